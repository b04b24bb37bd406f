"""The sweep runner: every point × seed becomes one run; each finished run is one CSV row.

Before training, the sweep's cost phase (`ablations.cost`) measures every point's speed side by side;
each training row carries its config's figures. Resume: a run whose `run_id` already has an `ok` row
in `<out>/ablations/<sweep>.csv` is skipped. Faults: a run that diverges, runs out of memory or raises
is recorded with its status and the sweep goes on. Writes: only the driver writes (history rows, then
test predictions and weights, then the result row, each append atomic), so a kill at any instant
leaves every earlier row whole, and an executor that runs tasks elsewhere (Ray) needs no shared
filesystem.
"""

from __future__ import annotations

import dataclasses
import io
import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np
import torch
from tqdm import tqdm

from bench.csvio import append_row, read_rows
from bench.env import environment, resolve_device, run_id
from bench.grid import classify_failure
from bench.measure import cost
from bench.schema import ABLATION_COLUMNS, HISTORY_COLUMNS
from vit import VisionTransformer, init_from_checkpoint

from .cost import CostPlan, model_key, row_figures, run_cost_phase
from .data import Dataset, load_dataset
from .specs import Point
from .train import Diverged, train


@dataclass(frozen=True)
class RunOptions:
    dataset: str = "mnist5k"
    data_root: str = "data"
    download: bool = False
    seeds: tuple[int, ...] = (0, 1, 2)
    device: str = "auto"
    out: str = "results"
    cost: CostPlan = field(default_factory=CostPlan)
    progress: bool = True
    init: str = ""     # a timm checkpoint file to start every run from
    init_id: str = ""  # its name and sha256 prefix (vit.checkpoint_id), part of each run's identity


@dataclass(frozen=True)
class Task:
    """Everything a worker needs to train one run; picklable."""
    point: Point
    seed: int
    run_id: str
    options: RunOptions
    cost: dict[str, Any] = field(default_factory=dict)  # the config's speed columns from the cost phase


@dataclass
class Outcome:
    row: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    weights: bytes | None = None  # torch.save of the state dict
    preds: bytes | None = None    # np.savez of the final model's test predictions and the labels


def task_key(point: Point, dataset: str, seed: int, init_id: str = "") -> dict[str, Any]:
    """What defines a run: the model, the training, the data, the seed and the starting weights."""
    key = {"model": point.model.to_dict(), "train": point.train.to_dict(), "dataset": dataset, "seed": seed}
    return {**key, "init": init_id} if init_id else key


def make_tasks(points: Iterable[Point], options: RunOptions) -> list[Task]:
    return [Task(p, s, run_id(task_key(p, options.dataset, s, options.init_id)), options)
            for p in points for s in options.seeds]


@dataclass(frozen=True)
class SweepPaths:
    """Where a sweep's outputs live under `<out>/ablations/`."""
    rows: Path      # <sweep>.csv: one row per run
    history: Path   # <sweep>-history.csv: one row per epoch of each run
    cost: Path      # <sweep>-cost.csv: one row per point, mode and round of the cost phase
    weights: Path   # weights/<sweep>/<run_id>.pt
    preds: Path     # preds/<sweep>/<run_id>.npz: `pred` and `target`, one entry per test image

    @classmethod
    def of(cls, out: str | Path, sweep: str) -> "SweepPaths":
        base = Path(out) / "ablations"
        return cls(base / f"{sweep}.csv", base / f"{sweep}-history.csv", base / f"{sweep}-cost.csv",
                   base / "weights" / sweep, base / "preds" / sweep)


def save_preds(preds: torch.Tensor, targets: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, pred=preds.numpy().astype(np.int32), target=targets.numpy().astype(np.int32))
    return buffer.getvalue()


