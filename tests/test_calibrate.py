"""The report's comparison against known answers (ablations.analysis.calibrate): from saved predictions (the
committed reference: the ~97 % regime the report speaks about) A/A trials stay within α and planted
differences are found more often than the naive bootstrap finds them; by training, the plumbing at its
smallest, resumable after an interruption; bad input refused in one line."""

import numpy as np
import pytest
from helpers import naive_bootstrap_p

from ablations.__main__ import main as ablations_main
from ablations.analysis import calibrate as cal
from ablations.analysis.calibrate import Rate, calibrate, compare_pairs, draw_groups, saved_pool, with_label_noise
from ablations.analysis.report import REFERENCE
from ablations.analysis.stats import ALPHA, compare_settings
from ablations.results.store import SweepPaths, sweep_names
from ablations.training.data import cached_dataset

pytestmark = pytest.mark.slow   # `make test-quick` leaves this module out


@pytest.fixture(scope="module")
def reference_pool():
    return saved_pool(REFERENCE)


def test_the_pool_holds_each_committed_run_once_with_its_answers(reference_pool):
    ids = set()
    for sweep in sweep_names(REFERENCE):
        ids |= {p.stem for p in SweepPaths.of(REFERENCE, sweep).preds.glob("*.npz")}
    assert reference_pool.correct.shape == (len(ids), 1000) and reference_pool.dataset == "mnist5k"
    assert 0.95 < reference_pool.correct.mean() < 0.99 and set(np.unique(reference_pool.correct)) == {0.0, 1.0}


def test_on_the_reference_false_positives_stay_within_alpha_and_power_beats_the_naive_bootstrap(reference_pool):
    trials = cal.calibrate_saved(reference_pool, seeds=3, trials=400)
    assert set(trials["source"]) == {"one setting", "runs", "coin flips"} and len(trials) == 400 * 3 * 3 * 2
    hit = cal.detected(trials)
    for form in ("unpaired", "paired"):   # settings under different seeds, and compared seed by seed
        aa = trials[(trials["planted_pts"] == 0) & (trials["form"] == form)]
        fp = Rate.of(int(hit[aa.index].sum()), len(aa))
        assert fp.low <= ALPHA, (form, fp.text())
    one_point = trials[(trials["planted_pts"] == 1) & (trials["source"] == "runs") & (trials["form"] == "unpaired")]
    ours = hit[one_point.index].mean()
    # the naive bootstrap on the same 1-point trials (the same draws: draw_groups is deterministic)
    rng = np.random.default_rng(0)
    theirs = np.mean([naive_bootstrap_p(a, b, rng) < ALPHA and a.mean() > b.mean()
                      for a, b in draw_groups(reference_pool.correct, 3, 150, "runs", 0.01)])
    assert ours > theirs, (ours, theirs)
    planted = trials[trials["planted_pts"] > 0]
    assert (planted["acc_a"] - planted["acc_b"]).groupby(planted["planted_pts"]).mean().to_dict() == pytest.approx(
        {0.5: 0.005, 1.0: 0.01}, abs=0.002)   # planting takes exactly δ from every B run


def test_the_reference_holds_48_real_seeds_of_one_setting_the_pool_of_same_setting_calibration(reference_pool):
    """The committed `seeds` sweep: the base model under seeds 0-47; the pool's largest setting is it, each run
    once (the runs other sweeps share with it counted once)."""
    assert reference_pool.same is not None and len(reference_pool.same) >= 48
    assert "depth=4" in reference_pool.same_label and "seeds" in reference_pool.same_label
    assert len({row.tobytes() for row in reference_pool.same}) == len(reference_pool.same)   # 48 different runs


def test_the_sequential_design_on_real_same_setting_seeds_keeps_alpha_and_finds_a_one_point_winner(reference_pool):
    """SEEDS=auto on the committed real seeds: 2 settings × 24 seeds (the cap) drawn from the 48 same-setting runs.
    A/A: any false 'different' within α (the exact interval reaches α); a planted 0.5 point rarely called
    equivalent within ±0.5; a planted 1 point found most of the time, with fewer runs than fixed seeds at the cap."""
    trials = cal.calibrate_design(reference_pool.same, trials=100)
    by = dict(tuple(trials.groupby("case")))
    fp = Rate.of(int(by["A/A"]["any_different"].sum()), 100)
    assert fp.low <= ALPHA, fp.text()
    eq = Rate.of(int(by["0.5 point"]["equivalent"].sum()), 100)
    assert eq.low <= ALPHA, eq.text()
    one = by["1 point"]
    assert one["found"].mean() >= 0.8, one["found"].mean()
    assert one["runs"].mean() < one["fixed_runs"].iloc[0]
    lines = cal.design_lines(trials)
    assert lines[1].startswith("  A/A: any setting decided different") and "[95 % interval" in lines[1]


def test_planting_takes_exactly_delta_from_each_run():
    rng = np.random.default_rng(0)
    runs = (rng.random((3, 400)) < 0.9).astype(float)
    planted = cal.plant(runs, 0.01, rng)
    assert (runs.sum(1) - planted.sum(1) == 4).all() and (planted <= runs).all()
    with pytest.raises(ValueError, match="fewer than the 4"):
        cal.plant(np.zeros((1, 400)), 0.01, rng)


