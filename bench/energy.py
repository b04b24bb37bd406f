"""Energy of a timed region, from a cumulative hardware counter where the device has one.

- CUDA: NVML's total energy counter of the GPU (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since
  the driver loaded; Volta and newer). The whole board's energy: other processes on the GPU count too.
- CPU: RAPL package energy (`/sys/class/powercap/intel-rapl:<n>/energy_uj`, every package summed, the
  counter's wrap-around undone) where the kernel exposes it and the file is readable; the whole socket's
  energy, other processes included.
Elsewhere (no counter, no permission) `EnergyMeter.joules` stays None and the columns stay blank.
"""

from __future__ import annotations

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


class EnergyMeter:
    """`with EnergyMeter(counter) as m: ...` then `m.joules` (None without a counter) and `m.source`."""

    def __init__(self, counter: NvmlEnergy | RaplEnergy | None) -> None:
        self.counter, self.joules = counter, None
        self.source = counter.source if counter is not None else ""

    def __enter__(self) -> EnergyMeter:
        if self.counter is not None:
            self._start = self.counter.read()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.counter is not None:
            self.joules = self.counter.read() - self._start