def load_preds(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(pred, target) of one run, as `record` wrote them."""
    with np.load(path) as data:
        return data["pred"], data["target"]


def finished_ids(csv_path: Path) -> set[str]:
    if not csv_path.exists():
        return set()
    table = read_rows(csv_path)
    if table.empty:
        return set()
    return set(table.loc[table["status"] == "ok", "run_id"].astype(str))


_DATA_CACHE: dict[tuple[str, str], Dataset] = {}


def _dataset(options: RunOptions) -> Dataset:
    key = (options.dataset, options.data_root)
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = load_dataset(options.dataset, options.data_root, options.download)
    return _DATA_CACHE[key]


def base_row(task: Task, device: torch.device) -> dict[str, Any]:
    """The columns a run has before it trains: environment, config and identity."""
    point, options = task.point, task.options
    return {**environment(device), **point.model.to_dict(), "tokens": point.model.tokens,
            "run_id": task.run_id, "sweep": point.sweep, "dataset": options.dataset,
            "seed": task.seed, "epochs": point.train.epochs, "lr": point.train.lr,
            "dtype": point.train.resolved_dtype(device), "compile": int(point.train.compile),
            "init": options.init_id}


def lost_outcome(task: Task, message: str) -> Outcome:
    """The `error` row for a run whose worker never reported back (killed, node lost)."""
    row = base_row(task, torch.device("cpu"))
    row.update(host="", device=task.options.device, device_name="", status="error", error=message[:500])
    return Outcome(row)


def execute(task: Task) -> Outcome:
    """Train and measure one run; never raises for a failure of the run itself."""
    point, options = task.point, task.options
    device = resolve_device(options.device)
    row = base_row(task, device)
    history: list[dict[str, Any]] = []
    try:
        data = _dataset(options)
        torch.manual_seed(task.seed)
        model = VisionTransformer(point.model)
        if options.init:
            init_from_checkpoint(model, options.init, log=tqdm.write)
        row.update(cost(model, (point.model.in_chans, point.model.img_size, point.model.img_size)))
        result = train(model, data, point.train, task.seed, device, progress=options.progress)
        history = [{"run_id": task.run_id, **h} for h in result.history]
        row.update(result.row())
        row.update(task.cost)
        buffer = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
        row.update(status="ok", error="")
        return Outcome(row, history, buffer.getvalue(), save_preds(result.test_preds, data.test_y))
    except Diverged as err:
        row.update(status="diverged", error=str(err))
    except Exception as err:
        row.update(status=classify_failure(err), error=f"{type(err).__name__}: {err}"[:500])
        traceback.print_exc()
    return Outcome(row, history)


@dataclass(frozen=True)
class ExecutorOptions:
    """How an executor places runs. cpus/gpus_per_task: None = the executor's default (Ray: one GPU per
    task where the cluster has GPUs, else one CPU); max_retries: re-runs of a task whose worker died."""
    cpus_per_task: float | None = None
    gpus_per_task: float | None = None
    max_retries: int = 2

    def __post_init__(self) -> None:
        for name in ("cpus_per_task", "gpus_per_task"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be ≥ 0, got {value!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be ≥ 0, got {self.max_retries!r}")


class Executor(Protocol):
    """The seam between the runner and where runs happen (local process, Ray; Slurm via submitit could
    implement it too). `start` connects and fails early with a clear message; `run` yields
    (task, outcome) as each task finishes, in any order, and turns a task that never reports back into
    `lost_outcome`; `close` lets go of what `start` took. Only the driver, which consumes the yields, writes files."""

    def start(self) -> str: ...

    def close(self) -> None: ...

    def run(self, tasks: list[Task], fn: Callable[[Task], Outcome]) -> Iterator[tuple[Task, Outcome]]: ...


class LocalExecutor:
    """Runs tasks one after another in this process."""

    def __init__(self, options: ExecutorOptions | None = None) -> None:
        self.options = options or ExecutorOptions()

    def start(self) -> str:
        return f"local: this process, {torch.get_num_threads()} threads"

    def close(self) -> None:
        pass

    def run(self, tasks, fn):
        for task in tasks:
            yield task, fn(task)


def _ray_executor(options: ExecutorOptions | None = None) -> Executor:
    from .ray_executor import RayExecutor  # Ray is an optional extra: imported only when asked for

    return RayExecutor(options)


EXECUTORS: dict[str, Callable[[ExecutorOptions | None], Executor]] = {"local": LocalExecutor, "ray": _ray_executor}


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def record(outcome: Outcome, paths: SweepPaths) -> None:
    """History, then predictions and weights, then the row: the row is the commit mark of a run."""
    for h in outcome.history:
        append_row(paths.history, h, HISTORY_COLUMNS)
    if outcome.preds is not None:
        _write_atomic(paths.preds / f"{outcome.row['run_id']}.npz", outcome.preds)
    if outcome.weights is not None:
        _write_atomic(paths.weights / f"{outcome.row['run_id']}.pt", outcome.weights)
    append_row(paths.rows, outcome.row, ABLATION_COLUMNS)


def _finished_elsewhere(paths: SweepPaths, sweep: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """{run_id: (other sweep, its ok row)} over the other sweeps of the same results root whose
    predictions and weights are on disk: runs this sweep need not train again."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for csv in sorted(paths.rows.parent.glob("*.csv")):
        other = csv.stem
        if other == sweep or other.endswith(("-history", "-cost")):
            continue
        theirs = SweepPaths.of(paths.rows.parents[1], other)
        table = read_rows(csv)
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
    history = read_rows(theirs.history)
    history = history[history["run_id"].astype(str) == task.run_id].drop_duplicates("epoch", keep="last")
    row = {**row, **task.cost, "sweep": task.point.sweep, "reused_from": other}
    return Outcome(row, [{k: (None if v != v else v) for k, v in h.items()} for _, h in history.iterrows()],
                   (theirs.weights / f"{task.run_id}.pt").read_bytes(),
                   (theirs.preds / f"{task.run_id}.npz").read_bytes())


