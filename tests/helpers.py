"""Shortcuts the tests use: one sweep, or one sweep's cost phase, through the real entry points."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from ablations.cost import CostPlan, run_cost_phases
from ablations.data import Dataset
from ablations.executors.base import Executor
from ablations.runner import run_sweeps
from ablations.specs import Point
from ablations.tasks import Outcome, RunOptions, Task
from ablations.worker import execute


def run_sweep(sweep: str, points: list[Point], options: RunOptions, executor: Executor | None = None,
              fn: Callable[[Task, Dataset], Outcome] = execute) -> dict[str, Any]:
    """`run_sweeps` of one sweep: its summary."""
    return run_sweeps([(sweep, points, options)], executor, fn)[0]


def run_cost_phase(sweep: str, points: list[Point], plan: CostPlan, device: torch.device, csv_path: Path,
                   progress: bool = True, graphs: bool = True) -> pd.DataFrame:
    """The rows of this sweep's complete cost phase (`run_cost_phases` of one sweep)."""
    return run_cost_phases([(sweep, points, csv_path)], plan, device, progress, graphs)[sweep]
