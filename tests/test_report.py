"""The report from constructed CSVs and predictions: intervals, verdicts that follow the evidence, ratios
only outside the noise, failed and missing sweeps named, the method stated, and deterministic output."""

import dataclasses
import hashlib
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, run_cli, write_spec

from ablations.analysis.findings import analyse
from ablations.analysis.report import build_report
from ablations.analysis.stats import MARGIN as MARGIN_DEFAULT
from ablations.analysis.stats import contrast
from ablations.analysis.wording import setting_rows_csv, sharing_note, table_markdown
from ablations.results.schema import ABLATION_COLUMNS, COST_COLUMNS, read_table
from ablations.results.store import SweepPaths, Tables, newest_complete_phase, save_preds
from ablations.specs import load_spec
from bench.io.csvio import append_row

N_TEST = 1000
ENV = {"device": "cpu", "device_name": "test cpu", "torch_version": "x", "git_sha": "abc", "dataset": "digits"}



def depth_section(out: Path, margin: float = MARGIN_DEFAULT) -> str:
    """The depth sweep's part of the report alone (`report.sweep_page`): what a test of its sentences needs."""
    from ablations.analysis.report import sweep_page

    return "\n".join(sweep_page(out, "depth", margin).lines)

def hexid(text: str) -> str:
    """A 12-hex identifier, as run_id and phase_id are."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def write_run(out, depth, seed, correct_mask, status="ok", error=""):
    """One run of the `depth` sweep: its row and (for ok runs) its predictions; correct_mask: (N_TEST,) bool."""
    paths = SweepPaths.of(out, "depth")
    run_id = f"{depth:06d}{seed:06d}"
    row = {"run_id": run_id, "status": status, "error": error, "depth": depth, "seed": seed, "sweep": "depth",
           "started_at": f"2026-01-0{depth}T00:00:{seed:02d}", "epochs": 1, "lr": 0.002, "num_classes": 10, **ENV}
    if status == "ok":
        target = torch.arange(N_TEST) % 10
        pred = torch.where(torch.as_tensor(correct_mask), target, (target + 1) % 10)
        paths.preds.mkdir(parents=True, exist_ok=True)
        (paths.preds / f"{run_id}.npz").write_bytes(save_preds(pred, target))
        row.update(test_acc=float(np.mean(correct_mask)), test_size=N_TEST, params=1000 * depth,
                   gmacs=0.01 * depth, gflops=0.02 * depth, train_time_s=5.0 * depth + seed,
                   train_util_pct=90.0 + 3 * seed - depth, train_mfu=0.01 * depth + 0.002 * seed)
    append_row(paths.rows, row, ABLATION_COLUMNS)


def mask(wrong):
    m = np.ones(N_TEST, dtype=bool)
    m[list(wrong)] = False
    return m


def write_cost(out, throughput_by_depth, phase="p1", rounds=5):
    for depth, values in throughput_by_depth.items():
        for mode in ("infer", "train"):
            for r in range(rounds):
                append_row(SweepPaths.of(out, "depth").cost,
                           {"run_id": hexid(f"{phase}{depth}{mode}{r}"), "phase_id": hexid(phase), "round": r, "rounds": rounds,
                            "phase_items": 2 * len(throughput_by_depth), "depth": depth, "mode": mode,
                            "status": "ok", "throughput_img_s": values[r], "step_ms_median": 1000 / values[r],
                            "peak_mem_mb": 10.0 * depth if r == 0 else None, "started_at": "2026-01-01T00:00:00",
                            **ENV}, COST_COLUMNS)


def test_a_sweep_none_of_whose_runs_finished_says_so_in_the_findings_and_its_section_grouping_like_failures(tmp_path):
    """Every run diverged (lr far too high): the findings table has the sweep's row saying none finished, not no row;
    its section says no verdict, then the failures, those with the same error on one line in the sweep's order; no
    verdicts.csv is named, as none is written."""
    for depth, seed in ((2, 0), (1, 0), (2, 1), (1, 1), (4, 0)):   # finished in another order than the sweep's
        error = "loss became nan in epoch 1" if depth != 4 else "loss became inf in epoch 2"
        write_run(tmp_path, depth, seed, None, status="diverged", error=error)
    text = build_report(tmp_path).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| depth |"))
    assert ("| None of its 5 runs finished: 5 diverged (depth=1 and 2 at seeds 0, 1; depth=4 at seed 0). | — | — | — |"
            in row)
    section = text.split("## depth", 1)[1].split("\n## ", 1)[0]
    assert ("**No verdict: none of its 5 runs finished.**\n\n- depth=1 and 2 at seeds 0, 1: **diverged** loss became nan "
            "in epoch 1\n- depth=4 at seed 0: **diverged** loss became inf in epoch 2\n") in section
    assert "not counted above" not in section
    assert "verdicts.csv" not in text and not (tmp_path / "verdicts.csv").exists()
    one = tmp_path / "one"
    write_run(one, 2, 0, None, status="diverged", error="loss became nan in epoch 1")
    text = build_report(one).read_text()
    assert "| Its one run did not finish: 1 diverged (depth=2 at seed 0). |" in text
    assert "**No verdict: its one run did not finish.**" in text and "none of its 1 runs" not in text


def test_a_sweep_left_with_one_setting_by_failures_names_the_settings_that_finished_no_run(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path, 2, seed, mask(range(10 + seed)))
        write_run(tmp_path, 4, seed, None, status="diverged", error="loss became nan in epoch 1")
    section = build_report(tmp_path).read_text().split("## depth", 1)[1].split("\n## ", 1)[0]
    assert ("**No verdict**: depth=4 finished no run (failed runs, below), so one setting is left: nothing to "
            "compare.") in section


def test_the_head_names_the_commit_or_says_none_was_recorded(tmp_path, monkeypatch):
    """A run from an installed wheel has no commit (its git_sha cell is blank): the head says so, not 'git nan'."""
    write_run(tmp_path, 2, 0, mask(range(10)))
    assert "; git abc\n" in build_report(tmp_path).read_text()
    monkeypatch.setitem(ENV, "git_sha", "")
    blank = tmp_path / "blank"
    write_run(blank, 2, 0, mask(range(10)))
    head = build_report(blank).read_text().split("\n## ", 1)[0]
    assert "torch x; no git commit recorded (not run from a checkout)\n" in head and "nan" not in head


def test_the_head_names_every_device_and_commit_the_runs_came_from_with_their_counts(tmp_path, monkeypatch):
    """A sweep extended on another machine or at another commit: the head said only the newest run's device and
    commit (the reference read 'git 0bcfbb619916', the commit of 6 of its 551 runs); it names each, the most runs
    first."""
    for seed in (0, 1, 2):
        write_run(tmp_path, 2, seed, mask(range(10)))
    monkeypatch.setitem(ENV, "device_name", "other cpu")
    monkeypatch.setitem(ENV, "git_sha", "def")
    write_run(tmp_path, 4, 0, mask(range(10)))   # the newest run, alone on its device and commit
    head = build_report(tmp_path).read_text().split("\n## ", 1)[0]
    assert ("- ablation runs: device cpu (test cpu) for 3 runs, cpu (other cpu) for 1; torch x; git abc for 3 runs, "
            "def for 1\n") in head, head
    monkeypatch.setitem(ENV, "device_name", "")   # a row from before the device's name was recorded: its kind alone
    old = tmp_path / "old"
    write_run(old, 2, 0, mask(range(10)))
    assert "- ablation runs: device cpu; torch x; git def\n" in build_report(old).read_text()


def test_a_report_that_cannot_be_written_leaves_the_last_one_whole_and_says_why_once(tmp_path, capsys, monkeypatch):
    """REPORT.md, verdicts.csv and settings.csv are replaced whole or not at all: a disk that fills as the report
    is written leaves the previous files as they were and no temporary file, and the command says the system's
    reason in one line."""
    import errno
    import os

    from ablations.__main__ import main

    ten_points_apart(tmp_path)
    assert main(["report", "--out", str(tmp_path), "--reference", "none"]) == 0
    before = {name: (tmp_path / name).read_bytes() for name in ("REPORT.md", "verdicts.csv", "settings.csv")}

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    code, _, err = run_cli(main, ["report", "--out", str(tmp_path), "--reference", "none"], capsys)
    assert code == 2 and err == (f"error: --out {tmp_path}: cannot write the report there (No space left on "
                                 f"device); choose a writable OUT\n")
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_folder_with_nothing_to_report_gets_the_next_step_and_no_method(tmp_path):
    """Only a `train` command's table: the report says what to run, and not how verdicts it has none of are reached;
    with one sweep run, the Method section is there."""
    append_row(SweepPaths.of(tmp_path, "train").rows, {"run_id": "a" * 12, "status": "ok", "seed": 0}, ABLATION_COLUMNS)
    text = build_report(tmp_path).read_text()
    assert "No sweep results yet" in text and "ablations/train.csv" in text and "## Method" not in text, text
    write_run(tmp_path, 1, 0, mask(range(50)))
    assert "## Method" in build_report(tmp_path).read_text()


def test_a_folder_with_no_finished_run_gets_no_comparison_with_the_reference(tmp_path):
    """Only a bench table here: the report says no ablation results yet and sets nothing beside the reference
    (it had a section saying that no point was also trained there)."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "mine.csv").write_text("attn,throughput_img_s\nsdpa,100\n")
    text = build_report(tmp_path, reference=ROOT / "results" / "reference").read_text()
    assert "No sweep results yet" in text and "## against the reference" not in text
    write_run(tmp_path, 1, 0, mask(range(50)))   # one finished run: the section is there
    assert "## against the reference" in build_report(tmp_path, reference=ROOT / "results" / "reference").read_text()


def ten_points_apart(out):
    for seed in range(3):
        write_run(out, 1, seed, mask(range(150 + 10 * seed)))   # 85, 84, 83 %
        write_run(out, 2, seed, mask(range(50 + 5 * seed)))     # 95, 94.5, 94 %
    write_run(out, 3, 0, None, status="diverged", error="loss became nan")


def depth_runs_as(out, sweep, prefix, preds=True, **columns):
    """`ten_points_apart`'s depth runs as another sweep's: the same rows with `columns` assigned (pandas' assign:
    a callable gets the rows), run ids starting with `prefix`, and (with `preds`) the same predictions."""
    import shutil

    depth = read_table(SweepPaths.of(out, "depth").rows)
    rows = depth.assign(sweep=sweep, **columns, run_id=prefix + depth["run_id"].astype(str).str[1:])
    mine, theirs = SweepPaths.of(out, sweep).preds, SweepPaths.of(out, "depth").preds
    for rid, new in zip(depth["run_id"], rows["run_id"]) if preds else ():
        mine.mkdir(parents=True, exist_ok=True)
        if (theirs / f"{rid}.npz").exists():
            shutil.copy(theirs / f"{rid}.npz", mine / f"{new}.npz")
    for row in rows.astype(object).where(rows.notna(), None).to_dict("records"):
        append_row(SweepPaths.of(out, sweep).rows, row, ABLATION_COLUMNS)


def test_report_names_a_winner_ten_points_ahead_with_t_intervals_and_failures(tmp_path):
    ten_points_apart(tmp_path)
    write_cost(tmp_path, {1: [200, 210, 205, 198, 202], 2: [100, 104, 99, 101, 103]})
    text = build_report(tmp_path).read_text()
    assert "**depth=2 is best, 94.50 %. depth=1 is worse by 10.50 points [" in text
    runs = np.stack([mask(range(50 + 5 * seed)) for seed in range(3)]).astype(float)
    est = contrast([runs], [1.0])                     # seeds and test images (tests/test_stats.py checks it)
    low, high = (100 * x for x in est.interval())
    assert f"| 2 | 3 | 94.50 [{low:.2f}, {high:.2f}] |" in text
    assert "Seeds 0, 1, 2; digits, 1,000 test images; device cpu (test cpu)." in text
    assert "Intervals: t over 3 seeds and 1,000 test images." in text
    # apart round by round: the ratio is printed, and GMACs always (they are exact)
    assert "GMACs ×2.00; inference img/s ×0.50" in text
    assert "- depth=3 at seed 0: **diverged** loss became nan" in text and "\n| 3 |" not in text
    row = next(line for line in text.splitlines() if line.startswith("| depth |"))   # the findings table says so too
    assert "Not counted: 1 run that did not finish: 1 diverged (depth=3 at seed 0)." in row
    held = next(line for line in text.splitlines() if "Held fixed:" in line).split("Held fixed:", 1)[1]
    assert "dataset=digits" in held and "depth=" not in held
    # what this OUT lacks: one line, not a section per absent sweep, figure or benchmark
    lacking = [line for line in text.splitlines() if line.startswith("Not in this folder: ")]
    assert len(lacking) == 1 and "heads, patch" in lacking[0] and "`make ablate-<name>` or `vitbench sweep" in lacking[0]
    assert "a sweep over pos" in lacking[0] and "benchmarks" in lacking[0]
    assert "_Missing" not in text and "## patch" not in text and "## inside the model" not in text
    assert "## attention backends" not in text
    assert "## Method" in text and "Holm" in text and "Satterthwaite (1946)" in text and "TOST" in text
    assert (tmp_path / "figures" / "depth.png").stat().st_size < 300_000
    assert build_report(tmp_path).read_text() == text  # deterministic


