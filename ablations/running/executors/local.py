"""EXECUTOR=local: runs tasks on this machine, JOBS at a time.

JOBS=auto (default): on the CPU up to one run per core, each on one torch thread (THREADS), and before
each run starts as many runs as the cores other processes leave free (`bench.contention.FreeCores`): an
idle machine runs on every core, a busy one on fewer, and since a run's threads, not how many run at
once, decide its floats, the results are the same either way; on one GPU RUNS_PER_GPU_THREADS runs in this
process (as many as free memory allows); four runs per GPU over several GPUs. JOBS=1: one after another in
this process, each dataset loaded once.

JOBS=N runs them WORKERS=threads or WORKERS=processes (auto: threads on one GPU where the steps are CUDA graphs,
processes elsewhere and with GRAPHS=0, whose eager steps keep the host busy in Python).
Threads (`executors.threads`): N runs in this process, each on a thread and CUDA stream of its own, so their
kernels overlap on the GPU with one CUDA context and one copy of the dataset there. Processes: N worker
processes (spawned), each loading the dataset once from the parsed-array cache; on CUDA they share the GPU,
or with several GPUs each worker is pinned to one of them in turn. Workers that share a GPU run under CUDA
MPS where it can be had (`executors.mps`, MPS=auto|on|off), so that their kernels overlap rather than take
turns; the start line says which. Only the driver writes results.

Each worker process has a pipe of its own, so a worker that dies (SIGKILL, the kernel's OOM killer, a crash in
a native library) takes only its own run with it: the driver sees its pipe close, starts a new worker
in its place and gives the run to it again, up to `max_retries` times (the run resumes from its last
checkpoint); only a run that keeps losing its worker is recorded as `error`. Queued runs are never
touched. A disk that fills inside a worker stops the command, as with one job. On any exception in the
driver (Ctrl-C, SIGTERM, a full disk) no new run starts and every worker is stopped before `run`
returns: SIGTERM, then SIGKILL after `STOP_GRACE_S`. Workers ignore the terminal's SIGINT (the driver
stops them) and die with the driver (`ablations.running.spawned`: PR_SET_PDEATHSIG on Linux, set before a
worker imports torch).
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

import torch
from tqdm import tqdm

from ablations.running.executors.base import ExecutorOptions, Loader, RunFn
from ablations.running.executors.mps import Mps, shared_gpu_refusal
from ablations.running.executors.threads import ThreadPool
from ablations.running.interrupts import SIGNALS
from ablations.running.spawned import Raised, worker_main
from ablations.running.tasks import RunResult, Task, lost_outcome
from ablations.training.train import SHARED_DEVICE_ENV, EpochTick
from bench.contention import FreeCores
from bench.env import allowed_cores, resolve_device
from bench.units import count

RUNS_PER_GPU = 4  # JOBS=auto over several GPUs: worker processes per GPU
RUNS_PER_GPU_THREADS = 8  # JOBS=auto on one GPU: runs in this process, each on its own stream
STOP_GRACE_S = 3.0  # a stopped worker's time to exit on SIGTERM before it is killed


def auto_jobs(device: str, threads: bool = False) -> int:
    """JOBS=auto: at most this many runs at once: on one GPU in this process (`threads`)
    RUNS_PER_GPU_THREADS, else four per GPU, or every core on the CPU (each run on one thread; how many
    start is decided before each run by the cores other processes leave free)."""
    if device != "cpu" and torch.cuda.is_available():
        return RUNS_PER_GPU_THREADS if threads else RUNS_PER_GPU * torch.cuda.device_count()
    return max(1, os.cpu_count() or 1)


def visible_gpu(index: int, visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for a worker pinned to the index-th GPU this process sees: an entry of the
    driver's own CUDA_VISIBLE_DEVICES where it has one (GPU 0 of "2,3" is physical GPU 2)."""
    entries = [v.strip() for v in (visible or "").split(",") if v.strip()]
    return entries[index] if index < len(entries) else str(index)


def death_text(exitcode: int | None) -> str:
    """How a worker ended, in words: 'SIGKILL (killed; out of memory?)', 'exit status 1'."""
    if exitcode is None:
        return "its pipe closed"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"{name} (killed; out of memory?)" if -exitcode == signal.SIGKILL else name
    return f"exit status {exitcode}"


@dataclass
class _Worker:
    slot: int
    process: mp.process.BaseProcess
    conn: Connection
    task: Task | None = None
    attempt: int = 0


