"""The sweep runner: a SIGKILL mid-sweep loses nothing finished and a rerun trains only what is missing; a
diverging run is recorded; every run keeps its test predictions; a run finished in another sweep is reused."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import run_sweep

from ablations.results.schema import read_table
from ablations.results.store import SweepError, SweepPaths, load_preds, model_key, sweep_lock
from ablations.running import order, runner
from ablations.running.cost import CostPlan
from ablations.running.executors.local import LocalExecutor
from ablations.running.runner import run_sweeps
from ablations.running.tasks import RunOptions, Task
from ablations.running.worker import execute
from ablations.specs import Point
from ablations.training.data import load_dataset
from bench.env import cudnn_attention
from bench.flops import closed_form_macs
from bench.training.recipe import TrainConfig
from vit import ViTConfig

ROOT = Path(__file__).resolve().parents[1]
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
    rows = read_table(paths.rows)
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
    assert trained == [3, 3] and summary.reused == 2 and summary.statuses == {"ok": 2}
    a, b = (SweepPaths.of(tmp_path, s) for s in "ab")
    rows_a, rows_b = read_table(a.rows), read_table(b.rows)
    mine = rows_b[rows_b["depth"] == 2].reset_index(drop=True)
    theirs = rows_a[rows_a["depth"] == 2].reset_index(drop=True)
    assert (mine["sweep"] == "b").all() and (mine["reused_from"] == "a").all()
    pd.testing.assert_frame_equal(mine.drop(columns=["sweep", "reused_from"]),
                                  theirs.drop(columns=["sweep", "reused_from"]))
    for rid in mine["run_id"]:
        assert (b.weights / f"{rid}.pt").read_bytes() == (a.weights / f"{rid}.pt").read_bytes()
        assert (b.preds / f"{rid}.npz").read_bytes() == (a.preds / f"{rid}.npz").read_bytes()
    hist_a, hist_b = read_table(a.history), read_table(b.history)
    for rid in mine["run_id"]:
        pd.testing.assert_frame_equal(hist_b[hist_b["run_id"] == rid].reset_index(drop=True),
                                      hist_a[hist_a["run_id"] == rid].reset_index(drop=True))
    # a rerun of b finds all four done in its own table
    assert run_sweep("b", depth_points("b", 2, 3), options(tmp_path), fn=counting).skipped == 4


class CountingExecutor(LocalExecutor):
    """The local executor (JOBS=1), counting its `run` calls."""
    def __init__(self):
        super().__init__()
        self.calls = 0

    def run(self, tasks, fn, load):
        self.calls += 1
        yield from super().run(tasks, fn, load)


def test_a_commands_sweeps_run_as_one_stream_after_every_cost_phase_and_train_a_shared_run_once(tmp_path,
                                                                                                 monkeypatch):
    events = []
    real_phase = runner.run_cost_phases

    def phase(sweeps, *args, **kwargs):
        events.append(("cost", tuple(sweep for sweep, _, _ in sweeps)))
        return real_phase(sweeps, *args, **kwargs)

    def counting(task, data):
        events.append(("train", task.point.sweep, task.point.value, task.seed))
        return execute(task, data)

    monkeypatch.setattr(runner, "run_cost_phases", phase)
    opts = RunOptions(dataset="digits", out=str(tmp_path), seeds=(0, 1), progress=False,
                      cost=CostPlan(rounds=1, infer_batch_size=8), run_order="listed")
    executor = CountingExecutor()
    summaries = run_sweeps([("a", depth_points("a", 1, 2), opts), ("b", depth_points("b", 2, 3), opts)],
                           executor, fn=counting)
    assert executor.calls == 1                                    # one stream: JOBS workers would start once
    assert events[0] == ("cost", ("a", "b"))                      # one cost phase, before any training
    assert events[1:] == [("train", "a", 1, 0), ("train", "a", 1, 1), ("train", "a", 2, 0), ("train", "a", 2, 1),
                          ("train", "b", 3, 0), ("train", "b", 3, 1)]  # depth 2 is trained once, for a
    assert [(s.sweep, s.planned, s.skipped, s.reused, s.statuses) for s in summaries] == \
        [("a", 4, 0, 0, {"ok": 4}), ("b", 4, 0, 2, {"ok": 2})]
    a, b = (SweepPaths.of(tmp_path, s) for s in "ab")
    rows_a, rows_b = read_table(a.rows), read_table(b.rows)
    mine, theirs = (rows[rows["depth"] == 2].set_index("run_id").sort_index() for rows in (rows_b, rows_a))
    assert (mine["sweep"] == "b").all() and (mine["reused_from"] == "a").all()
    cost_b = read_table(b.cost)   # b's row carries b's own cost phase figures, the rest is a's run
    for rid, row in mine.iterrows():
        assert row["test_acc"] == theirs.loc[rid, "test_acc"] and row["train_time_s"] == theirs.loc[rid, "train_time_s"]
        assert (b.weights / f"{rid}.pt").read_bytes() == (a.weights / f"{rid}.pt").read_bytes()
        assert (b.preds / f"{rid}.npz").read_bytes() == (a.preds / f"{rid}.npz").read_bytes()
        infer = cost_b[(cost_b["mode"] == "infer") & (cost_b["depth"] == 2)]
        assert row["step_ms_median"] == infer["step_ms_median"].iloc[0]
    again = run_sweeps([("a", depth_points("a", 1, 2), opts), ("b", depth_points("b", 2, 3), opts)], fn=counting)
    assert [s.skipped for s in again] == [4, 4] and len(events) == 7   # a rerun trains nothing


def _started_in(out, seeds=(0, 1), **changes):
    """The run ids of sweeps a (depth 1, 2) and b (depth 2, 3) in the order they started, and every run's row."""
    started = []

    def counting(task, data):
        started.append(task.run_id)
        return execute(task, data)

    opts = RunOptions(dataset="digits", out=str(out), seeds=seeds, progress=False, **changes)
    run_sweeps([("a", depth_points("a", 1, 2), opts), ("b", depth_points("b", 2, 3), opts)], CountingExecutor(),
               fn=counting)
    rows = pd.concat([read_table(SweepPaths.of(out, s).rows) for s in "ab"]).drop_duplicates("run_id")
    return started, rows.set_index("run_id")