def test_a_report_names_the_bench_tables_it_does_not_read_and_the_command_that_writes_the_one_it_does(tmp_path):
    """`bench run --name mine` writes bench/mine.csv, which the report does not read: it says so, rather than
    leave the user to wonder; the command it gives for the backends' table is the one `make bench-tokens` runs."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "mine.csv").write_text("run_id\n")
    text = build_report(tmp_path).read_text()
    assert ("Not read here: bench/mine.csv: the command that wrote each printed its own table; the report reads the "
            "sweeps' tables, and of the bench tables the attention backends' alone") in text
    write_run(tmp_path / "one", 1, 0, mask(range(50)))   # a `train` command's table: read by no section, and said so
    SweepPaths.of(tmp_path / "one", "depth").rows.rename(SweepPaths.of(tmp_path / "one", "train").rows)
    one = build_report(tmp_path / "one").read_text()
    assert ("Not read here: ablations/train.csv: the command that wrote each printed its own table; the report reads "
            "the sweeps' tables; a `train` command's runs are one setting") in one and "bench tables" not in one
    command = "bench run --tokens 65,197,785 --batch-size 8 --name backends"
    assert f"`vitbench {command}`" in text and f"-m {command}" in (ROOT / "Makefile").read_text()


def test_the_report_command_ends_saying_what_it_wrote_where(tmp_path, capsys):
    """`report` names REPORT.md, the two CSVs beside it and the figures it drew, each with its path."""
    from ablations.__main__ import main

    ten_points_apart(tmp_path)
    code, out, _ = run_cli(main, ["report", "--out", str(tmp_path), "--reference", "none"], capsys)
    drawn = set(re.findall(r"\]\((figures/[^)]+\.png)\)", (tmp_path / "REPORT.md").read_text()))
    assert code == 0 and out.splitlines() == [
        f"report → {tmp_path / 'REPORT.md'}",
        f"  every pair → {tmp_path / 'verdicts.csv'}   every setting → {tmp_path / 'settings.csv'}   "
        f"{len(drawn)} figures → {tmp_path / 'figures'}/"], out
    assert len(drawn) >= 2 and all((tmp_path / name).is_file() for name in drawn)


def test_settings_all_identical_to_the_best_are_said_identical_once(tmp_path):
    """Three settings with the same predictions on every image and seed: the answer says the other two are
    identical to the first and stops there (each pair of them being identical follows from it); a pair identical
    to each other but not to the best is still named."""
    for seed in range(3):
        for depth in (1, 2, 4):
            write_run(tmp_path, depth, seed, mask(range(40 + 7 * seed)))
    row = next(line for line in build_report(tmp_path).read_text().splitlines() if line.startswith("| depth |"))
    assert "depth=2 and 4 are identical to depth=1 (the same predictions)." in row and "each other" not in row, row
    for seed in range(3):
        write_run(tmp_path, 6, seed, mask(range(20 + 7 * seed)))   # a better setting: the others stay twins
    row = next(line for line in build_report(tmp_path).read_text().splitlines() if line.startswith("| depth |"))
    assert row.count("identical to each other") == 1 and "depth=1, 2 and 4 are identical to each other." in row, row


def test_report_calls_settings_three_images_apart_indistinguishable(tmp_path):
    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(20)))
        write_run(tmp_path, 2, seed, mask(range(23)))
    text = depth_section(tmp_path)
    assert "**depth=1 has the highest mean, 98.00 %. depth=2 is undecided against it.**" in text
    assert " is best" not in text
    assert "A pair with this sweep's median noise detects only differences above about" in text
    assert "SEEDS=auto would train at most 42 more runs here: depth=1 and the 1 setting still open" in text
    # the 0.30 points are 3 images that every seed gets wrong: the test images keep part of the differences its
    # data allow undecided at any number of seeds
    assert "| 1 | 2 | +0.30 [" in text and "seeds decides on this test set) |" in text
    assert "Noise: a setting's mean ±" in text
    assert "(its sources' shares, seed, coin flips and test images, are given from 8 seeds a setting: with 3, the " \
           "seed share" in text


@pytest.mark.parametrize("seeds, more, reuse", [
    ((0, 1), 44, "it trains seeds 0–23 and reuses the runs here at seeds 0, 1)"),
    ((5, 30, 31), 46, "it trains seeds 0–23 and reuses the runs here at seeds 5)"),
    ((30, 31, 32), 48, "it trains seeds 0–23; no run here is at one of them)"),
])
def test_the_seeds_auto_sentence_counts_and_names_only_the_runs_it_would_reuse(tmp_path, seeds, more, reuse):
    """SEEDS=auto trains seeds 0 to its cap: runs at other seeds are not reused, and the sentence names the ones
    that are rather than seeds 0, 1, 2 whatever the sweep ran."""
    for seed in seeds:
        write_run(tmp_path, 1, seed, mask(range(20)))
        write_run(tmp_path, 2, seed, mask(range(23)))
    text = depth_section(tmp_path)
    assert (f"SEEDS=auto would train at most {more} more runs here: depth=1 and the 1 setting still open against "
            f"it, up to 24 seeds each, fewer where a look decides ({reuse}.") in text, text


def test_a_decided_pairs_interval_end_just_clear_of_0_is_not_printed_as_0(tmp_path):
    """Holm's p just under α, so the pair is decided and its interval's lower end is a few thousandths of a point
    above 0: the verdict and the pair table print that end with its first significant digit, never as 0.00."""
    from ablations.analysis.wording.verdicts import bound

    assert (bound(0.0123, True), bound(0.000028), bound(-0.00004, True), bound(0.0), bound(-0.0123)) == \
        ("+1.23", "0.003", "-0.004", "0.00", "-1.23")
    for seed in (5, 30, 31):
        write_run(tmp_path, 1, seed, mask(range(20)))
        write_run(tmp_path, 2, seed, mask(range(23 + seed % 2)))
    text = depth_section(tmp_path)
    verdict = re.search(r"depth=2 is worse by 0\.37 points \[([0-9.]+), 0\.73\]", text)
    row = re.search(r"^\| 1 \| 2 \| \+0\.37 \[\+([0-9.]+), \+0\.73\] ⁼ \| (0\.04\d*) /", text, re.M)
    assert verdict and row, text
    assert float(row.group(2)) < 0.05 and verdict.group(1) == row.group(1) and 0 < float(row.group(1)) < 0.01


def test_seeds_past_the_count_are_said_to_be_over_it_not_blamed_on_the_test_set(tmp_path):
    """Seeds spread 17 points apart on 1,000 test images: a 0.5-point difference needs more seeds than are counted,
    which is the seeds' spread, not the test set's (whose share is negligible): the sentence says so."""
    rng = np.random.default_rng(3)
    for seed in range(3):
        for depth in (1, 2):
            write_run(tmp_path, depth, seed, mask(np.sort(rng.choice(1000, int(rng.integers(50, 500)), replace=False))))
    text = depth_section(tmp_path)
    assert ("would take over 10,000 seeds per setting (the test images' share is negligible here); seed-to-seed "
            "s.d. 16.70 points") in text and "more test images" not in text, text


def test_the_power_sentence_gives_the_seeds_needed_over_the_interval_of_the_seed_spread(tmp_path):
    for seed in range(4):
        write_run(tmp_path, 1, seed, mask(range(20 + 4 * (seed % 2))))
        write_run(tmp_path, 2, seed, mask(range(23 + 3 * (seed % 3))))
    text = depth_section(tmp_path)
    import re

    found = re.search(r"would take about (\d+) seeds per setting, between (\d+) and (\d+|more than the test set "
                      r"allows) over the 95 % interval of the seed-to-seed s\.d\. \(([\d.]+)–([\d.]+) points\)", text)
    assert found, text[text.index("Detecting"):][:600]
    need, low, high = int(found[1]), int(found[2]), found[3]
    assert low <= need and (not high.isdigit() or need <= int(high))
    sd = float(re.search(r"seed-to-seed s\.d\. ([\d.]+) points, measured here", text)[1])
    assert float(found[4]) < sd < float(found[5])


def test_report_calls_settings_equivalent_only_where_two_one_sided_tests_show_it(tmp_path):
    for seed in range(6):   # 0.05 points apart: depth 2 misses one image more on every other seed
        write_run(tmp_path, 1, seed, mask(range(20 + seed)))
        write_run(tmp_path, 2, seed, mask(range(20 + seed + seed % 2)))
    text = depth_section(tmp_path)
    assert " depth=2 is equivalent to it within ±0.5 points (" in text and " is best" not in text
    assert "| equivalent |" in text
    narrow = depth_section(tmp_path, margin=0.0005)   # ±0.05 points, the difference itself: not shown equivalent
    assert "depth=2 is undecided against it.**" in narrow and "equivalent to" not in narrow
    assert "within ±0.05 points" in narrow


def test_cost_ratio_is_suppressed_when_the_iqrs_overlap(tmp_path):
    ten_points_apart(tmp_path)
    write_cost(tmp_path, {1: [200, 210, 205, 198, 202], 2: [150, 260, 180, 210, 120]})
    text = depth_section(tmp_path)
    assert "inference img/s same within noise" in text
    assert "inference img/s ×" not in text


def test_cost_ratio_is_stated_where_every_round_gives_the_same_difference_under_drift(tmp_path):
    """The machine's speed drifts by ±20 % from round to round, and depth=1 is 5 % faster than depth=2 in every
    round: their quartiles overlap, but the cost phase timed both in the same rounds, so the difference is called."""
    ten_points_apart(tmp_path)
    drift = [100.0, 120.0, 90.0, 110.0, 80.0]
    write_cost(tmp_path, {1: [1.05 * d for d in drift], 2: drift})
    text = depth_section(tmp_path)
    assert f"inference img/s ×{1 / 1.05:.2f}; training-step img/s ×{1 / 1.05:.2f}" in text


def test_runs_without_predictions_get_intervals_but_no_verdict(tmp_path):
    ten_points_apart(tmp_path)
    (SweepPaths.of(tmp_path, "depth").preds / "000001000000.npz").unlink()
    text = depth_section(tmp_path)
    assert "**No verdict**: 1 of 6 runs have no saved test predictions" in text and "Best:" not in text
    assert "| 2 | 3 | 94.50 [" in text
    row = next(line for line in build_report(tmp_path).read_text().splitlines() if line.startswith("| depth |"))
    assert "| No test: 1 of 6 runs have no saved test predictions" in row   # the findings table says why, too


def test_one_seed_names_no_winner_and_says_what_a_second_seed_adds(tmp_path):
    write_run(tmp_path, 1, 0, mask(range(150)))
    write_run(tmp_path, 2, 0, mask(range(50)))   # 10 points apart on 1,000 paired images: still one training seed
    text = build_report(tmp_path).read_text()
    assert "binomial over 1,000 test images (1 seed)" in text
    assert "**No verdict**: one seed per setting. Its intervals cover the test images only" in text
    assert "a second seed would measure" in text
    assert "Best:" not in text and "Pairwise comparisons" not in text and "p = " not in text.split("## Method")[0]


def test_a_setting_at_chance_is_compared_like_any_other_and_named_as_not_learning(tmp_path):
    ten_points_apart(tmp_path)
    for seed in range(3):   # 10.5 %, 11 %, 11.5 % on ten classes: guessing
        write_run(tmp_path, 4, seed, mask(range(895 - 5 * seed)))
    text = depth_section(tmp_path)
    section = text
    assert "**depth=2 is best, 94.50 %." in section and "No verdict" not in section
    assert "depth=4 (11.00 %) is within noise of chance (10.0 % for guessing, ‡): not shown to learn this task at " \
        "this budget" in section
    assert "may learn with more epochs" in section
    row = next(line for line in build_report(tmp_path).read_text().splitlines() if line.startswith("| depth |"))
    assert "depth=4 is within noise of chance: not shown to learn the task at this budget." in row
    assert "Not converged" not in row
    assert "| 2 | 4 | +83.50 [" in section and section.split("| 2 | 4 | ")[1].split("|")[-2].strip() == "a better"
    assert "| 4 | 3 | " in section and section.split("| 4 | 3 | ")[1].split("|")[0].endswith("‡ ")
    assert "| 2 | 3 | 94.50 [" in section and section.split("| 2 | 3 | ")[1].split("|")[0].strip()[-1] == "]"


def test_a_setting_its_seeds_show_above_chance_is_not_called_at_chance_however_little_it_learned(tmp_path):
    """Ten classes, 1,000 test images: under 10 % + 3 binomial s.d. (12.85 %) is within noise of guessing by the test
    set alone, but 24 seeds at 12.5 % more than 3 standard errors above 10 % show a setting that learned a little: no
    ‡ and no "not shown to learn"; three seeds spread around 11 % are at chance."""
    from ablations.analysis.stats import at_chance

    assert at_chance(0.125, 0.1, 1000) and not at_chance(0.13, 0.1, 1000)
    assert not at_chance(0.125, 0.1, 1000, [0.124, 0.125, 0.126]) and at_chance(0.11, 0.1, 1000, [0.095, 0.11, 0.125])
    ten_points_apart(tmp_path)
    rng = np.random.default_rng(0)
    for seed in range(24):   # each seed right on 125 ± 3 of the 1,000 images, other ones every seed
        write_run(tmp_path, 4, seed, mask(np.sort(rng.choice(1000, 875 + int(rng.integers(-3, 4)), replace=False))))
    text = depth_section(tmp_path)
    table = text.split("| 4 | 24 | ")[1].split("|")[0]
    low = float(table.split("[")[1].split(",")[0])
    assert 12 < float(table.split()[0]) < 12.85 and low > 10 and "‡" not in table, table
    assert "learn" not in text.split("**Not converged")[0] and "‡" not in text
    few = tmp_path / "few"
    ten_points_apart(few)
    for seed in range(3):    # 9.5 %, 11 %, 12.5 %: an interval that reaches 10 %
        write_run(few, 4, seed, mask(range(905 - 15 * seed)))
    text = depth_section(few)
    assert "| 4 | 3 | " in text and text.split("| 4 | 3 | ")[1].split("|")[0].endswith("‡ ")


def test_a_best_setting_at_chance_beside_one_whose_runs_show_learning_still_gets_a_comparison(tmp_path):
    """depth=1's two seeds at 12.6 % are within noise of guessing (two seeds show little), depth=2's 24 at 12.5 % are
    not: "no setting is shown to learn" would be false, so the pair is compared and depth=1 alone carries ‡."""
    rng = np.random.default_rng(1)
    for seed, right in ((0, 128), (1, 124)):
        write_run(tmp_path, 1, seed, mask(np.sort(rng.choice(1000, 1000 - right, replace=False))))
    for seed in range(24):
        write_run(tmp_path, 2, seed, mask(np.sort(rng.choice(1000, 875 + int(rng.integers(-3, 4)), replace=False))))
    text = depth_section(tmp_path)
    assert "No verdict" not in text and "no setting is shown to learn" not in text, text
    assert text.split("| 1 | 2 | ")[1].split("|")[0].endswith("‡ ") and "‡" not in text.split("| 2 | 24 | ")[1].split("|")[0]
    assert "depth=1 (12.60 %) is within noise of chance" in text


def test_a_sweep_whose_best_setting_is_at_chance_gets_no_verdict(tmp_path):
    for depth in (1, 2):     # shuffled labels: every setting guesses
        for seed in range(3):
            write_run(tmp_path, depth, seed, mask(range(880 + 7 * seed + depth)))
    section = depth_section(tmp_path)
    assert "**No verdict**: even the best setting, depth=1 (" in section and "is within noise of chance" in section
    assert "| depth a |" not in section and " is best" not in section


def test_a_seeds_auto_sweep_stopped_at_chance_says_where_its_design_stopped(tmp_path):
    """Every setting guesses and a SEEDS=auto design read its first look: no verdict, and both the findings table
    and the section say the design stopped there because the leader is at chance (not 'fixed' seeds)."""
    from ablations.analysis.stats import ALPHA
    from ablations.results import seed_design

    for depth in (1, 2):
        for seed in range(3):
            write_run(tmp_path, depth, seed, mask(range(880 + 7 * seed + depth)))
    paths = SweepPaths.of(tmp_path, "depth")
    experiment = hexid("guessing")
    read_table(paths.rows).assign(experiment_id=experiment).to_csv(paths.rows, index=False)
    seed_design.write_design(paths, seed_design.new_design(0.005, ALPHA, 10, (3, 5), experiment=experiment))
    text = build_report(tmp_path).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| depth |"))
    assert "| 3 each; stopped at look 1 of 2: the leader is at chance |" in row and "(fixed)" not in row
    assert ("is within noise of chance (10.0 % for guessing): no setting is shown to learn the task at this budget, so no "
            "comparison says anything about the factor; train longer (EPOCHS), or check that the labels can be "
            "learned from the images. Intervals only; no setting is named best. Adaptive seeds (SEEDS=auto): looks "
            "at 3/5 seeds a setting; stopped at look 1 of 2 (3 seeds each): the leader is within noise of "
            "chance.") in text
    assert "Its equivalence margin is the design's" not in text   # the report's margin is the design's
    other = build_report(tmp_path, margin=0.01).read_text()   # MARGIN=1: the design's ±0.5 still decides, said
    assert ("Its equivalence margin is the design's, ±0.5 points, which its looks decided with, not the ±1 points "
            "this report was asked for (MARGIN applies to sweeps at fixed seeds).") in other


def test_two_seeds_far_apart_and_far_above_chance_are_not_called_chance(tmp_path):
    for seed, right in ((0, 300), (1, 550)):     # 30 % and 55 % on ten classes: learning, noisily
        write_run(tmp_path, 1, seed, mask(range(right, N_TEST)))
        write_run(tmp_path, 2, seed, mask(range(right + 20, N_TEST)))
    section = depth_section(tmp_path)
    assert "‡" not in section and "No verdict" not in section and "| depth a |" in section


def test_a_count_takes_the_number_of_its_noun():
    from bench.units import count

    assert [count(n, "seed") for n in (0, 1, 2, 10_000)] == ["0 seeds", "1 seed", "2 seeds", "10,000 seeds"]
    assert count(1, "entry", "entries") == "1 entry" and count(3, "entry", "entries") == "3 entries"


def test_a_small_model_s_gmacs_are_printed_to_three_significant_digits_never_as_zero(tmp_path):
    """A digits model of 0.0000449 GMACs: the settings' table gives it as that, not '0.0000' (a measured figure
    shown as none); larger ones keep three digits (0.00121, 4.60) and from 100 on whole numbers."""
    from bench.units import macs

    assert [macs(x) for x in (4.4937e-5, 0.0012091, 4.6, 17.58, 1234.4)] == ["0.0000449", "0.00121", "4.60", "17.6",
                                                                              "1,234"]
    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(50 + seed)))
        write_run(tmp_path, 2, seed, mask(range(60 + seed)))
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    rows["gmacs"] = rows["gmacs"] * 4.4937e-3   # 0.0000449 and 0.0000899 GMACs
    table = table_markdown(analyse(rows, "depth", [1, 2], SweepPaths.of(tmp_path, "depth").preds, None))
    assert "| 0.0000449 |" in table and "| 0.0000899 |" in table and "0.0000 |" not in table, table


def test_analysis_means_equal_pandas_and_the_newest_complete_cost_phase_is_used(tmp_path):
    ten_points_apart(tmp_path)
    write_cost(tmp_path, {1: [1, 1, 1, 1, 1], 2: [1, 1, 1, 1, 1]}, phase="old")
    write_cost(tmp_path, {1: [9, 9, 9, 9, 9], 2: [9, 9, 9, 9, 9]}, phase="cut", rounds=5)
    cost = read_table(SweepPaths.of(tmp_path, "depth").cost)
    cost = cost[~((cost["phase_id"] == hexid("cut")) & (cost["round"] == 4))]  # the newer phase was cut short
    phase = newest_complete_phase(cost)
    assert set(phase["phase_id"]) == {hexid("old")}
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    f = analyse(rows, "depth", [1, 2], SweepPaths.of(tmp_path, "depth").preds, phase)
    ok = rows[rows["status"] == "ok"]
    table = table_markdown(f)
    assert "| depth | seeds | test acc % [95 % interval] | GMACs | infer img/s | train img/s |" in table
    assert all(line.count("|") <= 7 for line in table.splitlines())   # six columns at most: viewers render them
    every = {r["setting"]: r for r in setting_rows_csv(f, "depth")}   # settings.csv: every figure of each setting
    for s in f.settings:
        runs = ok[ok["depth"] == s.value]
        assert s.acc.mean == pytest.approx(ok.loc[ok["depth"] == s.value, "test_acc"].mean())
        assert s.infer["throughput_img_s"].median == 1
        util, mfu = runs["train_util_pct"].astype(float), runs["train_mfu"].astype(float)
        assert s.runs["train_util_pct"].median == pytest.approx(util.median())
        assert s.runs["train_mfu"].median == pytest.approx(mfu.median())
        row = every[s.value]
        assert (row["run_mfu"], row["run_mfu_q1"], row["run_mfu_q3"]) == pytest.approx(
            (mfu.median(), mfu.quantile(0.25), mfu.quantile(0.75)))
        assert (row["run_busy_pct"], row["run_busy_pct_q1"], row["run_busy_pct_q3"]) == pytest.approx(
            (util.median(), util.quantile(0.25), util.quantile(0.75)))
        assert row["infer_img_s"] == 1 and row["acc_pct"] == pytest.approx(100 * s.acc.mean)
    assert f.test_size == N_TEST and len(f.comparisons) == 1


def test_pareto_front_keeps_only_undominated_runs_even_with_repeated_index():
    from ablations.analysis.figures import pareto_front

    points = pd.DataFrame({"gflops": [1.0, 2.0, 3.0, 2.5, 0.5], "test_acc": [0.80, 0.90, 0.85, 0.95, 0.70]},
                          index=[0, 1, 0, 1, 2])
    front = pareto_front(points)
    assert list(zip(front.gflops, front.test_acc)) == [(0.5, 0.70), (1.0, 0.80), (2.0, 0.90), (2.5, 0.95)]


def test_report_without_the_data_root_skips_the_attention_maps_and_says_why(tmp_path):
    from vit import PRESETS, VisionTransformer

    cfg = PRESETS["vit_cifar"]
    paths = SweepPaths.of(tmp_path, "pos")
    paths.weights.mkdir(parents=True)
    torch.save(VisionTransformer(cfg).state_dict(), paths.weights / "000000000000.pt")
    append_row(paths.rows, {**ENV, **cfg.to_dict(), "dataset": "cifar10", "run_id": "000000000000", "status": "ok",
                            "error": "", "seed": 0, "sweep": "pos", "test_acc": 0.5, "test_size": 100, "params": 1,
                            "gmacs": 0.1, "gflops": 0.2, "train_time_s": 1.0, "started_at": "2026-01-01T00:00:00"},
               ABLATION_COLUMNS)
    text = build_report(tmp_path, data_root=tmp_path / "no-data").read_text()
    assert "position similarity" in text  # drawn from the weights alone
    assert "Attention maps skipped" in text and "DATA_ROOT" in text


@pytest.mark.slow
def test_a_report_forked_after_torch_ran_on_several_threads_finishes(tmp_path):
    """A process whose torch work ran on two threads (the OpenMP pool started: `known` trains, then reports, in one
    process) builds the report in forked workers, whose model-building sections run on one thread: the parent's
    OpenMP threads are not in the child, where a parallel region would wait for them forever."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        torch.set_num_threads(2)
        (torch.randn(512, 512) @ torch.randn(512, 512)).sum()   # the intra-op threads start
        import test_report
        test_report.test_report_without_the_data_root_skips_the_attention_maps_and_says_why(
            __import__("pathlib").Path({str(tmp_path)!r}))
        print("built")
    """)
    import os
    import signal

    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parents[1], start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)   # the process and its forked workers
        child.communicate()
        raise AssertionError("the report hung in its forked workers") from None
    assert child.returncode == 0 and "built" in stdout, stderr[-2000:]


def test_reused_runs_are_marked_and_their_wall_time_not_compared(tmp_path):
    ten_points_apart(tmp_path)
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    rows["reused_from"] = rows["reused_from"].astype(object)
    rows.loc[rows["depth"] == 2, "reused_from"] = "heads"  # as if depth=2 had been copied from the heads sweep
    SweepPaths.of(tmp_path, "depth").rows.unlink()
    for _, r in rows.iterrows():
        append_row(SweepPaths.of(tmp_path, "depth").rows, {k: v for k, v in r.items() if v == v}, ABLATION_COLUMNS)
    text = build_report(tmp_path).read_text()
    assert "wall time of a training run not compared (one side was trained in another sweep" in text
    assert "| — † |" in text and "† runs copied from the heads sweep (same run id" in text
    every = pd.read_csv(tmp_path / "settings.csv")
    assert (every.loc[every["setting"] == 2, ["run_s", "run_s_q1", "run_s_q3"]].iloc[0].tolist()
            == pytest.approx([11.0, 10.5, 11.5])) and every.loc[every["setting"] == 2, "reused_from"].iloc[0] == "heads"
    assert "**depth=2 is best" in text  # the accuracy verdict is unaffected: the same run_id is the same result


def sweep_figure_drawn(settings: list[dict], path, label: str):
    """`figures.sweep_figure`'s Figure object, as it was saved."""
    import ablations.analysis.figures as figs

    captured = {}
    real_save = figs.save
    figs.save = lambda fig, where, **kw: captured.setdefault("fig", fig) or real_save(fig, where, **kw)
    try:
        figs.sweep_figure(settings, path, label, device="cpu (test cpu)")
    finally:
        figs.save = real_save
    return captured["fig"]


