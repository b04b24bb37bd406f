"""ablations.stats: intervals against closed forms and statsmodels, the bootstrap against the paired
closed form, Holm against a hand computation, and verdicts that follow the evidence."""

import math

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from ablations.stats import (
    Comparison,
    accuracy_interval,
    compare_settings,
    detectable_difference,
    holm,
    paired_difference,
    verdict,
)


def test_t_interval_over_seeds_equals_the_closed_form_and_statsmodels():
    accs = [0.979, 0.976, 0.978]
    got = accuracy_interval(accs)
    mean, sd = np.mean(accs), np.std(accs, ddof=1)
    t_975_df2 = 4.302652729911275  # Student t table, 2 degrees of freedom
    assert got.mean == pytest.approx(mean)
    assert got.low == pytest.approx(mean - t_975_df2 * sd / math.sqrt(3), abs=1e-12)
    assert got.high == pytest.approx(mean + t_975_df2 * sd / math.sqrt(3), abs=1e-12)
    assert (got.low, got.high) == pytest.approx(DescrStatsW(np.array(accs)).tconfint_mean(0.05), abs=1e-12)
    assert got.kind == "t over 3 seeds"


def test_one_seed_gets_the_exact_binomial_interval_of_its_test_set():
    got = accuracy_interval([0.979], test_size=1000)
    low, high = proportion_confint(979, 1000, alpha=0.05, method="beta")  # Clopper–Pearson
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-9)
    assert "binomial over 1000 test images" in got.kind
    assert math.isnan(accuracy_interval([0.9]).low)  # no test-set size: no interval, and it says so
    with pytest.raises(ValueError, match="at least one"):
        accuracy_interval([])


def test_holm_adjustment_equals_the_hand_computation():
    # sorted 0.02, 0.04, 0.6 → 3·0.02 = 0.06, max(0.06, 2·0.04) = 0.08, max(0.08, 0.6) = 0.6
    assert holm([0.04, 0.6, 0.02]) == pytest.approx([0.08, 0.6, 0.06])


def test_holm_correction_turns_a_borderline_winner_into_no_winner():
    means = {"a": 0.98, "b": 0.97, "c": 0.969}
    raw = {("a", "b"): 0.04, ("a", "c"): 0.02, ("b", "c"): 0.6}
    adjusted = dict(zip(raw, holm(list(raw.values()))))

    def comparisons(p_of):
        return [Comparison(a, b, means[a] - means[b], 0, 0, 0.005, raw[a, b], p_of[a, b]) for a, b in raw]

    unadjusted = verdict(means, comparisons(raw))
    corrected = verdict(means, comparisons(adjusted))
    assert unadjusted.winner and unadjusted.best == "a" and unadjusted.beats == ("b", "c")
    assert not corrected.winner and corrected.best == "a" and corrected.tied_with == ("b", "c")


def correct_matrix(n, wrong, seeds=3):
    row = np.ones(n)
    row[list(wrong)] = 0
    return np.tile(row, (seeds, 1))


def test_predictions_differing_on_3_of_1000_images_are_indistinguishable():
    n = 1000
    a, b = correct_matrix(n, range(20)), correct_matrix(n, range(23))  # b misses 3 more images, every seed
    [c] = compare_settings({"a": a, "b": b})
    assert c.diff == pytest.approx(0.003)
    assert c.p_holm > 0.05 and c.low <= 0 <= c.high
    v = verdict({"a": a.mean(), "b": b.mean()}, [c])
    assert v.best == "a" and not v.winner and v.tied_with == ("b",)


def test_settings_ten_points_apart_name_the_right_winner():
    n = 1000
    rng = np.random.default_rng(1)
    settings = {"weak": (rng.random((3, n)) < 0.87).astype(float),
                "strong": (rng.random((3, n)) < 0.97).astype(float),
                "mid": (rng.random((3, n)) < 0.90).astype(float)}
    comparisons = compare_settings(settings)
    v = verdict({k: s.mean() for k, s in settings.items()}, comparisons)
    assert v.winner and v.best == "strong" and set(v.beats) == {"weak", "mid"}
    assert all(c.p_holm < 0.01 for c in comparisons if "strong" in (c.a, c.b))


def test_paired_bootstrap_se_matches_the_closed_form_for_one_seed():
    # one seed each: d = (b − c)/n with b images only A gets right, c only B; Var(d̂) = ((b + c)/n − d²)/n
    n, b, c = 1000, 40, 15
    a_correct, b_correct = np.ones((1, n)), np.ones((1, n))
    a_correct[0, :c] = 0
    b_correct[0, c:c + b] = 0
    [cmp] = compare_settings({"A": a_correct, "B": b_correct}, replicates=8000)
    d = (b - c) / n
    assert cmp.diff == pytest.approx(d)
    assert cmp.se == pytest.approx(math.sqrt(((b + c) / n - d * d) / n), rel=0.05)


def test_seed_variation_widens_the_interval_of_a_difference():
    # the same image-level gap, but one setting's seeds disagree a lot: its comparison is less certain
    n = 1000
    base = correct_matrix(n, range(30), seeds=3)
    steady = correct_matrix(n, range(20), seeds=3)
    shaky = np.stack([correct_matrix(n, range(k), seeds=1)[0] for k in (0, 20, 40)])  # same mean as steady
    [c_steady] = compare_settings({"x": steady, "base": base})
    [c_shaky] = compare_settings({"x": shaky, "base": base})
    assert c_steady.diff == pytest.approx(c_shaky.diff)
    assert c_shaky.se > 2 * c_steady.se


def test_comparison_refuses_settings_evaluated_on_different_test_sets():
    with pytest.raises(ValueError, match="different numbers of test images"):
        compare_settings({"a": np.ones((2, 100)), "b": np.ones((2, 90))})


def test_detectable_difference_is_the_normal_power_formula():
    # z_{1-0.05/2} + z_{0.8} = 1.959964 + 0.841621 for one comparison
    assert detectable_difference(0.01, 1) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)
    assert detectable_difference(0.01, 6) > detectable_difference(0.01, 1)  # Holm's strictest level is α/m


def test_a_paired_difference_is_the_float64_difference_with_an_interval_narrower_than_unpaired():
    rng = np.random.default_rng(5)
    a = (rng.random((3, 2000)) < 0.9).astype(float)   # 3 seeds, 2000 images
    b = a.copy()
    flip = rng.random(a.shape) < 0.03                 # the same runs, a few answers changed
    b[flip] = 1 - b[flip]
    paired = paired_difference(a, b)
    assert paired.diff == pytest.approx(float(a.astype(np.float64).mean() - b.astype(np.float64).mean()), abs=1e-15)
    assert paired.low <= paired.diff <= paired.high
    (unpaired,) = compare_settings({"a": a, "b": b})
    assert paired.high - paired.low < unpaired.high - unpaired.low   # seeds drawn alike: their shared noise cancels
    same = paired_difference(a, a.copy())
    assert (same.diff, same.low, same.high, same.p) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="same seeds and test images"):
        paired_difference(a, b[:2])
