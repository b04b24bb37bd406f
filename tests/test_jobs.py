"""JOBS=N: the local executor keeps N runs in flight in worker processes. The rows are those of JOBS=1 but
for when, where and how fast; a SIGKILL of the driver mid-sweep loses nothing finished."""

import errno
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import write_spec
from crash import workers_of
from helpers import run_sweep

import ablations.__main__ as cli
from ablations.results.schema import MEASURED, read_table
from ablations.running.cost import CostPlan
from ablations.running.executors import ExecutorOptions
from ablations.running.executors.local import LocalExecutor, visible_gpu
from ablations.running.runner import RUN_OVERHEAD_BYTES, planned_bytes
from ablations.running.tasks import RunOptions, RunResult, make_tasks
from ablations.specs import Point
from bench.training.recipe import TrainConfig
from vit import VisionTransformer, ViTConfig

pytestmark = pytest.mark.slow   # `make test-quick` leaves this module out

ROOT = Path(__file__).resolve().parents[1]
TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)
PLACEMENT = {"error"}


def test_two_jobs_write_the_rows_of_one_job(tmp_path):
    points = [Point("j", "depth", d, TINY.replace(depth=d), TrainConfig(epochs=2, batch_size=128)) for d in (1, 2)]
    tables, threads = {}, {}
    for jobs in (1, 2):
        opts = RunOptions(dataset="digits", out=str(tmp_path / f"jobs{jobs}"), seeds=(0, 1), progress=False,
                          cost=CostPlan(rounds=0))
        executor = LocalExecutor(ExecutorOptions(jobs=jobs, device="cpu"))
        assert (f"{jobs} runs at once" in executor.start()) == (jobs == 2)
        threads[jobs] = executor.threads   # each run's torch threads, in this process or in a worker
        run_sweep("j", points, opts, executor)
        tables[jobs] = read_table(tmp_path / f"jobs{jobs}" / "ablations" / "j.csv").sort_values("run_id")
    one, two = tables[1], tables[2]
    assert (one["jobs"] == 1).all() and (two["jobs"] == 2).all() and (two["status"] == "ok").all()
    allowed = len(os.sched_getaffinity(0))   # the busy share's base: the run's threads, at most the cores it may use
    assert (one["util_cores"] == min(threads[1], allowed)).all() and (two["util_cores"] == min(threads[2], allowed)).all()
    same = [c for c in one.columns if c not in MEASURED and c not in PLACEMENT]
    pd.testing.assert_frame_equal(one[same].reset_index(drop=True), two[same].reset_index(drop=True))


def test_more_runs_at_once_than_cores_are_started_with_a_note_saying_they_take_turns():
    """JOBS × THREADS above the cores the process may use: the executor's first lines say the runs take turns on
    them (a summary that later finds them busy a fraction of the time would otherwise blame other processes);
    at the cores or below, no note."""
    cores = len(os.sched_getaffinity(0))
    over = LocalExecutor(ExecutorOptions(jobs=cores + 1, device="cpu")).start()
    assert over.startswith(f"local: up to {cores + 1} runs at once, 1 CPU thread each;")
    assert (f"note: JOBS={cores + 1} × THREADS=1 asks for more threads than this machine's {cores} core"
            in over) and "take turns" in over
    if cores > 1:
        assert "note:" not in LocalExecutor(ExecutorOptions(jobs=cores, device="cpu")).start()