@pytest.mark.parametrize("values,numeric", [([1, 2], True), (["pre", "post"], False)])
def test_the_sweep_figure_is_a_readable_grid_with_honest_axes(tmp_path, values, numeric):
    import ablations.analysis.figures as figs
    from ablations.analysis.findings import setting_rows

    ten_points_apart(tmp_path)
    write_cost(tmp_path, {1: [200, 210, 205, 198, 202], 2: [100, 104, 99, 101, 103]})
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    phase = newest_complete_phase(read_table(SweepPaths.of(tmp_path, "depth").cost))
    settings = setting_rows(analyse(rows, "depth", [1, 2], SweepPaths.of(tmp_path, "depth").preds, phase))
    for s, v in zip(settings, values):
        s["value"] = v
    m = settings[0]["mem"]
    settings[1]["mem"] = dataclasses.replace(m, median=m.median + 0.002, q1=m.q1 + 0.002, q3=m.q3 + 0.002)
    fig = sweep_figure_drawn(settings, tmp_path / "d.png", "depth (blocks)")
    axes = fig.axes
    assert len(axes) == 6 and axes[0].get_subplotspec().get_geometry()[:2] == (2, 3)
    assert {ax.get_xlabel() for ax in axes} == {"depth (blocks)"}
    assert fig._suptitle.get_text() == "depth (blocks) sweep on cpu (test cpu)"
    assert fig.get_size_inches()[0] <= 11 and figs.DPI >= 150             # a page's width, sharp
    fig.savefig(tmp_path / "drawn.png")                                   # tick labels exist once drawn
    for ax in axes:
        assert ax.yaxis.get_major_formatter().get_offset() == ""           # no "+1.889e1"
    memory = next(ax for ax in axes if ax.get_title().startswith("training-step peak memory"))
    assert memory.get_ylim()[0] == 0                                      # 0.002 MB does not look like a cliff
    joined = [line for ax in axes for line in ax.get_lines() if len(line.get_xdata()) > 1 and line.get_linestyle() != "None"
              and line.get_gid() != "reference"]   # the accuracy panel's line at the best's 0 is no trend
    assert bool(joined) == numeric                                        # categories are points, not a trend


def test_intervals_that_differ_in_their_seeds_alone_are_said_once_with_the_range():
    """A SEEDS=auto sweep's settings rest on 3 and 5 seeds: the table's note says 't over 3–5 seeds' once, not the
    same kind twice (sorted as text, 12 came before 3); other kinds stay as they are, fewest seeds first."""
    from ablations.analysis.wording.tables import interval_kinds

    kinds = ["t over 5 seeds and 360 test images", "t over 3 seeds and 360 test images",
             "t over 12 seeds and 360 test images"]
    assert interval_kinds(kinds) == ["t over 3–12 seeds and 360 test images"]
    assert interval_kinds(["t over 3 seeds, test set held fixed", "binomial over 360 test images (1 seed)",
                           "t over 2 seeds and 360 test images"]) == [
        "binomial over 360 test images (1 seed)", "t over 2 seeds and 360 test images",
        "t over 3 seeds, test set held fixed"]


def test_wall_times_of_runs_on_two_devices_are_neither_compared_nor_drawn_and_a_lone_panels_titles_fit(tmp_path,
                                                                                                        monkeypatch):
    """A sweep extended on another machine (seed 2 on another CPU model): its runs' wall times are two machines',
    so the report compares none (it gave a ratio over them) and the figure leaves their panel out, saying why.
    With the cost panels unmeasured too, one panel is left: its title and the figure's, longer than it is wide,
    wrap onto lines of their own within the figure (they ran off its edges)."""
    from ablations.analysis.findings import setting_rows
    from ablations.analysis.wording import cost_sentence

    for seed in range(3):
        if seed == 2:
            monkeypatch.setitem(ENV, "device_name", "another cpu")
        write_run(tmp_path, 1, seed, mask(range(20 + seed)))
        write_run(tmp_path, 2, seed, mask(range(30 + seed)))
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    found = analyse(rows, "depth", [1, 2], SweepPaths.of(tmp_path, "depth").preds, None)
    assert "wall time of a training run not compared (their runs trained on 2 devices: another cpu, test cpu)" \
        in cost_sentence(found)
    fig = sweep_figure_drawn(setting_rows(found), tmp_path / "d.png", "depth (blocks)")
    assert [ax.get_title() for ax in fig.axes][1:] == ["GMACs per image"]
    assert any("Not drawn: training run wall time (s) (the runs trained on 2 devices)." in " ".join(t.get_text().split())
               for t in fig.texts)
    one = [{**d, "gmacs": 0.01} for d in setting_rows(found)]   # GMACs the same: the accuracy panel alone
    alone = sweep_figure_drawn(one, tmp_path / "e.png", "number of transformer blocks")
    [panel] = alone.axes
    assert "\n" in panel.get_title() and "\n" in alone._suptitle.get_text()
    renderer = alone.canvas.get_renderer()
    width = alone.get_figwidth() * alone.dpi
    for text in (panel.title, alone._suptitle):   # within the figure, both edges
        box = text.get_window_extent(renderer)
        assert 0 <= box.x0 and box.x1 <= width, (text.get_text(), box, width)


def test_settings_at_chance_are_drawn_beside_guessings_accuracy_and_learned_ones_are_not(tmp_path):
    """Runs that learned nothing (10.5–11.5 % on 10 classes: the report's ‡) get guessing's 10 % dashed on the
    accuracy panel; the ten-points-apart sweep, far above it, gets no such line."""
    from ablations.analysis.findings import setting_rows

    def chance_line(out):   # no cost phase: its three panels are named under the figure, not drawn blank
        rows = read_table(SweepPaths.of(out, "depth").rows)
        settings = setting_rows(analyse(rows, "depth", [1, 2], SweepPaths.of(out, "depth").preds, None))
        fig = sweep_figure_drawn(settings, out / "d.png", "depth (blocks)")
        assert [ax.get_title() for ax in fig.axes][1:] == ["GMACs per image", "training run wall time (s)"]
        assert any("Not measured here, so not drawn: inference img/s, training-step img/s, training-step peak memory "
                   "(MB)." in " ".join(t.get_text().split()) for t in fig.texts)
        return [line for line in fig.axes[0].get_lines() if line.get_gid() == "chance"]

    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(885 + 5 * seed)))   # 11.5, 11.0, 10.5 % right
        write_run(tmp_path, 2, seed, mask(range(890 - 5 * seed)))
    [line] = chance_line(tmp_path)
    assert list(line.get_ydata()) == [10.0, 10.0] and line.get_linestyle() == "--"
    ten_points_apart(tmp_path / "learned")
    assert chance_line(tmp_path / "learned") == []


