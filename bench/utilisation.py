"""Device utilisation over a timed region.

A reader returns figures since its last read; `UtilSampler` polls it every `interval_s` in a background
thread and averages.
- `NvmlReader`: GPU utilisation %, memory used (MiB) and power (W) from NVML (`nvidia-ml-py`).
- `CpuReader`: this process's CPU time over wall time since the last read, as % of the usable cores.
  Its samples carry the interval they cover and the figure is exact from the region's two ends, so it
  is read at the start and the end only: no thread competes with the work for the cores.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

import torch


class Reader(Protocol):
    source: str

    def read(self) -> dict[str, float]: ...


def thread_cores() -> int:
    """The cores this process's torch threads can keep busy: its torch thread count, at most the cores it
    may run on."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(allowed, torch.get_num_threads()))


class CpuReader:
    """The process's CPU time over wall time, as a share of the cores its torch threads can use (the
    cores it may run on, or fewer threads: a run given one thread of two cores is fully busy at 100 %).
    The figure over an interval is exact from its two ends, so a sampler reads it at the start and end
    only (no thread)."""
    source = "cpu"
    cumulative = True

    def __init__(self) -> None:
        self.cores = thread_cores()
        self._last = (time.perf_counter(), time.process_time())

    def read(self) -> dict[str, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        (wall0, cpu0), self._last = self._last, (wall, cpu)
        interval = max(wall - wall0, 1e-9)
        return {"util_pct": min(100.0, 100.0 * (cpu - cpu0) / interval / self.cores), "interval_s": interval}


class NvmlReader:
    source = "nvml"
    cumulative = False  # NVML reports recent activity: sample through the interval

    def __init__(self, device: torch.device) -> None:
        """The CUDA device's NVML handle, found by its UUID (`nvml_handle`). NVML numbers every GPU of the
        machine in PCI order, whatever CUDA_VISIBLE_DEVICES hides or reorders, so an index would read
        another GPU in a worker pinned to GPU 2 (whose cuda:0 is NVML's 2)."""
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = nvml_handle(pynvml, device)

    def read(self) -> dict[str, float]:
        nvml, h = self._nvml, self._handle
        return {"util_pct": float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                "gpu_mem_used_mb": nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20,
                "power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1e3}


def nvml_uuids(device: torch.device) -> list[str]:
    """The NVML UUIDs a CUDA device may go by: torch's device UUID as it is, and with NVML's "GPU-" and
    (a MIG instance) "MIG-" prefixes."""
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}", uuid]


def nvml_handle(pynvml, device: torch.device):
    """NVML's handle of a CUDA device (a whole GPU or a MIG instance), found by UUID; the last error when
    NVML knows none of them."""
    error: Exception | None = None
    for uuid in nvml_uuids(device):
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception as err:  # NVML's "not found" for this spelling: try the next
            error = err
    raise error if error else LookupError(f"no NVML device for {device}")


def reader_for(device: torch.device) -> Reader:
    """NVML on CUDA, process CPU otherwise; if NVML cannot start, say so and fall back to CPU."""
    if device.type == "cuda":
        try:
            return NvmlReader(device)
        except Exception as err:  # driver without NVML, or the package missing
            import warnings

            warnings.warn(f"NVML unavailable ({err}); util_pct falls back to process CPU utilisation",
                          stacklevel=2)
    return CpuReader()


class UtilSampler:
    """`with UtilSampler(reader) as s: ...` then `s.summary()` → mean of every figure, and `util_source`."""

    def __init__(self, reader: Reader, interval_s: float = 0.05) -> None:
        self.reader, self.interval_s = reader, interval_s
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(self.reader.read())

    def __enter__(self) -> UtilSampler:
        self.reader.read()  # start the reader's interval here
        if not getattr(self.reader, "cumulative", False):  # no thread beside the work where two reads are exact
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.samples.append(self.reader.read())  # the tail since the last tick (all of it for a cumulative reader)

    def summary(self) -> dict[str, float | str]:
        """Mean of each figure, weighted by the interval a sample covers where the reader says it."""
        keys = sorted({k for s in self.samples for k in s} - {"interval_s"})
        out: dict[str, float | str] = {}
        for key in keys:
            pairs = [(s[key], s.get("interval_s", 1.0)) for s in self.samples if key in s]
            out[key] = sum(v * w for v, w in pairs) / sum(w for _, w in pairs)
        out["util_source"] = self.reader.source
        out["util_samples"] = len(self.samples)
        return out
