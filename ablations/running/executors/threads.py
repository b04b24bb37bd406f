"""Several runs at once in this process: the local executor's way on one GPU (WORKERS=auto there, or threads).

Each run trains on one of the pool's threads, each thread with a CUDA stream of its own (a run's graph
replays, copies and evaluation are queued there), so the GPU runs the kernels of several runs side by side, as
under MPS, with one interpreter, one CUDA context and one import of everything. A thread trains run after run,
so what torch keeps per thread (cuDNN's plans for attention and convolutions) is built once per thread, not once
per run, and the executor keeps its threads from one batch of runs to the next until it closes. The dataset's
device copy is made once and read by every run (`training.train.on_device`), and the one-time costs (the first
optimizer's lazy imports, kernel loading) are paid once. A run's arithmetic is what it is alone: the same kernels
in the same order on its own stream; its initial weights are drawn under a lock (`running.worker.BUILD_LOCK`, the
global generator), its CUDA graphs captured one at a time (`bench.training.step.CAPTURE_LOCK`), and a run whose
model draws from the device's one random generator (dropout), whose step torch.compile compiles, or a pack
whose steps are CUDA graphs trains with no other run beside it.
On the CPU the same code runs (tests use it); there the runs share the process's torch threads.

How many at once: `size` at most, and on CUDA a new run starts only while the device has `HEADROOM_BYTES`
free (the number at once follows free memory). A run's failure (out of memory included) is its row, as in
any executor. On a stop (Ctrl-C, SIGTERM, a full disk) the driver sets the stop event, every run ends at its
next epoch (`training.train.Stopped`: nothing of it recorded, its last checkpoint kept) and every thread is
joined before `run` returns; only the driver writes results.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import queue
import threading
from collections.abc import Iterator

import torch
from tqdm import tqdm

from ablations.running.executors.base import Loader, RunFn
from ablations.running.tasks import RunResult, Task, lost_outcome
from ablations.training.packed import pack_graphed
from ablations.training.train import Occupancy, Stopped, beside_others

HEADROOM_BYTES = 2 * 2**30   # free device memory below which no further run starts beside those in flight
POLL_S = 0.25                # how often the driver looks up from waiting (so a signal is handled promptly)
STREAMS_IN_POOL = 32         # torch's pool of streams per priority and device (more runs than this share streams)


def dropout_of(task: Task) -> float:
    cfg = task.point.model
    return max(float(getattr(cfg, "dropout", 0.0) or 0.0), float(getattr(cfg, "attn_dropout", 0.0) or 0.0))


def needs_the_process(task: Task, device: torch.device, graphed_packs_alone: bool = True) -> bool:
    """A run that must train with no other run beside it in the process on `device`: its model draws from the
    device's one random generator (dropout), torch.compile compiles its step (not safe in several threads at
    once), or it is a pack whose steps are CUDA graphs (side by side, such packs can give members non-finite
    losses; docs/gpu.md, Packed runs), unless `graphed_packs_alone` is off."""
    return (dropout_of(task) > 0 or bool(task.point.train.compile)
            or graphed_packs_alone and bool(task.members) and pack_graphed(device, task.options.graphs))


@dataclasses.dataclass
class _Slot:
    """One worker thread of the pool, its inbox and, on CUDA, its stream: every run it trains queues its work on
    that stream."""
    inbox: queue.Queue
    stream: object | None
    thread: threading.Thread | None = None


class ThreadPool:
    """Runs `fn(task, data)` for tasks on up to `size` threads of this process (see the module docstring). The
    threads are started as runs need them and each trains run after run, so what torch keeps per thread (cuDNN's
    plans for attention and convolutions, one per shape) is built once per thread, not once per run. They end when a
    `run` ends, or with `keep` only at `close` (an executor's pool, kept from one `run` to the next); a stop ends
    them at once."""

    # False: a new thread for every run (its slot's stream kept), the other arm of benchmarks/concurrent_runs.py's
    # --thread-reuse; read as each run starts
    KEEP_THREADS = True
    # False: CUDA-graphed packs side by side like other runs, the other arm of concurrent_runs.py's --graphed-packs
    GRAPHED_PACKS_ALONE = True

    def __init__(self, size: int, device: torch.device, fn: RunFn, load: Loader, threads: int = 1,
                 keep: bool = False) -> None:
        if size < 1:
            raise ValueError(f"size must be ≥ 1, got {size!r}")
        self.size, self.device, self.fn, self.load, self.threads, self.keep = size, device, fn, load, threads, keep
        self._load_lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._streams: list | None = None
        self.busy = False   # a `run` is under way (its stream of outcomes not yet read to the end or closed)
        self._said_packs = False   # the note that packs train one at a time here is said once per pool

    def _capacity(self, running: int) -> int:
        """Runs allowed in flight now: at least one, more while the device keeps HEADROOM_BYTES free."""
        if running == 0:
            return 1
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            if free < HEADROOM_BYTES:
                return running
        return self.size

    def _alone(self, live: dict[str, _Slot]) -> bool:
        """Whether a run in flight must have the process to itself (`needs_the_process`)."""
        return any(self._needs_the_process(self._tasks[rid]) for rid in live)

    def _needs_the_process(self, task: Task) -> bool:
        return needs_the_process(task, self.device, self.GRAPHED_PACKS_ALONE)

    def _data(self, task: Task):
        with self._load_lock:  # one load of a dataset, however many runs start at once
            return self.load(task.options)

    def _serve(self, slot: _Slot) -> None:
        """A worker thread: the runs its inbox hands it, one after another, until it hands it None."""
        while (job := slot.inbox.get()) is not None:
            self._one(job[0], slot, *job[1:])

    def _one(self, task: Task, slot: _Slot, stop: threading.Event, occupancy: Occupancy, done: queue.Queue) -> None:
        quiet = dataclasses.replace(task, options=dataclasses.replace(task.options, progress=False))
        stream = slot.stream
        try:
            # autograd on, as in a thread of its own, whatever a run before it on this thread left
            with torch.enable_grad(), beside_others(stop, occupancy), \
                    (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()):
                outcome = self.fn(quiet, self._data(task))
                if stream is not None:
                    stream.synchronize()
            done.put((task, outcome, None))
        except Stopped:
            done.put((task, None, None))
        except BaseException as err:  # noqa: BLE001 - handed to the driver, which decides
            done.put((task, None, err))

    def _idle_slot(self, busy: list[_Slot]) -> _Slot | None:
        """A worker thread with no run in hand: one kept from an earlier run, else a new one while fewer than
        `size` (on CUDA, than the streams drawn) are there; None when every one is busy."""
        idle = [slot for slot in self._slots if all(slot is not b for b in busy)]
        if idle and not self.KEEP_THREADS:
            self._renew(idle[0])
        if idle:
            return idle[0]
        if self.device.type == "cuda" and self._streams is None:
            # one stream per thread, drawn together: `torch.cuda.Stream()` hands out a pool of STREAMS_IN_POOL in
            # turn, so streams drawn one by one as threads start could repeat one still in use
            self._streams = [torch.cuda.Stream(self.device) for _ in range(min(self.size, STREAMS_IN_POOL))]
        limit = len(self._streams) if self._streams is not None else self.size
        if len(self._slots) >= limit:
            return None
        slot = _Slot(queue.Queue(), self._streams[len(self._slots)] if self._streams is not None else None)
        self._slots.append(slot)
        self._start(slot)
        return slot

    def _start(self, slot: _Slot) -> None:
        slot.thread = threading.Thread(target=self._serve, args=(slot,), daemon=True,
                                       name=f"vitbench-run-{self._slots.index(slot)}")
        slot.thread.start()

    def _renew(self, slot: _Slot) -> None:
        """End an idle slot's thread and start a new one in its place (the same stream)."""
        slot.inbox.put(None)
        if slot.thread is not None:
            slot.thread.join()
        self._start(slot)

    def close(self) -> None:
        """End every worker thread (each finishes the run in its hands first) and wait for it."""
        for slot in self._slots:
            slot.inbox.put(None)
        for slot in self._slots:
            if slot.thread is not None:
                slot.thread.join()
        self._slots = []

    def run(self, tasks: list[Task]) -> Iterator[tuple[Task, RunResult]]:
        """Each task's outcome as it finishes. Ended early (the caller closes the stream of outcomes: a signal, a
        full disk), it stops the runs in flight at their next epoch and ends every thread before it returns."""
        self._tasks = {t.run_id: t for t in tasks}
        if self.size > 1 and not self._said_packs and any(t.members and self._needs_the_process(t) for t in tasks):
            self._said_packs = True
            tqdm.write("note: packs train one at a time here (CUDA-graphed packs side by side gave some of their "
                       "members non-finite losses); PACK=0 trains JOBS runs at once")
        waiting = collections.deque(tasks)
        stop, occupancy, done = threading.Event(), Occupancy(), queue.Queue()
        live: dict[str, _Slot] = {}
        before = torch.get_num_threads()
        if self.device.type == "cpu":
            torch.set_num_threads(self.threads)
        finished, self.busy = False, True
        try:
            while waiting or live:
                while waiting and len(live) < self._capacity(len(live)) and not self._alone(live):
                    if live and self._needs_the_process(waiting[0]):
                        break
                    slot = self._idle_slot(list(live.values()))
                    if slot is None:
                        break
                    task = waiting.popleft()
                    live[task.run_id] = slot
                    slot.inbox.put((task, stop, occupancy, done))
                try:
                    task, outcome, err = done.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                live.pop(task.run_id)
                if err is not None:
                    if isinstance(err, OSError):  # a full results disk: the command stops
                        raise err
                    outcome = lost_outcome(task, f"the run failed: {type(err).__name__}: {err}")
                if outcome is not None:
                    yield task, outcome
            finished = True
        finally:
            self.busy = False
            if not finished:
                stop.set()
            if not finished or not self.keep:
                self.close()
            if self.device.type == "cpu":
                torch.set_num_threads(before)
