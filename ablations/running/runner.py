"""The sweep runner: every point × seed becomes one run; each finished run is one CSV row.

Before training, the sweep's cost phase (`ablations.running.cost`) measures every point's speed side by side;
each training row carries its config's figures. A command's sweeps share one executor (`run_sweeps`):
every sweep's cost phase first, then all their runs as one stream, so JOBS workers start once and no
sweep waits for the slowest run of the one before; they start in the sweeps' order, or with RUN_ORDER=longest
the longest expected first (`ablations.running.order`). Resume: a run whose `run_id` already has an `ok` row
in `<out>/ablations/<sweep>.csv` is skipped. Faults: a run that diverges, runs out of memory or raises
is recorded with its status and the sweep goes on. Writes: only the driver writes, through `ablations.results.store`
(`store.record`), so an executor that runs tasks elsewhere (Ray) needs no shared filesystem. What one run
does is `ablations.running.worker.execute`; a run that was killed resumes from its last checkpoint.

Before any work: each sweep's lock and a preflight (`store.sweep_lock`, `store.preflight`). Failures of
that kind raise `store.SweepError`, whose message names the input and the fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm

from ablations.results import store, tensorboard
from ablations.results.experiments import differences, same_experiment, starved
from ablations.results.store import PHASES, SweepError, SweepPaths, is_ok, model_key, ok_rows, record
from ablations.running.cost import run_cost_phases
from ablations.running.executors.base import Executor, ExecutorOptions
from ablations.running.executors.local import LocalExecutor
from ablations.running.order import longest_first
from ablations.running.tasks import RunOptions, RunResult, Task, identity_columns, make_tasks, pack_tasks
from ablations.running.worker import execute, load_data, peak_or_none
from ablations.specs import Point
from ablations.training.data import Dataset
from bench.env import cudnn_attention, resolve_device
from bench.flops import param_count
from bench.gpm import GPM_FIGURES
from bench.mfu import TRAIN_FLOP_FACTOR, Peak
from vit import VisionTransformer

__all__ = ["SweepError", "SweepSummary", "run_sweeps", "planned_bytes", "starved"]


RUN_OVERHEAD_BYTES = 64 * 1024  # a run's predictions, result row and history rows, with room to spare


def planned_bytes(tasks: list[Task], jobs: int = 1) -> int:
    """Disk a sweep's runs need: weights (fp32), a checkpoint (weights and two AdamW moments) of the
    largest model for each of the `jobs` runs in flight, and each run's small files."""
    params: dict[str, int] = {}
    for task in tasks:
        key = model_key(task.point.model)
        if key not in params:
            params[key] = param_count(VisionTransformer(task.point.model))
    per_run = [4 * params[model_key(t.point.model)] + RUN_OVERHEAD_BYTES for t in tasks]
    return sum(per_run) + 3 * max(jobs, 1) * max(per_run, default=0)


def preflight(paths: SweepPaths, todo: list[Task], jobs: int = 1) -> int:
    """`store.preflight` for the runs of `todo`, `jobs` of them in flight at once."""
    return store.preflight(paths, len(todo), planned_bytes(todo, jobs))


def reuse(task: Task, other: str, row: dict[str, Any], paths: SweepPaths, history: pd.DataFrame | None = None) -> RunResult:
    """The outcome of a run already finished in sweep `other`: the same run_id means the same model,
    training, data, seed and initial weights, so its row, history, predictions and weights are this
    run's. The row takes this sweep's name and cost-phase figures, and names where it was trained.
    `history`: `other`'s epoch rows as the command read them (else read here)."""
    theirs = SweepPaths.of(paths.out, other)
    row = {**row, **task.cost, "sweep": task.point.sweep, "reused_from": other,
           "experiment_id": task.experiment_id}
    return RunResult(row, store.history_of(theirs, task.run_id, history), theirs.weights_file(task.run_id).read_bytes(),
                     theirs.preds_file(task.run_id).read_bytes())


