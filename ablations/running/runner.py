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
import functools
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
from ablations.results.store import PHASES, SweepError, SweepPaths, is_ok, model_key, record, row_figures, train_step_ms
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
from bench.units import count
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


def reuse(task: Task, taken: store.Taken) -> RunResult:
    """The outcome of a run already finished in another sweep: the same run_id means the same model, training,
    data, seed and initial weights, so its row, history, predictions and weights are this run's. The row takes
    this sweep's name and cost-phase figures, and names where it was trained."""
    return RunResult(_reused_row(taken.row, task, taken.sweep), taken.history, taken.weights.read_bytes(),
                     taken.preds.read_bytes())


def _reused_row(row: dict[str, Any], task: Task, trained_in: str) -> dict[str, Any]:
    """A row of sweep `trained_in` recorded as `task`'s: this sweep's name, cost-phase figures and experiment, and
    where it was trained."""
    return {**row, **task.cost, "sweep": task.point.sweep, "reused_from": trained_in,
            "experiment_id": task.experiment_id}


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
    packs: list[int] = dataclasses.field(default_factory=list)   # the seeds of each pack trained now
    pack_width: int = 0   # the width those packs trained at where it is pinned (CUDA: `TrainConfig.pack_width`)
    said: str = ""        # one more line for the summary (how SEEDS=auto trained the sweep's seeds)

    def merge(self, later: SweepSummary) -> SweepSummary:
        """This sweep over two steps of one command (the looks of SEEDS=auto) as one."""
        return dataclasses.replace(
            later, planned=self.planned + later.planned, skipped=self.skipped + later.skipped,
            reused=self.reused + later.reused, statuses=dict(Counter(self.statuses) + Counter(later.statuses)),
            stale_tmp=self.stale_tmp + later.stale_tmp,
            resumable=self.resumable + later.resumable, starved=self.starved + later.starved,
            run_ids=self.run_ids + later.run_ids, packs=self.packs + later.packs,
            pack_width=later.pack_width or self.pack_width)


@dataclass(frozen=True)
class _Sweep:
    """One sweep of a command: its name, points and options, every run it plans, and what OUT held of them before
    any work (`store.Found`)."""
    name: str
    points: list[Point]
    options: RunOptions
    tasks: list[Task]
    found: store.Found

    @property
    def paths(self) -> SweepPaths:
        return self.found.paths

    @functools.cached_property
    def todo(self) -> list[Task]:
        """Its runs that its own table does not hold finished."""
        return [t for t in self.tasks if t.run_id not in self.found.finished]

    @functools.cached_property
    def _labels(self) -> dict[str, str]:
        return {t.run_id: t.point.label for t in self.tasks}

    def label(self, run_id: str) -> str:
        return self._labels.get(run_id, "")


@dataclass
class _Kept:
    """What became of one sweep's runs in this command, as they are recorded: the run ids written (the command's
    list, `run_sweeps`'s `recorded`), their rows, the reuses, each status, the busy shares of starved runs."""
    recorded: list[str]
    rows: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    reused: int = 0
    statuses: Counter[str] = dataclasses.field(default_factory=Counter)
    starved: list[float] = dataclasses.field(default_factory=list)
    packs: list[int] = dataclasses.field(default_factory=list)
    pack_width: int = 0


@dataclass(frozen=True)
class _Left:
    """The runs no sweep's own table holds finished: trained here, or taken from another sweep under OUT."""
    tasks: list[Task]


@dataclass(frozen=True)
class _Costed:
    """Those runs, each with its config's cost-phase figures; the phase's training step per model and the training
    set's size, for the order they start in."""
    tasks: list[Task]
    step_ms: dict[str, float]
    images: dict[str, int]


@dataclass(frozen=True)
class _Ready:
    """The runs this command trains (no sweep under OUT finished them), each with its device's matmul peak, in the
    order they start."""
    tasks: list[Task]