def test_runs_side_by_side_in_one_process_write_the_rows_of_one_job(tmp_path):
    """WORKERS=threads (the default on one GPU; here on the CPU): three runs at once in this process, each seeding
    and building its model under the lock, give every run the losses, accuracies and predictions of JOBS=1."""
    points = [Point("t", "depth", d, TINY.replace(depth=d), TrainConfig(epochs=2, batch_size=128)) for d in (1, 2)]
    tables = {}
    for jobs in (1, 3):
        opts = RunOptions(dataset="digits", out=str(tmp_path / f"jobs{jobs}"), seeds=(0, 1), progress=False,
                          cost=CostPlan(rounds=0))
        executor = LocalExecutor(ExecutorOptions(jobs=jobs, device="cpu", workers="threads"))
        assert ("3 runs at once in this process" in executor.start()) == (jobs == 3)
        run_sweep("t", points, opts, executor)
        tables[jobs] = read_table(tmp_path / f"jobs{jobs}" / "ablations" / "t.csv").sort_values("run_id")
    one, three = tables[1], tables[3]
    assert (three["status"] == "ok").all() and (three["jobs"] == 3).all()
    same = [c for c in one.columns if c not in MEASURED and c not in PLACEMENT | {"jobs", "util_cores"}]
    pd.testing.assert_frame_equal(one[same].reset_index(drop=True), three[same].reset_index(drop=True))
    for rid in one["run_id"]:
        a, b = (np.load(tmp_path / f"jobs{j}" / "ablations" / "preds" / "t" / f"{rid}.npz")["pred"] for j in (1, 3))
        assert np.array_equal(a, b)
    # no run had the process to itself from start to end: no per-run busy share is claimed for any of them
    assert three["train_util_pct"].isna().all() and one["train_util_pct"].notna().all()


def test_runs_in_one_process_take_turns_on_threads_kept_from_one_run_to_the_next_until_the_executor_closes(tmp_path):
    """WORKERS=threads keeps its threads (torch keeps some state per thread: cuDNN's plans): runs two at a
    time train on two threads, the executor's next stream of runs (a later look of SEEDS=auto) on the same two, and
    `close` ends them; a pool of its own ends them when its runs are done, an executor let go unclosed at once."""
    import gc
    import threading

    from ablations.running.executors.threads import ThreadPool

    def fn(task, data):
        time.sleep(0.02)
        row = {"run_id": task.run_id, "status": "ok", "thread": threading.get_ident(), "grad": torch.is_grad_enabled()}
        torch.set_grad_enabled(False)   # left so: the thread's next run starts with autograd on all the same
        return RunResult(row)

    def alive(idents):
        return [t for t in threading.enumerate() if t.ident in idents]

    point = Point("s", "depth", 1, TINY, TrainConfig(epochs=1))
    tasks = make_tasks([point], RunOptions(dataset="digits", out=str(tmp_path), seeds=tuple(range(6))))
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cpu", workers="threads"))
    rows = [outcome.row for _, outcome in executor.run(tasks[:4], fn, lambda options: None)]
    first = {row["thread"] for row in rows}
    rows += [outcome.row for _, outcome in executor.run(tasks[4:], fn, lambda options: None)]
    later = {row["thread"] for row in rows[4:]}
    assert len(first) == 2 and later <= first and threading.get_ident() not in first
    assert all(row["grad"] for row in rows)
    assert len(alive(first)) == 2
    executor.close()
    assert not alive(first)
    own = {outcome.row["thread"] for _, outcome in ThreadPool(3, torch.device("cpu"), fn, lambda o: None).run(tasks)}
    assert len(own) == 3 and not alive(own)
    both = LocalExecutor(ExecutorOptions(jobs=2, device="cpu", workers="threads"))   # two streams read in turn
    one, two = both.run(tasks[:3], fn, lambda options: None), both.run(tasks[3:], fn, lambda options: None)
    got = [next(one), next(two)]
    got += [*one, *two]
    assert sorted(task.run_id for task, _ in got) == sorted(task.run_id for task in tasks)
    both.close()
    unclosed = LocalExecutor(ExecutorOptions(jobs=2, device="cpu", workers="threads"))
    kept = {outcome.row["thread"] for _, outcome in unclosed.run(tasks[:2], fn, lambda options: None)}
    assert alive(kept)
    del unclosed
    gc.collect()
    assert not alive(kept)


def test_the_benchmarks_fresh_arm_gives_every_run_a_thread_that_trained_nothing_before(tmp_path, monkeypatch):
    """`ThreadPool.KEEP_THREADS = False` (benchmarks/concurrent_runs.py --thread-reuse fresh): a new thread for each
    run, so no run finds what a run before it left in its thread; kept, the later runs do."""
    import threading

    from ablations.running.executors.threads import ThreadPool

    marker = threading.local()

    def fn(task, data):
        before, marker.trained = getattr(marker, "trained", False), True
        return RunResult({"run_id": task.run_id, "status": "ok", "before": before})

    point = Point("s", "depth", 1, TINY, TrainConfig(epochs=1))
    tasks = make_tasks([point], RunOptions(dataset="digits", out=str(tmp_path), seeds=tuple(range(6))))
    found = {}
    for keep in (False, True):
        monkeypatch.setattr(ThreadPool, "KEEP_THREADS", keep)
        found[keep] = [o.row["before"] for _, o in ThreadPool(2, torch.device("cpu"), fn, lambda o: None).run(tasks)]
    assert len(found[False]) == 6 and not any(found[False])
    assert sum(found[True]) == 4   # two threads: each one's first run found nothing, the other four something


