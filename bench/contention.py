"""How much of the machine other processes took while something was timed.

On a shared laptop or server a timing taken while other work runs is slower by however much the other
work took, and interleaved rounds only even that out when the load is steady. So every timed region
records the share of the machine that other processes used over it: all CPUs' busy time (user, nice,
system, interrupts and the hypervisor's steal, from `/proc/stat`) less this process's own CPU time,
over wall time × CPUs. `/proc/stat` counts in clock ticks while the process's own time is exact, so each
CPU's count can be a tick off at either end: that much is taken off before the share is computed,
which keeps a short region from showing load that is not there. A region is *contended* when the
share reaches `CONTENDED_PCT` of the machine,
or, on CUDA, when NVML lists a compute process of another PID on the GPU. Readers leave contended
regions out of medians and ratios (`ablations.findings`), and the MFU's matmul peak is not kept from
one (`bench.mfu`). Where `/proc/stat` cannot be read (not Linux) the share is unknown and nothing is
flagged.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

CONTENDED_PCT = 10.0  # other processes' share of all CPUs that marks a region as taken under load
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait, guest: in user)


def _tick_s() -> float:
    try:
        return 1.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return 0.01


def _cpu_busy_s() -> float | None:
    """All CPUs' busy time since boot, in seconds, or None where /proc/stat is unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        return sum(int(fields[i]) for i in _BUSY_FIELDS) * _tick_s()
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Load:
    other_cpu_pct: float | None  # other processes' share of all CPUs over the region, %
    other_gpu_procs: int | None  # other compute processes on the GPU (CUDA with NVML), else None
    load_avg_1m: float | None

    @property
    def contended(self) -> bool:
        return bool((self.other_cpu_pct or 0.0) >= CONTENDED_PCT or (self.other_gpu_procs or 0) > 0)

    def columns(self) -> dict[str, object]:
        return {"other_cpu_pct": self.other_cpu_pct, "contended": int(self.contended)}


class LoadMeter:
    """`with LoadMeter(device) as meter: ...` then `meter.load`: what other processes took meanwhile."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.load: Load | None = None

    def __enter__(self) -> LoadMeter:
        self._start = (time.perf_counter(), time.process_time(), _cpu_busy_s())
        return self

    def __exit__(self, *exc: object) -> None:
        wall0, own0, busy0 = self._start
        wall, own, busy = time.perf_counter(), time.process_time(), _cpu_busy_s()
        share = None
        if busy0 is not None and busy is not None:
            cpus = os.cpu_count() or 1
            other = max(0.0, (busy - busy0) - (own - own0) - 2 * cpus * _tick_s())
            share = min(100.0, 100.0 * other / max(wall - wall0, 1e-9) / cpus)
        try:
            load_avg = os.getloadavg()[0]
        except OSError:
            load_avg = None
        self.load = Load(share, _other_gpu_processes(self.device), load_avg)


def _other_gpu_processes(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    try:
        import pynvml

        from .utilisation import nvml_uuid

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(nvml_uuid(device))
        return sum(p.pid != os.getpid() for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except Exception:  # no NVML, or a driver that does not list processes: unknown, not flagged
        return None