def run_sweep(sweep: str, points: list[Point], options: RunOptions, executor: Executor | None = None,
              fn: Callable[[Task], Outcome] = execute) -> dict[str, Any]:
    """Run every missing point × seed of `sweep`; returns counts and paths for the summary."""
    paths = SweepPaths.of(options.out, sweep)
    tasks = make_tasks(points, options)
    done = finished_ids(paths.rows)
    todo = [t for t in tasks if t.run_id not in done]
    if todo and options.cost.rounds:
        phase = run_cost_phase(sweep, points, options.cost, resolve_device(options.device), paths.cost,
                               progress=options.progress)
        figures = row_figures(phase)
        todo = [dataclasses.replace(t, cost=figures.get(model_key(t.point.model), {})) for t in todo]
    statuses: dict[str, int] = {}
    elsewhere = _finished_elsewhere(paths, sweep) if todo else {}
    reused = [t for t in todo if t.run_id in elsewhere]
    for task in reused:
        record(reuse(task, *elsewhere[task.run_id], paths), paths)
    todo = [t for t in todo if t.run_id not in elsewhere]
    executor = executor or LocalExecutor()
    remote = getattr(executor, "remote", False)
    bar = tqdm(total=len(todo), desc=f"sweep {sweep}", unit="run", disable=not options.progress)
    for task, outcome in executor.run(todo, fn):
        record(outcome, paths)
        status = outcome.row["status"]
        statuses[status] = statuses.get(status, 0) + 1
        acc = outcome.row.get("test_acc")
        where = f" on {outcome.row.get('host') or '?'}" if remote else ""
        bar.set_postfix_str(f"{task.point.factor}={task.point.value} seed={task.seed}{where}: {status}"
                            + (f" acc={acc:.4f}" if isinstance(acc, float) else ""))
        bar.update()
    bar.close()
    return {"sweep": sweep, "planned": len(tasks), "skipped": len(tasks) - len(todo) - len(reused),
            "reused": len(reused), "statuses": statuses, "paths": paths}