def test_on_a_gpu_each_kept_thread_queues_every_run_it_trains_on_one_stream_of_its_own(tmp_path, monkeypatch):
    """The pool's streams are drawn together when its first thread starts (torch hands out a pool of streams in
    turn: drawn one by one they could repeat one in use), one per thread, and a thread's runs all queue on its
    stream, in this stream of runs and the next."""
    import contextlib
    import threading

    from ablations.running.executors.threads import ThreadPool

    drawn, current = [], threading.local()

    class Stream:
        def __init__(self, device=None, priority=0):
            drawn.append(self)

        def synchronize(self):
            pass

    @contextlib.contextmanager
    def on(stream):
        assert isinstance(stream, Stream), "a run queued on a stream the pool did not draw"
        before, current.stream = getattr(current, "stream", None), stream
        try:
            yield
        finally:
            current.stream = before

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", on)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 2**30, 80 * 2**30))

    def fn(task, data):
        time.sleep(0.02)
        return RunResult({"run_id": task.run_id, "status": "ok", "thread": threading.get_ident(),
                          "stream": id(current.stream), "drawn": len(drawn)})

    point = Point("s", "depth", 1, TINY, TrainConfig(epochs=1))
    tasks = make_tasks([point], RunOptions(dataset="digits", out=str(tmp_path), seeds=tuple(range(9)), device="cpu"))
    pool = ThreadPool(3, torch.device("cuda"), fn, lambda options: None, keep=True)
    rows = [outcome.row for _, outcome in pool.run(tasks[:6])] + [outcome.row for _, outcome in pool.run(tasks[6:])]
    pool.close()
    assert len(drawn) == 3 and {row["drawn"] for row in rows} == {3}   # all three before the first run
    by_thread = {}
    for row in rows:
        by_thread.setdefault(row["thread"], set()).add(row["stream"])
    assert len(by_thread) == 3 and all(len(streams) == 1 for streams in by_thread.values())
    assert len({next(iter(streams)) for streams in by_thread.values()}) == 3 == len({id(s) for s in drawn})


@pytest.mark.parametrize("device, graphs, alone", [("cuda", True, True), ("cuda", False, False), ("cpu", True, False)])
def test_packs_whose_steps_are_cuda_graphs_train_one_at_a_time_and_other_packs_side_by_side(
        tmp_path, monkeypatch, capsys, device, graphs, alone):
    """On CUDA, a pack whose steps are CUDA graphs has the process to itself (side by side such packs gave some
    members non-finite losses), and the pool says so once; eager packs, packs on a CPU and runs alone keep JOBS at
    once, and nothing is said."""
    import contextlib
    import threading

    from ablations.running.executors import threads
    from ablations.running.tasks import pack_tasks

    class Stream:
        def __init__(self, device=None, priority=0):
            pass

        def synchronize(self):
            pass

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 2**30, 80 * 2**30))
    lock, flight = threading.Lock(), {"now": 0, "most": 0}

    def fn(task, data):
        with lock:
            flight["now"] += 1
            flight["most"] = max(flight["most"], flight["now"])
        time.sleep(0.05)
        with lock:
            flight["now"] -= 1
        return RunResult({}, members=[RunResult({"run_id": m.run_id, "status": "ok"}) for m in task.runs])

    points = [Point("s", "depth", d, TINY.replace(depth=d), TrainConfig(epochs=1, packed=True)) for d in (1, 2, 3)]
    options = RunOptions(dataset="digits", out=str(tmp_path), seeds=(0, 1, 2), device="cpu", graphs=graphs, pack=3)
    packs = pack_tasks(make_tasks(points, options))
    assert [len(p.members) for p in packs] == [3, 3, 3]
    assert all(threads.needs_the_process(p, torch.device(device)) is alone for p in packs)
    assert not any(threads.needs_the_process(m, torch.device(device)) for p in packs for m in p.members)
    pool = threads.ThreadPool(3, torch.device(device), fn, lambda o: None, keep=True)
    outcomes = [o for _, o in pool.run(packs)] + [o for _, o in pool.run(packs[:1])]
    pool.close()
    assert sum(len(o.members) for o in outcomes) == 12
    assert flight["most"] == (1 if alone else 3)
    note = ("note: packs train one at a time here (CUDA-graphed packs side by side gave some of their members "
            "non-finite losses); PACK=0 trains JOBS runs at once\n")
    assert capsys.readouterr().out.count(note) == (1 if alone else 0)   # once a pool, where packs wait
    list(threads.ThreadPool(1, torch.device(device), fn, lambda o: None).run(packs[:1]))
    assert note not in capsys.readouterr().out   # JOBS=1: nothing is held back