def test_sixteen_log_spaced_values_get_tick_labels_that_do_not_run_into_each_other(tmp_path):
    from ablations.analysis.findings import setting_rows

    ten_points_apart(tmp_path)
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    two = setting_rows(analyse(rows, "depth", [1, 2], SweepPaths.of(tmp_path, "depth").preds, None))
    lrs = [float(v) for v in np.logspace(-4, -1, 16)]
    settings = [{**two[i % 2], "value": lr} for i, lr in enumerate(lrs)]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = sweep_figure_drawn(settings, tmp_path / "lr.png", "peak learning rate")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    fig.savefig(tmp_path / "lr-drawn.png")
    drawn = [ax for ax in fig.axes if ax.has_data()]     # panels with nothing measured are blank
    assert len(drawn) >= 2
    for ax in drawn:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert len(ax.get_xticks()) == 16 and len(labels) >= 3
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        if labels[0].get_rotation() == 0:    # level: side by side, apart
            assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
        else:                               # turned 45°: parallel, a text height apart across their slant at least
            assert labels[0].get_rotation() == 45
            ticks = ax.get_xticks()
            shown = [i for i, t in enumerate(ax.get_xticklabels()) if t.get_text()]
            at = ax.transData.transform([(ticks[i], 0.0) for i in shown])[:, 0]
            font = labels[0].get_fontsize() * fig.dpi / 72
            assert all((b - a) * np.sqrt(0.5) >= font for a, b in zip(at, at[1:]))
        assert labels[0].get_text() == "0.0001"


def test_cost_rounds_taken_under_load_are_left_out_so_a_loaded_speedup_is_not_reported(tmp_path):
    ten_points_apart(tmp_path)
    # two equally fast settings; rounds 1 to 4 of depth=1 ran while another process held the machine
    write_cost(tmp_path, {1: [101, 33, 34, 35, 36], 2: [102, 103, 101, 104, 102]})
    cost_csv = SweepPaths.of(tmp_path, "depth").cost
    table = read_table(cost_csv)
    table["contended"] = [int(d == 1 and r in (1, 2, 3)) for d, r in zip(table["depth"], table["round"])]
    table.to_csv(cost_csv, index=False)
    text = depth_section(tmp_path)
    assert "inference img/s not compared (fewer than 3 measurements on a side)" in text   # 2 rounds left
    assert "(6 of 20 timed steps ran while other processes took ≥ 10 % of the machine and are left out)" in text
    table["contended"] = [int(d == 1 and r in (1, 2)) for d, r in zip(table["depth"], table["round"])]
    table.to_csv(cost_csv, index=False)   # 3 rounds left, 2 of them loaded unflagged: too unlike to call a ratio
    assert "inference img/s same within noise" in depth_section(tmp_path)
    table["contended"] = 0   # the same figures without the flag would report a ratio
    table.to_csv(cost_csv, index=False)
    assert "inference img/s ×" in depth_section(tmp_path)


@pytest.mark.slow
def test_no_command_writes_into_the_reference_unless_told_and_the_report_compares_with_it(tmp_path, capsys):
    import shutil
    import subprocess
    import sys

    import ablations.__main__ as cli
    from bench.reference import REFERENCE_MARK

    reference = tmp_path / "reference"
    ten_points_apart(reference)
    (reference / REFERENCE_MARK).write_text("reference\n")
    before = sorted((p.relative_to(reference), p.read_bytes()) for p in reference.rglob("*") if p.is_file())
    spec = Path(__file__).resolve().parents[1] / "ablations" / "sweeps" / "depth.toml"
    linked = tmp_path / "linked"            # an OUT whose ablations/ is a link into the reference
    linked.mkdir()
    (linked / "ablations").symlink_to(reference / "ablations")

    for argv in (["sweep", str(spec), "--dataset", "digits", "--out", str(reference), "--seeds", "0"],
                 ["sweep", str(spec), "--dataset", "digits", "--out", str(reference / "ablations"), "--seeds", "0"],
                 ["sweep", str(spec), "--dataset", "digits", "--out", str(linked), "--seeds", "0"],
                 ["report", "--out", str(reference)], ["report", "--out", str(reference / "figures")]):
        assert cli.main(argv) == 2, argv
        assert "holds the committed reference results" in capsys.readouterr().err
    assert cli.main(["calibrate", "--from", str(reference), "--out", str(reference / "calibrate")]) == 2
    assert "holds the committed reference results" in capsys.readouterr().err
    from bench.reference import refusal

    holder = tmp_path / "results"                   # OUT=results holds results/reference: writing there is fine
    (holder / "reference").mkdir(parents=True)
    (holder / "reference" / REFERENCE_MARK).write_text("reference\n")
    assert refusal(holder, False) is None and refusal(holder / "reference", False) is not None
    for out in (reference, reference / "bench"):
        bench = subprocess.run([sys.executable, "-m", "bench", "run", "--preset", "vit_digits", "--out", str(out)],
                               capture_output=True, text=True, timeout=120)
        assert bench.returncode == 2 and "holds the committed reference results" in bench.stderr
    after = sorted((p.relative_to(reference), p.read_bytes()) for p in reference.rglob("*") if p.is_file())
    assert after == before

    mine = tmp_path / "mine"   # the same runs again, but depth=2 seed 0 now gets 3 more images wrong
    shutil.copytree(reference, mine)
    (mine / REFERENCE_MARK).unlink()
    write_run_preds = SweepPaths.of(mine, "depth").preds / "000002000000.npz"
    target = torch.arange(N_TEST) % 10
    correct = mask(range(53))
    write_run_preds.write_bytes(save_preds(torch.where(torch.as_tensor(correct), target, (target + 1) % 10), target))
    rows = read_table(SweepPaths.of(mine, "depth").rows)
    rows.loc[rows["run_id"] == "000002000000", "test_acc"] = 0.947
    rows.to_csv(SweepPaths.of(mine, "depth").rows, index=False)
    text = build_report(mine, reference=reference).read_text()
    section = text.split("## against the reference", 1)[1].split("\n## ", 1)[0]
    assert f"in `{reference}`, trained there apart from these runs;" in section   # where or when: not known
    assert "another machine" not in section
    assert "| depth | depth=1 | 3 | 84.00 | 84.00 | 0 (same predictions) | identical |" in section   # no interval
    assert "| depth | depth=2 | 3 |" in section and "-0.10 [" in section
    row = next(line for line in section.splitlines() if line.startswith("| depth | depth=2 |"))
    low, high = (float(v) for v in re.search(r"\[([-+0-9.]+), ([-+0-9.]+)\]", row).groups())
    assert row.endswith("| same within noise |") and low < -0.5   # its interval reaches past the margin
    # what the comparison could see is read off the points with an interval, not the identical one's none
    assert (f"1 of 2 points reproduced the reference bit for bit (the same predicted class on every test image, "
            f"seed by seed). What this comparison could see: the median half-width of the other points' intervals "
            f"is {(high - low) / 2:.2f} points") in section
    correct = mask(range(51))   # one image apart from the reference's run instead of three: the interval narrows
    write_run_preds.write_bytes(save_preds(torch.where(torch.as_tensor(correct), target, (target + 1) % 10), target))
    rows.loc[rows["run_id"] == "000002000000", "test_acc"] = 0.949
    rows.to_csv(SweepPaths.of(mine, "depth").rows, index=False)
    section = build_report(mine, reference=reference).read_text().split("## against the reference", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith("| depth | depth=2 |"))
    low, high = (float(v) for v in re.search(r"\[([-+0-9.]+), ([-+0-9.]+)\]", row).groups())
    assert -0.5 <= low and high <= 0.5 and row.endswith("| equivalent (within ±0.5) |"), row
    assert "What this comparison could see: the median half-width of the other points' intervals is " in section


def test_every_section_stays_when_every_cost_round_ran_under_load(tmp_path):
    from matplotlib.image import imread

    for depth in (1, 2, 4, 8):   # a factor spanning ×8: its speed panels would take a log axis
        for seed in range(3):
            write_run(tmp_path, depth, seed, mask(range(20 + 3 * depth + seed)))
    write_cost(tmp_path, {d: [100 / d] * 5 for d in (1, 2, 4, 8)})
    cost_csv = SweepPaths.of(tmp_path, "depth").cost
    table = read_table(cost_csv)
    table["contended"] = 1
    table.to_csv(cost_csv, index=False)
    text = build_report(tmp_path).read_text()
    section = text.split("## depth", 1)[1].split("\n## ", 1)[0]
    assert "could not be built" not in text and "| 8 | 3 | " in section
    assert "inference img/s not measured; training-step img/s not measured" in section
    assert "training-step peak memory ×" in section              # the allocator's peak does not depend on load
    assert "(40 of 40 timed steps ran while other processes took" in section
    assert imread(tmp_path / "figures" / "depth.png").shape[1] > 1000     # drawn, blank speed panels included


def test_accuracy_against_compute_draws_one_front_per_dataset_and_budget(tmp_path):
    from ablations.analysis.report import _pareto_section

    rows = []
    for sweep, dataset, data_id, epochs, accs in (("depth", "mnist5k", "", 20, {1: 0.97, 2: 0.98}),
                                                  ("mine", "imagefolder", "files:aaa,resized:16", 4, {1: 0.60, 2: 0.99}),
                                                  ("other", "imagefolder", "files:bbb", 4, {1: 0.30, 2: 0.35}),
                                                  ("seeds", "mnist5k", "", 20, {2: 0.985})):  # one setting, many seeds
        for depth, acc in accs.items():
            for seed in range(3):
                rows.append({"run_id": hexid(f"{sweep}{depth}{seed}"), "sweep": sweep, "status": "ok", "seed": seed,
                             "depth": depth, "test_acc": acc + 0.001 * seed, "gflops": 0.001 * depth,
                             "dataset": dataset, "data_id": data_id, "epochs": epochs, "test_size": 1000})
    figures = tmp_path / "figures"
    figures.mkdir()
    table = pd.DataFrame(rows)
    specs = {name: load_spec(write_spec(tmp_path / f"{name}.toml", "depth", "[1, 2]"))
             for name in ("depth", "mine", "other", "seeds")}
    text = "\n".join(_pareto_section({name: table[table["sweep"] == name] for name in specs}, specs, Tables(tmp_path),
                                     figures, tmp_path))
    assert "**mnist5k, 20 epochs**" in text and "**imagefolder (files:aaa), 4 epochs**" in text
    assert "**imagefolder (files:bbb), 4 epochs**" in text   # another folder is another test set: its own front
    assert (figures / "pareto-3.png").exists()
    assert "Left out: seeds (one setting each: nothing to trade off)." in text and "seeds depth=" not in text
    assert (figures / "pareto.png").exists() and (figures / "pareto-2.png").exists()
    fronts = {part.split("**", 1)[0]: part.split("**", 1)[1].split("![")[0]
              for part in text.split("\n**")[1:]}
    assert "mine: depth=" not in fronts["mnist5k, 20 epochs"] and "depth: depth=2" in fronts["mnist5k, 20 epochs"]
    mine = fronts["imagefolder (files:aaa), 4 epochs"]
    assert "depth: depth=" not in mine and "other: depth=" not in mine and "mine: depth=2" in mine


def test_variance_shares_are_given_from_eight_seeds_and_add_up(tmp_path):
    import re

    for seed in range(8):
        write_run(tmp_path, 1, seed, mask(range(20 + 3 * (seed % 3))))
        write_run(tmp_path, 2, seed, mask(range(25 + 2 * (seed % 4))))
    text = depth_section(tmp_path)
    row = next(line for line in text.splitlines() if "Noise: a setting's mean" in line)
    shares = [int(x) for x in re.findall(r"a setting's mean ±[\d.]+ points s\.e\. \(seed (\d+) %, coin flips (\d+) %, "
                                         r"test images (\d+) %\)", row)[0]]
    assert len(shares) == 3 and 99 <= sum(shares) <= 101, row
    assert "shares, seed, coin flips" not in text


@pytest.mark.parametrize("link", ["ablations/weights", "ablations/preds/depth", "ablations/depth.csv"])
def test_a_link_anywhere_below_out_into_the_reference_is_refused_before_any_work(tmp_path, capsys, link):
    """OUT/ablations/weights linked to the reference's weights (to draw figures from committed weights), a
    sweep's preds folder, or its table: a sweep would write into the reference. Refused in one line, the
    reference untouched."""
    from bench.reference import REFERENCE_MARK

    reference = tmp_path / "reference"
    target = reference / link
    (target.parent if target.suffix else target).mkdir(parents=True)
    if target.suffix:
        target.write_text("run_id\n")
    (reference / REFERENCE_MARK).write_text("reference\n")
    before = sorted(p.relative_to(reference) for p in reference.rglob("*"))
    out = tmp_path / "mine"
    (out / link).parent.mkdir(parents=True)
    (out / link).symlink_to(target)
    from ablations.__main__ import main

    code, _, err = run_cli(main, ["sweep", "depth", "--dataset", "digits", "--epochs", "1", "--seeds", "0",
                                  "--cost-rounds", "0", "--out", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"its {link}{'' if target.suffix else '/'} leads into {reference}" in err
    assert sorted(p.relative_to(reference) for p in reference.rglob("*")) == before


def test_runs_still_learning_at_their_last_epoch_are_labelled_not_converged(tmp_path):
    """A quick pass (2 epochs: 67 % then 84 %) says its numbers are a short budget's; runs whose last epoch
    changed test accuracy by a tenth of a point say nothing."""
    from ablations.analysis.budget import still_learning
    from ablations.analysis.wording import not_converged

    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(20 + seed)))
        write_run(tmp_path, 2, seed, mask(range(23 + seed)))
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    quick = pd.DataFrame([{"run_id": r, "epoch": e, "lr": 0.002, "train_loss": 1 / e, "test_loss": 1 / e, "test_acc": acc,
                           "elapsed_s": e} for r in rows["run_id"] for e, acc in ((1, 0.67), (2, 0.84))])
    said = not_converged(still_learning(quick, rows, "depth"), "depth")
    # one clause names every setting it holds for, with each one's figure
    assert said.startswith("**Not converged**: depth=1 and 2: their test accuracy rose 17.0 and 17.0 points over the "
                           "last of 2 epochs (means over runs)."), said
    backwards = still_learning(quick, rows.iloc[::-1], "depth", order=[1, 2])   # the sweep's order, not the rows'
    assert [u.value for u in backwards.settings] == [1, 2]
    settled = quick.assign(test_acc=quick["epoch"].map({1: 0.975, 2: 0.976}))
    assert still_learning(settled, rows, "depth").converged
    quick.to_csv(SweepPaths.of(tmp_path, "depth").history, index=False)
    assert "**Not converged**: depth=1 and 2: their test accuracy rose 17.0 and 17.0 points" in depth_section(tmp_path)
    row = next(line for line in build_report(tmp_path).read_text().splitlines() if line.startswith("| depth |"))
    assert "| Not converged; at this budget: depth=" in row   # the findings table carries it, as the section does


def test_a_float_field_swept_with_whole_values_is_named_as_its_spec_names_it_in_every_sentence(tmp_path, capsys):
    """mlp_ratio = [1, 2] comes back from the table as 1.0 and 2.0; the verdict, the convergence warning and the
    Pareto front all say mlp_ratio=1."""
    from ablations.__main__ import main

    spec = write_spec(tmp_path / "mlp.toml", "mlp_ratio", "[1, 2]", train="epochs = 1")
    out = tmp_path / "o"
    code, _, err = run_cli(main, ["sweep", str(spec), "--dataset", "digits", "--seeds", "0,1", "--cost-rounds", "0",
                                  "--out", str(out)], capsys)
    assert code == 0, err
    text = build_report(out).read_text()
    assert "**Not converged**: mlp_ratio=1 and 2:" in text
    assert re.search(r"Pareto front .*: mlp: mlp_ratio=[12] \(", text)
    assert "mlp_ratio=1.0" not in text and "mlp_ratio=2.0" not in text


