"""The sweep runner: every point × seed becomes one run; each finished run is one CSV row.

Before training, the sweep's cost phase (`ablations.cost`) measures every point's speed side by side;
each training row carries its config's figures. A command's sweeps share one executor (`run_sweeps`):
every sweep's cost phase first, then all their runs as one stream, so JOBS workers start once and no
sweep waits for the slowest run of the one before. Resume: a run whose `run_id` already has an `ok` row
in `<out>/ablations/<sweep>.csv` is skipped. Faults: a run that diverges, runs out of memory or raises
is recorded with its status and the sweep goes on. Writes: only the driver writes (a run's history
rows in one append, then test predictions and weights, then the result row, each atomic), so a kill at
any instant leaves every earlier row whole, and an executor that runs tasks elsewhere (Ray) needs no
shared filesystem. A run that was killed resumes from its last checkpoint (`train.Checkpointing`).

Before any work: a sweep lock (one process per OUT and sweep; a second one exits naming the holder's
PID) and a preflight (OUT can be created and written, its filesystem has room for the planned runs,
temporary files of dead writers are removed). Failures of that kind raise `SweepError`, whose message
names the input and the fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import io
import os
import shutil
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from tqdm import tqdm

from bench.atomic import write_atomic
from bench.csvio import append_row, append_rows, drop_rows
from bench.env import resolve_device
from bench.grid import classify_failure
from bench.measure import cost
from bench.mfu import Peak, matmul_peak, mfu
from vit import VisionTransformer, init_from_checkpoint

from .cost import model_key, row_figures, run_cost_phases
from .data import Dataset, cached_dataset
from .executors.base import Executor, ExecutorOptions
from .executors.local import LocalExecutor
from .experiments import differences, same_experiment
from .schema import ABLATION_COLUMNS, HISTORY_COLUMNS, read_table
from .specs import Point
from .tasks import Outcome, RunOptions, Task, base_row, experiment_id, make_tasks
from .train import Checkpointing, Diverged, train


DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


class SweepError(Exception):
    """A sweep that cannot start or go on; the message names the input and the fix (the CLI exits 2)."""


@dataclass(frozen=True)
class SweepPaths:
    """Where a sweep's outputs live under `<out>/ablations/`."""
    rows: Path      # <sweep>.csv: one row per run
    history: Path   # <sweep>-history.csv: one row per epoch of each run
    cost: Path      # <sweep>-cost.csv: one row per point, mode and round of the cost phase
    weights: Path   # weights/<sweep>/<run_id>.pt
    preds: Path     # preds/<sweep>/<run_id>.npz: `pred` and `target`, one entry per test image
    checkpoints: Path  # checkpoints/<sweep>/<run_id>.safetensors: an unfinished run's last epoch
    lock: Path      # <sweep>.lock: flock'ed by the process running the sweep; names its PID

    @classmethod
    def of(cls, out: str | Path, sweep: str) -> "SweepPaths":
        base = Path(out) / "ablations"
        return cls(base / f"{sweep}.csv", base / f"{sweep}-history.csv", base / f"{sweep}-cost.csv",
                   base / "weights" / sweep, base / "preds" / sweep, base / "checkpoints" / sweep,
                   base / f"{sweep}.lock")

    def checkpoint(self, run_id: str) -> Path:
        return self.checkpoints / f"{run_id}.safetensors"


def save_preds(preds: torch.Tensor, targets: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, pred=preds.numpy().astype(np.int32), target=targets.numpy().astype(np.int32))
    return buffer.getvalue()