def test_a_stop_ends_every_run_in_flight_in_the_process_and_joins_its_threads(tmp_path):
    """Closing the stream of outcomes (what the runner does on Ctrl-C, SIGTERM or a full disk) stops every run
    still in flight at its next epoch (`Stopped`: nothing recorded) and joins every thread before it returns."""
    import threading

    from ablations.running.executors.threads import ThreadPool
    from ablations.training.train import check_stop

    started = threading.Barrier(3)

    def fn(task, data):
        if task.seed == 0:
            return RunResult({"run_id": task.run_id, "status": "ok"})
        started.wait(timeout=10)
        while True:   # a long run: an epoch at a time, as train() checks
            check_stop()
            time.sleep(0.01)

    point = Point("s", "depth", 1, TINY, TrainConfig(epochs=1))
    tasks = make_tasks([point], RunOptions(dataset="digits", out=str(tmp_path), seeds=(1, 2, 0)))
    pool = ThreadPool(3, torch.device("cpu"), fn, lambda options: None)
    stream = pool.run(tasks)
    task, outcome = next(stream)
    assert task.seed == 0 and outcome.row["status"] == "ok"
    started.wait(timeout=10)
    t0 = time.perf_counter()
    stream.close()
    assert time.perf_counter() - t0 < 5
    assert not [t for t in threading.enumerate() if t.name.startswith("vitbench-run-")]


def test_a_worker_pinned_to_a_gpu_keeps_to_the_gpus_the_driver_was_given():
    assert [visible_gpu(i, None) for i in range(3)] == ["0", "1", "2"]
    assert [visible_gpu(i, "2, 3") for i in range(2)] == ["2", "3"]   # GPU 0 of "2,3" is physical GPU 2
    assert visible_gpu(0, "GPU-5f0e1c2a") == "GPU-5f0e1c2a"   # UUIDs pass through


# --- a worker that dies takes only its own run with it --------------------------------------------------

def _dies_on_first_try(task, data):
    """Seed 1's first attempt kills its own worker (as the OOM killer would); every other attempt finishes."""
    marker = Path(task.options.out) / f"{task.run_id}.tried"
    if task.seed == 1 and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.3)
    return RunResult({"run_id": task.run_id, "seed": task.seed, "status": "ok", "pid": os.getpid()})


def _always_dies(task, data):
    if task.seed == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.3)
    return RunResult({"run_id": task.run_id, "seed": task.seed, "status": "ok", "pid": os.getpid()})


def _no_data(options):
    return None


def _tasks(tmp_path, seeds):
    point = Point("j", "depth", 1, TINY, TrainConfig(epochs=1))
    return make_tasks([point], RunOptions(dataset="digits", out=str(tmp_path), seeds=seeds, progress=False))


def test_a_killed_worker_costs_only_its_own_run_which_a_new_worker_retries(tmp_path, capsys):
    tasks = _tasks(tmp_path, (0, 1, 2, 3, 4))
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cpu", max_retries=2))
    got = list(executor.run(tasks, _dies_on_first_try, _no_data))
    assert sorted(t.seed for t, _ in got) == [0, 1, 2, 3, 4]          # queued runs were never marked lost
    assert all(o.row["status"] == "ok" for _, o in got)
    assert "its worker died (SIGKILL (killed; out of memory?)); a new worker retries it" in capsys.readouterr().err
    assert len({o.row["pid"] for _, o in got}) >= 2