@contextlib.contextmanager
def _signals_ignored():
    """Hold off SIGINT, SIGTERM and SIGHUP while workers are being stopped (a second Ctrl-C must not cut
    the stop short and leave workers training); only the main thread can change handlers."""
    try:
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in SIGNALS}
    except ValueError:  # not the main thread
        previous = {}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class WorkerPool:
    """`size` spawned workers, each with its own pipe, running tasks of `fn`; see the module docstring."""

    def __init__(self, size: int, threads: int, gpus: int, max_retries: int, fn: RunFn, load: Loader,
                 env: dict[str, str] | None = None, capacity: Callable[[], int | None] | None = None) -> None:
        self.size, self.threads, self.gpus, self.max_retries = size, threads, gpus, max_retries
        self.env = env or {}  # set in each worker before it imports torch
        # runs allowed at once, asked before each run starts (None: `size`); workers then start as needed
        self.capacity = capacity
        self.fn, self.load = fn, load
        self.ctx = mp.get_context("spawn")
        self.workers: list[_Worker] = []
        # each worker's run in progress, a bar a slot under the driver's own, drawn on a terminal only: in a log,
        # bars at several positions are cursor movements, and the driver's bar counts the runs there
        self.draw = sys.stderr.isatty()
        self.bars: dict[int, tqdm] = {}

    def _start(self, slot: int) -> _Worker:
        ours, theirs = self.ctx.Pipe()
        gpu = visible_gpu(slot % self.gpus, os.environ.get("CUDA_VISIBLE_DEVICES")) if self.gpus else None
        process = self.ctx.Process(target=worker_main, args=(theirs, os.getpid(), self.threads, gpu, self.env),
                                   name=f"vitbench-worker-{slot}", daemon=True)
        process.start()
        theirs.close()
        try:
            ours.send((self.fn, self.load))  # buffered in the pipe until the worker, started, reads it
        except OSError:  # it died at once: the next task sent to it finds that out and replaces it
            pass
        worker = _Worker(slot, process, ours)
        self.workers.append(worker)
        return worker

    def _retire(self, worker: _Worker) -> int | None:
        """Forget a dead worker; its exit code."""
        worker.process.join(timeout=5)
        worker.conn.close()
        self.workers.remove(worker)
        return worker.process.exitcode

    def run(self, tasks: list[Task]) -> Iterator[tuple[Task, RunResult]]:
        queue = collections.deque((task, 0) for task in tasks)
        try:
            for slot in range(min(self.size, len(tasks)) if self.capacity is None else 0):
                self._start(slot)
            ended = True   # runs start where one ended (or at the start), not at a worker's epoch tick: `capacity`
            while queue or any(w.task for w in self.workers):   # measures the free cores between two starts
                if ended:
                    self._dispatch(queue)
                busy = [w for w in self.workers if w.task is not None]
                ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
                ended = False
                for worker in busy:
                    if worker.conn in ready or worker.process.sentinel in ready:
                        yield from self._collect(worker, queue)
                        ended = ended or worker.task is None or worker not in self.workers
        finally:
            self.stop()

    def _limit(self) -> int:
        """Runs allowed in flight now: `size`, or what `capacity` says (at least one, at most `size`)."""
        if self.capacity is None:
            return self.size
        free = self.capacity()
        return self.size if free is None else max(1, min(self.size, free))

    def _dispatch(self, queue: collections.deque) -> None:
        if not queue:
            return
        running = sum(1 for w in self.workers if w.task is not None)
        limit = self._limit() if running < self.size else running
        while queue and running < limit:
            worker = next((w for w in self.workers if w.task is None), None)
            if worker is None:
                slots = {w.slot for w in self.workers}
                worker = self._start(next(i for i in range(self.size) if i not in slots))
            task, attempt = queue.popleft()
            try:
                worker.conn.send(task)
            except OSError:  # died while idle: its slot gets a new worker and the task waits for it
                queue.appendleft((task, attempt))
                self._retire(worker)
                self._start(worker.slot)
                continue
            worker.task, worker.attempt = task, attempt
            running += 1

    def _show(self, worker: _Worker, tick: EpochTick) -> None:
        """Draw a worker's epoch progress under the driver's bar (on a terminal)."""
        if not self.draw:
            return
        bar = self.bars.get(worker.slot)
        if bar is None:
            bar = self.bars[worker.slot] = tqdm(total=tick.total, desc=tick.desc, unit="ep", leave=False)
        bar.n = tick.n
        bar.set_postfix_str(tick.postfix, refresh=False)
        bar.refresh()

    def _unshow(self, slot: int) -> None:
        bar = self.bars.pop(slot, None)
        if bar is not None:
            bar.close()

    def _collect(self, worker: _Worker, queue: collections.deque) -> Iterator[tuple[Task, RunResult]]:
        task, attempt = worker.task, worker.attempt
        assert task is not None
        result, closed = None, False
        try:
            while result is None and worker.conn.poll():
                message = worker.conn.recv()
                if isinstance(message, EpochTick):
                    self._show(worker, message)
                else:
                    result = message
        except (EOFError, OSError):  # killed mid-send, or its pipe closed
            closed = True
        if result is None and not closed and worker.process.is_alive():   # only its epochs so far
            return
        self._unshow(worker.slot)
        if result is not None:
            worker.task = None
            if isinstance(result, Raised):
                if isinstance(result.error, OSError):  # a full disk inside a worker: the command stops
                    raise result.error
                yield task, lost_outcome(task, f"the worker failed: {result.error}")
            else:
                yield task, result
            return
        how = death_text(self._retire(worker))
        self._start(worker.slot)
        if attempt < self.max_retries:
            tqdm.write(f"run {task.run_id} ({task.point.factor}={task.point.value}, seed {task.seed}): its worker "
                       f"died ({how}); a new worker retries it from its last checkpoint (retry {attempt + 1} of "
                       f"{self.max_retries})", file=sys.stderr)
            queue.appendleft((task, attempt + 1))
            return
        yield task, lost_outcome(task, f"worker lost: {how}, {count(attempt + 1, 'time')} (MAX_RETRIES={self.max_retries}); "
                                       f"its last checkpoint is kept, so a rerun resumes it")

    def stop(self) -> None:
        """Stop every worker (SIGTERM, SIGKILL after STOP_GRACE_S) and wait until each is gone."""
        with _signals_ignored():
            for slot in list(self.bars):
                self._unshow(slot)
            for worker in self.workers:
                if worker.process.is_alive():
                    worker.process.terminate()
            deadline = time.monotonic() + STOP_GRACE_S
            for worker in self.workers:
                worker.process.join(max(0.0, deadline - time.monotonic()))
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join()
                worker.conn.close()
            self.workers.clear()