def test_seed_lists_are_written_as_ranges_from_four_in_a_row():
    from ablations.analysis.wording import seed_ranges

    assert seed_ranges([0, 1, 2]) == "0, 1, 2"
    assert seed_ranges(list(range(48))) == "0–47"
    assert seed_ranges([0, 1, 2, 3, 7, 9, 10]) == "0–3, 7, 9, 10"


def test_an_ok_row_with_a_blank_test_accuracy_keeps_its_sweep_section_and_the_pareto_section(tmp_path):
    """A `test_acc` cell emptied (a hand edit, a damaged copy): the accuracy comes from the run's saved
    predictions, and neither the sweep's section nor the accuracy-against-compute section is lost."""
    ten_points_apart(tmp_path)
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    rows.loc[0, "test_acc"] = float("nan")
    rows.to_csv(SweepPaths.of(tmp_path, "depth").rows, index=False)
    text = build_report(tmp_path).read_text()
    assert "could not be built" not in text
    assert "**depth=2 is best, 94.50 %." in text and "Pareto front" in text


def test_a_sweep_with_one_setting_makes_no_cost_comparison_with_itself(tmp_path):
    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(20 + seed)))
    text = depth_section(tmp_path)
    section = text
    assert "\n| 1 | 3 | " in section                           # the setting's row: depth 1, 3 seeds
    assert "From depth=1 to depth=1" not in section and "GMACs ×" not in section


def test_the_report_shows_the_gpus_own_figures_over_each_training_phase(tmp_path):
    """Runs that shared a GPU have no busy share of their own: the report gives the device's over the phase, with
    energy only where the phase held a window between counter ticks (— otherwise, never 0)."""
    from ablations.analysis.report import _phases_section
    from ablations.results.store import PHASES, Tables
    from ablations.running.runner import PHASE_COLUMNS
    from bench.io.csvio import append_row

    assert _phases_section(Tables(tmp_path)) == []
    base = {"sweeps": "depth+heads+patch", "runs": 27, "jobs": 8, "device_name": "NVIDIA H200", "util_samples": 40,
            "energy_source": "nvml"}
    append_row(tmp_path / PHASES, {**base, "when": "2026-11-26T07:00:00+00:00", "wall_s": 0.8, "images": 80000,
                                   "util_pct": None, "power_w": None, "energy_window_s": None,
                                   "energy_j_per_img": None}, PHASE_COLUMNS)
    append_row(tmp_path / PHASES, {**base, "when": "2026-11-26T07:01:00+00:00", "wall_s": 12.5, "images": 2_160_000,
                                   "util_pct": 93.4, "power_w": 251.0, "energy_window_s": 12.1,
                                   "energy_j_per_img": 0.00145}, PHASE_COLUMNS)
    lines = _phases_section(Tables(tmp_path))   # the OUT as a new command reads it
    text = "\n".join(lines)
    assert "the newest 2 of 2" in text
    assert "| 2026-11-26T07:00:00+00:00 | depth+heads+patch | 8 | 80,000 | 0.8 | — | — | — | — | — | — |" in lines
    assert ("| 2026-11-26T07:01:00+00:00 | depth+heads+patch | 8 | 2,160,000 | 12.5 | 93 | — | — | — | 251 | "
            "0.0014 (12.1) |") in lines


def test_a_verdict_over_a_design_that_left_a_setting_out_says_so_in_its_headline():
    """SEEDS=auto leaves out a setting one of whose runs diverged: the verdict is over the others, and its
    headline says so; a left-out setting whose finished runs average above the leader is named."""
    import math

    from ablations.analysis.findings import CostSource, Setting, SweepFindings
    from ablations.analysis.stats import Interval, Verdict
    from ablations.analysis.wording import verdict_sentence
    from bench.rounds import Spread

    def setting(value, mean, seeds):
        return Setting(value, list(range(seeds)), Interval(mean, math.nan, math.nan, "binomial"), 1, 0.1,
                       Spread.of([]))

    f = SweepFindings("depth", [setting(1, 0.975, 3), setting(2, 0.975, 3), setting(6, 0.979, 2)], 1000, CostSource(None),
                      [], Verdict(best=1, winner=False, beats=(), equivalent=(), inconclusive=(), detectable=0.01,
                                  identical=(2,)))
    plain = verdict_sentence(f)
    assert plain.startswith("**depth=1 has the highest mean, 97.50 %. depth=2 is identical to it (the same "
                            "predictions).**") and "Left out" not in plain
    text = verdict_sentence(dataclasses.replace(f, left_out=(6,)))
    assert text.startswith("Of the settings in the design: **depth=1 has the highest mean, 97.50 %. depth=2 is "
                           "identical to it")
    assert ("Left out of the design and of this verdict: depth=6 (a run diverged; the mean of its 2 finished runs: "
            "97.90 %, above depth=1's 97.50 %: no claim is made about it).") in text


def test_a_sweep_without_a_cost_phase_says_none_was_kept_and_claims_nothing_was_measured_alone(tmp_path):
    """Runs trained side by side (jobs 8) with no cost phase kept: the report neither tells the user to pass
    --cost-rounds (the phase may have run and stopped) nor says the cost-phase figures were measured alone."""
    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(150 + 10 * seed)))
        write_run(tmp_path, 2, seed, mask(range(50 + 5 * seed)))
    table = read_table(SweepPaths.of(tmp_path, "depth").rows).assign(jobs=8)
    table.to_csv(SweepPaths.of(tmp_path, "depth").rows, index=False)
    text = depth_section(tmp_path)
    assert "measured with up to 8 runs sharing the device (JOBS); no cost phase measured this sweep's speed alone." \
        in text and "measured alone." not in text.replace("speed alone.", "")
    assert "no cost phase (none kept here; make cost OUT=… (or vitbench cost --out …) measures one)" in text
    assert "--cost-rounds ≥ 1" not in text
    assert "members of packs" not in text
    table.assign(packed=1).to_csv(SweepPaths.of(tmp_path, "depth").rows, index=False)
    packed = depth_section(tmp_path)   # a member's wall time is its pack's, and what shared the device were packs
    assert ("All 6 of its runs trained as members of packs (PACK: the seeds of a point as one stacked model): a "
            "member's training wall time (`train_time_s`) is its whole pack's") in packed
    assert ("Training wall times (`train_time_s`, `train_util_pct`) of all 6 of its runs were measured with up to 8 "
            "runs or packs sharing the device (JOBS)") in packed
    some = " ".join(sharing_note(pd.DataFrame({"packed": [1, 0] * 3, "jobs": [8, 1, 1, 1, 1, 1]}), phase=True))
    assert "3 of its 6 runs trained as members of packs" in some and "of 1 of its 6 runs were measured with" in some
    one = " ".join(sharing_note(pd.DataFrame({"packed": [1], "jobs": [2]}), phase=True))
    assert one.startswith("Its one run trained as a member of a pack (PACK") and "of its one run were measured" in one


def test_a_design_file_of_another_experiment_is_not_applied_to_the_tables_runs(tmp_path):
    """A SEEDS=auto design kept beside a table belongs to its experiment: runs of another experiment in the table
    (a quick fixed-seed check with other epochs, newest) are analysed at their own seeds, and the report says why;
    so are runs of the design's own experiment that its first look has not finished."""
    from ablations.analysis.stats import ALPHA
    from ablations.results import seed_design

    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(150 + 10 * seed)))
        write_run(tmp_path, 2, seed, mask(range(50 + 5 * seed)))
    paths = SweepPaths.of(tmp_path, "depth")
    quick, auto = hexid("a quick check"), hexid("the adaptive sweep")   # experiment ids are 12 hex digits
    table = read_table(paths.rows).assign(experiment_id=quick)
    table.to_csv(paths.rows, index=False)
    seed_design.write_design(paths, seed_design.new_design(0.005, ALPHA, 10, (3, 5), experiment=auto))
    text = build_report(tmp_path).read_text()
    assert "The SEEDS=auto design beside this table (depth-design.json) is another experiment's" in text
    assert "Adaptive seeds (SEEDS=auto)" not in text and "**depth=2 is best" in text
    seed_design.write_design(paths, seed_design.new_design(0.005, ALPHA, 10, (3, 5), experiment=quick))
    text = build_report(tmp_path).read_text()
    assert "is another experiment's" not in text and "Adaptive seeds (SEEDS=auto)" in text
    seed_design.write_design(paths, seed_design.new_design(0.005, ALPHA, 10, (5, 8), experiment=quick))
    text = build_report(tmp_path).read_text()   # its first look needs seeds 3 and 4 of both settings
    assert "Trained with SEEDS=auto, but look 1 of its design needs 4 runs the table lacks" in text


def test_learning_curves_are_titled_with_their_sweep_not_its_factor(tmp_path, monkeypatch):
    """The seeds sweep varies the seed of the base model (factor depth): its curves say 'seeds sweep (depth)',
    not 'depth sweep', which is another sweep's name."""
    from ablations.analysis import figures

    titles = []
    monkeypatch.setattr(figures, "save", lambda fig, path, **kw: titles.append(fig._suptitle.get_text()) or path)
    history = pd.DataFrame({"run_id": ["a", "a"], "epoch": [1, 2], "test_acc": [0.5, 0.6], "train_loss": [1.0, 0.5]})
    rows = pd.DataFrame({"run_id": ["a"], "status": ["ok"], "depth": [4], "device": ["cpu"], "device_name": ["x"]})
    figures.learning_curves(history, rows, "depth", tmp_path / "s.png", [4], sweep="seeds")
    figures.learning_curves(history, rows, "depth", tmp_path / "d.png", [4], sweep="depth")
    assert titles == ["learning curves, seeds sweep (depth) on cpu (x)", "learning curves, depth sweep on cpu (x)"]


def test_learning_curves_keep_their_legend_off_the_curves(tmp_path, monkeypatch):
    """Six settings whose curves fill both panels: one legend for both, beside them, not inside a panel over the
    lines (where matplotlib's 'best' place has no empty corner)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from ablations.analysis import figures

    drawn = {}
    monkeypatch.setattr(figures, "save", lambda fig, path, **kw: drawn.setdefault("fig", fig) and path)
    settings = [1, 2, 3, 4, 5, 6]
    history = pd.DataFrame([{"run_id": f"r{d}", "epoch": e, "test_acc": 0.1 + 0.02 * e * d, "train_loss": 2.3 / e / d}
                            for d in settings for e in range(1, 16)])
    rows = pd.DataFrame({"run_id": [f"r{d}" for d in settings], "status": "ok", "depth": settings, "device": "cpu",
                         "device_name": "x"})
    figures.learning_curves(history, rows, "depth", tmp_path / "c.png", settings, sweep="depth")
    fig = drawn["fig"]
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = fig.legends[0].get_window_extent(renderer)
    assert all(box.x0 >= ax.get_window_extent(renderer).x1 for ax in fig.axes)      # beside the panels
    assert box.x1 <= fig.get_figwidth() * fig.dpi + 1                               # and inside the figure
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [str(d) for d in settings]


def test_runs_far_from_fitting_their_training_set_are_labelled_not_converged_even_when_the_last_epoch_is_flat(tmp_path):
    """A 10-epoch pooling question on digits: the training loss goes 2.30 → 1.90 of the 2.30 of guessing, and the
    cosine schedule flattens the last epoch (test accuracy +0.2 points): 'Not converged' all the same, in the
    section's first lines; a run that fits (loss 0.3) is not labelled."""
    from ablations.analysis.budget import still_learning
    from ablations.analysis.wording import not_converged

    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(700 + seed)))
        write_run(tmp_path, 2, seed, mask(range(720 + seed)))
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    losses = np.linspace(2.30, 1.90, 10)
    flat = pd.DataFrame([{"run_id": r, "epoch": e + 1, "lr": 0.002, "train_loss": losses[e], "test_loss": losses[e],
                          "test_acc": 0.26 + 0.002 * min(e, 8) + 0.002 * (e == 9), "elapsed_s": e}
                         for r in rows["run_id"] for e in range(10)])
    said = not_converged(still_learning(flat, rows, "depth", classes=10), "depth")
    assert said.startswith("**Not converged**: depth=1 and 2: their training losses ended at 1.90 and 1.90 (means over "
                           "runs), far from fitting the training set (guessing among 10 classes: 2.30)."), said
    assert "still learning" not in said   # a flat last epoch is not a run still learning
    rising = flat.assign(test_acc=flat["test_acc"] + 0.1 * (flat["epoch"] == 10))   # +0.2 + 10 points: one clause
    both = not_converged(still_learning(rising, rows, "depth", classes=10), "depth")
    assert both.startswith("**Not converged**: depth=1 and 2: their test accuracy rose 10.2 and 10.2 points over the "
                           "last of 10 epochs (means over runs), and their training losses ended at 1.90 and 1.90 "
                           "(means over runs), far from fitting"), both
    assert both.count("depth=1 and 2") == 1
    alone = not_converged(still_learning(flat, rows, "depth", classes=10), "depth", settings=1)
    assert "order" not in alone and alone.endswith("Its accuracy is a short budget's, not the setting's converged "
                                                   "one, and can change with more epochs (EPOCHS).")   # one setting
    assert still_learning(flat, rows, "depth").converged   # without the classes, the last epoch alone says nothing
    fitted = flat.assign(train_loss=flat["train_loss"] * 0.3 / 1.9)
    assert still_learning(fitted, rows, "depth", classes=10).converged
    flat.to_csv(SweepPaths.of(tmp_path, "depth").history, index=False)
    section = depth_section(tmp_path)
    assert "**Not converged**: depth=1 and 2: their training losses ended at 1.90" in section[:2500]
    # the verdict's own headline says it, not only a paragraph beside it
    headline = next(line for line in section.splitlines() if line.startswith("**") and "Not converged**:" not in line)
    assert headline.startswith("**Not converged; at this budget: depth="), headline


def test_convergence_is_judged_per_setting_against_what_the_recipe_can_reach(tmp_path):
    """Label smoothing 0.3 over 10 classes cannot take the loss below 1.18: runs ending at 1.25 have fitted (not
    'Not converged', as against guessing's 2.30 alone); one setting that never fitted (loss 1.14) while the
    other did is named, not averaged away; runs without per-epoch history are said not checked."""
    from ablations.analysis.budget import smoothing_floor, still_learning
    from ablations.analysis.wording import not_converged

    floor = smoothing_floor(0.1, 10)
    assert floor == pytest.approx(-(0.91 * np.log(0.91) + 9 * 0.01 * np.log(0.01)))
    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(8 + seed)))
        write_run(tmp_path, 2, seed, mask(range(9 + seed)))
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows).assign(label_smoothing=0.3)

    def history(loss_of):
        return pd.DataFrame([{"run_id": r, "epoch": e, "train_loss": loss_of(d) + (2 - e) * 0.01, "test_acc": 0.99}
                             for r, d in zip(rows["run_id"], rows["depth"]) for e in (1, 2)])

    smoothed = still_learning(history(lambda d: 1.25), rows, "depth", classes=10)
    assert smoothed.converged and smoothed.checked   # 0.07 above its floor of 1.18: fitted
    assert not still_learning(history(lambda d: 1.25), rows.assign(label_smoothing=0.0), "depth", classes=10).converged
    one = still_learning(history(lambda d: 1.14 if d == 2 else 0.1), rows.assign(label_smoothing=0.0), "depth",
                         classes=10)
    assert [u.value for u in one.settings] == [2]
    said = not_converged(one, "depth")
    assert said.startswith("**Not converged**: depth=2: its training loss ended at 1.14") and "depth=1" not in said
    unknown = still_learning(pd.DataFrame(), rows, "depth", classes=10)
    assert unknown.converged and not unknown.checked
    assert not_converged(unknown, "depth") == "Convergence not checked: these runs have no per-epoch history."