@dataclass
class SweepSummary:
    """What one command did to one sweep: runs planned, finished earlier (skipped), reused from other sweeps,
    trained now by status, stale temporary files removed, runs resumed from checkpoints, the busy shares of
    runs that got too little CPU, and every run of the sweep (ids, rows) trained now or before."""
    sweep: str
    paths: SweepPaths
    planned: int = 0
    skipped: int = 0
    reused: int = 0
    statuses: dict[str, int] = dataclasses.field(default_factory=dict)
    stale_tmp: int = 0
    resumable: int = 0
    starved: list[float] = dataclasses.field(default_factory=list)
    run_ids: list[str] = dataclasses.field(default_factory=list)
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def merge(self, later: SweepSummary) -> SweepSummary:
        """This sweep over two steps of one command (the looks of SEEDS=auto) as one."""
        return dataclasses.replace(
            later, planned=self.planned + later.planned, skipped=self.skipped + later.skipped,
            reused=self.reused + later.reused, statuses=dict(Counter(self.statuses) + Counter(later.statuses)),
            stale_tmp=self.stale_tmp + later.stale_tmp,
            resumable=self.resumable + later.resumable, starved=self.starved + later.starved,
            run_ids=self.run_ids + later.run_ids)


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
    run_ids: list[str] = dataclasses.field(default_factory=list)  # every run of the sweep: trained now or before
    reused: int = 0     # recorded from the same run finished in another sweep
    stale: int = 0
    resumable: int = 0
    statuses: dict[str, int] = dataclasses.field(default_factory=dict)
    starved: list[float] = dataclasses.field(default_factory=list)  # train_util_pct of runs that got too little CPU
    labels: dict[str, str] = dataclasses.field(default_factory=dict)  # run id -> its point's label
    rows: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # run id -> its row, kept now or before
    recorded: list[str] | None = None   # the command's list of the run ids written, in order (see `run_sweeps`)
    step_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # model key -> cost phase's training step ms
    train_images: int | None = None   # the training set's images, where the cost phase loaded it

    def summary(self) -> SweepSummary:
        return SweepSummary(self.sweep, self.paths, self.planned, self.skipped, self.reused, dict(self.statuses),
                            self.stale, self.resumable, list(self.starved), list(self.run_ids),
                            [self.rows[rid] for rid in self.run_ids if rid in self.rows])


def run_sweeps(sweeps: list[tuple[str, list[Point], RunOptions]], executor: Executor | None = None,
               fn: Callable[[Task, Dataset], RunResult] = execute, recorded: list[str] | None = None,
               locked: bool = False, spent: Counter[str] | None = None) -> list[SweepSummary]:
    """Run every missing point × seed of several sweeps with one executor; one summary per sweep.

    First, with every sweep's lock held: each sweep's preflight, one cost phase over all their points
    (with no training beside it; a model several sweeps share is timed once), and the runs that sweeps
    on disk already finished. Then all the sweeps' runs as one stream through the executor, in sweep order
    (or the longest expected first: `RunOptions.run_order`): JOBS workers start once and stay busy to the
    end. A run two of these sweeps share (same run_id: the base point of several sweeps) is trained once and
    recorded in each, as a reuse in all but the first. Each sweep's table, and those of the other sweeps under
    its OUT, is read once (`store.Tables`). `recorded`: a list the run ids are appended to as their rows are written, which
    the caller still holds when a signal or an error ends the command. `locked`: the caller holds every
    sweep's lock already (a command that writes more of a sweep than its runs: its design file). `spent`: a
    counter that gets the seconds of the cost phase ("cost phase") and of training ("training", and one
    "training phases" for a call that trained). Raises SweepError (another process runs one of the sweeps;
    OUT unusable) before any work."""
    names = [name for name, _, _ in sweeps]
    if len(set(names)) != len(names):
        raise ValueError(f"sweeps {names}: each sweep may appear once in one command")
    kernels = {options.cudnn_attention for _, _, options in sweeps}
    if len(kernels) > 1:   # one flag for the process: its runs and its cost phase
        raise ValueError(f"sweeps {names}: one command's sweeps share one cudnn_attention, got {sorted(kernels)}")
    executor = executor or LocalExecutor(ExecutorOptions(jobs=1))
    with contextlib.ExitStack() as locks, cudnn_attention(kernels.pop() if kernels else "auto"):
        for name, _, options in sweeps if not locked else ():
            locks.enter_context(store.sweep_lock(SweepPaths.of(options.out, name), name))
        tables = {out: store.Tables(out) for out in {Path(options.out) for _, _, options in sweeps}}
        shares = [_prepare(name, points, options, executor.jobs or 1, tables[Path(options.out)])
                  for name, points, options in sweeps]
        for share in shares:
            share.recorded = recorded
            if share.options.tensorboard:
                _events_of_finished_runs(share, tables[Path(share.options.out)])
        spent = Counter() if spent is None else spent
        with _timed(spent, "cost phase"):
            _cost_phases(shares)
        for share in shares:
            _reuse_finished(share, tables[Path(share.options.out)])
        _ship_peaks(shares)
        trains = any(share.todo for share in shares)
        spent["training phases"] += trains
        with _timed(spent, "training") if trains else contextlib.nullcontext():
            _train_all(shares, executor, fn)
    return [share.summary() for share in shares]


