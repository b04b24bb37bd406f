"""Device utilisation over a timed region.

A reader measures one region at a time: `start()` at its beginning, `poll()` while it runs (where the
reader says `poll_s`: from a background thread), `finish()` at its end → the region's figures.
- `CpuReader`: this process's CPU time over wall time, as % of the cores its torch threads can use; exact
  from the region's two ends, so nothing polls it and no thread competes with the work for the cores.
- `NvmlReader`: GPU utilisation from the driver's own timestamped samples (`nvmlDeviceGetSamples`), only
  those that lie wholly inside the region, so a short region is not credited with the last second of
  whatever ran before it; power from the GPU's energy counter over the region's wall time (samples where
  it has none); memory in use at the region's ends. Polled every `poll_s` so that the driver's sample
  buffer is read before it wraps.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

import torch

from bench.energy import MIN_WINDOW_S, energy_counter
from bench.env import allowed_cores
from bench.nvml import nvml_device


class Reader(Protocol):
    source: str
    poll_s: float | None

    def start(self) -> None: ...

    def poll(self) -> None: ...

    def finish(self) -> dict[str, float]: ...


def thread_cores() -> int:
    """The cores this process's torch threads can keep busy: its torch thread count, at most the cores it
    may run on."""
    return max(1, min(allowed_cores(), torch.get_num_threads()))


class CpuReader:
    """The process's CPU time over wall time, as a share of the cores its torch threads can use (the
    cores it may run on, or fewer threads: a run given one thread of two cores is fully busy at 100 %).
    Exact from the region's two ends: nothing polls it."""
    source = "cpu"
    poll_s = None

    def __init__(self) -> None:
        self.cores = thread_cores()
        self.start()

    def start(self) -> None:
        self._start = (time.perf_counter(), time.process_time())

    def poll(self) -> None:
        pass

    def finish(self) -> dict[str, float]:
        (wall0, cpu0), wall, cpu = self._start, time.perf_counter(), time.process_time()
        interval = max(wall - wall0, 1e-9)
        return {"util_pct": min(100.0, 100.0 * (cpu - cpu0) / interval / self.cores), "samples": 1}


# nvmlSample_t.sampleValue's field for each nvmlValueType_t NVML says its samples have
SAMPLE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
TOTAL_POWER_SAMPLES, GPU_UTILIZATION_SAMPLES = 0, 1   # nvmlSamplingType_t