def run_sweeps(sweeps: list[tuple[str, list[Point], RunOptions]], executor: Executor | None = None,
               fn: Callable[[Task, Dataset], RunResult] = execute, recorded: list[str] | None = None,
               locked: bool = False, spent: Counter[str] | None = None) -> list[SweepSummary]:
    """Run every missing point × seed of several sweeps with one executor; one summary per sweep.

    With every sweep's lock held, in this order: what OUT holds of the sweeps, read once (`store.find`), and a
    preflight; one cost phase over all their points (with no training beside it; a model several sweeps share is
    timed once); the runs that another sweep under OUT finished, recorded from there; each device's matmul peak;
    then all the runs left as one stream through the executor, in sweep order (or the longest expected first:
    `RunOptions.run_order`): JOBS workers start once and stay busy to the end. A run two of these sweeps share
    (same run_id: the base point of several sweeps) is trained once and recorded in each, as a reuse in all but
    the first. `recorded`: a list the run ids are appended to as their rows are written, which the caller still
    holds when a signal or an error ends the command. `locked`: the caller holds every sweep's lock already (a
    command that writes more of a sweep than its runs: its design file). `spent`: a counter that gets the seconds
    of the cost phase ("cost phase") and of training ("training", and one "training phases" for a call that
    trained). Raises SweepError (another process runs one of the sweeps; OUT unusable) before any work."""
    kernels = _one_setting(sweeps)
    executor = executor or LocalExecutor(ExecutorOptions(jobs=1))
    spent = Counter() if spent is None else spent
    recorded = [] if recorded is None else recorded
    with contextlib.ExitStack() as locks, cudnn_attention(kernels):
        for name, _, options in sweeps if not locked else ():
            locks.enter_context(store.sweep_lock(SweepPaths.of(options.out, name), name))
        command = _read(sweeps)
        stale = {sweep.name: _before_work(sweep, executor.jobs or 1) for sweep in command}
        for sweep in command:
            if sweep.options.tensorboard:
                _events_of_finished_runs(sweep)
        kept = {sweep.name: _Kept(recorded) for sweep in command}
        with _timed(spent, "cost phase"):
            costed = _with_cost(_left(command), command)
        costed = _take_finished_elsewhere(costed, command, kept)
        resumable = {sweep.name: _resumable(sweep, costed.tasks) for sweep in command}
        ready = _with_peaks(costed)
        spent["training phases"] += bool(ready.tasks)
        with _timed(spent, "training") if ready.tasks else contextlib.nullcontext():
            _train_all(ready, command, kept, executor, fn)
    return [_summary(sweep, kept[sweep.name], stale[sweep.name], resumable[sweep.name]) for sweep in command]


def _one_setting(sweeps: list[tuple[str, list[Point], RunOptions]]) -> str:
    """The command's one cudnn_attention setting (one flag for the process: its runs and its cost phase); ValueError
    for a sweep named twice or two settings."""
    names = [name for name, _, _ in sweeps]
    if len(set(names)) != len(names):
        raise ValueError(f"sweeps {names}: each sweep may appear once in one command")
    kernels = {options.cudnn_attention for _, _, options in sweeps}
    if len(kernels) > 1:
        raise ValueError(f"sweeps {names}: one command's sweeps share one cudnn_attention, got {sorted(kernels)}")
    return kernels.pop() if kernels else "auto"


def _read(sweeps: list[tuple[str, list[Point], RunOptions]]) -> list[_Sweep]:
    """Each sweep's runs and what its OUT holds of them (`store.find`: each OUT read once)."""
    tasks = {name: make_tasks(points, options) for name, points, options in sweeps}
    found: dict[str, store.Found] = {}
    for out in dict.fromkeys(Path(options.out) for _, _, options in sweeps):
        mine = [(name, options) for name, _, options in sweeps if Path(options.out) == out]
        found.update(store.find(out, {name: [t.run_id for t in tasks[name]] for name, _ in mine},
                                history=any(options.tensorboard for _, options in mine)))
    return [_Sweep(name, points, options, tasks[name], found[name]) for name, points, options in sweeps]


def _resumable(sweep: _Sweep, tasks: list[Task]) -> int:
    """How many of the sweep's runs among `tasks` go on from a checkpoint."""
    return sum(sweep.paths.checkpoint(t.run_id).exists() for t in tasks if t.point.sweep == sweep.name)


def _left(command: list[_Sweep]) -> _Left:
    return _Left([t for sweep in command for t in sweep.todo])


def _summary(sweep: _Sweep, kept: _Kept, stale: int, resumable: int) -> SweepSummary:
    run_ids = [t.run_id for t in sweep.tasks]
    rows = {**sweep.found.finished, **kept.rows}
    return SweepSummary(sweep.name, sweep.paths, len(run_ids), len(sweep.found.finished), kept.reused,
                        dict(kept.statuses), stale, resumable, list(kept.starved), run_ids,
                        [rows[rid] for rid in run_ids if rid in rows], list(kept.packs), kept.pack_width)