def test_a_run_that_keeps_losing_its_worker_is_recorded_after_max_retries_and_the_rest_finish(tmp_path, capsys):
    tasks = _tasks(tmp_path, (0, 1, 2))
    got = dict((t.seed, o.row) for t, o in
               LocalExecutor(ExecutorOptions(jobs=2, device="cpu", max_retries=1)).run(tasks, _always_dies, _no_data))
    assert got[0]["status"] == got[2]["status"] == "ok"
    assert got[1]["status"] == "error"
    assert "worker lost: SIGKILL (killed; out of memory?), 2 times (MAX_RETRIES=1)" in got[1]["error"]
    assert capsys.readouterr().err.count("retries it from its last checkpoint") == 1


# --- one process draws every bar: a worker's epochs go to the driver ------------------------------------

def _three_epochs(task, data):
    """Three epochs reported as a run's are (`epoch_bar`); seed 1's first attempt then kills its own worker."""
    from ablations.training.train import epoch_bar

    bar = epoch_bar(range(1, 4), f"{task.point.label} seed={task.seed}: epochs", True)
    for epoch in bar:
        time.sleep(0.05)
        bar.set_postfix(loss=f"{1 / epoch:.3f}", acc=f"{epoch / 10:.4f}")
    marker = Path(task.options.out) / f"{task.run_id}.tried"
    if task.seed == 1 and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return RunResult({"run_id": task.run_id, "seed": task.seed, "status": "ok"})


@pytest.mark.parametrize("terminal", [True, False])
def test_workers_send_their_epochs_to_the_driver_which_draws_a_bar_a_run_on_a_terminal_only(tmp_path, capsys,
                                                                                             terminal):
    from ablations.running.executors.local import WorkerPool

    pool = WorkerPool(2, 1, 0, 1, _three_epochs, _no_data)
    pool.draw = terminal
    got = [(t.seed, o.row["status"]) for t, o in pool.run(_tasks(tmp_path, (0, 1, 2)))]
    assert sorted(got) == [(0, "ok"), (1, "ok"), (2, "ok")]      # epochs are never taken for outcomes
    err = capsys.readouterr().err
    assert "its worker died" in err                              # seed 1 died after sending its epochs: retried
    assert pool.bars == {}
    if terminal:
        assert all(f"depth=1 seed={seed}: epochs" in err for seed in (0, 1, 2)), err
        assert "3/3" in err and "acc=0.3000, loss=0.333" in err
    else:
        assert "epochs" not in err


@pytest.mark.parametrize("jobs,pack", [(1, 0), (2, 0), (2, 2)])
def test_each_runs_epoch_bar_names_the_run_alone_in_the_driver_in_a_worker_and_in_a_pack(tmp_path, capsys,
                                                                                         monkeypatch, jobs, pack):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)   # a terminal: the driver draws the workers' bars
    points = [Point("j", "depth", 1, TINY, TrainConfig(epochs=2, batch_size=256))]
    opts = RunOptions(dataset="digits", out=str(tmp_path), seeds=(0, 1), cost=CostPlan(rounds=0), pack=pack)
    run_sweep("j", points, opts, LocalExecutor(ExecutorOptions(jobs=jobs, device="cpu")))
    err = capsys.readouterr().err
    named = ["depth=1 seeds=0,1: epochs (pack of 2)"] if pack else ["depth=1 seed=0: epochs", "depth=1 seed=1: epochs"]
    assert all(f"{name}: " in err for name in named), err


def test_a_run_in_this_process_draws_no_epoch_bar_into_a_log(tmp_path, capsys):
    """One job, stderr not a terminal (a log): the sweep's bar only, no nested epoch bar and its cursor-ups."""
    points = [Point("j", "depth", 1, TINY, TrainConfig(epochs=2, batch_size=256))]
    opts = RunOptions(dataset="digits", out=str(tmp_path), seeds=(0,), cost=CostPlan(rounds=0))
    run_sweep("j", points, opts, LocalExecutor(ExecutorOptions(jobs=1, device="cpu")))
    err = capsys.readouterr().err
    assert "sweep j" in err and "epochs" not in err and "\x1b[A" not in err, err