@contextlib.contextmanager
def _timed(spent: Counter[str], what: str):
    """Adds the block's wall seconds to spent[what], whatever it raised."""
    start = time.perf_counter()
    try:
        yield
    finally:
        spent[what] += time.perf_counter() - start


def _prepare(sweep: str, points: list[Point], options: RunOptions, jobs: int, tables: store.Tables) -> _Share:
    """The sweep's runs not finished in its own table, after a preflight for them."""
    paths = SweepPaths.of(options.out, sweep)
    tasks = make_tasks(points, options)
    table = tables.rows(sweep)
    done = store.finished_ids(paths, table=table)
    todo = [t for t in tasks if t.run_id not in done]
    share = _Share(sweep, points, options, paths, len(tasks), len(tasks) - len(todo), todo,
                   [t.run_id for t in tasks], labels={t.run_id: t.point.label for t in tasks},
                   rows=_rows_of(tables.finished(sweep), done & {t.run_id for t in tasks}))
    share.stale = preflight(paths, todo, jobs) if todo else 0
    if todo:
        _warn_other_experiment(paths, todo[0], table)
    return share


def _rows_of(finished: pd.DataFrame, run_ids: set[str]) -> dict[str, dict[str, Any]]:
    """{run id: its row} of `run_ids` among a sweep's finished runs (`Tables.finished`: one row each)."""
    if not run_ids:
        return {}
    mine = finished[finished["run_id"].astype(str).isin(run_ids)]
    return {str(r["run_id"]): r for r in mine.to_dict("records")}


def _events_of_finished_runs(share: _Share, tables: store.Tables) -> None:
    """TENSORBOARD=1: check that the event folder can be written (SweepError before any work), then write
    the events of this sweep's finished runs that have none (runs finished without TENSORBOARD, or while the
    folder could not be written)."""
    root = Path(share.options.out) / "tensorboard"
    probe = root / f".write-test-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise SweepError(f"TENSORBOARD=1: cannot write {root} ({err.strerror or err}); fix its permissions or "
                         f"choose another OUT") from None
    table = tables.finished(share.sweep)
    if table.empty or "run_id" not in table:
        return
    ok = table[table["run_id"].astype(str).isin(set(share.run_ids))]
    missing = [r for _, r in ok.iterrows() if not tensorboard.written(share.options.out, share.sweep, str(r["run_id"]))]
    if not missing:
        return
    history = tables.history(share.sweep)
    history = history if "run_id" in history else pd.DataFrame(columns=["run_id"])
    for row in missing:
        epochs = history[history["run_id"].astype(str) == str(row["run_id"])]
        tensorboard.write_run(share.options.out, {**row.to_dict(), "sweep": share.sweep},
                              [e.to_dict() for _, e in epochs.iterrows()], share.labels.get(str(row["run_id"]), ""))
    print(f"tensorboard: events of {len(missing)} finished run(s) of {share.sweep} written", file=sys.stderr)


def _warn_other_experiment(paths: SweepPaths, task: Task, table: pd.DataFrame) -> None:
    """Say before training when the sweep's table (`table`, its rows) holds runs of another experiment
    (other epochs, dataset or recipe): the report will show the newest experiment only."""
    if table.empty or "status" not in table:
        return
    ok = ok_rows(table)
    if ok.empty:
        return
    mine = identity_columns(task, resolve_device(task.options.device))
    factor = task.point.fields
    others = [r for _, r in ok.iterrows() if not same_experiment(r, mine, factor)]
    if others:
        print(f"note: {paths.rows} holds {len(others)} run(s) of another experiment "
              f"({differences(others[-1], mine, factor)}); the report shows the newest experiment only and lists "
              f"the others under Skipped inputs. To keep both, use another OUT (--out)", file=sys.stderr)


