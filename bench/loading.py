"""Loading heavy modules without Python's cyclic garbage collector running meanwhile.

Importing torch, pandas, scipy, matplotlib or `torch._dynamo` (which torch's optimizers load on first use)
creates hundreds of thousands of objects that all live as long as the process. Their allocations set off
the collector's full collections, each of which walks every object made so far and frees none of these:
on a 2-core machine about a fifth of a command's start (`benchmarks/startup.py` measures it). Within
`without_gc()` the collector is off; it is on again afterwards where it was on before, so a long command
still collects its cycles: the collector simply runs later. At a command's end `end_process` spares the exit
the same walks over everything still alive.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from typing import NoReturn


@contextlib.contextmanager
def without_gc() -> Iterator[None]:
    """The block runs with the cyclic collector off (`gc.collect()` still works); afterwards the collector is
    on again if it was on before, whatever the block raised. Safe across threads: a thread that enters while
    another holds the collector off finds it off and leaves it to that thread to turn back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def end_process(status: int | None = 0) -> NoReturn:
    """Exit with `status`, leaving the process's objects to the operating system: at exit Python's finalisation
    runs full collections that walk every object still alive (a second or so once torch, pandas and scipy are
    loaded) to free memory that is about to go anyway. The objects are frozen first (`gc.freeze`), which those
    collections skip; `atexit` handlers, `weakref.finalize` callbacks and the flushing of the standard streams
    run as ever. Only for a command-line entry point's last step, never in a process that goes on."""
    gc.freeze()
    sys.exit(status)
