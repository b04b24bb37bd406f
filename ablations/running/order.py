"""The order a command's runs start in.

`listed` (the default) keeps the sweeps' order, point by point and seed by seed: a command stopped half way has
then finished its first sweeps whole. `longest` starts the runs expected to take longest first, so the JOBS slots
(or the runs side by side on one GPU) stay full until near the end instead of waiting on a few long runs that
started last: the longest-processing-time-first rule of list scheduling (at worst 4/3 of the shortest schedule,
where an arbitrary order can take twice it; on one given set of runs either can be the faster, so
`benchmarks/run_order.py` times the two). A run's expected time is its training steps (epochs ×
batches of its training images) times its training step's median time in the command's cost phase, measured
on the device the runs train on; where the phase did not measure every run's step (COST_ROUNDS=0, a phase with
no budget), every run is ranked by its closed-form forward MACs × training images × epochs instead. Ties keep the
listed order.

The order changes when a run starts and what runs beside it, never what it computes: a run's arithmetic does not
depend on its neighbours (the executors' own guarantee), so its run id, row and predictions are the same in
either order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from ablations.results.store import model_key
from ablations.running.tasks import Task
from bench.flops import closed_form_macs


def _images(task: Task, train_images: Callable[[Task], int]) -> float:
    """The images a run trains on in each epoch: its dataset's training set less the recipe's held-out split."""
    return train_images(task) * (1 - float(task.point.train.holdout or 0))


def expected_work(task: Task, step_ms: Mapping[str, float], train_images: Callable[[Task], int]) -> float | None:
    """The run's expected training time in ms from its step's measured median (`step_ms`, by model key), or None
    where its step was not measured."""
    ms = step_ms.get(model_key(task.point.model))
    if ms is None or not math.isfinite(ms):
        return None
    recipe = task.point.train
    return recipe.epochs * math.ceil(_images(task, train_images) / recipe.batch_size) * ms


def expected_macs(task: Task, train_images: Callable[[Task], int]) -> float:
    """The run's forward multiply-accumulates over its training: a ranking where no step was measured."""
    return task.point.train.epochs * _images(task, train_images) * closed_form_macs(task.point.model)


def longest_first(tasks: list[Task], step_ms: Mapping[str, float], train_images: Callable[[Task], int]) -> list[Task]:
    """`tasks` with the longest expected first (`expected_work` where every step was measured, else
    `expected_macs`); equal ones in their listed order."""
    measured = [expected_work(t, step_ms, train_images) for t in tasks]
    work = measured if all(w is not None for w in measured) else [expected_macs(t, train_images) for t in tasks]
    ranked = sorted(range(len(tasks)), key=lambda i: -work[i])   # sorted is stable: ties stay as listed
    return [tasks[i] for i in ranked]
