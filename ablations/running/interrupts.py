"""SIGINT, SIGTERM and SIGHUP end a command the same orderly way: an `Interrupted` exception in the main
thread, so no new run starts, the executor stops its workers, the sweep locks are released last, and
the command exits 128 + the signal's number (130, 143, 129) saying what was kept. Slurm, systemd and
docker send SIGTERM before SIGKILL; a closed terminal sends SIGHUP.

Only the first signal raises: a second one while the command stops is ignored with a line (it must not
cut the stop short), a third quits at once (the workers die with the driver; the kernel releases the
locks).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal to the driver."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def signals_raise():
    """Within the block, the stop signals raise `Interrupted` once (see the module docstring)."""
    seen: list[int] = []

    def handler(signum, frame):
        seen.append(signum)
        if len(seen) == 1:
            raise Interrupted(signum)
        if len(seen) == 2:
            print(f"\n{signal.Signals(signum).name}: already stopping (workers are being stopped); send it once more "
                  f"to quit at once", file=sys.stderr, flush=True)
            return
        os._exit(128 + signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