class LocalExecutor:
    remote = False

    def __init__(self, options: ExecutorOptions | None = None) -> None:
        self.options = options or ExecutorOptions()
        self.gpus = torch.cuda.device_count() if self.options.device != "cpu" and torch.cuda.is_available() else 0
        # workers spread over the GPUs only where DEVICE names none (auto, cuda); DEVICE=cuda:1 shares GPU 1
        self.spread = self.gpus > 1 and self.options.device in ("auto", "cuda")
        workers = self.options.workers
        # threads on one GPU where the steps are graph replays (the host launches little); eager steps keep the
        # host busy in Python, which several threads of one interpreter cannot share out: processes then
        self.in_process = workers == "threads" or (workers == "auto" and self.gpus > 0 and not self.spread
                                                   and self.options.graphs)
        self.jobs = self.options.jobs or auto_jobs(self.options.device, self.in_process)
        self.in_process = self.in_process and self.jobs > 1
        # one thread a run unless asked: two OpenMP threads beside other work spin and wait on each other
        self.threads = self.options.threads or 1
        # JOBS=auto on the CPU: before each run starts, as many runs as other processes leave cores free
        self.free = (FreeCores() if self.options.jobs is None and not self.gpus and self.jobs > 1
                     and not self.in_process else None)
        self.shared = bool(self.gpus) and self.jobs > max(1, self.gpus if self.spread else 1)  # runs share a GPU
        self.mps = Mps(self.options.mps) if self.shared and not self.in_process else None
        self._pool: ThreadPool | None = None   # WORKERS=threads: made at the first run, kept to `close`

    def start(self) -> str:
        return self._where() + self._crowded()

    def _crowded(self) -> str:
        """A note where JOBS (as given) × THREADS asks for more threads than the machine has cores, or where runs
        of several threads each start beside other work ("" otherwise): their threads then wait on each other, and
        the threads, part of what reproduces a run, are kept as asked."""
        if self.gpus:
            return ""
        cores = allowed_cores()
        if self.options.jobs is not None and self.jobs > 1 and not self.in_process and self.jobs * self.threads > cores:
            return (f"\nnote: JOBS={self.jobs} × THREADS={self.threads} asks for more threads than this machine's "
                    f"{count(cores, 'core')}: runs in flight take turns on them, so their training wall times are "
                    f"not a run's alone; JOBS=auto runs as many as the cores allow")
        if self.threads == 1:
            return ""
        meter = FreeCores()
        free = meter()
        if free is None or free >= self.threads * self.jobs:
            return ""
        return (f"\nnote: THREADS={self.threads} for {count(self.jobs, 'run')} at once while other processes hold about "
                f"{meter.other_cores:.1f} of {meter.cores} cores: threads that share cores with other work wait on "
                f"each other, so a run can take several times longer than at THREADS=1 (the default)")

    def _where(self) -> str:
        chosen = " (JOBS=auto)" if self.options.jobs is None else ""
        if self.jobs == 1:
            return f"local: this process, {count(self.threads, 'thread')}{chosen}"
        if self.in_process:
            refusal = shared_gpu_refusal(self._gpu_indices(), self.jobs) if self.gpus else ""
            if "PROHIBITED" in refusal:   # one process may hold a context on an EXCLUSIVE_PROCESS GPU: this one
                raise ValueError(refusal)
            where = ("each on a CUDA stream of its own, a further one only while the GPU keeps 2 GiB free" if self.gpus else
                     f"sharing this process's {count(self.threads, 'CPU thread')}")
            return (f"local: up to {self.jobs} runs at once in this process{chosen} (WORKERS=threads), {where}; "
                    f"a run stopped by a signal resumes from its last checkpoint")
        if self.free is not None:
            return (f"local: up to {self.jobs} runs at once (JOBS=auto: before each run starts, as many as other "
                    f"processes leave cores free), {count(self.threads, 'CPU thread')} each; a run whose worker dies is "
                    f"retried up to {self.options.max_retries}×")
        where = (f"round-robin over {self.gpus} GPUs" if self.spread else
                 f"sharing {self.options.device if self.gpus > 1 else 'the GPU'}" if self.gpus else
                 f"{count(self.threads, 'CPU thread')} each")
        if self.gpus:
            refusal = shared_gpu_refusal(self._gpu_indices(), self.jobs)
            if refusal:
                raise ValueError(refusal)
        if self.mps is not None:
            where += f", {self.mps.start()}"
        return (f"local: up to {self.jobs} runs at once{chosen}, {where}; a run whose worker dies is retried up to "
                f"{self.options.max_retries}×")

    def _gpu_indices(self) -> list[int]:
        """The GPUs the workers run on: all of them where they spread, else the one DEVICE names."""
        if self.spread:
            return list(range(self.gpus))
        device = torch.device(self.options.device if self.options.device.startswith("cuda") else "cuda")
        return [device.index or 0]   # plain "cuda" is device 0 (asking torch would start CUDA here)

    def close(self) -> None:
        if self.mps is not None:
            self.mps.close()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def run(self, tasks: list[Task], fn: RunFn, load: Loader) -> Iterator[tuple[Task, RunResult]]:
        if self.in_process:   # one pool for the executor's life: its threads keep what torch keeps per thread
            device = resolve_device(self.options.device)
            if self._pool is None:
                self._pool = ThreadPool(self.jobs, device, fn, load, self.threads, keep=True)
                weakref.finalize(self, self._pool.close)   # an executor let go unclosed ends its threads too
            # a second stream of runs while the first is still read gets threads of its own, ended with it
            pool = ThreadPool(self.jobs, device, fn, load, self.threads) if self._pool.busy else self._pool
            pool.fn, pool.load = fn, load
            yield from pool.run(tasks)
            return
        if self.jobs == 1:  # with JOBS > 1 even a lone run goes to a worker: the same threads as its siblings
            before = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            try:
                for task in tasks:
                    yield task, fn(task, load(task.options))
            finally:
                torch.set_num_threads(before)
            return
        env = {**(self.mps.env if self.mps is not None else {}), **({SHARED_DEVICE_ENV: "1"} if self.shared else {})}
        pool = WorkerPool(self.jobs, self.threads, self.gpus if self.spread else 0, self.options.max_retries, fn, load,
                          env, self.free)
        yield from pool.run(tasks)