@contextlib.contextmanager
def _timed(spent: Counter[str], what: str):
    """Adds the block's wall seconds to spent[what], whatever it raised."""
    start = time.perf_counter()
    try:
        yield
    finally:
        spent[what] += time.perf_counter() - start


def _before_work(sweep: _Sweep, jobs: int) -> int:
    """Where a sweep has runs left, its check before any work: a preflight (the stale temporary files it removed,
    returned) and a note on runs of another experiment in its table."""
    if not sweep.todo:
        return 0
    stale = preflight(sweep.paths, sweep.todo, jobs)
    _warn_other_experiment(sweep.paths, sweep.todo[0], sweep.found.ok)
    return stale


def _events_of_finished_runs(sweep: _Sweep) -> None:
    """TENSORBOARD=1: check that the event folder can be written (SweepError before any work), then write
    the events of this sweep's finished runs that have none (runs finished without TENSORBOARD, or while the
    folder could not be written)."""
    root = Path(sweep.options.out) / "tensorboard"
    probe = root / f".write-test-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise SweepError(f"TENSORBOARD=1: cannot write {root} ({err.strerror or err}); fix its permissions or "
                         f"choose another OUT") from None
    missing = [row for rid, row in sweep.found.finished.items()
               if not tensorboard.written(sweep.options.out, sweep.name, rid)]
    if not missing:
        return
    history = sweep.found.history if "run_id" in sweep.found.history else pd.DataFrame(columns=["run_id"])
    for row in missing:
        epochs = history[history["run_id"].astype(str) == str(row["run_id"])]
        tensorboard.write_run(sweep.options.out, {**row, "sweep": sweep.name},
                              [e.to_dict() for _, e in epochs.iterrows()], sweep.label(str(row["run_id"])))
    print(f"tensorboard: events of {count(len(missing), 'finished run')} of {sweep.name} written", file=sys.stderr)


def _warn_other_experiment(paths: SweepPaths, task: Task, ok: pd.DataFrame) -> None:
    """Say before training when the sweep's table holds runs of another experiment (`ok`: its ok rows; other
    epochs, dataset or recipe): the report will show the newest experiment only."""
    if ok.empty:
        return
    mine = identity_columns(task, resolve_device(task.options.device))
    factor = task.point.fields
    others = [r for _, r in ok.iterrows() if not same_experiment(r, mine, factor)]
    if others:
        print(f"note: {paths.rows} holds {count(len(others), 'run')} of another experiment "
              f"({differences(others[-1], mine, factor)}); the report shows the newest experiment only and lists "
              f"the others under Skipped inputs. To keep both, use another OUT (--out)", file=sys.stderr)


def _with_cost(left: _Left, command: list[_Sweep]) -> _Costed:
    """One cost phase (`cost.run_cost_phases`) over the sweeps that measure alike (the same CostPlan, device and
    GRAPHS: all of one command's), where any has runs left; each run takes its config's figures."""
    groups: dict[tuple, list[_Sweep]] = {}
    for sweep in command:
        o = sweep.options
        if o.cost.rounds:
            groups.setdefault((o.cost, o.device, o.graphs, o.progress), []).append(sweep)
    sweeps_left = {t.point.sweep for t in left.tasks}
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    step_ms: dict[str, float] = {}
    images: dict[str, int] = {}
    for (cost_plan, device_name, graphs, progress), members in groups.items():
        # the command's sweeps all, whichever have runs left: a later look of SEEDS=auto, or a rerun after some
        # sweeps finished, is the same sitting as the first (the phase id names the sweeps), found and reused
        if not sweeps_left & {sweep.name for sweep in members}:
            continue
        device = resolve_device(device_name)
        first = members[0].options
        workload = (len(load_data(first).train_y), len(first.seeds))   # what the runs will train, for the budget
        phases = run_cost_phases([(sweep.name, sweep.points, sweep.paths.cost) for sweep in members], cost_plan,
                                 device, progress=progress, graphs=graphs, workload=workload)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the driver keeps no cached blocks while the runs train
        for sweep in members:
            figures[sweep.name] = row_figures(phases[sweep.name])
            step_ms.update(train_step_ms(phases[sweep.name]))
            images[sweep.name] = workload[0]
    return _Costed([dataclasses.replace(t, cost=figures.get(t.point.sweep, {}).get(model_key(t.point.model), {}))
                    if t.point.sweep in figures else t for t in left.tasks], step_ms, images)