def load_preds(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(pred, target) of one run, as `record` wrote them; ValueError naming the file if it is damaged."""
    try:
        with np.load(path) as data:
            pred, target = data["pred"], data["target"]
    except Exception as err:
        raise ValueError(f"{path}: not a readable predictions file ({type(err).__name__})") from None
    if pred.shape != target.shape:
        raise ValueError(f"{path}: {len(pred)} predictions for {len(target)} labels")
    return pred, target


def finished_ids(csv_path: Path, preds: Path | None = None) -> set[str]:
    """The runs with an ok row; with `preds`, only those whose test predictions are still there (a run
    whose predictions file is gone is trained again, so the report can compare it)."""
    if not csv_path.exists():
        return set()
    table = read_table(csv_path)
    if table.empty or "status" not in table or "run_id" not in table:
        return set()
    done = set(table.loc[table["status"] == "ok", "run_id"].astype(str))
    return done if preds is None else {rid for rid in done if (preds / f"{rid}.npz").exists()}


def load_data(options: RunOptions) -> Dataset:
    """A task's dataset, loaded once per process."""
    return cached_dataset(options.dataset, options.data_root, options.download)


def execute(task: Task, data: Dataset) -> Outcome:
    """Train one run on `data`; never raises for a failure of the run itself."""
    point, options = task.point, task.options
    device = resolve_device(options.device)
    row = {**base_row(task, device), "torch_threads": torch.get_num_threads()}
    history: list[dict[str, Any]] = []
    try:
        torch.manual_seed(task.seed)
        model = VisionTransformer(point.model)
        if options.init:
            init_from_checkpoint(model, options.init, log=tqdm.write)
        row.update(cost(model, (point.model.in_chans, point.model.img_size, point.model.img_size)))
        checkpoint = Checkpointing(SweepPaths.of(options.out, point.sweep).checkpoint(task.run_id),
                                   options.checkpoint_every)
        result = train(model, data, point.train, task.seed, device, progress=options.progress, checkpoint=checkpoint,
                       graphs=options.graphs)
        history = [{"run_id": task.run_id, **h} for h in result.history]
        row.update(result.row())
        peak = task.peak or peak_or_none(device, row["dtype"])
        if peak is not None:
            row.update(train_mfu=mfu(row["gflops"], result.train_throughput_img_s, "train", peak.flops),
                       **peak.columns())
        row.update(task.cost)
        buffer = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
        row.update(status="ok", error="")
        return Outcome(row, history, buffer.getvalue(), save_preds(result.test_preds, data.test_y))
    except Diverged as err:
        row.update(status="diverged", error=str(err))
    except OSError as err:
        if err.errno in DISK_ERRORS:  # the results disk, not the run, failed: stop the sweep, keep what is done
            raise
        row.update(status=classify_failure(err), error=f"{type(err).__name__}: {err}"[:500])
        traceback.print_exc()
    except Exception as err:
        row.update(status=classify_failure(err), error=f"{type(err).__name__}: {err}"[:500])
        traceback.print_exc()
    return Outcome(row, history)


def peak_or_none(device: torch.device, dtype: str) -> Peak | None:
    """The device's matmul peak for the MFU columns, or None where none can be measured (they stay blank)."""
    try:
        return matmul_peak(device, dtype)
    except Exception:
        return None


def _save_mark(stage: str, run_id: str) -> None:
    """VITBENCH_SAVE_MARKS=<seconds>: print where a run's save step is and pause there, so that a crash
    test can kill a sweep inside it and tell that it did (tests/crash.py). Off by default."""
    pause = os.environ.get("VITBENCH_SAVE_MARKS")
    if pause:
        print(f"save {stage} {run_id}", file=sys.stderr, flush=True)
        time.sleep(float(pause))


def record(outcome: Outcome, paths: SweepPaths) -> None:
    """History, then predictions and weights, then the row: the row is the commit mark of a run. The
    history of an earlier attempt of the same run (killed before its row) is removed first."""
    run_id = str(outcome.row["run_id"])
    _save_mark("begin", run_id)
    drop_rows(paths.history, "run_id", {run_id})
    append_rows(paths.history, outcome.history, HISTORY_COLUMNS)
    _save_mark("history", run_id)
    if outcome.preds is not None:
        write_atomic(paths.preds / f"{run_id}.npz", outcome.preds)
    if outcome.weights is not None:
        write_atomic(paths.weights / f"{run_id}.pt", outcome.weights)
    _save_mark("files", run_id)
    append_row(paths.rows, outcome.row, ABLATION_COLUMNS)
    if outcome.row.get("status") == "ok":  # a failed run keeps its checkpoint: a rerun resumes it
        paths.checkpoint(run_id).unlink(missing_ok=True)
    _save_mark("end", run_id)


@contextlib.contextmanager
def sweep_lock(paths: SweepPaths, sweep: str):
    """Hold the sweep's lock file for the duration; SweepError naming the holder if another process has it."""
    try:
        paths.lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise SweepError(f"OUT={paths.rows.parents[1]}: cannot create {paths.lock} ({err.strerror}); "
                         f"choose another OUT (--out) or fix its permissions") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process"
            raise SweepError(f"sweep {sweep} under OUT={paths.rows.parents[1]} is already running ({holder}); "
                             f"wait for it to finish (it trains the same runs) or stop it, then rerun") from None
        since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"PID {os.getpid()} on {socket.gethostname()} since {since}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_tmp(paths: SweepPaths) -> int:
    """Remove `<name>.<pid>.tmp` files (`bench.atomic`) whose writer is gone (killed mid-write, or out of space)."""
    removed = 0
    for folder in (paths.rows.parent, paths.weights, paths.preds, paths.checkpoints):
        for tmp in folder.glob("*.tmp") if folder.is_dir() else ():
            pid = tmp.name.rsplit(".", 2)[-2] if tmp.name.count(".") >= 2 else ""
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                tmp.unlink(missing_ok=True)
                removed += 1
    return removed


RUN_OVERHEAD_BYTES = 64 * 1024  # a run's predictions, result row and history rows, with room to spare


def planned_bytes(tasks: list[Task], jobs: int = 1) -> int:
    """Disk a sweep's runs need: weights (fp32), a checkpoint (weights and two AdamW moments) of the
    largest model for each of the `jobs` runs in flight, and each run's small files."""
    params: dict[str, int] = {}
    for task in tasks:
        key = model_key(task.point.model)
        if key not in params:
            params[key] = sum(p.numel() for p in VisionTransformer(task.point.model).parameters())
    per_run = [4 * params[model_key(t.point.model)] + RUN_OVERHEAD_BYTES for t in tasks]
    return sum(per_run) + 3 * max(jobs, 1) * max(per_run, default=0)


def preflight(paths: SweepPaths, todo: list[Task], jobs: int = 1) -> int:
    """Before any work: OUT is creatable and writable and has room for `todo`; returns how many stale
    temporary files it removed. Raises SweepError naming OUT and the fix."""
    out, base = paths.rows.parents[1], paths.rows.parent
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SweepError(f"OUT={out}: cannot create {base} ({err.strerror}); choose another OUT (--out)") from None
    probe = base / f".preflight.{os.getpid()}.tmp"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise SweepError(f"OUT={out}: cannot write in {base} ({err.strerror}); choose another OUT (--out) or "
                         f"free space") from None
    finally:
        probe.unlink(missing_ok=True)
    need, free = planned_bytes(todo, jobs), shutil.disk_usage(base).free
    if free < need:
        raise SweepError(f"OUT={out}: {free / 2**20:,.1f} MiB free, but the {len(todo)} runs to do need about "
                         f"{need / 2**20:,.1f} MiB (weights, a checkpoint per run in flight, predictions and rows); "
                         f"free space or choose another OUT (--out)")
    return clean_stale_tmp(paths)


def _finished_elsewhere(paths: SweepPaths, sweep: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """{run_id: (other sweep, its ok row)} over the other sweeps of the same results root whose
    predictions and weights are on disk: runs this sweep need not train again."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for csv in sorted(paths.rows.parent.glob("*.csv")):
        other = csv.stem
        if other == sweep or other.endswith(("-history", "-cost")):
            continue
        theirs = SweepPaths.of(paths.rows.parents[1], other)
        table = read_table(csv)
        if table.empty or "status" not in table:
            continue
        for _, r in table[table["status"] == "ok"].iterrows():
            rid = str(r["run_id"])
            if (theirs.preds / f"{rid}.npz").exists() and (theirs.weights / f"{rid}.pt").exists():
                found.setdefault(rid, (other, {k: (None if v != v else v) for k, v in r.items()}))
    return found


def reuse(task: Task, other: str, row: dict[str, Any], paths: SweepPaths) -> Outcome:
    """The outcome of a run already finished in sweep `other`: the same run_id means the same model,
    training, data, seed and initial weights, so its row, history, predictions and weights are this
    run's. The row takes this sweep's name and cost-phase figures, and names where it was trained."""
    theirs = SweepPaths.of(paths.rows.parents[1], other)
    table = read_table(theirs.history) if theirs.history.exists() else None
    history = []
    if table is not None and "run_id" in table:
        mine = table[table["run_id"].astype(str) == task.run_id].drop_duplicates("epoch", keep="last")
        history = [{k: (None if v != v else v) for k, v in h.items()} for _, h in mine.iterrows()]
    row = {**row, **task.cost, "sweep": task.point.sweep, "reused_from": other,
           "experiment_id": experiment_id(task.point, task.options.dataset, task.options.init_id)}
    return Outcome(row, history,
                   (theirs.weights / f"{task.run_id}.pt").read_bytes(),
                   (theirs.preds / f"{task.run_id}.npz").read_bytes())


def run_sweep(sweep: str, points: list[Point], options: RunOptions, executor: Executor | None = None,
              fn: Callable[[Task, Dataset], Outcome] = execute) -> dict[str, Any]:
    """Run every missing point × seed of `sweep`; returns counts and paths for the summary. Raises
    SweepError (another process runs the sweep; OUT unusable) before any work."""
    return run_sweeps([(sweep, points, options)], executor, fn)[0]


@dataclass
class _Share:
    """One sweep's part of a command: its paths, its runs and what became of them."""
    sweep: str
    points: list[Point]
    options: RunOptions
    paths: SweepPaths
    planned: int
    skipped: int        # finished earlier: an ok row in the sweep's own table
    todo: list[Task]    # left to train
    reused: int = 0     # recorded from the same run finished in another sweep
    stale: int = 0
    resumable: int = 0
    statuses: dict[str, int] = dataclasses.field(default_factory=dict)
    starved: list[float] = dataclasses.field(default_factory=list)  # train_util_pct of runs that got too little CPU

    def summary(self) -> dict[str, Any]:
        return {"sweep": self.sweep, "planned": self.planned, "skipped": self.skipped,
                "reused": self.reused, "statuses": self.statuses, "paths": self.paths, "stale_tmp": self.stale,
                "resumable": self.resumable, "starved": self.starved}


def run_sweeps(plans: list[tuple[str, list[Point], RunOptions]], executor: Executor | None = None,
               fn: Callable[[Task, Dataset], Outcome] = execute) -> list[dict[str, Any]]:
    """Run every missing point × seed of several sweeps with one executor; one summary dict per sweep.

    First, with every sweep's lock held: each sweep's preflight, one cost phase over all their points
    (with no training beside it; a model several sweeps share is timed once), and the runs that sweeps
    on disk already finished. Then all the sweeps' runs as one stream through the executor, in sweep
    order: JOBS workers start once and stay busy from one sweep to the next. A run two of these sweeps
    share (same run_id: the base point of several sweeps) is trained once and recorded in each, as a
    reuse in all but the first. Raises SweepError (another process runs one of the sweeps; OUT
    unusable) before any work."""
    names = [name for name, _, _ in plans]
    if len(set(names)) != len(names):
        raise ValueError(f"sweeps {names}: each sweep may appear once in one command")
    executor = executor or LocalExecutor(ExecutorOptions())
    with contextlib.ExitStack() as locks:
        for name, _, options in plans:
            locks.enter_context(sweep_lock(SweepPaths.of(options.out, name), name))
        shares = [_prepare(name, points, options, executor.jobs or 1) for name, points, options in plans]
        _cost_phases(shares)
        for share in shares:
            _reuse_finished(share)
        _ship_peaks(shares)
        _train_all(shares, executor, fn)
    return [share.summary() for share in shares]


def _prepare(sweep: str, points: list[Point], options: RunOptions, jobs: int) -> _Share:
    """The sweep's runs not finished in its own table, after a preflight for them."""
    paths = SweepPaths.of(options.out, sweep)
    tasks = make_tasks(points, options)
    done = finished_ids(paths.rows, paths.preds)
    todo = [t for t in tasks if t.run_id not in done]
    share = _Share(sweep, points, options, paths, len(tasks), len(tasks) - len(todo), todo)
    share.stale = preflight(paths, todo, jobs) if todo else 0
    if todo:
        _warn_other_experiment(paths, todo[0])
    return share


def _warn_other_experiment(paths: SweepPaths, task: Task) -> None:
    """Say before training when the sweep's table holds runs of another experiment (other epochs,
    dataset or recipe): the report will show the newest experiment only."""
    table = read_table(paths.rows) if paths.rows.exists() else None
    if table is None or table.empty or "status" not in table:
        return
    ok = table[table["status"] == "ok"]
    if ok.empty:
        return
    mine = base_row(task, torch.device("cpu"))
    factor = task.point.factor
    others = [r for _, r in ok.iterrows() if not same_experiment(r, mine, factor)]
    if others:
        print(f"note: {paths.rows} holds {len(others)} run(s) of another experiment "
              f"({differences(others[-1], mine, factor)}); the report shows the newest experiment only and lists "
              f"the others under Skipped inputs. To keep both, use another OUT (--out)", file=sys.stderr)


def _cost_phases(shares: list[_Share]) -> None:
    """One cost phase (`cost.run_cost_phases`) over the sweeps with runs to do that measure alike (the
    same plan, device and GRAPHS: all of one command's); each run's task takes its config's figures."""
    groups: dict[tuple, list[_Share]] = {}
    for share in shares:
        o = share.options
        if share.todo and o.cost.rounds:
            groups.setdefault((o.cost, o.device, o.graphs, o.progress), []).append(share)
    for (plan, device_name, graphs, progress), members in groups.items():
        device = resolve_device(device_name)
        phases = run_cost_phases([(share.sweep, share.points, share.paths.cost) for share in members], plan,
                                 device, progress=progress, graphs=graphs)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the driver keeps no cached blocks while the runs train
        for share in members:
            figures = row_figures(phases[share.sweep])
            share.todo = [dataclasses.replace(t, cost=figures.get(model_key(t.point.model), {})) for t in share.todo]


def _ship_peaks(shares: list[_Share]) -> None:
    """Measure each (device, dtype) matmul peak of the runs left to train here, before any trains (the
    device is idle), and give it to every task: workers training side by side would measure it under
    each other's load."""
    peaks: dict[tuple, Peak | None] = {}
    for share in shares:
        tasks = []
        for task in share.todo:
            device = resolve_device(task.options.device)
            key = (str(device), task.point.train.resolved_dtype(device))
            if key not in peaks:
                peaks[key] = peak_or_none(device, key[1])
            tasks.append(dataclasses.replace(task, peak=peaks[key]))
        share.todo = tasks


def _reuse_finished(share: _Share) -> None:
    """Record the runs that another sweep under the same OUT already finished; the rest are left to train."""
    elsewhere = _finished_elsewhere(share.paths, share.sweep) if share.todo else {}
    for task in share.todo:
        if task.run_id in elsewhere:
            record(reuse(task, *elsewhere[task.run_id], share.paths), share.paths)
            share.reused += 1
    share.todo = [t for t in share.todo if t.run_id not in elsewhere]
    share.resumable = sum(share.paths.checkpoint(t.run_id).exists() for t in share.todo)


def _train_all(shares: list[_Share], executor: Executor, fn: Callable[[Task, Dataset], Outcome]) -> None:
    by_sweep = {share.sweep: share for share in shares}
    first: dict[str, Task] = {}
    twins: dict[str, list[Task]] = {}
    for task in (t for share in shares for t in share.todo):
        if task.run_id in first:
            twins.setdefault(task.run_id, []).append(task)
        else:
            first[task.run_id] = task
    desc = f"sweep {shares[0].sweep}" if len(shares) == 1 else f"{len(shares)} sweeps"
    total = sum(len(share.todo) for share in shares)
    stream = contextlib.closing(executor.run(list(first.values()), fn, load_data))  # closed (workers stopped) on a raise
    with tqdm(total=total, desc=desc, unit="run", disable=not shares[0].options.progress) as bar, stream as outcomes:
        for task, outcome in outcomes:
            outcome.row["jobs"] = executor.jobs
            share = by_sweep[task.point.sweep]
            record(outcome, share.paths)
            if starved(outcome.row):
                share.starved.append(float(outcome.row["train_util_pct"]))
            status = outcome.row["status"]
            share.statuses[status] = share.statuses.get(status, 0) + 1
            acc = outcome.row.get("test_acc")
            where = f" on {outcome.row.get('host') or '?'}" if executor.remote else ""
            bar.set_postfix_str(f"{'' if len(shares) == 1 else task.point.sweep + ' '}"
                                f"{task.point.factor}={task.point.value} seed={task.seed}{where}: {status}"
                                + (f" acc={acc:.4f}" if isinstance(acc, float) else ""))
            bar.update()
            for twin in twins.pop(task.run_id, []):
                _record_twin(twin, task.point.sweep, outcome, by_sweep[twin.point.sweep])
                bar.update()


STARVED_SHARE = 0.7  # a CPU run whose busy share is under this fraction of its threads' share got too little


def starved(row: dict[str, Any]) -> bool:
    """Whether a CPU run was busy well under the share of the cores its threads could use (other work held
    the machine): each of JOBS runs may use 1 / JOBS of the cores."""
    util, jobs = row.get("train_util_pct"), row.get("jobs") or 1
    if row.get("status") != "ok" or row.get("device") != "cpu" or not isinstance(util, (int, float)):
        return False
    return util < STARVED_SHARE * 100.0 / jobs


def _record_twin(twin: Task, trained_in: str, outcome: Outcome, share: _Share) -> None:
    """Record, in `share`'s sweep, the outcome of the same run trained for another sweep of this command:
    an ok run as a reuse (its files are on disk now); a failed one as the same failure, retried by a rerun."""
    if outcome.row["status"] == "ok":
        record(reuse(twin, trained_in, outcome.row, share.paths), share.paths)
        share.reused += 1
        return
    row = {**outcome.row, **twin.cost, "sweep": twin.point.sweep, "reused_from": trained_in,
           "experiment_id": experiment_id(twin.point, twin.options.dataset, twin.options.init_id)}
    record(Outcome(row, outcome.history), share.paths)
    share.statuses[row["status"]] = share.statuses.get(row["status"], 0) + 1
