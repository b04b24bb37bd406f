"""The sweep runner: every run keeps its test predictions; a run finished in another sweep is reused."""

import numpy as np
import pandas as pd
import pytest

from ablations.cost import CostPlan
from ablations.data import load_dataset
from ablations.runner import SweepPaths, execute, load_preds, run_sweep
from ablations.tasks import RunOptions
from ablations.specs import Point
from ablations.train import TrainConfig
from bench.csvio import read_rows
from vit import ViTConfig

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)
FAST = TrainConfig(epochs=1, batch_size=128)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


def depth_points(sweep, *depths):
    return [Point(sweep, "depth", d, TINY.replace(depth=d), FAST) for d in depths]


def options(out, seeds=(0, 1)):
    return RunOptions(dataset="digits", out=str(out), seeds=seeds, progress=False, cost=CostPlan(rounds=0))


def test_every_run_keeps_test_predictions_that_reproduce_its_accuracy(tmp_path):
    run_sweep("p", depth_points("p", 1, 2), options(tmp_path))
    paths = SweepPaths.of(tmp_path, "p")
    rows = read_rows(paths.rows)
    test_y = load_dataset("digits").test_y.numpy()
    assert len(rows) == 4 and (rows["status"] == "ok").all() and (rows["test_size"] == len(test_y)).all()
    for _, r in rows.iterrows():
        pred, target = load_preds(paths.preds / f"{r['run_id']}.npz")
        np.testing.assert_array_equal(target, test_y)
        assert (pred == target).mean() == r["test_acc"]  # exactly: the same final evaluation
    assert not list(paths.preds.glob("*.tmp"))


def test_a_run_finished_in_another_sweep_is_reused_not_trained_again(tmp_path):
    run_sweep("a", depth_points("a", 1, 2), options(tmp_path))
    trained = []

    def counting(task, data):
        trained.append(task.point.value)
        return execute(task, data)

    summary = run_sweep("b", depth_points("b", 2, 3), options(tmp_path), fn=counting)
    assert trained == [3, 3] and summary["reused"] == 2 and summary["statuses"] == {"ok": 2}
    a, b = (SweepPaths.of(tmp_path, s) for s in "ab")
    rows_a, rows_b = read_rows(a.rows), read_rows(b.rows)
    mine = rows_b[rows_b["depth"] == 2].reset_index(drop=True)
    theirs = rows_a[rows_a["depth"] == 2].reset_index(drop=True)
    assert (mine["sweep"] == "b").all() and (mine["reused_from"] == "a").all()
    pd.testing.assert_frame_equal(mine.drop(columns=["sweep", "reused_from"]),
                                  theirs.drop(columns=["sweep", "reused_from"]))
    for rid in mine["run_id"]:
        assert (b.weights / f"{rid}.pt").read_bytes() == (a.weights / f"{rid}.pt").read_bytes()
        assert (b.preds / f"{rid}.npz").read_bytes() == (a.preds / f"{rid}.npz").read_bytes()
    hist_a, hist_b = read_rows(a.history), read_rows(b.history)
    for rid in mine["run_id"]:
        pd.testing.assert_frame_equal(hist_b[hist_b["run_id"] == rid].reset_index(drop=True),
                                      hist_a[hist_a["run_id"] == rid].reset_index(drop=True))
    # a rerun of b finds all four done in its own table
    assert run_sweep("b", depth_points("b", 2, 3), options(tmp_path), fn=counting)["skipped"] == 4


def test_a_run_whose_files_are_gone_is_trained_again_rather_than_reused(tmp_path):
    run_sweep("a", depth_points("a", 2), options(tmp_path, seeds=(0,)))
    for f in SweepPaths.of(tmp_path, "a").weights.glob("*.pt"):
        f.unlink()
    summary = run_sweep("b", depth_points("b", 2), options(tmp_path, seeds=(0,)))
    assert summary["reused"] == 0 and summary["statuses"] == {"ok": 1}
