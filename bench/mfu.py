"""Model FLOP utilisation against the matmul peak measured on this device and dtype.

The peak is the best FLOP/s of a square matmul (n = 8192 on CUDA; on a CPU 1024 for up to 4 threads, which
reach the same FLOP/s as 2048 there in under half the time, else 2048) in that dtype, measured
once per process and dtype on first use (a sweep's driver measures it before any run trains and gives
it to every run), so a row's MFU depends on this sitting alone, not on what the machine did before.
Other load can only make a measured peak too low, and so an MFU too high, so it is measured again (up
to `PEAK_TRIES` times) while other processes hold the machine (`bench.contention`), and the best of
those is taken. Every row with an MFU stores the peak it was divided by and when that peak was measured
(`mfu_peak_gflops`, `mfu_peak_at`), so a figure can be checked or corrected later.
A training step is counted as 3 × the forward FLOPs (forward, and a backward of twice its cost).
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass

import torch

from bench.contention import LoadMeter
from bench.timing import TimingConfig, time_steps
from bench.training.precision import DTYPES

TRAIN_FLOP_FACTOR = 3


def peak_size(device: torch.device) -> int:
    """The side n of the square matmul whose FLOP/s is the peak on `device` (the module docstring says why)."""
    return 8192 if device.type == "cuda" else 1024 if torch.get_num_threads() <= 4 else 2048


def measure_matmul_peak(device: torch.device, dtype: str, n: int | None = None) -> float:
    """Best FLOP/s of an n×n @ n×n product in `dtype` on `device`."""
    n = n or peak_size(device)
    a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    timing = time_steps(lambda: a @ b, device, TimingConfig(warmup=2, min_repeats=5, min_time_s=0.5, max_repeats=50))
    return 2 * n**3 / (min(timing.times_ms) / 1e3)


PEAK_TRIES = 3  # measurements of the peak while other processes hold the machine, before taking the best


@dataclass(frozen=True)
class Peak:
    """A device's matmul peak (FLOP/s) and when it was measured (ISO 8601, UTC)."""
    flops: float
    measured_at: str

    def columns(self) -> dict[str, object]:
        return {"mfu_peak_gflops": self.flops / 1e9, "mfu_peak_at": self.measured_at}


def _measure_idle(device: torch.device, dtype: str) -> float:
    """The peak, measured again while other processes take a share of the machine (`bench.contention`)."""
    best = 0.0
    for _ in range(PEAK_TRIES):
        with LoadMeter(device) as meter:
            best = max(best, measure_matmul_peak(device, dtype))
        if meter.load is None or not meter.load.contended:
            break
    return best


def matmul_peak_flops(device: torch.device, dtype: str) -> float:
    """This process's matmul FLOP/s on this device and dtype (`matmul_peak`)."""
    return matmul_peak(device, dtype).flops


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@functools.cache
def matmul_peak(device: torch.device, dtype: str) -> Peak:
    """This process's matmul peak on this device and dtype, and when it was measured: measured on first use
    (again while other processes hold the machine, `_measure_idle`), then the same for the process."""
    return Peak(_measure_idle(device, dtype), _now())


def mfu(gflops_per_image: float, throughput_img_s: float, mode: str, peak_flops: float) -> float:
    factor = TRAIN_FLOP_FACTOR if mode == "train" else 1
    return gflops_per_image * 1e9 * factor * throughput_img_s / peak_flops
