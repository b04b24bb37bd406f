"""Peak tensor memory of one step: the allocator's peak on CUDA, MemTracker's tensor-level peak on CPU.

Process RSS is not used: it counts the interpreter, libraries and allocator caches, not the step.
Both figures include the tensors alive before the step that it is given to track (parameters, optimizer
state, inputs) and nothing else that happens to be alive: on CUDA the allocator's figures cover the whole
device, so what was allocated before the step and is not tracked (other models, other steps kept by the
caller) is taken off.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch

from bench.training.step import resident_bytes


def peak_mem_mb(step: Callable[[], object], device: torch.device, track: Iterable[object] = (),
                grads: bool = True) -> float:
    """Peak MiB of tensor memory while `step()` runs; `track`: modules/optimizers/tensors alive already.
    `grads=False` (an inference step): gradients that an earlier training step left on the tracked modules'
    parameters are not counted, as the step neither needs nor touches them.
    A step that captures a CUDA graph measures its own first call (`own_peak_bytes`, what it added to what
    was alive; see `bench.training.step.StaticStep`): that is taken over the allocator's peak, which would count
    the capture's scaffolding too."""
    if device.type == "cuda":
        track = list(track)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        resident = resident_bytes(track, device, grads=grads)
        untracked = torch.cuda.memory_allocated(device) - resident
        step()
        torch.cuda.synchronize(device)
        own = getattr(step, "own_peak_bytes", None)
        if own is not None:
            return (resident + own) / 2**20
        return (torch.cuda.max_memory_allocated(device) - max(0, untracked)) / 2**20
    from torch.distributed._tools import mem_tracker
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    _no_hooks_on_frozen(tracker, track)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracker.track_external(*track)
        with tracker:
            step()
    snapshot = tracker.get_tracker_snapshot("peak")   # per device: bytes by kind at the peak, and their "Total"
    grad = getattr(getattr(mem_tracker, "_MemRefType", None), "GRAD", None)
    return max((per_device.get("Total", 0) - (0 if grads else per_device.get(grad, 0))
                for per_device in snapshot.values()), default=0) / 2**20


class _NoHook:
    def remove(self) -> None:
        pass


def _no_hooks_on_frozen(tracker: object, track: Iterable[object]) -> None:
    """MemTracker puts a gradient hook on every parameter of each module the step calls, and a parameter that
    takes no gradient (a frozen backbone, `freeze=all_but_head`) refuses one: such parameters are entered in
    its table of hooked parameters beforehand, with hooks that do nothing (they would never fire)."""
    handles = getattr(tracker, "_param_to_grad_hook_handles", None)
    if handles is None:  # another torch: its tracker keeps no such table
        return
    for obj in track:
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                if not p.requires_grad:
                    handles[p] = (_NoHook(), _NoHook())
