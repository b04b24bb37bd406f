"""What a failed measurement or run is recorded as."""

from __future__ import annotations

import torch


def classify_failure(err: BaseException) -> str:
    """`oom` for allocator failures on any device, `error` otherwise."""
    text = str(err).lower()
    if isinstance(err, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text:
        return "oom"
    return "error"