def test_runs_start_longest_expected_first_by_the_cost_phases_training_steps(tmp_path):
    started, rows = _started_in(tmp_path, cost=CostPlan(rounds=1, infer_batch_size=8), run_order="longest")
    step = {}   # each depth's training step as the cost tables recorded it (one round: its median)
    for sweep in "ab":
        cost = read_table(SweepPaths.of(tmp_path, sweep).cost)
        step.update({int(r["depth"]): float(r["step_ms_median"]) for _, r in cost[cost["mode"] == "train"].iterrows()})
    assert len(step) == 3 and len(started) == 6     # depth 2 is one run per seed, trained once for both sweeps
    order = [(step[int(rows.loc[rid, "depth"])], int(rows.loc[rid, "seed"])) for rid in started]
    assert order == sorted(order, key=lambda o: (-o[0], o[1]))   # slowest step first; a point's seeds as listed


def test_a_runs_expected_time_is_its_epochs_times_its_batches_times_its_measured_step():
    d1, d2, d3 = depth_points("a", 1, 2, 3)
    d2 = dataclasses.replace(d2, train=dataclasses.replace(FAST, epochs=4))
    d3 = dataclasses.replace(d3, train=dataclasses.replace(FAST, batch_size=64))
    half = dataclasses.replace(d1, train=dataclasses.replace(FAST, holdout=0.5))
    tasks = [Task(p, 0, str(i), options(".")) for i, p in enumerate((d1, d2, d3, half))]
    ms = {model_key(p.model): v for p, v in ((d1, 30.0), (d2, 10.0), (d3, 20.0))}
    # 1,280 images: d1 10 batches × 30 ms = 300; d2 4 epochs × 10 × 10 ms = 400; d3 20 batches × 20 ms = 400;
    # half of d1's images held out: 5 × 30 ms = 150
    assert [order.expected_work(t, ms, lambda t: 1280) for t in tasks] == [300, 400, 400, 150]
    assert [t.run_id for t in order.longest_first(tasks, ms, lambda t: 1280)] == ["1", "2", "0", "3"]  # a tie as listed
    del ms[model_key(d3.model)]   # one step unmeasured: every run ranked by its forward MACs over its training
    macs = [closed_form_macs(p.model) * e for p, e in ((d1, 1), (d2, 4), (d3, 1), (d1, 0.5))]
    assert [t.run_id for t in order.longest_first(tasks, ms, lambda t: 1280)] == \
        [str(i) for i in sorted(range(4), key=lambda i: -macs[i])]


def test_without_a_cost_phase_runs_start_by_forward_macs_and_compute_what_the_listed_order_computes(tmp_path):
    longest, rows = _started_in(tmp_path / "longest", cost=CostPlan(rounds=0), run_order="longest")
    listed, rows_listed = _started_in(tmp_path / "listed", cost=CostPlan(rounds=0))   # the default: as listed
    depth_seed = [(int(rows.loc[rid, "depth"]), int(rows.loc[rid, "seed"])) for rid in longest]
    assert depth_seed == [(3, 0), (3, 1), (2, 0), (2, 1), (1, 0), (1, 1)]   # MACs grow with depth
    assert [(int(rows_listed.loc[rid, "depth"]), int(rows_listed.loc[rid, "seed"])) for rid in listed] == \
        [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]
    for column in ("train_loss", "test_loss", "test_acc"):   # the order moves when a run starts, not what it computes
        assert rows[column].sort_index().equals(rows_listed[column].sort_index())
    for rid in longest:
        preds = [load_preds(SweepPaths.of(tmp_path / order, rows.loc[rid, "sweep"]).preds / f"{rid}.npz")[0]
                 for order in ("longest", "listed")]
        assert np.array_equal(*preds)