def test_relayed_epochs_tick_at_the_start_and_after_each_epoch_with_tqdms_postfix():
    import io

    from tqdm import tqdm

    from ablations.training.train import CONTEXT, EpochTick, epoch_bar

    ticks: list[EpochTick] = []
    CONTEXT.relay = ticks.append
    try:
        bar = epoch_bar(range(3, 5), "epochs", True)
        for epoch in bar:
            bar.set_postfix(loss=f"{epoch:.3f}", acc="0.5")
        assert epoch_bar(range(3, 5), "epochs", False).disable     # no progress asked: a disabled bar, no ticks
    finally:
        CONTEXT.relay = None
    reference = tqdm(file=io.StringIO())
    reference.set_postfix(loss="4.000", acc="0.5")
    assert ticks == [EpochTick("epochs", 0, 2, ""), EpochTick("epochs", 1, 2, "acc=0.5, loss=3.000"),
                     EpochTick("epochs", 2, 2, reference.postfix)]


def _disk_full(task, data):
    raise OSError(errno.ENOSPC, "No space left on device", "/out/ablations/j.csv")


def _checkpoint_unwritable(task, data):   # the writer's own error, which names its fix
    from bench.io.atomic import write_atomic

    write_atomic(Path("/proc/no-such-folder/c.safetensors"), b"x" * 2000)


@pytest.mark.parametrize("fail,said", [
    (_disk_full, "error: /out/ablations/j.csv: No space left on device; 0 runs finished and kept; rerun the same "
                 "command to resume\n"),
    (_checkpoint_unwritable, "error: /proc/no-such-folder/c.safetensors: could not write 2,000 bytes (No such file or "
                             "directory); 0 runs finished and kept; free space or choose another OUT, then rerun to "
                             "resume\n")])
def test_a_full_disk_inside_a_worker_stops_the_command_with_the_one_job_line(tmp_path, capsys, fail, said):
    """One line, its next step said once and last."""
    spec = write_spec(tmp_path / "full.toml", "depth", "[1, 2]")
    import ablations.cli.commands as commands
    import ablations.running.runner as runner

    original = runner.run_sweeps

    def with_full_disk(plans, executor, recorded, locked=False, spent=None):
        return original(plans, executor, fn=fail, recorded=recorded, locked=locked, spent=spent)
    commands.run_sweeps = with_full_disk
    try:
        code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"), "--seeds", "0,1",
                         "--cost-rounds", "0", "--jobs", "2"])
    finally:
        commands.run_sweeps = original
    err = capsys.readouterr().err
    assert code == 2
    assert err.endswith(said) and err.count("rerun") == 1 and "Traceback" not in err, err


def test_the_preflight_counts_a_checkpoint_per_run_in_flight(tmp_path):
    tasks = _tasks(tmp_path, (0, 1, 2, 3))
    one, four = planned_bytes(tasks, 1), planned_bytes(tasks, 4)
    params = sum(p.numel() for p in VisionTransformer(TINY).parameters())
    assert four - one == 3 * 3 * (4 * params + RUN_OVERHEAD_BYTES)


# --- a real sweep with JOBS=2: a worker SIGKILLed, SIGTERM and the terminal's Ctrl-C --------------------

def _sweep(tmp_path, epochs=6):
    spec = write_spec(tmp_path / "js.toml", "depth", "[1, 2]", train=f"epochs = {epochs}")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--out", str(out),
           "--device", "cpu", "--seeds", "0,1", "--cost-rounds", "0", "--jobs", "2", "--checkpoint-every", "1"]
    return cmd, out, {**os.environ, "PYTHONPATH": str(ROOT), "VITBENCH_CACHE": str(tmp_path / "cache")}


