"""Where runs happen: the seam between the sweep runner and a process, a cluster or a scheduler.

An executor is registered in `EXECUTORS` under the name users type for EXECUTOR. Each implements
`Executor`: `start` connects and fails early with a clear message (ValueError); `run(tasks, fn, load)`
calls `fn(task, data)` for every task, wherever it places it, and yields `(task, outcome)` as each
finishes, in any order, turning a task that never reports back into `tasks.lost_outcome`; `close`
lets go of what `start` took. `load(options)` gives a task's dataset on the driver: an executor that
runs tasks elsewhere ships it (and anything else a task reads from the driver's disk) to them. Only
the driver, which consumes the yields, writes files. A Slurm back-end (e.g. submitit) would be one
more module here and one more entry in `EXECUTORS`.
"""

from __future__ import annotations

from typing import Callable

from .base import Executor, ExecutorOptions, Loader, RunFn

__all__ = ["EXECUTORS", "Executor", "ExecutorOptions", "Loader", "RunFn"]


def _local(options: ExecutorOptions | None = None) -> Executor:
    from .local import LocalExecutor

    return LocalExecutor(options)


def _ray(options: ExecutorOptions | None = None) -> Executor:
    from .ray import RayExecutor  # Ray is an optional extra: imported only when asked for

    return RayExecutor(options)


EXECUTORS: dict[str, Callable[[ExecutorOptions | None], Executor]] = {"local": _local, "ray": _ray}
