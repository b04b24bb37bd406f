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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from tqdm import tqdm

from bench.csvio import append_row, read_rows
from bench.env import resolve_device
from bench.grid import classify_failure
from bench.measure import cost
from vit import VisionTransformer, init_from_checkpoint

from .cost import model_key, row_figures, run_cost_phase
from .data import Dataset, cached_dataset
from .executors.base import Executor, ExecutorOptions
from .executors.local import LocalExecutor
from .schema import ABLATION_COLUMNS, HISTORY_COLUMNS
from .specs import Point
from .tasks import Outcome, RunOptions, Task, base_row, make_tasks
from .train import Diverged, train


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


def load_data(options: RunOptions) -> Dataset:
    """A task's dataset, loaded once per process."""
    return cached_dataset(options.dataset, options.data_root, options.download)


def execute(task: Task, data: Dataset) -> Outcome:
    """Train one run on `data`; never raises for a failure of the run itself."""
    point, options = task.point, task.options
    device = resolve_device(options.device)
    row = base_row(task, device)
    history: list[dict[str, Any]] = []
    try:
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
              fn: Callable[[Task, Dataset], Outcome] = execute) -> dict[str, Any]:
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
    executor = executor or LocalExecutor(ExecutorOptions())
    bar = tqdm(total=len(todo), desc=f"sweep {sweep}", unit="run", disable=not options.progress)
    for task, outcome in executor.run(todo, fn, load_data):
        record(outcome, paths)
        status = outcome.row["status"]
        statuses[status] = statuses.get(status, 0) + 1
        acc = outcome.row.get("test_acc")
        where = f" on {outcome.row.get('host') or '?'}" if executor.remote else ""
        bar.set_postfix_str(f"{task.point.factor}={task.point.value} seed={task.seed}{where}: {status}"
                            + (f" acc={acc:.4f}" if isinstance(acc, float) else ""))
        bar.update()
    bar.close()
    return {"sweep": sweep, "planned": len(tasks), "skipped": len(tasks) - len(todo) - len(reused),
            "reused": len(reused), "statuses": statuses, "paths": paths}