def _longer_runs(out, depth, accs, epochs=3):
    """Runs of the `depth` sweep's model at `depth` trained for `epochs` (other run ids), written before the
    shown ones: another experiment of the same table, left out of its section."""
    paths = SweepPaths.of(out, "depth")
    for seed, acc in enumerate(accs):
        run_id = hexid(f"longer{depth}{epochs}{seed}")
        correct = mask(range(round(N_TEST * (1 - acc))))
        target = torch.arange(N_TEST) % 10
        paths.preds.mkdir(parents=True, exist_ok=True)
        (paths.preds / f"{run_id}.npz").write_bytes(save_preds(torch.where(torch.as_tensor(correct), target,
                                                                           (target + 1) % 10), target))
        append_row(paths.rows, {"run_id": run_id, "status": "ok", "error": "", "depth": depth, "seed": seed,
                                "sweep": "depth", "started_at": f"2025-12-01T00:00:0{seed}", "epochs": epochs,
                                "lr": 0.002, "num_classes": 10, "test_acc": float(np.mean(correct)),
                                "test_size": N_TEST, "params": 1000 * depth, "gmacs": 0.01 * depth,
                                "gflops": 0.02 * depth, "train_time_s": 5.0, **ENV}, ABLATION_COLUMNS)


def test_runs_far_below_the_same_model_trained_longer_are_labelled_not_converged(tmp_path):
    """A 1-epoch sweep whose depth-1 model reaches 84 % where the same model (other seeds, same recipe but the
    epochs) reached 97 % after 3 epochs: its headline says the runs have not converged, naming that setting
    and not depth 2, whose longer runs are within a point of it; longer runs no better say nothing."""
    from ablations.analysis.budget import below_longer_budget
    from ablations.analysis.wording import shortfall
    from ablations.results.experiments import latest_rows

    _longer_runs(tmp_path, 1, (0.97, 0.968, 0.972))
    _longer_runs(tmp_path, 2, (0.95, 0.951, 0.945))
    ten_points_apart(tmp_path)
    rows = latest_rows(read_table(SweepPaths.of(tmp_path, "depth").rows))
    shown = rows[(rows["epochs"] == 1) & (rows["status"] == "ok")]
    below = below_longer_budget(shown, rows, "depth")
    assert [b.value for b in below] == [1]
    said = shortfall(below[0])
    assert said == ("depth=1 reaches 84.0 % after 1 epoch (3 runs) where the same model reaches 97.0 % after 3 epochs "
                    "(3 runs), more than the ±0.5 points margin below it")
    section = depth_section(tmp_path)
    assert f"**Not converged**: {said}" in section[:3000]
    headline = next(line for line in section.splitlines() if line.startswith("**") and "Not converged**:" not in line)
    assert headline.startswith("**Not converged; at this budget: depth=2 is best"), headline

    margin = tmp_path / "margin"   # 1.5 points below: beyond the ±0.5 margin, within the old 1-point rule's noise
    _longer_runs(margin, 2, (0.96, 0.9605, 0.9595))
    ten_points_apart(margin)
    rows = latest_rows(read_table(SweepPaths.of(margin, "depth").rows))
    assert [b.value for b in below_longer_budget(rows[(rows["epochs"] == 1) & (rows["status"] == "ok")], rows,
                                                 "depth")] == [2]

    other = tmp_path / "same"
    _longer_runs(other, 1, (0.84, 0.83, 0.85))   # as good as the 1-epoch runs: nothing to say
    ten_points_apart(other)
    rows = latest_rows(read_table(SweepPaths.of(other, "depth").rows))
    assert below_longer_budget(rows[(rows["epochs"] == 1) & (rows["status"] == "ok")], rows, "depth") == ()
    assert "Not converged" not in build_report(other).read_text()