def _take_finished_elsewhere(costed: _Costed, command: list[_Sweep], kept: dict[str, _Kept]) -> _Costed:
    """Record the runs that another sweep under the same OUT finished (`store.Found.elsewhere`); the rest are left
    to train."""
    elsewhere = {sweep.name: sweep.found.elsewhere for sweep in command}
    by_name = {sweep.name: sweep for sweep in command}
    for task in costed.tasks:
        taken = elsewhere[task.point.sweep].get(task.run_id)
        if taken is not None:
            _keep(reuse(task, taken), by_name[task.point.sweep], kept[task.point.sweep])
            kept[task.point.sweep].reused += 1
    return dataclasses.replace(costed, tasks=[t for t in costed.tasks if t.run_id not in elsewhere[t.point.sweep]])


def _with_peaks(costed: _Costed) -> _Ready:
    """Each (device, dtype) matmul peak of the runs left to train here, measured before any trains (the device is
    idle) and given to every task, which then start in their order (`_in_order`): workers training side by side
    would measure it under each other's load."""
    peaks: dict[tuple, Peak | None] = {}
    tasks = []
    for task in costed.tasks:
        device = resolve_device(task.options.device)
        key = (str(device), task.point.train.resolved_dtype(device))
        if key not in peaks:
            peaks[key] = peak_or_none(device, key[1])
        tasks.append(dataclasses.replace(task, peak=peaks[key]))
    return _Ready(_in_order(tasks, costed))


def _in_order(tasks: list[Task], costed: _Costed) -> list[Task]:
    """The runs in the order they start (`running.order`): as listed, unless every run's options ask for the
    longest expected first (from the cost phase's training steps)."""
    if any(task.options.run_order == "listed" for task in tasks):
        return tasks
    return longest_first(tasks, costed.step_ms, lambda task: costed.images.get(task.point.sweep, 1))


def _keep(outcome: RunResult, sweep: _Sweep, kept: _Kept) -> None:
    """Record a run in its sweep's folder (`store.record`), and its TensorBoard events where asked for."""
    record(outcome, sweep.paths)
    rid = str(outcome.row.get("run_id"))
    kept.rows[rid] = outcome.row
    kept.recorded.append(rid)
    if sweep.options.tensorboard and is_ok(outcome.row):
        tensorboard.write_run(sweep.options.out, outcome.row, outcome.history, sweep.label(rid))


def _train_all(ready: _Ready, command: list[_Sweep], kept: dict[str, _Kept], executor: Executor,
               fn: Callable[[Task, Dataset], RunResult]) -> None:
    """Every run of `ready` through the executor, packed where asked (`tasks.pack_tasks`), each recorded in its
    sweep as it finishes (a run two sweeps share: trained once, recorded in both); on CUDA, one row for the phase."""
    by_name = {sweep.name: sweep for sweep in command}
    first: dict[str, Task] = {}
    twins: dict[str, list[Task]] = {}
    for task in ready.tasks:
        if task.run_id in first:
            twins.setdefault(task.run_id, []).append(task)
        else:
            first[task.run_id] = task
    desc = f"sweep {command[0].name}" if len(command) == 1 else f"{len(command)} sweeps"
    # closed (the workers stopped) on a raise
    stream = contextlib.closing(executor.run(pack_tasks(list(first.values())), fn, load_data))
    region, images, flops = _device_region(ready, executor), 0, 0.0
    with tqdm(total=len(ready.tasks), desc=desc, unit="run", disable=not command[0].options.progress) as bar, \
            stream as outcomes, region or contextlib.nullcontext():
        for trained, result in outcomes:
            if trained.members:
                kept[trained.point.sweep].packs.append(len(trained.members))
                kept[trained.point.sweep].pack_width = trained.point.train.pack_width
            for task, outcome in zip(trained.runs, result.members or [result]):   # a pack's members, one by one
                images += _images_trained(outcome.row)
                flops += _flops_trained(outcome.row)
                outcome.row["jobs"] = executor.jobs
                _kept_trained(task, outcome, by_name[task.point.sweep], kept[task.point.sweep])
                bar.set_postfix_str(_progress(task, outcome, len(command) > 1, executor.remote))
                bar.update()
                for twin in twins.pop(task.run_id, []):
                    _record_twin(twin, task.point.sweep, outcome, by_name[twin.point.sweep], kept[twin.point.sweep])
                    bar.update()
    if region is not None and images:
        _keep_phase(command, ready, executor,
                    {**region.figures(images), "mfu": _phase_mfu(ready.tasks, flops, region.wall_s)})