def _cost_phases(shares: list[_Share]) -> None:
    """One cost phase (`cost.run_cost_phases`) over the sweeps with runs to do that measure alike (the
    same CostPlan, device and GRAPHS: all of one command's); each run's task takes its config's figures."""
    groups: dict[tuple, list[_Share]] = {}
    for share in shares:
        o = share.options
        if o.cost.rounds:
            groups.setdefault((o.cost, o.device, o.graphs, o.progress), []).append(share)
    for (cost_plan, device_name, graphs, progress), members in groups.items():
        # the command's sweeps all, whichever have runs left: a later look of SEEDS=auto, or a rerun after some
        # sweeps finished, is the same sitting as the first (the phase id names the sweeps), found and reused
        if not any(share.todo for share in members):
            continue
        device = resolve_device(device_name)
        first = members[0].options
        workload = (len(load_data(first).train_y), len(first.seeds))   # what the runs will train, for the budget
        phases = run_cost_phases([(share.sweep, share.points, share.paths.cost) for share in members], cost_plan,
                                 device, progress=progress, graphs=graphs, workload=workload)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the driver keeps no cached blocks while the runs train
        for share in members:
            figures = store.row_figures(phases[share.sweep])
            share.todo = [dataclasses.replace(t, cost=figures.get(model_key(t.point.model), {})) for t in share.todo]
            share.step_ms, share.train_images = store.train_step_ms(phases[share.sweep]), workload[0]


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


def _keep(outcome: RunResult, share: _Share) -> None:
    """Record a run in its sweep's folder (`store.record`), and its TensorBoard events where asked for."""
    record(outcome, share.paths)
    rid = str(outcome.row.get("run_id"))
    share.rows[rid] = outcome.row
    if share.recorded is not None:
        share.recorded.append(rid)
    if share.options.tensorboard and is_ok(outcome.row):
        tensorboard.write_run(share.options.out, outcome.row, outcome.history,
                              share.labels.get(str(outcome.row.get("run_id")), ""))


def _reuse_finished(share: _Share, tables: store.Tables) -> None:
    """Record the runs that another sweep under the same OUT already finished; the rest are left to train."""
    elsewhere = store.finished_elsewhere(tables, share.sweep) if share.todo else {}
    for task in share.todo:
        if task.run_id in elsewhere:
            other, row = elsewhere[task.run_id]
            _keep(reuse(task, other, row, share.paths, tables.history(other)), share)
            share.reused += 1
    share.todo = [t for t in share.todo if t.run_id not in elsewhere]
    share.resumable = sum(share.paths.checkpoint(t.run_id).exists() for t in share.todo)


def _train_all(shares: list[_Share], executor: Executor, fn: Callable[[Task, Dataset], RunResult]) -> None:
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
    # closed (the workers stopped) on a raise
    stream = contextlib.closing(executor.run(pack_tasks(_in_order(list(first.values()), shares)), fn, load_data))
    region, images, flops = _device_region(shares, executor), 0, 0.0
    with tqdm(total=total, desc=desc, unit="run", disable=not shares[0].options.progress) as bar, stream as outcomes, \
            region or contextlib.nullcontext():
        for trained, result in outcomes:
            for task, outcome in zip(trained.runs, result.members or [result]):   # a pack's members, one by one
                images += _images_trained(outcome.row)
                flops += _flops_trained(outcome.row)
                outcome.row["jobs"] = executor.jobs
                share = by_sweep[task.point.sweep]
                _keep(outcome, share)
                if starved(outcome.row):
                    share.starved.append(float(outcome.row["train_util_pct"]))
                status = outcome.row["status"]
                share.statuses[status] = share.statuses.get(status, 0) + 1
                acc = outcome.row.get("test_acc")
                where = f" on {outcome.row.get('host') or '?'}" if executor.remote else ""
                bar.set_postfix_str(f"{'' if len(shares) == 1 else task.point.sweep + ' '}"
                                    f"{task.point.label} seed={task.seed}{where}: {status}"
                                    + (f" acc={acc:.4f}" if isinstance(acc, float) else ""))
                bar.update()
                for twin in twins.pop(task.run_id, []):
                    _record_twin(twin, task.point.sweep, outcome, by_sweep[twin.point.sweep])
                    bar.update()
    if region is not None and images:
        _keep_phase(shares, executor, {**region.figures(images), "mfu": _phase_mfu(shares, flops, region.wall_s)})


def _in_order(tasks: list[Task], shares: list[_Share]) -> list[Task]:
    """The runs in the order they start (`running.order`): as listed, unless every sweep's options ask for the
    longest expected first (from the cost phase's training steps)."""
    if any(share.options.run_order == "listed" for share in shares):
        return tasks
    step_ms = {key: ms for share in shares for key, ms in share.step_ms.items()}
    images = {share.sweep: share.train_images or 1 for share in shares}   # unknown (no cost phase): per image
    return longest_first(tasks, step_ms, lambda task: images[task.point.sweep])


