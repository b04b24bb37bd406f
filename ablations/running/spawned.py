"""The first code a spawned JOBS worker runs (`executors.local.WorkerPool`).

It imports nothing heavy before it has asked the kernel to kill it with its driver (PR_SET_PDEATHSIG
on Linux), and exits at once if the driver is already gone, so a worker still starting when its driver
is killed does not live on and train. Only then does it import torch, pin its GPU and thread count,
and receive the run function from the driver over its pipe; `serve` then runs tasks until the driver
sends None or goes away.
"""

from __future__ import annotations

import os
import signal


def die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_main(conn, parent: int, threads: int, gpu: str | None, env: dict[str, str] | None = None) -> None:
    die_with_parent()
    if os.getppid() != parent:  # the driver died before this worker could ask to die with it
        return
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's Ctrl-C reaches the whole group: the driver decides
        signal.signal(sig, signal.SIG_IGN)
    os.environ.update(env or {})  # before this process initialises CUDA (the MPS daemon's pipe folder)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    import threading

    import torch
    from tqdm import tqdm

    # tqdm's default lock is a multiprocessing semaphore; a worker stopped by a signal never unlinks it,
    # and the resource tracker then warns about leaked semaphores after the driver's last line
    tqdm.set_lock(threading.RLock())
    torch.set_num_threads(threads)
    try:
        fn, load = conn.recv()
    except (EOFError, OSError):
        return
    serve(conn, fn, load)


class Raised:
    """An exception that escaped `fn` in a worker, in a form that always pickles."""

    def __init__(self, err: BaseException) -> None:
        self.error: BaseException = (OSError(err.errno, err.strerror, err.filename) if isinstance(err, OSError)
                                     else RuntimeError(f"{type(err).__name__}: {err}"))


def serve(conn, fn, load) -> None:
    """A worker's loop (after `ablations.running.spawned.worker_main`): receive a task, run it, send its outcome
    back; until the driver sends None or goes away. A run's epochs are sent as they end (`EpochTick`), before its
    outcome, and the driver draws them: bars from several processes would overwrite each other's line."""
    from ablations.training.train import CONTEXT

    def relay(tick) -> None:
        try:
            conn.send(tick)
        except OSError:   # the driver is gone, and this worker with it
            pass
    CONTEXT.relay = relay
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            result = fn(task, load(task.options))
        except BaseException as err:  # noqa: BLE001 - sent to the driver, which decides
            result = Raised(err)
        try:
            conn.send(result)
        except OSError:  # the driver is gone: nobody to report to
            return
