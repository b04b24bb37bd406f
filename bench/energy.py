"""Energy of a timed region, from a cumulative hardware counter where the device has one.

- CUDA: NVML's total energy counter of the GPU (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since
  the driver loaded; Volta and newer). The whole board's energy: other processes on the GPU count too.
- CPU: RAPL package energy (`/sys/class/powercap/intel-rapl:<n>/energy_uj`, every package summed, the
  counter's wrap-around undone) where the kernel exposes it and the file is readable; the whole socket's
  energy, other processes included.
Elsewhere (no counter, no permission) `EnergyMeter.per_unit` stays None and the columns stay blank; so does a
window shorter than `MIN_WINDOW_S` between two ticks of the counter (`EnergyMeter`).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

RAPL = Path("/sys/class/powercap")


class NvmlEnergy:
    source = "nvml"

    def __init__(self, device: torch.device) -> None:
        from bench.nvml import nvml_device

        self._nvml, self._handle = nvml_device(device)
        self.read()  # raises where the GPU has no energy counter

    def read(self) -> float:
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1e3


class RaplEnergy:
    source = "rapl"

    def __init__(self, root: Path = RAPL) -> None:
        self.zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not self.zones:
            raise OSError(f"no RAPL package zones under {root}")
        self.ranges = [int((z / "max_energy_range_uj").read_text()) for z in self.zones]
        self._last = [int((z / "energy_uj").read_text()) for z in self.zones]
        self._total = 0.0

    def read(self) -> float:
        """Joules since this counter was made (wrap-arounds between reads undone)."""
        now = [int((z / "energy_uj").read_text()) for z in self.zones]
        for before, after, span in zip(self._last, now, self.ranges):
            self._total += (after - before if after >= before else after + span - before) / 1e6
        self._last = now
        return self._total


def energy_counter(device: torch.device) -> NvmlEnergy | RaplEnergy | None:
    """The device's energy counter, or None where it has none this process can read."""
    try:
        return NvmlEnergy(device) if device.type == "cuda" else RaplEnergy()
    except Exception:
        return None


MIN_WINDOW_S = 1.0  # the shortest window an energy figure is taken over (NVML's counter moves about every 0.1 s)


class EnergyMeter:
    """Energy per unit of work (a step, an image) over a window bounded by the counter's own ticks.

    `with EnergyMeter(counter) as m:` around the work, `m.poll(done)` after each piece of it with the units
    done so far (outside any timed region); then `m.per_unit` (J per unit) and `m.window_s`. A cumulative
    counter moves in ticks (NVML's GPU energy about every 100 ms): the energy between two reads that straddle
    no tick is 0, and one that straddles one is a whole tick, so a figure from the reads at a short region's
    ends is either 0 or many times too high. Here the window starts at the first poll that sees the counter
    move and ends at the last such poll, and the units are those done between the same two polls (off by at
    most one piece of work at each end). Blank (None) where that window is shorter than `min_window_s` or
    there is no counter; never a 0 from a counter that did not move. `joules`: the energy over the window."""

    def __init__(self, counter: NvmlEnergy | RaplEnergy | None, min_window_s: float = MIN_WINDOW_S) -> None:
        self.counter, self.min_window_s = counter, min_window_s
        self.source = counter.source if counter is not None else ""
        self.joules: float | None = None
        self.per_unit: float | None = None
        self.window_s: float | None = None
        self._ticks: list[tuple[float, float, float]] = []   # (time, counter, units done) at each poll that saw a move

    def __enter__(self) -> EnergyMeter:
        if self.counter is not None:
            self._last = self.counter.read()
        return self

    def poll(self, done: float) -> None:
        if self.counter is None:
            return
        now = self.counter.read()
        if now != self._last:
            self._ticks.append((time.perf_counter(), now, done))
            self._last = now

    def __exit__(self, *exc: object) -> None:
        if len(self._ticks) < 2:
            return
        (t0, e0, d0), (t1, e1, d1) = self._ticks[0], self._ticks[-1]
        if t1 - t0 >= self.min_window_s and d1 > d0:
            self.joules, self.window_s = e1 - e0, t1 - t0
            self.per_unit = self.joules / (d1 - d0)