PHASE_COLUMNS = ["when", "sweeps", "runs", "jobs", "device_name", "wall_s", "images", "util_pct", "util_samples",
                 "power_w", "energy_window_s", "energy_j_per_img", "energy_source", *GPM_FIGURES, "mfu"]


def _device_region(shares: list[_Share], executor: Executor):
    """The GPU's figures over the training phase of this command (`bench.utilisation.DeviceRegion`): on CUDA, for
    runs trained on this machine; None elsewhere or where NVML cannot start."""
    device = resolve_device(shares[0].options.device) if shares else None
    if device is None or device.type != "cuda" or executor.remote or not any(share.todo for share in shares):
        return None
    try:
        from bench.utilisation import DeviceRegion

        return DeviceRegion(device)
    except Exception:   # no NVML here: the phase has no device figures
        return None


def _images_trained(row: dict[str, Any]) -> int:
    """Images a finished run trained on in this command (a resumed run: its epochs after the checkpoint)."""
    try:
        epochs = int(row["epochs"]) - int(row.get("resumed_after") or 0)
        return max(0, epochs) * int(row["train_size"]) if is_ok(row) else 0
    except (KeyError, TypeError, ValueError):
        return 0


def _flops_trained(row: dict[str, Any]) -> float:
    """The training FLOPs of a finished run's images (3 × its forward FLOPs per image); 0 for any other row."""
    gflops = row.get("gflops")
    if not is_ok(row) or gflops is None or gflops != gflops:
        return 0.0
    return _images_trained(row) * float(gflops) * 1e9 * TRAIN_FLOP_FACTOR


def _phase_mfu(shares: list[_Share], flops: float, wall_s: float) -> float | None:
    """The phase's model FLOPs utilisation: its runs' training FLOPs over its wall time, as a share of the
    device's matmul peak for their precision; None where the peak is unknown or the runs trained in several."""
    peaks = {task.peak.flops for share in shares for task in share.todo if task.peak is not None}
    return flops / wall_s / peaks.pop() if len(peaks) == 1 and flops and wall_s > 0 else None


def _keep_phase(shares: list[_Share], executor: Executor, figures: dict[str, Any]) -> None:
    """One row for the phase in OUT's `PHASES` table, and one line saying what the device did in it."""
    from datetime import datetime, timezone

    from bench.io.csvio import append_row

    out = Path(shares[0].options.out)
    device = resolve_device(shares[0].options.device)
    row = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "sweeps": "+".join(share.sweep for share in shares), "runs": sum(len(share.todo) for share in shares),
           "jobs": executor.jobs, "device_name": torch.cuda.get_device_name(device), **figures}
    append_row(out / PHASES, row, PHASE_COLUMNS)
    util = f"{row['util_pct']:.0f} % busy" if row["util_pct"] is not None else "busy % not sampled"
    sm = (f", SM activity {row['sm_active_pct']:.0f} %, tensor cores {row['tensor_active_pct']:.0f} %"
          if row.get("sm_active_pct") is not None and row.get("tensor_active_pct") is not None else "")
    mfu_said = f", MFU {100 * row['mfu']:.2g} %" if row.get("mfu") is not None else ""
    energy = (f", {row['power_w']:.0f} W, {row['energy_j_per_img']:.2g} J per image (over {row['energy_window_s']:.1f} s "
              f"between energy-counter ticks)" if row["energy_j_per_img"] is not None else ", energy not measured")
    tqdm.write(f"training phase: {row['images']:,} images in {row['wall_s']:.1f} s on {row['device_name']} "
               f"({row['jobs']} at once): {util} (NVML, the whole GPU){sm}{mfu_said}{energy}", file=sys.stderr)


def _record_twin(twin: Task, trained_in: str, outcome: RunResult, share: _Share) -> None:
    """Record, in `share`'s sweep, the outcome of the same run trained for another sweep of this command:
    an ok run as a reuse (its files are on disk now); a failed one as the same failure, retried by a rerun."""
    if is_ok(outcome.row):
        _keep(reuse(twin, trained_in, outcome.row, share.paths), share)
        share.reused += 1
        return
    row = {**outcome.row, **twin.cost, "sweep": twin.point.sweep, "reused_from": trained_in,
           "experiment_id": twin.experiment_id}
    _keep(RunResult(row, outcome.history), share)
    share.statuses[row["status"]] = share.statuses.get(row["status"], 0) + 1
