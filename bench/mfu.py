"""Model FLOP utilisation against the matmul peak measured on this device and dtype.

The peak is the best FLOP/s of a square matmul (n = 2048 on CPU, 8192 on CUDA) in that dtype, kept per
(device name, dtype, thread count, torch version) in a JSON file (`$VITBENCH_CACHE`, default
`~/.cache/vitbench/matmul_peak.json`) with when it was measured. Other load can only make a measured
peak too low, and so an MFU too high, so each process measures once more on first use, measures
again (up to `PEAK_TRIES` times) while other processes hold the machine (`bench.contention`), and the
file keeps the best ever seen. Every row with an MFU stores the peak it was divided by and when that
peak was measured (`mfu_peak_gflops`, `mfu_peak_at`), so a figure can be checked or corrected later.
A training step is counted as 3 × the forward FLOPs (forward, and a backward of twice its cost).
"""

from __future__ import annotations

import datetime
import fcntl
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.contention import LoadMeter
from bench.env import cache_dir, device_name
from bench.io.atomic import write_atomic
from bench.timing import TimingConfig, time_steps
from bench.training.precision import DTYPES

TRAIN_FLOP_FACTOR = 3


def cache_path() -> Path:
    return cache_dir() / "matmul_peak.json"


def measure_matmul_peak(device: torch.device, dtype: str, n: int | None = None) -> float:
    """Best FLOP/s of an n×n @ n×n product in `dtype` on `device`."""
    n = n or (8192 if device.type == "cuda" else 2048)
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
    """The best matmul FLOP/s seen on this device and dtype (`matmul_peak`)."""
    return matmul_peak(device, dtype).flops


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@functools.cache
def matmul_peak(device: torch.device, dtype: str) -> Peak:
    """The best matmul FLOP/s seen on this device and dtype, and when: measured once per process, then
    the higher of that and the cached value, which is kept."""
    key = f"{device_name(device)}|{dtype}|threads={torch.get_num_threads()}|torch={torch.__version__}"
    path = cache_path()
    measured, at = _measure_idle(device, dtype), _now()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:  # concurrent processes update the file in turn
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                cache = json.loads(path.read_text())
            except (OSError, ValueError):
                cache = {}
            if measured >= cache.get(key, 0.0):
                cache[key], cache[f"{key}|measured_at"] = measured, at
            write_atomic(path, json.dumps(cache, indent=1).encode())
    except OSError as err:  # a read-only or misplaced cache costs only the cached value: use this measurement
        _warn_cache_once(path, err)
        return Peak(measured, at)
    return Peak(cache[key], cache.get(f"{key}|measured_at", "before peaks were dated"))


_warned: list[Path] = []


def _warn_cache_once(path: Path, err: OSError) -> None:
    if not _warned:
        _warned.append(path)
        print(f"note: cannot keep the matmul peak in {path} ({err.strerror or err}); it is measured in each "
              f"process instead (set VITBENCH_CACHE to a writable folder to keep it)", file=sys.stderr)


def mfu(gflops_per_image: float, throughput_img_s: float, mode: str, peak_flops: float) -> float:
    factor = TRAIN_FLOP_FACTOR if mode == "train" else 1
    return gflops_per_image * 1e9 * factor * throughput_img_s / peak_flops