class NvmlReader:
    """The region's GPU utilisation, power and memory in use from NVML, for the GPU (or MIG instance) that
    is this CUDA device. NVML's sample timestamps are the host's wall clock in microseconds; a sample
    covers the time since the one before it, and only samples whose whole period lies in the region count."""
    source = "nvml"
    poll_s = 1.0  # the driver keeps a few seconds of samples: read them well before they are overwritten

    def __init__(self, device: torch.device) -> None:
        self._nvml, self._handle = nvml_device(device)
        self._energy = energy_counter(device)  # None where the GPU has no energy counter (before Volta)
        self._seen = {GPU_UTILIZATION_SAMPLES: 0, TOTAL_POWER_SAMPLES: 0}   # newest sample stamp read, µs
        self.start()

    def _memory_mb(self) -> float:
        return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2**20

    def _new_samples(self, kind: int, since_us: int) -> list[tuple[int, float]]:
        """(timestamp µs, value) of the driver's samples of `kind` newer than `since_us`, oldest first."""
        try:
            value_type, samples = self._nvml.nvmlDeviceGetSamples(self._handle, kind, since_us)
        except self._nvml.NVMLError:  # NVML_ERROR_NOT_FOUND: no sample since then (or none of this kind)
            return []
        field = SAMPLE_FIELDS.get(value_type, "uiVal")
        return sorted((int(x.timeStamp), float(getattr(x.sampleValue, field))) for x in samples
                      if int(x.timeStamp) > since_us)

    def start(self) -> None:
        self._t0_us = int(time.time() * 1e6)
        self._wall0, self._mem = time.perf_counter(), [self._memory_mb()]
        self._j0 = self._energy.read() if self._energy is not None else None
        # the newest sample so far (read since the last region's): the one before the region's first, whose
        # period starts inside it
        for kind in self._seen:
            newer = self._new_samples(kind, self._seen[kind])
            if newer:
                self._seen[kind] = newer[-1][0]
        self._periods: dict[int, list[tuple[float, float]]] = {GPU_UTILIZATION_SAMPLES: [], TOTAL_POWER_SAMPLES: []}

    def poll(self) -> None:
        for kind, periods in self._periods.items():
            for stamp, value in self._new_samples(kind, self._seen[kind]):
                if self._seen[kind] >= self._t0_us:   # the period (previous stamp, stamp] lies inside the region
                    periods.append((value, stamp - self._seen[kind]))
                self._seen[kind] = stamp

    def finish(self) -> dict[str, float]:
        self.poll()
        self._mem.append(self._memory_mb())
        wall = max(time.perf_counter() - self._wall0, 1e-9)
        util, power = self._periods[GPU_UTILIZATION_SAMPLES], self._periods[TOTAL_POWER_SAMPLES]
        # power: the energy counter over a region of at least MIN_WINDOW_S, else the power samples wholly inside
        # it, else none (a counter read at a short region's ends gives 0 or a whole tick)
        out: dict[str, float] = {"gpu_mem_used_mb": sum(self._mem) / len(self._mem), "samples": len(util)}
        if util:
            out["util_pct"] = sum(v * w for v, w in util) / sum(w for _, w in util)
        if self._j0 is not None and wall >= MIN_WINDOW_S:   # shorter, the counter's ticks (~0.1 s) decide it
            out["power_w"] = (self._energy.read() - self._j0) / wall
        elif power:
            out["power_w"] = sum(v * w for v, w in power) / sum(w for _, w in power) / 1e3   # samples in mW
        return out


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
    """`with UtilSampler(reader) as s: ...` then `s.summary()` → the reader's figures for the region, with
    `util_source` and `util_samples` (the device samples behind util_pct)."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.figures: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.reader.poll_s):
            self.reader.poll()

    def __enter__(self) -> UtilSampler:
        self.reader.start()
        if self.reader.poll_s:  # no thread beside the work where the region's two ends are exact
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.figures = self.reader.finish()

    def summary(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {k: v for k, v in self.figures.items() if k != "samples"}
        out["util_source"] = self.reader.source
        out["util_samples"] = int(self.figures.get("samples", 0))
        return out


class DeviceRegion:
    """The whole device over a stretch of work that several runs share (a command's training phase on a GPU):
    its busy % from NVML's samples wholly inside the stretch, its SM activity, SM occupancy and tensor-core
    activity where the GPU has GPM (`bench.gpm`), and its power from the energy counter between two
    of its ticks at least `bench.energy.MIN_WINDOW_S` apart (polled in the background every POLL_S). Figures of
    the device, other processes included; blank where NVML or the counter has nothing of that kind."""

    POLL_S = 0.02

    def __init__(self, device: torch.device) -> None:
        from bench.energy import EnergyMeter
        from bench.gpm import GpmWindow

        reader = NvmlReader(device)
        self.sampler = UtilSampler(reader)
        self.gpm = GpmWindow(reader._nvml, reader._handle)
        self.energy = EnergyMeter(energy_counter(device))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="vitbench-energy")

    def _poll(self) -> None:
        while not self._stop.wait(self.POLL_S):
            self.energy.poll(time.perf_counter())   # a unit of work is a second: per_unit is the mean power

    def __enter__(self) -> DeviceRegion:
        self._t0 = time.perf_counter()
        self.sampler.__enter__()
        self.gpm.start()
        self.energy.__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.energy.__exit__(*exc)
        self.gpm_figures = self.gpm.finish()
        self.sampler.__exit__(*exc)
        self.wall_s = time.perf_counter() - self._t0

    def figures(self, images: int) -> dict[str, float | int | str | None]:
        """The stretch's figures, energy per image over `images` trained in it (at the window's mean power)."""
        util = self.sampler.summary()
        power = self.energy.per_unit
        return {"wall_s": self.wall_s, "images": images, "util_pct": util.get("util_pct"),
                "util_samples": util.get("util_samples"), "power_w": power, "energy_window_s": self.energy.window_s,
                "energy_j_per_img": power * self.wall_s / images if power is not None and images else None,
                "energy_source": self.energy.source, **self.gpm_figures}
