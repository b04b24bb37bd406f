"""Wall-clock timing of one step, honest on CPU and CUDA.

CUDA steps are bracketed by CUDA events and synchronised, so the time is the device's, never a bare
host clock around an asynchronous launch. Warm-up steps (which include any torch.compile compilation,
cuDNN autotuning and allocator growth) are run and discarded before timing.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 3            # discarded steps (compilation happens here)
    min_repeats: int = 10      # timed steps at least ...
    min_time_s: float = 1.0    # ... and until this much time was timed ...
    max_repeats: int = 500     # ... but never more than this many

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup must be ≥ 0 steps, got {self.warmup}")
        if self.min_repeats < 1:
            raise ValueError(f"repeats must be ≥ 1 timed step, got {self.min_repeats}")
        if not self.min_time_s >= 0:
            raise ValueError(f"min_time_s must be ≥ 0 seconds, got {self.min_time_s}")
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max_repeats ({self.max_repeats}) must be ≥ repeats ({self.min_repeats})")


@dataclass(frozen=True)
class Timing:
    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def iqr_ms(self) -> float:
        q1, q3 = np.percentile(self.times_ms, [25, 75])
        return float(q3 - q1)

    def percentile_ms(self, q: float) -> float:
        """The q-th percentile of the step times (numpy's linear interpolation)."""
        return float(np.percentile(self.times_ms, q))

    def throughput(self, items_per_step: int) -> float:
        return items_per_step / (self.median_ms / 1e3)


def _time_one(step: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    step()
    return (time.perf_counter() - t0) * 1e3


def time_steps(step: Callable[[], object], device: torch.device | str = "cpu",
               cfg: TimingConfig = TimingConfig(), around: AbstractContextManager | None = None) -> Timing:
    """Run `step` cfg.warmup times untimed, then time it until both repeat and time floors are met.
    `around`: a context entered for the timed steps alone (after the warm-up; left with the device idle)."""
    device = torch.device(device)
    for _ in range(cfg.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times: list[float] = []
    with around or contextlib.nullcontext():
        while len(times) < cfg.max_repeats and (len(times) < cfg.min_repeats or sum(times) < cfg.min_time_s * 1e3):
            times.append(_time_one(step, device))
    return Timing(tuple(times))