def test_the_report_of_sweeps_without_a_model_figure_runs_without_torch(tmp_path):
    """Reading tables, the statistics and the figures need no torch: the report runs in a process where torch
    cannot be imported (only the position and attention figures, which draw trained models, load it)."""
    import subprocess
    import sys

    ten_points_apart(tmp_path)
    write_cost(tmp_path, {1: [200, 210, 205, 198, 202], 2: [100, 104, 99, 101, 103]})
    blocker = ("import importlib.abc, runpy, sys\n"
               "class NoTorch(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name == 'torch' or name.startswith('torch.'):\n"
               "            raise ImportError('torch is blocked in this test')\n"
               "sys.meta_path.insert(0, NoTorch())\n"
               "sys.argv = ['ablations', 'report', '--out', sys.argv[1]]\n"
               "runpy.run_module('ablations', run_name='__main__', alter_sys=True)\n")
    done = subprocess.run([sys.executable, "-c", blocker, str(tmp_path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "**depth=2 is best" in (tmp_path / "REPORT.md").read_text()


def test_the_accuracy_panel_draws_the_verdicts_paired_differences_and_its_decisions(tmp_path):
    """The verdict compares settings by paired differences: the figure's accuracy panel draws those (each setting's
    difference from the best with its pair's interval, the margin as a band) and marks what the verdict decided,
    so the figure and the sentence beside it tell one story."""
    from ablations.analysis.findings import setting_rows
    from ablations.analysis.wording import OUTCOME_MARKERS

    ten_points_apart(tmp_path)
    write_cost(tmp_path, {1: [200, 210, 205, 198, 202], 2: [100, 104, 99, 101, 103]})
    paths = SweepPaths.of(tmp_path, "depth")
    f = analyse(read_table(paths.rows), "depth", [1, 2], paths.preds, newest_complete_phase(read_table(paths.cost)))
    settings = setting_rows(f)
    pair = next(c for c in f.comparisons if {c.a, c.b} == {1, 2})
    want = pair.diff if pair.a == 1 else -pair.diff                      # depth=1 − depth=2, the best
    assert settings[1]["vs_best"] == (0.0, 0.0, 0.0) and settings[0]["vs_best"][0] == pytest.approx(want)
    assert [s["decided"] for s in settings] == ["worse", "best"]
    fig = sweep_figure_drawn(settings, tmp_path / "d.png", "depth (blocks)")
    panel = fig.axes[0]
    assert panel.get_title() == "test accuracy − the highest mean's (2), points"
    worse = [line for line in panel.get_lines() if line.get_label() == "worse"]
    assert len(worse) == 1 and worse[0].get_ydata()[0] == pytest.approx(100 * want)
    # the best is drawn as itself, not in the plain marker an inconclusive setting gets
    best = [line for line in panel.get_lines() if line.get_label() == "highest mean"]   # as the verdicts name it
    assert len(best) == 1 and list(best[0].get_xdata()) == [2] and best[0].get_ydata()[0] == 0
    plain = [line for line in panel.get_lines() if line.get_marker() == "o"]
    assert not any(2 in list(line.get_xdata()) for line in plain), "the best also drawn as a plain point"
    assert best[0].get_marker() not in {m["marker"] for m in OUTCOME_MARKERS.values()}
    assert panel.get_ylim()[0] < 100 * want < 0 < panel.get_ylim()[1]   # not from zero: a difference, 0 in view
    text = build_report(tmp_path).read_text()
    assert "each setting's difference from depth=2, marked by its verdict" in text
    assert "Accuracy: each setting's difference from the one with the highest mean, with its pair's interval" in text   # Method
    # intervals that span the whole panel (a short digits sweep): the legend still sits clear of every end
    wide = [dict(settings[1], value=v, best=2, vs_best=vs, decided=word) for v, vs, word in (
        (1, (-0.001, -0.031, 0.029), "inconclusive"), (2, (0.0, 0.0, 0.0), "best"),
        (4, (-0.007, -0.042, 0.028), "inconclusive"), (8, (-0.010, -0.038, 0.018), "inconclusive"))]
    fig = sweep_figure_drawn(wide, tmp_path / "w.png", "attention heads")
    panel = fig.axes[0]
    fig.canvas.draw()
    box = panel.get_legend().get_window_extent()
    ends = [(d["value"], 100 * y) for d in wide for y in d["vs_best"]]
    assert not any(box.contains(*panel.transData.transform(point)) for point in ends), ends
    # every setting identical to the best (attention backends): a scale of at least ±margin, not one of 1e-17
    same = [dict(settings[1], value=v, best=2, vs_best=(0.0, 0.0, 0.0), decided=word)
            for v, word in ((1, "identical"), (2, "best"), (4, "identical"))]
    panel = sweep_figure_drawn(same, tmp_path / "s.png", "depth (blocks)").axes[0]
    bottom, top, margin = *panel.get_ylim(), 100 * settings[0]["margin"]
    assert bottom <= -margin and top >= margin, (bottom, top)


def test_a_sweep_of_one_setting_draws_how_its_runs_spread_not_six_one_point_panels(tmp_path, monkeypatch):
    import ablations.analysis.figures as figs
    import ablations.analysis.report as report

    for seed in range(4):
        write_run(tmp_path, 2, seed, mask(range(50 + 5 * seed)))     # 95, 94.5, 94, 93.5 %
    drawn = {}
    real = figs.save
    monkeypatch.setattr(report, "_may_fork", lambda: False)   # the figures drawn in this process, where `drawn` sees them
    monkeypatch.setattr(figs, "save", lambda fig, where, **kw: drawn.setdefault(Path(where).name, fig) and real(fig, where, **kw))
    text = build_report(tmp_path).read_text()
    fig = drawn["depth.png"]
    assert len(fig.axes) == 1 and fig.axes[0].get_xlabel() == "test accuracy of one run (%)"
    assert fig.axes[0].get_title().startswith("depth: depth=2 over 4 seeds on cpu (test cpu)")
    ticks = [line for line in fig.axes[0].get_lines() if line.get_marker() == "|"]
    assert sorted(ticks[0].get_xdata()) == pytest.approx([93.5, 94.0, 94.5, 95.0])   # every run drawn
    assert "each run's test accuracy (one per seed), their mean and its interval" in text


def test_settings_that_share_a_models_gflops_get_a_labelled_panel_of_their_own_not_one_blob(tmp_path, monkeypatch):
    """Many sweeps' base-model settings share one GFLOPs: on the accuracy-compute axes they are one grey marker
    spanning their means' range, and beside it a panel gives each its own labelled row ('sweep: value'), in
    order of accuracy; a setting alone stays where it is, labelled with its value; a legend entry per sweep."""
    import ablations.analysis.figures as figs

    piled = [{"sweep": s, "value": v, "gflops": 0.006, "acc_mean": m, "acc_low": m - 0.005, "acc_high": m + 0.005,
              "seeds": 3} for (s, v), m in zip((("attn", "bmm"), ("attn", "sdpa"), ("pos", "learned"), ("pos", "none")),
                                                 (0.975, 0.976, 0.972, 0.979))]
    alone = [{"sweep": "depth", "value": 6, "gflops": 0.0085, "acc_mean": 0.977, "acc_low": 0.97, "acc_high": 0.985,
              "seeds": 3},
             {"sweep": "heads", "value": 8, "gflops": 0.0095, "acc_mean": 0.978, "acc_low": 0.97, "acc_high": 0.985,
              "seeds": 3}]
    drawn = {}
    real = figs.save
    monkeypatch.setattr(figs, "save", lambda fig, where, **kw: drawn.setdefault("fig", fig) and real(fig, where, **kw))
    factors = {"attn": "attn", "pos": "pos", "depth": "depth", "heads": "num_heads"}
    figs.accuracy_vs_gflops(pd.DataFrame(piled + alone), tmp_path / "p.png", factors=factors)
    ax, side = drawn["fig"].axes
    xs = sorted(float(x) for c in ax.containers for x in c.lines[0].get_xdata())
    assert xs == pytest.approx([0.006, 0.0085, 0.0095])         # the pile once, the settings alone where they are
    assert [t.get_text() for t in side.get_yticklabels()] == ["pos: learned", "attn: bmm", "attn: sdpa", "pos: none"]
    assert "4 settings" in side.get_title() and any(t.get_text() == "6" for t in ax.texts)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [label for label in labels if not label.startswith(("Pareto", "4 settings"))] == ["depth", "heads (num_heads)"]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(drawn["fig"]).get_renderer()   # the legend below the axes, over no interval
    assert ax.get_legend().get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0


def test_the_experiment_of_a_design_present_is_reported_though_a_quick_check_trained_after_it(tmp_path):
    """An adaptive sweep, then a quick one-epoch check at a fixed seed (which removes the design), then the adaptive
    command again (nothing new; it writes the design back): the table's newest runs are the check's, yet the last
    command was the adaptive one, so the report shows its experiment and leaves the check out, saying why; `make
    cost` measures the points of that experiment, as the report shows them."""
    from ablations.analysis.stats import ALPHA
    from ablations.results import seed_design

    for seed in range(3):
        write_run(tmp_path, 1, seed, mask(range(150 + 10 * seed)))
        write_run(tmp_path, 2, seed, mask(range(50 + 5 * seed)))
    paths = SweepPaths.of(tmp_path, "depth")
    auto, quick = hexid("the adaptive sweep"), hexid("a quick check")
    table = read_table(paths.rows).assign(experiment_id=auto)
    check = table[table["seed"] == 0].assign(experiment_id=quick, epochs=2, started_at="2026-02-01T00:00:00",
                                             run_id=lambda t: t["run_id"].str.replace("000000", "00000a", n=1))
    for run in check["run_id"]:   # the check's predictions: the same as seed 0's
        (paths.preds / f"{run}.npz").write_bytes((paths.preds / f"{run.replace('00000a', '000000', 1)}.npz").read_bytes())
    pd.concat([table, check]).to_csv(paths.rows, index=False)
    seed_design.write_design(paths, seed_design.new_design(0.005, ALPHA, 10, (3, 5), experiment=auto))
    text = build_report(tmp_path).read_text()
    assert "Adaptive seeds (SEEDS=auto)" in text and "Seeds 0, 1, 2;" in text
    assert "2 runs of another experiment (epochs 2 vs 1) left out: a table is reported as one experiment, the one " \
           "of the sweep's SEEDS=auto design" in text
    from ablations.running.remeasure import trained_points

    assert {p.train.epochs for p in trained_points(tmp_path)["depth"]} == {1}   # `make cost` times what the report shows


def test_a_verdict_on_runs_that_other_sweeps_share_names_those_sweeps(tmp_path):
    """depth=2's runs (the best, decided better than depth=1) are also another sweep's through their run ids: the
    section names it; without such sharing there is no line."""
    from ablations.analysis import sittings, wording

    ten_points_apart(tmp_path)
    paths = SweepPaths.of(tmp_path, "depth")
    rows = read_table(paths.rows)
    f = analyse(rows, "depth", [1, 2], paths.preds, None)
    ok = rows[rows["status"] == "ok"]
    shared = {r: {"depth", "heads"} for r in ok.loc[ok["depth"] == 2, "run_id"].astype(str)}
    line = wording.shared_line("depth", sittings.shared_settings("depth", "depth", f.verdict, ok, shared))
    assert line.startswith("Shared runs: depth=2's runs are also the heads sweep's (same run ids)")
    assert sittings.shared_settings("depth", "depth", f.verdict, ok, {r: {"depth"} for r in ok["run_id"].astype(str)}) == []


def test_a_run_copied_from_another_sweep_is_not_joined_into_the_wall_time_trend(tmp_path):
    """Copied runs trained at another time: drawn hollow and apart, the line runs through the settings measured
    alike only."""
    from ablations.analysis.findings import setting_rows

    for depth in (1, 2, 4):
        for seed in range(3):
            write_run(tmp_path, depth, seed, mask(range(20 + 5 * depth + seed)))
    paths = SweepPaths.of(tmp_path, "depth")
    settings = setting_rows(analyse(read_table(paths.rows), "depth", [1, 2, 4], paths.preds, None))
    settings[1]["reused"] = True
    fig = sweep_figure_drawn(settings, tmp_path / "d.png", "depth (blocks)")
    wall = next(ax for ax in fig.axes if ax.get_title() == "training run wall time (s)")
    trend = [line for line in wall.get_lines() if line.get_linestyle() == "-" and line.get_gid() != "reference"]
    assert len(trend) == 1 and list(trend[0].get_xdata()) == [1, 4]
    hollow = [line for line in wall.get_lines() if line.get_label() == "copied from another sweep"]
    assert list(hollow[0].get_xdata()) == [2] and hollow[0].get_markerfacecolor() == "white"


@pytest.mark.slow
def test_the_longer_budget_rule_keeps_its_level_at_the_margin_and_finds_a_larger_shortfall():
    """Simulated runs (3 a side, seed s.d. 0.3 points, as the reference's): where the longer budget is exactly
    the ±0.5-point margin better (the rule's boundary) the rule fires on about 5 % of draws, never where it is no
    better, and on nearly every draw where it is 2 points better."""
    from ablations.analysis.budget import below_longer_budget

    rng = np.random.default_rng(7)

    def rate(gap: float, reps: int = 150) -> float:
        fired = 0
        for r in range(reps):
            rows = pd.DataFrame([{"run_id": f"{epochs}-{r}-{i}", "status": "ok", "depth": 4, "epochs": epochs,
                                  "lr": 0.002, "dataset": "digits",
                                  "test_acc": 0.95 + (gap if epochs == 30 else 0.0) + rng.normal(0, 0.003)}
                                 for epochs in (10, 30) for i in range(3)])
            fired += bool(below_longer_budget(rows[rows["epochs"] == 10], rows, "depth"))
        return fired / reps

    assert rate(0.0) == 0.0
    assert rate(0.005) <= 0.10         # 5 % expected; 0.10 is 2.3 binomial s.d. above it over 150 draws
    assert rate(0.02) >= 0.90


@pytest.mark.slow
def test_sweep_sections_built_in_forked_processes_give_the_report_of_one_process_byte_for_byte(tmp_path, monkeypatch):
    """Several sweeps on several cores: each sweep's section is built in a forked worker; REPORT.md (its skipped
    inputs in the same order) and every figure are byte for byte those of the sections built one after another
    in this process, a section that fails is said as it would be, and the workers are other processes; a worker
    killed mid-report, or another thread in this process, leaves the sections to this process, with the same report."""
    import os
    import shutil
    import signal
    import threading

    import ablations.analysis.report as report

    real_may_fork = report._may_fork
    ten_points_apart(tmp_path)
    depth_runs_as(tmp_path, "heads", "a", num_heads=lambda d: d["depth"].map({1: 2, 2: 4, 3: 8}), depth=4)
    (SweepPaths.of(tmp_path, "depth").preds / "000001000001.npz").write_bytes(b"damaged")   # a skip in each section
    (SweepPaths.of(tmp_path, "heads").preds / "a00001000001.npz").write_bytes(b"damaged")
    builders, real, parent, killed = tmp_path / "builders.txt", report.sweep_section, os.getpid(), tmp_path / "kill"

    def section(spec, *args, **kwargs):
        with builders.open("a") as f:
            f.write(f"{spec.name} {os.getpid()}\n")
        if spec.name == "patch":
            raise RuntimeError("a section that fails")
        if spec.name == "heads" and os.getpid() != parent and killed.exists():
            os.kill(os.getpid(), signal.SIGKILL)   # a worker killed mid-report (the OOM killer, say)
        return real(spec, *args, **kwargs)
    monkeypatch.setattr(report, "sweep_section", section)
    real_pareto = report._pareto_section

    def pareto(*args, **kwargs):   # a closing section: built beside the sweeps' in a worker of its own
        with builders.open("a") as f:
            f.write(f"pareto {os.getpid()}\n")
        return real_pareto(*args, **kwargs)
    monkeypatch.setattr(report, "_pareto_section", pareto)
    depth_runs_as(tmp_path, "patch", "b", preds=False, patch_size=lambda d: d["depth"].map({1: 2, 2: 4, 3: 8}),
                  depth=4)

    reference = tmp_path.parent / f"{tmp_path.name}-reference"   # a folder to compare with: a copy of these runs
    shutil.copytree(tmp_path / "ablations", reference / "ablations")
    built = {}
    monkeypatch.setattr(report, "_may_fork", lambda: True)   # earlier tests may have left a thread (tqdm's monitor)
    for cores in (1, 5):
        monkeypatch.setattr(report, "allowed_cores", lambda cores=cores: cores)
        shutil.rmtree(tmp_path / "figures", ignore_errors=True)
        builders.write_text("")
        text = build_report(tmp_path, reference=reference).read_text()
        figures = {p.name: p.read_bytes() for p in sorted((tmp_path / "figures").iterdir())}
        pids = {line.split()[0]: int(line.split()[1]) for line in builders.read_text().splitlines()}
        built[cores] = text, figures, pids
    (serial, serial_figures, serial_pids), (forked, forked_figures, forked_pids) = built[1], built[5]
    assert forked == serial and forked_figures == serial_figures
    assert {"depth.png", "heads.png", "pareto.png"} <= set(serial_figures)
    assert "## against the reference" in serial   # a closing section of its own, after the sweeps'
    assert set(serial_pids.values()) == {os.getpid()}
    assert sorted(serial_pids) == sorted(forked_pids) == ["depth", "heads", "pareto", "patch"]
    assert os.getpid() not in forked_pids.values() and len(set(forked_pids.values())) >= 2
    notes = serial.split("## Skipped inputs", 1)[1]
    assert notes.index("000001000001.npz") < notes.index("a00001000001.npz") < notes.index("the patch sweep's section")
    assert "the patch sweep's section: could not be built (RuntimeError: a section that fails)" in notes
    killed.touch()
    builders.write_text("")
    # a worker that dies: the sections built here instead
    assert build_report(tmp_path, reference=reference).read_text() == serial
    assert [line.split()[0] for line in builders.read_text().splitlines() if int(line.split()[1]) == os.getpid()] \
        == ["depth", "heads", "patch", "pareto"]
    monkeypatch.setattr(report, "_may_fork", real_may_fork)
    ticking = threading.Event()
    beside = threading.Thread(target=ticking.wait)   # another thread of this process: no fork, the same report
    beside.start()
    try:
        builders.write_text("")
        assert not report._may_fork() and build_report(tmp_path, reference=reference).read_text() == serial
        assert {int(line.split()[1]) for line in builders.read_text().splitlines()} == {os.getpid()}
    finally:
        ticking.set()
        beside.join()


def test_the_report_is_the_same_whatever_order_the_runs_finished_in(tmp_path):
    """Runs start longest expected first (`running.order`), so a table's rows come in the order its runs finished:
    the report's text and figures, the comparison with a reference folder included, do not depend on it."""
    import shutil

    ten_points_apart(tmp_path / "a")
    write_cost(tmp_path / "a", {1: [200, 210, 205, 198, 202], 2: [100, 104, 99, 101, 103]})
    depth_runs_as(tmp_path / "a", "heads", "a", num_heads=lambda d: d["depth"].map({1: 2, 2: 4, 3: 8}), depth=4,
                  gmacs=0.04, gflops=0.08)   # and a sweep whose settings share GFLOPs
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for sweep in ("depth", "heads"):
        rows = SweepPaths.of(tmp_path / "b", sweep).rows
        table = pd.read_csv(rows, dtype=str, keep_default_na=False)
        table.iloc[::-1].to_csv(rows, index=False)   # the same runs, finished the other way round
    reference = tmp_path / "reference"
    shutil.copytree(tmp_path / "a" / "ablations", reference / "ablations")
    texts = [build_report(tmp_path / side, reference=reference).read_text().replace(str(tmp_path / side), "OUT")
             for side in "ab"]
    assert "## against the reference" in texts[0] and "depth=1" in texts[0]
    assert texts[0] == texts[1]
    figures = [{p.name: p.read_bytes() for p in sorted((tmp_path / side / "figures").iterdir())} for side in "ab"]
    assert figures[0] == figures[1] and {"depth.png", "heads.png", "pareto.png"} <= set(figures[0])


def test_two_seeds_far_apart_say_no_difference_could_be_detected_and_no_interval_leaves_what_accuracy_can_be(tmp_path):
    """Two seeds whose differences go 22 points one way and 20 the other: a t on one degree of freedom gives a
    detectable difference of hundreds of points and intervals past ±100. The verdict says no difference could be
    detected at these seeds (not '177.6 points'), and every pair interval stays within ±100 points."""
    from ablations.analysis.findings import analyse
    from ablations.analysis.wording import comparisons_markdown, verdict_sentence

    for seed, right, other in ((0, 500, 720), (1, 500, 300)):   # depth 2 22 points above on seed 0, 20 below on 1
        write_run(tmp_path, 1, seed, mask(range(1000 - right)))
        write_run(tmp_path, 2, seed, mask(range(1000 - other)))
    f = analyse(read_table(SweepPaths.of(tmp_path, "depth").rows), "depth", [1, 2], SweepPaths.of(tmp_path, "depth").preds,
                None)
    assert f.verdict is not None and f.verdict.detectable >= 1
    text = verdict_sentence(f)
    assert "a pair with this sweep's median noise could detect no difference, however large" in text
    assert "detects only differences above" not in text
    for c in f.comparisons:
        assert -1 <= c.low <= c.diff <= c.high <= 1
    rows = [line for line in comparisons_markdown(f).splitlines() if line.startswith("| 1 | 2 |")]
    low, high = (float(x) for x in rows[0].split("[", 1)[1].split("]", 1)[0].split(", "))
    assert -100 <= low and high <= 100


def test_the_report_opens_with_a_findings_table_and_writes_every_pair_to_verdicts_csv(tmp_path):
    """A reader who stops at the first screen has the answer: a findings row per sweep within the first 40 lines
    (differences first, with their interval); every pair's outcome, difference, interval and p in verdicts.csv,
    the same figures as the pair table, loaded by pandas with the documented columns."""
    from ablations.results.schema import VERDICTS_COLUMNS

    ten_points_apart(tmp_path)
    text = build_report(tmp_path).read_text()
    head = text.splitlines()[:40]
    row = next(line for line in head if line.startswith("| depth | "))
    assert "## Findings" in head and "depth=2 is best, 94.50 %. depth=1 is worse by 10.50 points" in row
    assert "(fixed)" in row
    verdicts = pd.read_csv(tmp_path / "verdicts.csv")
    assert list(verdicts.columns) == list(VERDICTS_COLUMNS) and len(verdicts) == 1
    pair = verdicts.iloc[0]
    assert (pair["sweep"], pair["a"], pair["b"], pair["outcome"]) == ("depth", 1, 2, "worse")
    shown = next(line for line in text.splitlines() if line.startswith("| 1 | 2 | "))
    assert f"{pair['diff_points']:+.2f} [{pair['low_points']:+.2f}, {pair['high_points']:+.2f}]" in shown
    assert f"{pair['p_differ']:.3g}" in shown


def test_an_identical_pair_is_written_to_verdicts_csv_with_no_interval_ends(tmp_path):
    """Two settings with the same predictions on every image and seed: verdicts.csv says 'identical', a difference
    of 0 and 'none (same predictions)' for its interval, and leaves the interval's ends and the p-values blank (no
    interval of width 0, which pandas would read as a measured one)."""
    for seed in range(3):
        for depth in (1, 2):
            write_run(tmp_path, depth, seed, mask(range(40 + 7 * seed)))
    build_report(tmp_path)
    pair = pd.read_csv(tmp_path / "verdicts.csv").iloc[0]
    assert (pair["outcome"], pair["diff_points"], pair["interval"]) == ("identical", 0, "none (same predictions)")
    assert pair[["low_points", "high_points", "p_differ", "p_equivalent"]].isna().all(), pair


def test_a_figure_draws_only_panels_that_can_vary_the_margin_where_it_informs_and_no_trend_through_starved_runs(
        tmp_path):
    """A learning-rate sweep: one model at every setting, so GMACs, speed and memory are one value each and their
    panels are left out (a line under the figure names them). The ±margin band is drawn only where some interval
    leaves it. Wall times of runs that got too little CPU are points, not a trend."""
    from ablations.analysis.findings import setting_rows

    ten_points_apart(tmp_path)
    write_cost(tmp_path, {1: [200, 210, 205, 198, 202], 2: [200, 210, 205, 198, 202]})
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    phase = newest_complete_phase(read_table(SweepPaths.of(tmp_path, "depth").cost))
    settings = setting_rows(analyse(rows, "depth", [1, 2], SweepPaths.of(tmp_path, "depth").preds, phase))
    same = [dict(d, gmacs=0.003, mem=settings[0]["mem"], starved=1) for d in settings]
    fig = sweep_figure_drawn(same, tmp_path / "lr.png", "peak learning rate")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["test accuracy − the highest mean's (2), points", "training run wall time (s)"], titles
    assert any("The same at every setting, so not drawn: GMACs per image, inference img/s, training-step img/s"
               in " ".join(t.get_text().split()) for t in fig.texts)
    wall = fig.axes[1]
    assert not [line for line in wall.get_lines() if line.get_linestyle() == "-"]      # no trend
    accuracy = fig.axes[0]
    band = [p for p in accuracy.patches if p.get_label().endswith("equivalence margin")]
    assert band            # the 10-point difference's interval leaves ±0.5: the band says where the margin is
    inside = [dict(d, vs_best=(0.0, -0.001, 0.001) if d["vs_best"] else None) for d in same]
    inside[0]["vs_best"], inside[1]["vs_best"] = (-0.001, -0.002, 0.0), (0.0, 0.0, 0.0)
    fig = sweep_figure_drawn(inside, tmp_path / "in.png", "peak learning rate")
    assert not [p for p in fig.axes[0].patches if p.get_label().endswith("equivalence margin")]


def test_a_margin_given_as_a_share_of_the_error_is_resolved_on_each_sweeps_runs_and_said_as_such(tmp_path, capsys):
    """--margin 20%: each sweep's margin is 20 % of its best setting's error (here 0.2 × 2.75 % = 0.55 points on
    97.25 % runs), which its answer states; a spec may say `margin = "20%"` too, but not under SEEDS=auto (its design fixes
    the margin before any run exists): refused in one line. A margin that is neither points nor a share is refused
    naming itself."""
    from ablations.__main__ import main
    from ablations.choices import RelativeMargin, parse_margin

    assert parse_margin("20%", "m") == RelativeMargin(0.2) and parse_margin(0.5, "m") == 0.005
    assert RelativeMargin(0.2).resolve(0.975) == pytest.approx(0.005)
    with pytest.raises(ValueError, match="m must be a number of accuracy points above 0 and below 100"):
        parse_margin("150%", "m")
    for seed in range(6):
        write_run(tmp_path, 1, seed, mask(range(25 + seed)))
        write_run(tmp_path, 2, seed, mask(range(25 + seed + seed % 2)))
    text = build_report(tmp_path, margin=RelativeMargin(0.2)).read_text()
    assert "depth=2 is equivalent to it within ±0.55 points (20 % of its 2." in text   # 0.2 × 2.75 % (97.25 %)
    assert "20 % of the best setting's error unless the sweep sets" in " ".join(text.split())
    third = build_report(tmp_path, margin=RelativeMargin(1 / 3)).read_text()   # 2.75 % / 3: 0.916… points
    assert "within ±0.92 points" in third and not re.search(r"±\d+\.\d{3,}", third)   # said to 2 decimals
    spec = tmp_path / "rel.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [1, 2]\nmargin = "20%"\n[model]\npreset = "vit_digits"\n'
                    '[train]\nepochs = 1\n')
    code = main(["sweep", str(spec), "--dataset", "digits", "--seeds", "auto", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "sets its margin as a share of the best setting's error" in err
    assert not list((tmp_path / "o").glob("ablations/*.csv"))


def test_a_one_seed_pass_that_has_not_converged_keeps_its_own_reason_for_no_verdict(tmp_path):
    """A quick single-seed pass (2 epochs): no verdict because one seed cannot measure the spread between seeds,
    not because of convergence, which its own line then reports."""
    for depth in (1, 2):
        write_run(tmp_path, depth, 0, mask(range(150 + 10 * depth)))
    rows = read_table(SweepPaths.of(tmp_path, "depth").rows)
    pd.DataFrame([{"run_id": r, "epoch": e, "train_loss": 1 / e, "test_acc": acc} for r in rows["run_id"]
                  for e, acc in ((1, 0.67), (2, 0.84))]).to_csv(SweepPaths.of(tmp_path, "depth").history, index=False)
    section = depth_section(tmp_path)
    assert "**No verdict**: one seed per setting" in section and "No verdict (not converged)" not in section
    assert "**Not converged**: depth=1 and 2: their test accuracy rose" in section



def test_an_open_pair_never_says_that_fewer_seeds_than_it_has_would_decide_it(tmp_path):
    """The reference's heads runs at seeds 0, 1 and 2 alone, a sweep at fixed seeds: every open pair's count of
    the seeds that would decide it starts above the 3 it has, and 2 heads against 4, whose whole range by the
    design's rule lies at or below them (its Holm-adjusted test is the stricter), says only that more would."""
    import shutil

    from ablations.analysis.report import sweep_page
    from ablations.results.schema import read_table

    reference = Path(__file__).resolve().parents[1] / "results" / "reference" / "ablations"
    rows = read_table(reference / "heads.csv")
    rows = rows[rows["seed"].astype(int) <= 2]
    out = tmp_path / "ablations"
    (out / "preds" / "heads").mkdir(parents=True)
    rows.to_csv(out / "heads.csv", index=False)
    shutil.copy(reference / "heads.toml", out)
    for run_id in rows["run_id"].astype(str):
        shutil.copy(reference / "preds" / "heads" / f"{run_id}.npz", out / "preds" / "heads")
    text = "\n".join(sweep_page(tmp_path, "heads").lines)
    counts = [int(n) for n in re.findall(r"inconclusive \((\d+)[^)]*seeds a setting", text)]
    assert counts and min(counts) > 3, counts
    row = next(line for line in text.splitlines() if line.startswith("| 2 | 4 |"))
    assert row.endswith("| inconclusive (more seeds a setting would decide it) |"), row


def test_the_bench_table_gives_mfu_as_a_percentage_of_the_measured_peak_and_a_dash_where_blank(tmp_path):
    from ablations.analysis.wording import bench_lines
    from bench.mfu import mfu

    peak = 200e9   # FLOP/s
    steps = pd.DataFrame([
        {"tokens": 17, "batch_size": 64, "mode": mode, "attn": "sdpa", "throughput_img_s": rate, "gflops": 0.01,
         "step_ms_median": 5.0, "step_ms_iqr": 0.1, "device_name": "cpu", "dtype": "fp32",
         "mfu": mfu(0.01, rate, mode, peak) if mode == "infer" else float("nan")}
        for mode, rate in (("infer", 6000.0), ("train", 2000.0))])
    lines = bench_lines(tmp_path / "pytest-benchmark.csv", steps, tmp_path / "backends.csv", None, None)
    assert "| tokens | batch | mode | attn | img/s | step ms (IQR) | MFU % |" in lines
    # 0.01 GFLOPs × 6,000 img/s = 60 GFLOP/s of a 200 GFLOP/s peak: 30 %, not 0.3
    assert "| 17 | 64 | infer | sdpa | 6,000.0 | 5.00 (0.10) | 30 |" in lines
    assert "| 17 | 64 | train | sdpa | 2,000.0 | 5.00 (0.10) | — |" in lines


def test_under_seeds_auto_a_decided_pair_names_its_look_exactly_where_it_holds_the_leader(tmp_path):
    """The reference's depth sweep (SEEDS=auto): the design decides each setting against the leader, at a look it
    names; a pair of two other settings takes the last look's step-down, with no look. The note under the table and
    Method say which is which."""
    from ablations.analysis.report import REFERENCE

    out = tmp_path / "depth-only"
    (out / "ablations" / "preds").mkdir(parents=True)
    for name in ("depth.csv", "depth-design.json", "depth.toml"):
        shutil.copy(REFERENCE / "ablations" / name, out / "ablations" / name)
    shutil.copytree(REFERENCE / "ablations" / "preds" / "depth", out / "ablations" / "preds" / "depth")
    section = build_report(out, reference=None).read_text().split("## depth", 1)[1].split("\n## ", 1)[0]
    leader = re.search(r"\*\*depth=(\d+) has the highest mean", section).group(1)
    rows = [line.split(" | ") for line in section.splitlines() if re.match(r"\| \d+ \| \d+ \| [-+]", line)]
    assert len(rows) == 6
    decided = [(r[0].strip("| "), r[1], r[-1]) for r in rows if not r[-1].startswith("inconclusive")]
    with_leader = [d for d in decided if leader in d[:2]]
    others = [d for d in decided if leader not in d[:2]]
    assert with_leader and others   # both kinds are in this table
    assert all("(look " in d[2] for d in with_leader) and not any("(look " in d[2] for d in others), decided
    assert ("a pair with the leader that the design decided, with the look and the level its p crossed; a pair of "
            "two others as the last look's step-down reads it") in section


def test_with_a_tie_for_the_lead_each_comparison_names_the_setting_it_is_against():
    """A tie goes to the first in sorted order (Method); after "a and b tie", "equivalent to it" would not say which
    of the two. Without a tie, "it" is the one named first."""
    from ablations.analysis.answers import Answer, Difference
    from ablations.analysis.wording.verdicts import answer_text

    tied = Answer("pd", "patch_size × depth", "", "14 × 1", tied=("14 × 2",), equivalent=("7 × 4", "14 × 2"),
                  worse=[Difference("7 × 1", 0.004, 0.001, 0.007)], open=[Difference("7 × 2", 0.002, -0.001, 0.005)],
                  best_error=0.022)
    assert answer_text(tied) == ("14 × 1 and 14 × 2 tie for the highest mean, 97.80 %. 7 × 1 is worse than 14 × 1 by "
                                 "0.40 points [0.10, 0.70]. 7 × 4 and 14 × 2 are equivalent to 14 × 1 within ±0.5 "
                                 "points (23 % of its 2.2 % error). 7 × 2 is undecided against 14 × 1.")
    alone = dataclasses.replace(tied, tied=(), equivalent=("7 × 4",))
    assert answer_text(alone) == ("14 × 1 has the highest mean, 97.80 %. 7 × 1 is worse by 0.40 points [0.10, 0.70]. "
                                  "7 × 4 is equivalent to it within ±0.5 points (23 % of its 2.2 % error). 7 × 2 is "
                                  "undecided against it.")


def test_the_cheapest_setting_as_good_as_the_best_by_compute_then_by_a_training_step_stated_faster():
    """The findings table's cheapest column: the setting of fewest GMACs among the best and those shown equivalent
    or identical to it; where all have the best's GMACs (heads, attention backends), the fastest training step, but
    only where the cost phase states it faster (its test over ≥ 3 rounds), never a setting shown worse."""
    from ablations.analysis.answers import Answer, _cheapest
    from ablations.analysis.findings import CostSource, Setting, SweepFindings
    from ablations.analysis.stats import accuracy_interval
    from ablations.analysis.wording.summary import cheapest_text
    from bench.rounds import Spread

    def setting(value, gmacs, img_s, rounds=5, spread=0.01):
        steps = {"throughput_img_s": Spread.of([img_s * (1 + spread * k) for k in range(-2, 3)][:rounds])}
        return Setting(value, [0, 1, 2], accuracy_interval([0.97, 0.98, 0.975], 1000), 10, gmacs, Spread.of([5.0]),
                       train=steps)

    def cheapest(settings, best, equivalent=(), worse=(), cpu_time=False):
        found = Answer("s", "num_heads", "", best, equivalent=tuple(equivalent))
        _cheapest(found, SweepFindings("num_heads", settings, 1000, CostSource(5, cpu_time=cpu_time), None, None))
        return cheapest_text(found)

    fewer = [setting(1, 0.0012, 4600), setting(4, 0.0030, 2037)]
    assert cheapest(fewer, 4, [1]) == "num_heads=1: GMACs ÷2.50, training img/s ×2.26"
    assert cheapest(fewer, 4) == "—"   # depth=1 not shown as good: not offered
    same = [setting(2, 0.003, 2163), setting(4, 0.003, 2037), setting(8, 0.003, 1656), setting(1, 0.003, 2214)]
    assert cheapest(same, 8, [2, 4]) == "num_heads=2: the same GMACs, training img/s ×1.31"   # not 1: shown worse
    assert cheapest(same, 8, [2, 4], cpu_time=True) == ("num_heads=2: the same GMACs, training img/s ≈×1.31 "
                                                         "(CPU time under load)")
    assert cheapest(same, 2, [4, 8]) == "—"   # the best is the fastest of those as good
    near = [setting(2, 0.003, 1700, spread=0.05), setting(8, 0.003, 1656, spread=0.05)]
    assert cheapest(near, 8, [2]) == "—"      # within noise: not stated faster
    few = [setting(2, 0.003, 2163, rounds=2), setting(8, 0.003, 1656)]
    assert cheapest(few, 8, [2]) == "—"       # 2 rounds on a side: no ratio


def test_the_findings_table_bounds_an_answer_as_its_section_does():
    """The findings table is what a reader who stops there quotes: a design that left a setting out, settings at
    chance and runs still learning are said there too, not only in the sweep's section."""
    from ablations.analysis.answers import Answer
    from ablations.analysis.wording.summary import caveated

    a = Answer("d", "depth", "", 2, equivalent=(4,), best_error=0.05, left_out=(6,), at_chance=(8,), unconverged=True)
    assert caveated(a) == ("Not converged; at this budget: Of the settings in the design: depth=2 has the highest "
                           "mean, 95.00 %. depth=4 is equivalent to it within ±0.5 points (10 % of its 5.0 % error). "
                           "Left out (a run diverged): depth=6. depth=8 is within noise of chance: not shown to learn "
                           "the task at this budget.")
    assert caveated(Answer("d", "depth", "", None, no_verdict="one seed", unconverged=True)) == \
        "One seed a setting: no test."   # its own reason stands, as in the section


def test_the_bench_section_says_the_load_its_figures_were_taken_under_and_leaves_loaded_rounds_out(tmp_path):
    """`bench run` leaves rounds taken under load out of its summary: so does the report's table of it (img/s from
    the other rounds, blank where none; memory from all), and the `make bench` table marks a benchmark taken under
    load and says how many were, or that the load was not recorded."""
    from ablations.analysis.report import _bench_section
    from bench.schema import BENCH_COLUMNS

    def row(**cells):
        return {"run_id": hexid(str(cells)), "status": "ok", "device_name": "cpu", "dtype": "fp32", "mode": "infer",
                "batch_size": 8, "step_ms_iqr": 0.1, "util_source": "cpu", **cells}

    bench = tmp_path / "bench"
    for attn, tokens, rate, contended in (("sdpa", 65, 100.0, 0), ("sdpa", 65, 104.0, 0), ("sdpa", 65, 10.0, 1),
                                          ("bmm", 65, 50.0, 1), ("bmm", 197, 20.0, 0)):
        append_row(bench / "backends.csv", row(attn=attn, tokens=tokens, throughput_img_s=rate, peak_mem_mb=tokens,
                                               step_ms_median=8e3 / rate, contended=contended), BENCH_COLUMNS)
    for attn, contended in (("sdpa", 0), ("bmm", 1)):
        append_row(bench / "pytest-benchmark.csv", row(attn=attn, tokens=17, throughput_img_s=1000.0,
                                                       step_ms_median=8.0, contended=contended), BENCH_COLUMNS)
    lines = _bench_section(bench, tmp_path)
    assert any("median step over pytest-benchmark's rounds; 1 of 2 benchmarks taken while other processes took ≥ 10 % "
               "of the machine: †" in line for line in lines)
    assert "| 17 | 8 | infer | bmm | 1,000.0 † | 8.00 (0.10) | — |" in lines
    assert "| 17 | 8 | infer | sdpa | 1,000.0 | 8.00 (0.10) | — |" in lines
    assert any("img/s: median over rounds; 2 of 5 rounds taken while other processes took ≥ 10 % of the machine: left "
               "out of img/s, blank where every one was" in line for line in lines)
    # sdpa at 65: the median of 100 and 104, not of those and the loaded 10; bmm at 65: every round loaded
    assert "| bmm | — | 20.00 | 65.0 | 197.0 |" in lines and "| sdpa | 102.00 | — | 65.0 | — |" in lines


def test_the_still_open_column_says_why_each_pair_is_open_as_its_interval_shows():
    """An open pair's interval clear of 0 (the reference's lr 0.002 − 0.008: [+0.05, +0.61] at its look's level for
    one pair) or inside the margin (a main job's patch 4 − 7 at 3 seeds: [-0.34, +0.48], TOST Holm p 0.061) is
    open because it did not survive the adjustment over the sweep's pairs; only a pair neither clear of 0 nor inside
    the margin is said to be so."""
    from ablations.analysis.answers import Answer, Difference
    from ablations.analysis.wording.summary import open_text

    pairs = [Difference(8, 0.0033, 0.0005, 0.0061), Difference(7, 0.0007, -0.0034, 0.0048),
             Difference(1, 0.0027, -0.0001, 0.0055)]
    fixed = open_text(Answer("s", "lr", "", 2, open=pairs))
    assert fixed == ("2 − 8: +0.33 [+0.05, +0.61], clear of 0, but not after Holm's adjustment over the sweep's pairs; "
                     "2 − 7: +0.07 [-0.34, +0.48], inside ±0.5 points, but not after Holm's adjustment over the sweep's "
                     "pairs; 2 − 1: +0.27 [-0.01, +0.55], neither clear of 0 nor inside ±0.5 points")
    auto = open_text(Answer("s", "lr", "", 2, open=pairs[:1], look=(6, 6)))
    assert auto == "2 − 8: +0.33 [+0.05, +0.61], clear of 0, but not after the design's step-down over its pairs"
