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

from collections.abc import Callable

from ablations.options import Option, integer, non_negative, positive
from ablations.running.executors.base import WORKERS, Executor, ExecutorOptions, Loader, RunFn

__all__ = ["EXECUTORS", "OPTIONS", "Executor", "ExecutorOptions", "Loader", "RunFn"]


def _local(options: ExecutorOptions | None = None) -> Executor:
    from ablations.running.executors.local import LocalExecutor

    return LocalExecutor(options)


def _ray(options: ExecutorOptions | None = None) -> Executor:
    from ablations.running.executors.ray import RayExecutor  # Ray is an optional extra: imported only when asked for

    return RayExecutor(options)


EXECUTORS: dict[str, Callable[[ExecutorOptions | None], Executor]] = {"local": _local, "ray": _ray}

# Each executor's command-line options (`ablations.options.Option`), each flag an `ExecutorOptions` field.
MAX_RETRIES = Option("--max-retries", "re-runs of a run whose worker died (default 2)", "MAX_RETRIES",
                     type=integer(0, "--max-retries (MAX_RETRIES) must be an integer ≥ 0"), default=2)
OPTIONS: dict[str, tuple[Option, ...]] = {
    "local": (
        Option("--jobs", "local executor: runs in flight at once (default auto: on the CPU up to one per core, "
                         "as many as other processes leave cores free, decided before each run starts; on one "
                         "GPU 8, each on its own CUDA stream in this process, as many as free memory allows; "
                         "4 per GPU over several GPUs). 1: one after another in this process", "JOBS",
               type=integer(1, "jobs must be auto or an integer ≥ 1", auto=True), default=None, metavar="N|auto"),
        Option("--threads", "local executor on the CPU: torch threads per run (default 1: beside other work two "
                            "OpenMP threads spin and wait on each other). Runs with the same count give the same "
                            "floats whatever JOBS is; a different count changes the order of reductions", "THREADS",
               type=positive("--threads (THREADS)")),
        Option("--workers", "local executor with JOBS > 1: threads (the runs in this process, each on a thread "
                            "and CUDA stream of its own: one CUDA context, the dataset on the device once) or "
                            "processes (one spawned worker per run in flight; under MPS on a shared GPU). auto "
                            "(default): threads on one GPU, processes on the CPU and over several GPUs", "WORKERS",
               choices=WORKERS, default="auto"),
        Option("--mps", "local executor on CUDA with JOBS > 1 and WORKERS=processes: run the workers under CUDA "
                        "MPS so that their kernels overlap (without it processes on one GPU take turns). auto "
                        "(default): a daemon already running, else a private one started and stopped with the command, "
                        "else without MPS, saying why; on: MPS or stop; off: never", "MPS", choices=("auto", "on", "off"),
               default="auto"),
        MAX_RETRIES,
    ),
    "ray": (
        Option("--cpus-per-task", "CPUs each run asks the executor for (ray default 1)", "CPUS_PER_TASK",
               type=non_negative("--cpus-per-task (CPUS_PER_TASK) must be a number ≥ 0")),
        Option("--gpus-per-task", "GPUs each run asks for (ray default: 1 where the cluster has GPUs, else 0)",
               "GPUS_PER_TASK",
               type=non_negative("--gpus-per-task (GPUS_PER_TASK) must be a number ≥ 0")),
        MAX_RETRIES,
    ),
}

