"""EXECUTOR=local: runs tasks on this machine, JOBS at a time.

JOBS=1 (default): one after another in this process, each dataset loaded once. JOBS=N: N worker
processes (spawned), each loading the dataset once from the parsed-array cache; on the CPU the cores are
split between them (torch threads per run = cores // N); on CUDA they share the GPU, or with several
GPUs each worker is pinned to one of them in turn. JOBS=auto: half the cores on the CPU (so each run
keeps two threads), four runs per GPU. Workers die with the driver (PR_SET_PDEATHSIG on Linux), and
only the driver writes results.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from typing import Iterator

import torch

from ..tasks import Outcome, Task, lost_outcome
from .base import ExecutorOptions, Loader, RunFn

RUNS_PER_GPU = 4  # JOBS=auto on CUDA: the issue 13 measurement had 8 processes on one H100 give ~7x the work


def auto_jobs(device: str) -> int:
    if device != "cpu" and torch.cuda.is_available():
        return RUNS_PER_GPU * torch.cuda.device_count()
    return max(1, (os.cpu_count() or 1) // 2)


def _die_with_parent() -> None:
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def visible_gpu(index: int, visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for a worker pinned to the index-th GPU this process sees: an entry of the
    driver's own CUDA_VISIBLE_DEVICES where it has one (GPU 0 of "2,3" is physical GPU 2)."""
    entries = [v.strip() for v in (visible or "").split(",") if v.strip()]
    return entries[index] if index < len(entries) else str(index)


def _init_worker(threads: int, gpus: "mp.Queue | None") -> None:
    _die_with_parent()
    if gpus is not None:  # before this process initialises CUDA
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_gpu(gpus.get(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    torch.set_num_threads(threads)


def _work(fn: RunFn, load: Loader, task: Task) -> Outcome:
    return fn(task, load(task.options))


class LocalExecutor:
    remote = False

    def __init__(self, options: ExecutorOptions | None = None) -> None:
        self.options = options or ExecutorOptions()
        self.jobs = self.options.jobs or auto_jobs(self.options.device)
        self.gpus = torch.cuda.device_count() if self.options.device != "cpu" and torch.cuda.is_available() else 0
        self.threads = max(1, torch.get_num_threads() // self.jobs) if not self.gpus else 1
        # workers spread over the GPUs only where DEVICE names none (auto, cuda); DEVICE=cuda:1 shares GPU 1
        self.spread = self.gpus > 1 and self.options.device in ("auto", "cuda")

    def start(self) -> str:
        chosen = " (JOBS=auto)" if self.options.jobs is None else ""
        if self.jobs == 1:
            return f"local: this process, {torch.get_num_threads()} threads{chosen}"
        where = (f"round-robin over {self.gpus} GPUs" if self.spread else
                 f"sharing {self.options.device if self.gpus > 1 else 'the GPU'}" if self.gpus else
                 f"{self.threads} CPU thread(s) each")
        return f"local: {self.jobs} runs at once{chosen}, {where}"

    def close(self) -> None:
        pass

    def run(self, tasks: list[Task], fn: RunFn, load: Loader) -> Iterator[tuple[Task, Outcome]]:
        if self.jobs == 1 or len(tasks) <= 1:
            for task in tasks:
                yield task, fn(task, load(task.options))
            return
        ctx = mp.get_context("spawn")
        gpus = None
        if self.spread:
            gpus = ctx.Queue()
            for i in range(self.jobs):
                gpus.put(i % self.gpus)
        with cf.ProcessPoolExecutor(min(self.jobs, len(tasks)), mp_context=ctx, initializer=_init_worker,
                                    initargs=(self.threads, gpus)) as pool:
            futures = {pool.submit(_work, fn, load, task): task for task in tasks}
            try:
                for future in cf.as_completed(futures):
                    task = futures[future]
                    try:
                        yield task, future.result()
                    except Exception as err:  # the worker died (killed, out of memory) or fn is not picklable
                        yield task, lost_outcome(task, f"worker lost: {type(err).__name__}: {err}")
            finally:
                for future in futures:
                    future.cancel()
