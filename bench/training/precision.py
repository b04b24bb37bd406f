"""The dtypes a step may run in, and the autocast context for each."""

from __future__ import annotations

import contextlib

import torch

from bench import choices

DTYPES = {name: getattr(torch, attribute) for name, attribute in choices.DTYPES.items()}


def autocast(device: torch.device, dtype: str, cache_enabled: bool = True):
    """Autocast to `dtype` ("fp32": none). cache_enabled=False for steps captured into a CUDA graph."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[dtype], cache_enabled=cache_enabled)
