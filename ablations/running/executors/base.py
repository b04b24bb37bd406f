"""The executor protocol and its options (`ablations.running.executors` says what an executor does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the names only: the executors' registry and options load without torch
    from ablations.running.tasks import RunOptions, RunResult, Task
    from ablations.training.data import Dataset

WORKERS = ("auto", "threads", "processes")  # how the local executor runs several runs at once
RunFn = Callable[["Task", "Dataset"], "RunResult"]
Loader = Callable[["RunOptions"], "Dataset"]


@dataclass(frozen=True)
class ExecutorOptions:
    """How an executor places runs. cpus/gpus_per_task: None = the executor's default (Ray: one GPU per
    task where the cluster has GPUs, else one CPU; a fraction such as 0.125 packs runs onto a GPU);
    max_retries: re-runs of a task whose worker died; jobs and device: the local executor's JOBS."""
    cpus_per_task: float | None = None
    gpus_per_task: float | None = None
    max_retries: int = 2
    jobs: int | None = None   # local: runs in flight at once; None = auto (executors.local.auto_jobs)
    device: str = "auto"      # the runs' device (local: how JOBS places them)
    threads: int | None = None  # local, CPU: torch threads per run; None = 1
    mps: str = "auto"         # local, CUDA with jobs > 1: CUDA MPS for the workers (executors.mps)
    workers: str = "auto"     # local with jobs > 1: threads of this process, or processes (executors.local)
    graphs: bool = True       # the runs' steps are CUDA graphs (GRAPHS): auto picks threads on one GPU only then

    def __post_init__(self) -> None:
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1):
            raise ValueError(f"jobs must be auto or an integer ≥ 1, got {self.jobs!r}")
        for name in ("cpus_per_task", "gpus_per_task"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be ≥ 0, got {value!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"threads must be an integer ≥ 1, got {self.threads!r}")
        if self.workers not in WORKERS:
            raise ValueError(f"workers must be one of {', '.join(WORKERS)}, got {self.workers!r}")
        if self.mps not in ("auto", "on", "off"):
            raise ValueError(f"mps must be auto, on or off, got {self.mps!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be ≥ 0, got {self.max_retries!r}")


class Executor(Protocol):
    remote: bool      # runs tasks on other hosts: progress lines name the host of each run
    jobs: int | None  # runs in flight at once on this machine (each row's `jobs`); None where runs go elsewhere

    def start(self) -> str: ...

    def close(self) -> None: ...

    def run(self, tasks: list[Task], fn: RunFn, load: Loader) -> Iterator[tuple[Task, RunResult]]: ...
