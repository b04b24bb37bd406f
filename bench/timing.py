"""Wall-clock timing of a step, honest on CPU and CUDA: its throughput and, apart, its latency.

On the CPU a step is synchronous: each is timed alone with the host clock, and those times are both.
On CUDA a step only launches work, and training launches the next step while the device still runs
this one. Throughput is therefore timed as training runs: CUDA events around a block of `block` steps
launched back to back with no synchronisation inside, the block's time over its steps being one
figure. Latency is timed apart afterwards: `latency_steps` steps, each bracketed by events and
synchronised, so it includes the host's launch time. Warm-up steps (which include any torch.compile
compilation, cuDNN autotuning, CUDA graph capture and allocator growth) are run and discarded first.
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
    block: int = 8             # CUDA: steps launched back to back between two events (one throughput figure)
    latency_steps: int = 10    # CUDA: steps timed alone, synchronised, after the throughput blocks

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup must be ≥ 0 steps, got {self.warmup}")
        if self.min_repeats < 1:
            raise ValueError(f"repeats must be ≥ 1 timed step, got {self.min_repeats}")
        if not self.min_time_s >= 0:
            raise ValueError(f"min_time_s must be ≥ 0 seconds, got {self.min_time_s}")
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max_repeats ({self.max_repeats}) must be ≥ repeats ({self.min_repeats})")
        if self.block < 1 or self.latency_steps < 0:
            raise ValueError(f"block must be ≥ 1 step and latency_steps ≥ 0, got {self.block} and {self.latency_steps}")


@dataclass(frozen=True)
class Timing:
    """times_ms: milliseconds per step, one figure per step timed alone (CPU) or per block of steps
    launched back to back (CUDA); steps: the steps they cover. latency_ms: steps timed alone and
    synchronised, where that differs from times_ms (CUDA); empty elsewhere, where times_ms are latencies."""
    times_ms: tuple[float, ...]
    steps: int
    latency_ms: tuple[float, ...] = ()
    cpu_ms: tuple[float, ...] = ()   # CPU only: this process's CPU time per step, alongside times_ms

    @property
    def cpu_median_ms(self) -> float | None:
        """The median CPU time per step (None on CUDA, where the host's CPU time says nothing of the device)."""
        return statistics.median(self.cpu_ms) if self.cpu_ms else None

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def iqr_ms(self) -> float:
        q1, q3 = np.percentile(self.times_ms, [25, 75])
        return float(q3 - q1)

    def latency_percentile_ms(self, q: float) -> float:
        """The q-th percentile of one step's latency (timed alone and synchronised)."""
        return float(np.percentile(self.latency_ms or self.times_ms, q))

    def throughput(self, items_per_step: int) -> float:
        return items_per_step / (self.median_ms / 1e3)


def _time_block(step: Callable[[], object], device: torch.device, steps: int) -> float:
    """Milliseconds per step over `steps` CUDA steps run back to back, between two events, with one
    synchronisation after the last."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def _time_cpu_step(step: Callable[[], object]) -> tuple[float, float]:
    """One CPU step's (wall, CPU) milliseconds: the CPU time is this process's, all its threads, which other
    processes holding the machine do not lengthen (beyond what they do to its caches)."""
    t0, c0 = time.perf_counter(), time.process_time()
    step()
    return (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3


def time_steps(step: Callable[[], object], device: torch.device | str = "cpu",
               cfg: TimingConfig = TimingConfig(), around: AbstractContextManager | None = None) -> Timing:
    """Run `step` cfg.warmup times untimed, then time it until both the step and time floors are met (at
    most cfg.max_repeats steps); on CUDA in blocks of cfg.block steps, then cfg.latency_steps steps alone.
    `around`: a context entered for the throughput steps alone (after the warm-up; left with the device idle);
    where it has `poll(steps)`, that is called after each block with the steps timed so far, outside the block's
    timing (an energy counter read between the blocks: `bench.energy.EnergyMeter`)."""
    device = torch.device(device)
    for _ in range(cfg.warmup):
        step()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    block = cfg.block if cuda else 1
    poll = getattr(around, "poll", None)
    times: list[float] = []
    cpu: list[float] = []
    steps, timed_ms = 0, 0.0
    with around or contextlib.nullcontext():
        while steps < cfg.max_repeats and (steps < cfg.min_repeats or timed_ms < cfg.min_time_s * 1e3):
            n = min(block, cfg.max_repeats - steps)
            if cuda:
                times.append(_time_block(step, device, n))
            else:
                wall, used = _time_cpu_step(step)
                times.append(wall)
                cpu.append(used)
            steps, timed_ms = steps + n, timed_ms + times[-1] * n
            if poll is not None:
                poll(steps)
    latency = tuple(_time_block(step, device, 1) for _ in range(cfg.latency_steps)) if cuda else ()
    return Timing(tuple(times), steps, latency, tuple(cpu))