def _wait_for(predicate, timeout_s=180.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_worker_sigkilled_mid_run_is_replaced_and_its_run_resumes_from_its_checkpoint(tmp_path):
    cmd, out, env = _sweep(tmp_path, epochs=12)
    checkpoints = out / "ablations" / "checkpoints" / "js"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # both runs in flight have a checkpoint: whichever worker dies, its run has one to resume from
        assert _wait_for(lambda: len(list(checkpoints.glob("*.safetensors"))) >= 2), "no checkpoints were written"
        victim = workers_of(proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "its worker died (SIGKILL" in err
    table = read_table(out / "ablations" / "js.csv")
    assert len(table) == 4 and (table["status"] == "ok").all() and table["run_id"].is_unique
    assert (table["resumed_after"] > 0).sum() == 1   # the killed run went on from its checkpoint, the others ran through
    assert not list(checkpoints.glob("*.safetensors"))   # deleted only after their ok rows


@pytest.mark.parametrize("how,status", [("SIGTERM", 143), ("terminal Ctrl-C", 130)])
def test_a_stop_signal_with_two_jobs_stops_every_worker_within_seconds_and_keeps_the_checkpoints(tmp_path, how, status):
    cmd, out, env = _sweep(tmp_path, epochs=40)
    checkpoints = out / "ablations" / "checkpoints" / "js"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert _wait_for(lambda: len(list(checkpoints.glob("*.safetensors"))) >= 2), "no checkpoints were written"
        workers = workers_of(proc.pid)
        assert len(workers) == 2
        t0 = time.perf_counter()
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:  # a terminal sends SIGINT to its whole foreground process group
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        took = time.perf_counter() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == status, err[-2000:]
    assert took < 30   # seconds: a busy machine slows the stop; that it came before the runs finished is checked below
    assert re.search(r"0 runs finished and kept; ([2-9]|\d\d) unfinished runs go on from a checkpoint \(\S+=\S+ seed \d+ "
                     r"after epoch \d+, .*; rerun the same command to resume", err), err[-2000:]
    assert "Traceback" not in err
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "a worker outlived the driver"
    assert len(list(checkpoints.glob("*.safetensors"))) >= 2
    rows = out / "ablations" / "js.csv"
    assert not rows.exists() or len(read_table(rows)) == 0   # nothing finished, nothing recorded as failed
    lock = out / "ablations" / "js.lock"
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # the lock was released
    finally:
        os.close(fd)


def test_mnist5k_runs_give_the_same_accuracies_with_one_or_two_jobs_at_the_same_threads(tmp_path):
    from vit import PRESETS

    base = PRESETS["vit_mnist"]
    points = [Point("m", "depth", d, base.replace(depth=d), TrainConfig(epochs=1)) for d in (1, 2)]
    tables = {}
    for jobs in (1, 2):
        opts = RunOptions(dataset="mnist5k", out=str(tmp_path / f"jobs{jobs}"), seeds=(0,), progress=False,
                          cost=CostPlan(rounds=0))
        run_sweep("m", points, opts, LocalExecutor(ExecutorOptions(jobs=jobs, device="cpu", threads=1)))
        tables[jobs] = read_table(tmp_path / f"jobs{jobs}" / "ablations" / "m.csv").sort_values("run_id")
    assert (tables[1]["torch_threads"] == 1).all() and (tables[2]["torch_threads"] == 1).all()
    assert list(tables[1]["test_acc"]) == list(tables[2]["test_acc"])
    assert list(tables[1]["test_loss"]) == list(tables[2]["test_loss"])


# --- JOBS=auto: as many runs as other processes leave cores free, decided before each run ------------------

def _reports_its_threads(task, data):
    time.sleep(0.5)
    return RunResult({"run_id": task.run_id, "seed": task.seed, "status": "ok", "pid": os.getpid(),
                    "threads": torch.get_num_threads(), "started": time.monotonic()})


def test_auto_jobs_start_as_many_one_thread_runs_as_cores_are_free_before_each_run(tmp_path):
    from ablations.running.executors.local import WorkerPool

    asked = []

    def busy_machine():            # other processes hold all but one core, then the machine frees up
        asked.append(len(asked))
        return 0 if len(asked) <= 2 else 4
    pool = WorkerPool(4, 1, 0, 0, _reports_its_threads, _no_data, capacity=busy_machine)
    got = [o.row for _, o in pool.run(_tasks(tmp_path, (0, 1, 2, 3, 4, 5)))]
    assert sorted(r["seed"] for r in got) == [0, 1, 2, 3, 4, 5] and {r["threads"] for r in got} == {1}
    starts = sorted(r["started"] for r in got)
    assert starts[1] - starts[0] > 0.4          # busy: the second run waited for the first (one at a time)
    assert len({r["pid"] for r in got}) >= 2 and asked    # freed: more workers joined, each asked first


def _twenty_epochs(task, data):
    from ablations.training.train import epoch_bar

    for _ in epoch_bar(range(20), "epochs", True):
        time.sleep(0.01)
    return RunResult({"run_id": task.run_id, "seed": task.seed, "status": "ok"})


def test_free_cores_are_asked_when_a_run_ends_not_at_every_epoch_a_worker_sends(tmp_path):
    """The meter measures between two calls: asked at each of a worker's epochs it would measure over a tenth of a
    second, and a short lull would start a run on a busy machine."""
    from ablations.running.executors.local import WorkerPool

    asked = []

    def one_free():
        asked.append(1)
        return 1
    pool = WorkerPool(2, 1, 0, 0, _twenty_epochs, _no_data, capacity=one_free)
    got = [o.row["seed"] for _, o in pool.run(_tasks(tmp_path, (0, 1, 2)))]
    assert sorted(got) == [0, 1, 2] and 1 <= len(asked) <= 4, asked   # at the start and after each run, not at each epoch


def test_the_free_core_meter_counts_other_processes_not_this_commands_own(monkeypatch):
    from bench import contention

    meter = contention.FreeCores(cores=4, first_window_s=0.0)
    readings = iter([100.0, 100.0 + 3.0])          # all CPUs' busy seconds at the two samples
    own = iter([10.0, 10.0 + 1.0])                 # this command's share of them
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(contention, "_cpu_busy_s", lambda: next(readings))
    monkeypatch.setattr(contention, "_family_cpu_s", lambda family: next(own))
    monkeypatch.setattr(contention.time, "perf_counter", lambda: next(clock))
    assert meter() == 2 and meter.other_cores == pytest.approx(2.0 - 8 * contention._tick_s())


def test_a_sweep_defaults_to_one_thread_a_run_and_records_it(tmp_path):
    spec = write_spec(tmp_path / "t.toml", "depth", "[1, 2]")
    done = subprocess.run([sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--seeds", "0",
                           "--cost-rounds", "0", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "JOBS=auto: before each run starts, as many as other processes leave cores free" in done.stderr \
        or (os.cpu_count() or 1) == 1
    rows = read_table(tmp_path / "out" / "ablations" / "t.csv")
    assert set(rows["torch_threads"]) == {1} and len(rows) == 2


@pytest.mark.parametrize("other_cores, noted", [(1.6, True), (0.0, False)])
def test_several_threads_a_run_beside_other_work_are_kept_and_named_in_one_note(monkeypatch, other_cores, noted):
    """THREADS=2 where other processes hold cores: the runs keep the threads asked for (they are part of what
    reproduces a run) and the start line says what that costs; THREADS=1, or a free machine, says nothing."""
    import ablations.running.executors.local as local

    class Meter:          # as bench.contention.FreeCores: whole free cores, and the others' share measured
        def __init__(self):
            self.cores, self.other_cores = 2, None

        def __call__(self):
            self.other_cores = other_cores
            return max(0, round(self.cores - other_cores))

    monkeypatch.setattr(local, "FreeCores", Meter)
    two = local.LocalExecutor(ExecutorOptions(jobs=1, threads=2, device="cpu"))
    said = two.start()
    assert two.threads == 2 and said.startswith("local: this process, 2 threads")
    assert ("note: THREADS=2 for 1 run at once while other processes hold about 1.6 of 2 cores" in said) == noted
    assert "note:" not in local.LocalExecutor(ExecutorOptions(jobs=1, threads=1, device="cpu")).start()


def test_the_summary_says_runs_busy_a_fraction_of_their_cores_shared_them_without_blaming_other_work(tmp_path, capsys):
    """The runs' cores may have been shared with this command's own runs (JOBS above the cores), not only with
    other processes: the note names both, and what it means for their figures."""
    from ablations.cli.outcome import summary
    from ablations.results.store import SweepPaths
    from ablations.running.runner import SweepSummary

    summary([SweepSummary("d", SweepPaths.of(tmp_path, "d"), planned=4, statuses={"ok": 4}, starved=[49.6, 70.2])],
            "Done in 1 s.")
    out = capsys.readouterr().out
    assert ("note: 2 runs: busy only 50–70 % of the cores they were given (train_util_pct): the cores were shared "
            "(with other processes, or with more runs than cores), so their train_time_s and train_mfu are not a "
            "run's alone") in out