def test_the_summary_reports_the_rate_with_its_interval_and_the_p_value_distribution(capsys, tmp_path):
    assert ablations_main(["calibrate", "--from", str(REFERENCE), "--trials", "400", "--design-trials", "20",
                           "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "false positives (A/A, α = 0.05)" in out and "p < 0.2" in out and "mean p" in out
    assert "power at 0.5 pt" in out and "power at 1 pt" in out and "[95 % interval" in out
    assert (tmp_path / "calibrate" / "calibration.csv").exists()
    assert "one setting" in out and "sequential design (SEEDS=auto, looks 3/5/8/12/18/24) on real same-setting seeds" in out


@pytest.mark.parametrize("argv, message", [
    (["--from", "{empty}"], "no finished run with saved test predictions"),
    (["--from", "{ref}", "--seeds", "1"], "--seeds must be ≥ 2"),
    (["--from", "{ref}", "--seeds", "1000"], "need 2000 runs"),
    (["--from", "{ref}", "--out", "{ref}"], "holds the committed reference results"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_work(argv, message, tmp_path, capsys):
    (tmp_path / "empty" / "ablations").mkdir(parents=True)
    argv = [a.format(empty=tmp_path / "empty", ref=REFERENCE) for a in argv]
    assert ablations_main(["calibrate", *argv, *([] if "--out" in argv else ["--out", str(tmp_path)])]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")


def test_a_short_training_calibration_resumes_after_an_interruption(tmp_path, monkeypatch):
    # the plumbing at its smallest (make calibrate TRAIN=1 runs the real one: 100 A/A pairs, 30 planted)
    result = calibrate(pairs=1, seeds=2, planted_pairs=1, label_noise=0.5, keep=tmp_path)
    assert len(result.aa) == 1 and len(result.planted) == 1
    assert result.planted["diff_pts"].mean() > 0        # label noise costs accuracy
    assert len(list((tmp_path / "clean").glob("*.npy"))) == 4 and len(list(tmp_path.glob("noise-*/*.npy"))) == 2
    import ablations.training.train

    def no_training(*args, **kwargs):
        raise AssertionError("a kept run was trained again")
    monkeypatch.setattr(ablations.training.train, "train", no_training)
    again = calibrate(pairs=1, seeds=2, planted_pairs=1, label_noise=0.5, keep=tmp_path)
    assert again.aa["p"].tolist() == result.aa["p"].tolist()


def test_a_training_calibration_stopped_by_a_signal_says_how_many_runs_it_kept_and_exits_as_the_sweeps_do(
        tmp_path, monkeypatch, capsys):
    """SIGTERM after two runs (the third raises as the signal handler does): exit 143 and one line with the count
    of runs kept and where, as a stopped sweep says it."""
    import signal

    import ablations.training.train
    from ablations.running.interrupts import Interrupted

    real, calls = ablations.training.train.train, []

    def stopped_at_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise Interrupted(signal.SIGTERM)
        return real(*args, **kwargs)
    monkeypatch.setattr(ablations.training.train, "train", stopped_at_the_third)
    code = ablations_main(["calibrate", "--train", "--pairs", "1", "--seeds", "2", "--planted-pairs", "0",
                           "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 143, err
    assert err.splitlines()[-1] == (f"interrupted (SIGTERM): 2 runs finished and kept in {tmp_path / 'calibrate' / 'runs'}; "
                                    f"rerun the same command to resume")


def test_label_noise_changes_only_the_share_of_training_labels_asked_for():
    data = cached_dataset("digits")
    noisy = with_label_noise(data, 0.3, seed=1)
    changed = (noisy.train_y != data.train_y).float().mean().item()
    assert 0.3 * 0.9 * 0.8 < changed < 0.3 * 0.9 * 1.2     # a random class equals the old one 1 time in 10
    assert noisy.test_y is data.test_y and noisy.train_x is data.train_x


def test_pairs_are_disjoint_groups_and_identical_groups_give_no_difference():
    rng = np.random.default_rng(0)
    runs = (rng.random((6, 200)) < 0.9).astype(float)
    table = compare_pairs(runs, runs, seeds=3)
    assert list(table["pair"]) == [0, 1] and (table["diff_pts"] == 0).all() and (table["p"] == 1).all()
    assert Rate.of(5, 100).low < 0.05 < Rate.of(5, 100).high
    # within α only where the whole interval is; a few trials whose interval reaches above α cannot say so
    assert Rate.of(0, 6).against_alpha() == "not above α (its interval reaches 45.9 %: more trials would narrow it)"
    assert Rate.of(1, 400).against_alpha() == "within α"
    assert Rate.of(40, 400).against_alpha().startswith("ABOVE α")
    assert compare_settings({"A": runs[:3], "B": runs[:3]})[0].p == 1.0


def test_calibrate_out_that_is_a_file_is_refused_before_any_trial(tmp_path, capsys):
    import time

    from ablations.analysis import calibrate

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    t0 = time.perf_counter()
    status = ablations_main(["calibrate", "--from", str(calibrate.CHECKOUT_REFERENCE), "--out", str(blocker),
                             "--trials", "400"])
    err = capsys.readouterr().err
    assert status == 2 and f"{blocker} is a file" in err and err.count("\n") == 1
    assert time.perf_counter() - t0 < 5 and blocker.read_text() == "not a folder\n"


def test_one_damaged_predictions_file_is_left_out_of_the_pool_and_named(tmp_path, capsys):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(SweepPaths.of(REFERENCE, "depth").preds, SweepPaths.of(out, "depth").preds)
    shutil.copy(SweepPaths.of(REFERENCE, "depth").rows, SweepPaths.of(out, "depth").rows)
    files = sorted(SweepPaths.of(out, "depth").preds.glob("*.npz"))
    files[0].write_bytes(b"not an npz")
    pool = saved_pool(out)
    assert len(pool.correct) == len(files) - 1
    err = capsys.readouterr().err
    assert "1 predictions file left out of the pool" in err and files[0].name in err
