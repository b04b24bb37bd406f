"""Pooling, keyed by the name users type for `ViTConfig.pool`: what the classifier head reads.

- `cls`: the CLS token (ViT); the final LayerNorm comes before pooling (timm's `norm`).
- `avg`: the mean of the patch tokens (timm's `global_pool="avg"`); the final LayerNorm comes after
  pooling (timm's `fc_norm`). The CLS token stays in the sequence either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from .names import POOLING_READERS


@dataclass(frozen=True)
class Pooling:
    pool: Callable[[Tensor], Tensor]   # tokens (B, T, D) -> (B, D)
    norm_after: bool                   # the final LayerNorm after pooling (fc_norm) rather than before (norm)
    query: Callable[[Tensor], Tensor]  # attention (..., T, T) -> (..., N): what the pooled vector attends to
    reader: str                        # for figure titles


POOLINGS: dict[str, Pooling] = {
    "cls": Pooling(lambda x: x[:, 0], False, lambda a: a[..., 0, 1:], POOLING_READERS["cls"]),
    "avg": Pooling(lambda x: x[:, 1:].mean(dim=1), True, lambda a: a[..., 1:, 1:].mean(-2), POOLING_READERS["avg"]),
}