def test_a_shared_run_that_fails_is_recorded_as_failed_in_each_sweep(tmp_path):
    points = {s: [Point(s, "lr", lr, TINY, TrainConfig(epochs=1, batch_size=32, lr=lr, grad_clip=0.0))
                  for lr in (1e6,)] for s in "ab"}
    opts = options(tmp_path, seeds=(0,))
    summaries = run_sweeps([(s, points[s], opts) for s in "ab"])
    assert [s.statuses for s in summaries] == [{"diverged": 1}, {"diverged": 1}]
    row_b = read_table(SweepPaths.of(tmp_path, "b").rows).iloc[0]
    assert row_b["status"] == "diverged" and row_b["reused_from"] == "a" and "loss became" in row_b["error"]


def test_a_locked_second_sweep_stops_the_command_before_any_work(tmp_path):
    with sweep_lock(SweepPaths.of(tmp_path, "b"), "b"):
        with pytest.raises(SweepError, match="sweep b .* is in use by another command"):
            run_sweeps([("a", depth_points("a", 1), options(tmp_path)), ("b", depth_points("b", 2), options(tmp_path))])
    assert not SweepPaths.of(tmp_path, "a").rows.exists()
    with pytest.raises(ValueError, match="each sweep may appear once"):
        run_sweeps([("a", depth_points("a", 1), options(tmp_path))] * 2)


def test_a_run_whose_files_are_gone_is_trained_again_rather_than_reused(tmp_path):
    run_sweep("a", depth_points("a", 2), options(tmp_path, seeds=(0,)))
    for f in SweepPaths.of(tmp_path, "a").weights.glob("*.pt"):
        f.unlink()
    summary = run_sweep("b", depth_points("b", 2), options(tmp_path, seeds=(0,)))
    assert summary.reused == 0 and summary.statuses == {"ok": 1}


def test_diverging_run_is_recorded_and_the_next_point_runs(tmp_path):
    points = [Point("div", "lr", lr, TINY, TrainConfig(epochs=1, batch_size=32, lr=lr, grad_clip=0.0))
              for lr in (1e6, 1e-3)]
    summary = run_sweep("div", points, RunOptions(dataset="digits", out=str(tmp_path), progress=False,
                                                  seeds=(0,), cost=CostPlan(rounds=0)))
    table = read_table(tmp_path / "ablations" / "div.csv")
    assert list(table["status"]) == ["diverged", "ok"]
    assert "loss became" in table.loc[0, "error"] and pd.isna(table.loc[0, "test_acc"])
    assert 0 <= table.loc[1, "test_acc"] <= 1
    assert summary.statuses == {"diverged": 1, "ok": 1}


def test_a_cpu_run_busy_well_under_its_cores_is_called_starved():
    from ablations.running.runner import starved

    row = {"status": "ok", "device": "cpu", "train_util_pct": 35.0, "jobs": 1}
    assert starved(row)
    assert not starved({**row, "train_util_pct": 95.0})
    assert not starved({**row, "jobs": 2, "train_util_pct": 48.0})   # one of two runs: half the cores is its share
    assert starved({**row, "jobs": 2, "util_cores": 1, "train_util_pct": 48.0})  # but half its own thread's core
    assert not starved({**row, "jobs": 2, "torch_threads": 1, "train_util_pct": 48.0})  # an older row: of all cores
    assert starved({**row, "jobs": 2, "train_util_pct": 20.0})
    assert not starved({**row, "device": "cuda"}) and not starved({**row, "status": "error"})


def test_a_device_without_a_measurable_peak_leaves_mfu_blank_and_the_run_ok(tmp_path, monkeypatch):
    import ablations.running.worker as worker

    def no_peak(device, dtype):
        raise RuntimeError("no matmul on this device")
    monkeypatch.setattr(worker, "matmul_peak", no_peak)
    summary = run_sweep("np", depth_points("np", 1), options(tmp_path, seeds=(0,)))
    row = read_table(tmp_path / "ablations" / "np.csv").iloc[0]
    assert summary.statuses == {"ok": 1} and row["status"] == "ok"
    assert pd.isna(row["train_mfu"]) and pd.isna(row["mfu_peak_gflops"])


