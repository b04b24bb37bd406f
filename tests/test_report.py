"""The report builds from small CSVs: expected means, failed rows named, missing sweeps named, deterministic."""

import pandas as pd

from ablations.report import build_report, sweep_table
from bench.csvio import append_row
from bench.schema import ABLATION_COLUMNS


def write_depth_rows(path):
    accs = {1: [0.90, 0.92], 2: [0.95, 0.97]}
    for depth, values in accs.items():
        for seed, acc in enumerate(values):
            append_row(path, {"run_id": f"d{depth}s{seed}", "status": "ok", "error": "", "depth": depth,
                              "seed": seed, "test_acc": acc, "params": 1000 * depth, "gmacs": 0.01 * depth,
                              "throughput_img_s": 500 / depth, "peak_mem_mb": 10.0 * depth, "mfu": 0.1,
                              "train_time_s": 5.0 * depth, "started_at": f"2026-01-0{depth}T00:00:0{seed}",
                              "device": "cpu", "device_name": "test cpu", "torch_version": "x", "git_sha": "abc",
                              "dataset": "digits"}, ABLATION_COLUMNS)
    append_row(path, {"run_id": "d3s0", "status": "diverged", "error": "loss became nan", "depth": 3, "seed": 0,
                      "started_at": "2026-01-03T00:00:00", "device": "cpu", "device_name": "test cpu",
                      "torch_version": "x", "git_sha": "abc", "dataset": "digits"}, ABLATION_COLUMNS)


def test_report_tables_hold_means_and_name_failures_and_missing(tmp_path):
    write_depth_rows(tmp_path / "ablations" / "depth.csv")
    path = build_report(tmp_path)
    text = path.read_text()
    assert "| 1 | 2 | 91.00 ± 1.41 |" in text and "| 2 | 2 | 96.00 ± 1.41 |" in text
    assert "depth=3 seed 0: **diverged** loss became nan" in text
    assert "| 3 |" not in text  # a failed run is never a row of zeros
    assert "Best: depth=2 at 96.00%" in text and "GMACs ×2.00" in text
    # what the sweep held fixed is stated; the factor and columns that vary are not
    held = next(line for line in text.splitlines() if line.startswith("Held fixed:"))
    assert "dataset=digits" in held and "depth=" not in held
    assert "`make ablate-patch` produces it" in text and "`make ablate-heads` produces it" in text
    assert (tmp_path / "figures" / "depth.png").stat().st_size < 300_000
    first = text
    assert build_report(tmp_path).read_text() == first


def test_sweep_table_means_match_pandas():
    rows = pd.DataFrame({"status": ["ok"] * 4, "depth": [1, 1, 2, 2], "seed": [0, 1, 0, 1],
                         "test_acc": [0.5, 0.7, 0.8, 0.8], "params": 1, "gmacs": 1.0, "throughput_img_s": 1.0,
                         "peak_mem_mb": 1.0, "mfu": 0.1, "train_time_s": [1.0, 3.0, 2.0, 2.0]})
    table = sweep_table(rows, "depth")
    assert table.loc[1, "acc_mean"] == 60.0 and table.loc[2, "acc_std"] == 0.0 and table.loc[1, "train_s"] == 2.0


def test_pareto_front_keeps_only_undominated_runs_even_with_repeated_index():
    from ablations.figures import pareto_front

    points = pd.DataFrame({"gflops": [1.0, 2.0, 3.0, 2.5, 0.5], "test_acc": [0.80, 0.90, 0.85, 0.95, 0.70]},
                          index=[0, 1, 0, 1, 2])
    front = pareto_front(points)
    assert list(zip(front.gflops, front.test_acc)) == [(0.5, 0.70), (1.0, 0.80), (2.0, 0.90), (2.5, 0.95)]


def test_finding_names_every_value_tied_for_best():
    from ablations.report import _finding

    rows = pd.DataFrame({"status": ["ok"] * 3, "attn": ["loop", "bmm", "sdpa"], "seed": 0,
                         "test_acc": [0.975, 0.979, 0.979], "params": 1, "gmacs": 1.0,
                         "throughput_img_s": [1.0, 2.0, 4.0], "peak_mem_mb": 1.0, "mfu": 0.1, "train_time_s": 1.0})
    text = _finding(sweep_table(rows, "attn", ["loop", "bmm", "sdpa"]), "attn")
    assert text.startswith("Best: attn=bmm, sdpa at 97.90% test accuracy (tied: 2 values).")
    assert "inference img/s ×4.00" in text