def _kept_trained(task: Task, outcome: RunResult, sweep: _Sweep, kept: _Kept) -> None:
    """A run trained now, recorded in its sweep and counted by status (a starved run's busy share noted)."""
    _keep(outcome, sweep, kept)
    if starved(outcome.row):
        kept.starved.append(float(outcome.row["train_util_pct"]))
    kept.statuses[outcome.row["status"]] += 1


def _progress(task: Task, outcome: RunResult, several: bool, remote: bool) -> str:
    """The progress bar's note on the run that finished last."""
    row = outcome.row
    acc = row.get("test_acc")
    where = f" on {row.get('host') or '?'}" if remote else ""
    return (f"{task.point.sweep + ' ' if several else ''}{task.point.label} seed={task.seed}{where}: {row['status']}"
            + (f" acc={acc:.4f}" if isinstance(acc, float) else ""))


PHASE_COLUMNS = ["when", "sweeps", "runs", "jobs", "device_name", "wall_s", "images", "util_pct", "util_samples",
                 "power_w", "energy_window_s", "energy_j_per_img", "energy_source", *GPM_FIGURES, "mfu"]


def _device_region(ready: _Ready, executor: Executor):
    """The GPU's figures over the training phase of this command (`bench.utilisation.DeviceRegion`): on CUDA, for
    runs trained on this machine; None elsewhere or where NVML cannot start."""
    if not ready.tasks or executor.remote:
        return None
    device = resolve_device(ready.tasks[0].options.device)
    if device.type != "cuda":
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


def _phase_mfu(tasks: list[Task], flops: float, wall_s: float) -> float | None:
    """The phase's model FLOPs utilisation: its runs' training FLOPs over its wall time, as a share of the
    device's matmul peak for their precision; None where the peak is unknown or the runs trained in several."""
    peaks = {task.peak.flops for task in tasks if task.peak is not None}
    return flops / wall_s / peaks.pop() if len(peaks) == 1 and flops and wall_s > 0 else None


def _keep_phase(command: list[_Sweep], ready: _Ready, executor: Executor, figures: dict[str, Any]) -> None:
    """One row for the phase in OUT's `PHASES` table, and one line saying what the device did in it."""
    from datetime import datetime, timezone

    from bench.io.csvio import append_row

    options = command[0].options
    device = resolve_device(options.device)
    row = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "sweeps": "+".join(sweep.name for sweep in command), "runs": len(ready.tasks),
           "jobs": executor.jobs, "device_name": torch.cuda.get_device_name(device), **figures}
    append_row(Path(options.out) / PHASES, row, PHASE_COLUMNS)
    util = f"{row['util_pct']:.0f} % busy" if row["util_pct"] is not None else "busy % not sampled"
    sm = (f", SM activity {row['sm_active_pct']:.0f} %, tensor cores {row['tensor_active_pct']:.0f} %"
          if row.get("sm_active_pct") is not None and row.get("tensor_active_pct") is not None else "")
    mfu_said = f", MFU {100 * row['mfu']:.2g} %" if row.get("mfu") is not None else ""
    energy = (f", {row['power_w']:.0f} W, {row['energy_j_per_img']:.2g} J per image (over {row['energy_window_s']:.1f} s "
              f"between energy-counter ticks)" if row["energy_j_per_img"] is not None else ", energy not measured")
    tqdm.write(f"training phase: {row['images']:,} images in {row['wall_s']:.1f} s on {row['device_name']} "
               f"({row['jobs']} at once): {util} (NVML, the whole GPU){sm}{mfu_said}{energy}", file=sys.stderr)


def _record_twin(twin: Task, trained_in: str, outcome: RunResult, sweep: _Sweep, kept: _Kept) -> None:
    """Record, in `sweep`, the outcome of the same run trained for another sweep of this command: an ok run as a
    reuse (its files are on disk now); a failed one as the same failure, retried by a rerun."""
    row = _reused_row(outcome.row, twin, trained_in)
    if is_ok(row):
        _keep(RunResult(row, outcome.history, outcome.weights, outcome.preds), sweep, kept)
        kept.reused += 1
    else:
        _keep(RunResult(row, outcome.history), sweep, kept)
        kept.statuses[row["status"]] += 1
