"""JOBS=N: the local executor keeps N runs in flight in worker processes. The rows are those of JOBS=1 but
for when, where and how fast; a SIGKILL of the driver mid-sweep loses nothing finished."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ablations.cost import CostPlan
from ablations.executors import ExecutorOptions
from ablations.executors.local import LocalExecutor, visible_gpu
from ablations.runner import run_sweep
from ablations.schema import MEASURED
from ablations.specs import Point
from ablations.tasks import RunOptions
from ablations.train import TrainConfig
from bench.csvio import read_rows
from conftest import kill_after_first_row, write_spec
from vit import ViTConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)
PLACEMENT = {"error"}


def test_two_jobs_write_the_rows_of_one_job(tmp_path):
    points = [Point("j", "depth", d, TINY.replace(depth=d), TrainConfig(epochs=2, batch_size=128)) for d in (1, 2)]
    tables = {}
    for jobs in (1, 2):
        opts = RunOptions(dataset="digits", out=str(tmp_path / f"jobs{jobs}"), seeds=(0, 1), progress=False,
                          cost=CostPlan(rounds=0))
        executor = LocalExecutor(ExecutorOptions(jobs=jobs, device="cpu"))
        assert (f"{jobs} runs at once" in executor.start()) == (jobs == 2)
        run_sweep("j", points, opts, executor)
        tables[jobs] = read_rows(tmp_path / f"jobs{jobs}" / "ablations" / "j.csv").sort_values("run_id")
    one, two = tables[1], tables[2]
    assert (one["jobs"] == 1).all() and (two["jobs"] == 2).all() and (two["status"] == "ok").all()
    same = [c for c in one.columns if c not in MEASURED and c not in PLACEMENT]
    pd.testing.assert_frame_equal(one[same].reset_index(drop=True), two[same].reset_index(drop=True))


def test_sigkill_with_two_jobs_then_rerun_keeps_every_finished_run(tmp_path):
    spec = write_spec(tmp_path / "jk.toml", "depth", "[1, 2, 3]", train="epochs = 2")
    out = tmp_path / "out"
    csv = out / "ablations" / "jk.csv"
    cmd = [sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--out", str(out),
           "--device", "cpu", "--seeds", "0,1", "--cost-rounds", "0", "--jobs", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = kill_after_first_row(cmd, env, csv)
    assert 1 <= len(first) < 6, "the kill should land mid-sweep"
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    table = read_rows(csv)
    assert len(table) == 6 and (table["status"] == "ok").all() and table["run_id"].is_unique
    pd.testing.assert_frame_equal(table.iloc[: len(first)].reset_index(drop=True), first)


def test_a_worker_pinned_to_a_gpu_keeps_to_the_gpus_the_driver_was_given():
    assert [visible_gpu(i, None) for i in range(3)] == ["0", "1", "2"]
    assert [visible_gpu(i, "2, 3") for i in range(2)] == ["2", "3"]   # GPU 0 of "2,3" is physical GPU 2
    assert visible_gpu(0, "GPU-5f0e1c2a") == "GPU-5f0e1c2a"   # UUIDs pass through
