"""The report's comparison against known answers (ablations.calibrate): two groups of seeds of one
setting are called different no more often than α allows, and a planted accuracy cost is found."""

import numpy as np

from ablations.calibrate import Rate, calibrate, compare_pairs, with_label_noise
from ablations.data import cached_dataset
from ablations.stats import ALPHA


def test_a_short_aa_calibration_stays_within_alpha_and_a_planted_cost_is_detected():
    # the plumbing at its smallest (make calibrate runs the real one: 100 A/A pairs, 30 planted)
    result = calibrate(pairs=3, seeds=3, planted_pairs=2, label_noise=0.5, replicates=1000)
    assert len(result.aa) == 3 and len(result.planted) == 2
    assert result.false_positives.low <= ALPHA          # not significantly above α
    assert result.planted["diff_pts"].mean() > 0        # label noise costs accuracy
    assert result.power is not None and result.power.hits == 2


def test_label_noise_changes_only_the_share_of_training_labels_asked_for():
    data = cached_dataset("digits")
    noisy = with_label_noise(data, 0.3, seed=1)
    changed = (noisy.train_y != data.train_y).float().mean().item()
    assert 0.3 * 0.9 * 0.8 < changed < 0.3 * 0.9 * 1.2     # a random class equals the old one 1 time in 10
    assert noisy.test_y is data.test_y and noisy.train_x is data.train_x


def test_pairs_are_disjoint_groups_and_identical_groups_give_no_difference():
    rng = np.random.default_rng(0)
    runs = (rng.random((6, 200)) < 0.9).astype(float)
    table = compare_pairs(runs, runs, seeds=3, replicates=200)
    assert list(table["pair"]) == [0, 1] and (table["diff_pts"] == 0).all() and (table["p"] == 1).all()
    assert Rate.of(5, 100).low < 0.05 < Rate.of(5, 100).high