def test_a_sweeps_summaries_over_two_steps_merge_into_one(tmp_path):
    """The summary of a sweep over the looks of SEEDS=auto: counts add, statuses add by status, the runs and
    the starved shares follow each other, and the rows are the later step's (every run of the sweep so far)."""
    from ablations.results.store import SweepPaths
    from ablations.running.runner import SweepSummary

    paths = SweepPaths.of(tmp_path, "a")
    first = SweepSummary("a", paths, planned=6, skipped=1, reused=2, statuses={"ok": 3}, stale_tmp=1, resumable=0,
                         starved=[40.0], run_ids=["r1", "r2", "r3"], rows=[{"run_id": "r1"}])
    later = SweepSummary("a", paths, planned=4, skipped=3, reused=0, statuses={"ok": 1, "diverged": 1}, stale_tmp=0,
                         resumable=1, starved=[], run_ids=["r4"], rows=[{"run_id": "r1"}, {"run_id": "r4"}])
    both = first.merge(later)
    assert (both.planned, both.skipped, both.reused, both.stale_tmp, both.resumable) == (10, 4, 2, 1, 1)
    assert both.statuses == {"ok": 4, "diverged": 1} and first.statuses == {"ok": 3}   # neither side changed
    assert both.run_ids == ["r1", "r2", "r3", "r4"] and both.starved == [40.0] and both.rows == later.rows


def test_finished_gpu_runs_of_the_same_experiment_draw_no_note_and_a_lost_one_names_its_precision(
        tmp_path, monkeypatch, capsys):
    """On CUDA, DTYPE=auto trains in bf16 and a finished run's row says so (`dtype` bf16, `device` cuda). The
    check before a later look or a rerun reads such rows as this experiment's: no "another experiment" note
    for them, one for a row of other epochs; and the row of a run lost on its way names the precision it was
    to train in, not the driver's CPU's."""
    from ablations.running import tasks as task_module
    cuda = torch.device("cuda")   # a device object only: nothing here runs on it
    monkeypatch.setattr(task_module, "resolve_device", lambda name: cuda)
    monkeypatch.setattr(runner, "resolve_device", lambda name: cuda)
    opts = dataclasses.replace(options(tmp_path / "o", seeds=(0, 1, 2)), device="cuda")
    todo = task_module.make_tasks(depth_points("depth", 1, 2), opts)
    gpu_rows = [{**task_module.base_row(t, torch.device("cpu")), "device": "cuda", "dtype": "bf16", "status": "ok"}
                for t in todo[:4]]
    paths = SweepPaths.of(str(tmp_path / "o"), "depth")
    runner._warn_other_experiment(paths, todo[4], pd.DataFrame(gpu_rows))
    assert "another experiment" not in capsys.readouterr().err
    longer = {**gpu_rows[0], "epochs": FAST.epochs + 1}
    runner._warn_other_experiment(paths, todo[4], pd.DataFrame([*gpu_rows, longer]))
    err = capsys.readouterr().err
    assert f"holds 1 run of another experiment (epochs {FAST.epochs + 1} vs {FAST.epochs})" in err
    lost = task_module.lost_outcome(todo[0], "the worker died").row
    assert (lost["device"], lost["dtype"], lost["status"], lost["run_id"]) == ("cuda", "bf16", "error", todo[0].run_id)


def test_cudnn_attention_off_holds_while_runs_train_here_or_in_a_worker_process_and_changes_nothing_on_a_cpu(
        tmp_path, monkeypatch):
    from ablations.running import worker

    seen = []

    def watching(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real_train(*args, **kwargs)
    real_train = worker.train
    monkeypatch.setattr(worker, "train", watching)
    with cudnn_attention("auto"):   # torch's flag as it was afterwards
        off = dataclasses.replace(options(tmp_path / "off", seeds=(0,)), cudnn_attention="off")
        run_sweep("a", depth_points("a", 1), off)
        assert seen == [False] and torch.backends.cuda.cudnn_sdp_enabled()   # the command's flag, then torch's again
        run_sweep("a", depth_points("a", 1), options(tmp_path / "auto", seeds=(0,)))
        assert seen == [False, True]
        task = Task(depth_points("a", 1)[0], 0, "w0", off)   # a worker process: its flag as torch starts it
        execute(task, load_dataset("digits"))
        assert seen == [False, True, False]
    preds = [load_preds(next((tmp_path / way / "ablations" / "preds").glob("**/*.npz"))) for way in ("off", "auto")]
    np.testing.assert_array_equal(preds[0][0], preds[1][0])   # the CPU's attention does not read the flag
    with pytest.raises(ValueError, match="cudnn_attention='sometimes' is unknown; choose one of"):
        RunOptions(cudnn_attention="sometimes")
    with pytest.raises(ValueError, match="one command's sweeps share one cudnn_attention, got \\['auto', 'off'\\]"):
        run_sweeps([("b", depth_points("b", 1), off), ("c", depth_points("c", 1), options(tmp_path / "c"))])
