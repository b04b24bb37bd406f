"""Peak tensor memory of one step: the allocator's peak on CUDA, MemTracker's tensor-level peak on CPU.

Process RSS is not used: it counts the interpreter, libraries and allocator caches, not the step.
Both figures include the tensors alive before the step (parameters, optimizer state, inputs).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch


def peak_mem_mb(step: Callable[[], object], device: torch.device, track: Iterable[object] = ()) -> float:
    """Peak MiB of tensor memory while `step()` runs; `track`: modules/optimizers/tensors alive already."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) / 2**20
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracker.track_external(*track)
        with tracker:
            step()
    snapshot = tracker.get_tracker_snapshot("peak")
    return max((per_device.get("Total", 0) for per_device in snapshot.values()), default=0) / 2**20
