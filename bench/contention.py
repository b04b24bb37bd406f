"""How much of the machine other processes took while something was timed.

On a shared laptop or server a timing taken while other work runs is slower by however much the other
work took, and interleaved rounds only even that out when the load is steady. So every timed region
records the share of the machine that other processes used over it: all CPUs' busy time (user, nice,
system, interrupts and the hypervisor's steal, from `/proc/stat`) less this process's own CPU time,
over wall time × CPUs. `/proc/stat` counts in clock ticks while the process's own time is exact, so each
CPU's count can be a tick off at either end: that much is taken off before the share is computed,
which keeps a short region from showing load that is not there. A region is *contended* when the
share reaches `CONTENDED_PCT` of the machine,
or, on CUDA, when NVML lists a compute process on the GPU that is neither this command's (this process
and its workers) nor an MPS server (`gpu_procs_seen` says what it listed). Readers leave contended
regions out of medians and ratios (`ablations.analysis.findings`), and the MFU's matmul peak is not kept from
one (`bench.mfu`). Where `/proc/stat` cannot be read (not Linux) the share is unknown and nothing is
flagged.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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


def _other_cpu_s(busy: float, own: float, cpus: int) -> float:
    """CPU seconds other processes took over an interval: all CPUs' busy time less this command's own, less
    the tick each CPU's count can be off at either end (so a short interval shows no load that is not there)."""
    return max(0.0, busy - own - 2 * cpus * _tick_s())


@dataclass
class Load:
    other_cpu_pct: float | None  # other processes' share of all CPUs over the region, %
    other_gpu_procs: int | None  # other compute processes on the GPU (CUDA with NVML), else None
    load_avg_1m: float | None
    gpu_procs_seen: str = ""     # what NVML listed on the GPU, by kind (CUDA only)

    @property
    def contended(self) -> bool:
        return bool((self.other_cpu_pct or 0.0) >= CONTENDED_PCT or (self.other_gpu_procs or 0) > 0)

    def columns(self) -> dict[str, object]:
        return {"other_cpu_pct": self.other_cpu_pct, "contended": int(self.contended),
                "gpu_procs_seen": self.gpu_procs_seen or None}


class LoadMeter:
    """`with LoadMeter(device) as meter: ...` then `meter.load`: what other processes took meanwhile."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        import torch

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
            share = min(100.0, 100.0 * _other_cpu_s(busy - busy0, own - own0, cpus) / max(wall - wall0, 1e-9) / cpus)
        try:
            load_avg = os.getloadavg()[0]
        except OSError:
            load_avg = None
        others, seen = gpu_processes(self.device)
        self.load = Load(share, others, load_avg, seen)


def _family_cpu_s(family: set[int]) -> float:
    """User and system CPU time of these processes (this command's own), from /proc/<pid>/stat, in seconds."""
    total = 0
    for pid in family:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])     # utime, stime (the 14th and 15th fields)
        except (OSError, IndexError, ValueError):
            continue
    return total * _tick_s()


class FreeCores:
    """How many of the machine's cores other processes leave free, measured between calls: all CPUs' busy
    time over the interval less this command's own (this process and its workers), as whole cores. The
    first call measures over `first_window_s`. None where /proc/stat cannot be read."""

    def __init__(self, cores: int | None = None, first_window_s: float = 0.5) -> None:
        self.cores = cores or os.cpu_count() or 1
        self.first_window_s = first_window_s
        self._last: tuple[float, float, float] | None = None
        self.other_cores: float | None = None

    def _sample(self) -> tuple[float, float, float] | None:
        busy = _cpu_busy_s()
        return None if busy is None else (time.perf_counter(), busy, _family_cpu_s(_family()))

    def __call__(self) -> int | None:
        if self._last is None:
            self._last = self._sample()
            time.sleep(self.first_window_s)
        now = self._sample()
        if now is None or self._last is None:
            return None
        (t0, busy0, own0), (t1, busy1, own1) = self._last, now
        self._last = now
        wall = max(t1 - t0, 1e-6)
        other = _other_cpu_s(busy1 - busy0, own1 - own0, self.cores) / wall
        self.other_cores = min(float(self.cores), other)
        return max(0, min(self.cores, round(self.cores - self.other_cores)))


MPS_SERVER = "nvidia-cuda-mps-server"


def _family() -> set[int]:
    """This process and its descendants (a command's workers), from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    family, grew = {os.getpid()}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in family} - family
        family |= more
        grew = bool(more)
    return family


def _name(pynvml, pid: int) -> str:
    try:
        name = pynvml.nvmlSystemGetProcessName(pid)
        return (name.decode() if isinstance(name, bytes) else str(name)).rsplit("/", 1)[-1]
    except Exception:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""


def attribute(pids: list[int], names: dict[int, str], family: set[int]) -> tuple[int | None, str]:
    """(other compute processes, what was seen) of the PIDs NVML lists on a GPU: this command's own
    processes (this one and its workers) and an MPS server (which serves them, and which NVML lists as
    a compute process) are not other work. Where none of the PIDs is one this namespace knows, including
    this process's own, the driver reports host PIDs (a container): they cannot be told apart, so the
    count is unknown (None), not contended."""
    ours = [p for p in pids if p in family]
    mps = [p for p in pids if p not in family and names.get(p) == MPS_SERVER]
    others = [p for p in pids if p not in family and p not in mps]
    if pids and not ours and not all(Path(f"/proc/{p}").exists() for p in pids):
        return None, f"{len(pids)} process(es) with host PIDs: not attributable"
    seen = ", ".join(f"{label} {len(group)}" for label, group in (("ours", ours), ("mps-server", mps),
                                                                    ("other", others)) if group)
    return len(others), seen


def gpu_processes(device: torch.device) -> tuple[int | None, str]:
    """(other compute processes on the CUDA device, what NVML listed); (None, "") off CUDA or without NVML."""
    if device.type != "cuda":
        return None, ""
    try:
        from bench.nvml import nvml_device

        pynvml, handle = nvml_device(device)
        pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    except Exception:  # no NVML, or a driver that does not list processes: unknown, not flagged
        return None, ""
    own = os.getpid()   # only this process listed (runs side by side in it): no /proc scan, no names asked
    family = {own} if all(pid == own for pid in pids) else _family()
    return attribute(pids, {pid: _name(pynvml, pid) for pid in pids if pid not in family}, family)
