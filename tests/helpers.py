"""Shortcuts the tests use: one sweep, or one sweep's cost phase, through the real entry points."""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ablations.running.cost import CostPlan, run_cost_phases
from ablations.running.executors.base import Executor
from ablations.running.runner import SweepSummary, run_sweeps
from ablations.running.tasks import RunOptions, RunResult, Task
from ablations.running.worker import execute
from ablations.specs import Point
from ablations.training.data import Dataset


def benchmark_module(name: str) -> types.ModuleType:
    """`benchmarks/<name>.py` loaded as a module (the folder is no package): its functions, for a test. The folder
    goes on sys.path, as for the script run itself, so the siblings it imports are found."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    path = folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_sweep(sweep: str, points: list[Point], options: RunOptions, executor: Executor | None = None,
              fn: Callable[[Task, Dataset], RunResult] = execute) -> SweepSummary:
    """`run_sweeps` of one sweep: its summary."""
    return run_sweeps([(sweep, points, options)], executor, fn)[0]


def run_cost_phase(sweep: str, points: list[Point], plan: CostPlan, device: torch.device, csv_path: Path,
                   progress: bool = True, graphs: bool = True) -> pd.DataFrame:
    """The rows of this sweep's complete cost phase (`run_cost_phases` of one sweep)."""
    return run_cost_phases([(sweep, points, csv_path)], plan, device, progress, graphs)[sweep]


def naive_bootstrap_p(a, b, rng, replicates=500):
    """The naive two-level paired bootstrap of two settings' (seeds, n) 0/1 arrays (test images resampled
    once for both, seeds within each, seed deviations scaled by √(s/(s−1))): it counts the seed × image
    noise twice, so it is the conservative reference the crossed-design test must out-power."""
    n = a.shape[1]
    weights = rng.multinomial(n, np.full(n, 1 / n), size=replicates) / n

    def replicate(x):
        per_seed = x @ weights.T
        centre = per_seed.mean(0)
        drawn = per_seed[rng.integers(0, len(x), (len(x), replicates)), np.arange(replicates)].mean(0)
        return centre + math.sqrt(len(x) / (len(x) - 1)) * (drawn - centre)
    d = a.mean() - b.mean()
    dstar = replicate(a) - replicate(b)
    return (1 + np.count_nonzero(np.abs(dstar - d) >= abs(d) - 1e-12)) / (replicates + 1)


OLD_RECIPE = ("batch_size", "weight_decay", "warmup_epochs", "label_smoothing", "grad_clip", "eval_batch_size",
              "layer_decay", "freeze", "holdout", "holdout_seed", "holdout_split", "infer_batch_size")


def write_old_format(current: Path, dest: Path) -> list[dict[str, str]]:
    """`current` (a sweep table of today's format) written to `dest` as tables were before the recipe had
    columns: the cost phase's inference batch under batch_size with mode = infer, no recipe columns. Only
    the rows a cost phase gave figures (every row of that format had them). Returns those rows (as text)."""
    import csv

    rows = [r for r in csv.DictReader(current.open()) if r.get("infer_batch_size")]
    header = [c for c in rows[0] if c not in OLD_RECIPE] + ["mode", "batch_size"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        for r in rows:
            writer.writerow([{"mode": "infer", "batch_size": r["infer_batch_size"]}.get(c, r.get(c, "")) for c in header])
    return rows
