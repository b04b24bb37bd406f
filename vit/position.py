"""Position encodings, keyed by the name users type for `ViTConfig.pos`.

Fixed encodings are non-persistent buffers (recomputed from the config, never trained or saved);
`learned` is a parameter named `weight`, timm's `pos_embed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .names import POSITION_DIM_MULTIPLE


def sinusoidal_1d(num_positions: int, dim: int) -> Tensor:
    """Vaswani et al.: PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D)). (P, D)"""
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]            # (P, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (D/2,)
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.float()


def _sincos(coords: Tensor, dim: int) -> Tensor:
    # MAE's get_1d_sincos_pos_embed_from_grid: (N,) -> (N, dim), [sin | cos] halves
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    angles = coords.to(torch.float64)[:, None] * omega[None]                  # (N, dim/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def sincos_2d(grid_size: int, dim: int, cls_token: bool = True) -> Tensor:
    """MAE's fixed 2-D encoding over a grid_size² patch grid, row-major; CLS (first row) is zeros.

    The first D/2 channels encode the column, the last D/2 the row. Returns (T, D).
    """
    rows, cols = torch.meshgrid(torch.arange(grid_size), torch.arange(grid_size), indexing="ij")
    table = torch.cat([_sincos(cols.flatten(), dim // 2), _sincos(rows.flatten(), dim // 2)], dim=1)
    if cls_token:
        table = torch.cat([torch.zeros(1, dim, dtype=table.dtype), table], dim=0)
    return table.float()


class LearnedPosition(nn.Module):
    def __init__(self, tokens: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, tokens, dim))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.weight


class FixedPosition(nn.Module):
    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", table[None], persistent=False)  # (1, T, D)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.weight


class NoPosition(nn.Module):
    weight = None

    def forward(self, x: Tensor) -> Tensor:
        return x


@dataclass(frozen=True)
class PositionScheme:
    build: Callable[[Any], nn.Module]  # ViTConfig -> module mapping (B, T, D) -> (B, T, D)
    dim_multiple: int                  # embed_dim must be a multiple of this


POSITION_ENCODINGS: dict[str, PositionScheme] = {
    "learned": PositionScheme(lambda c: LearnedPosition(c.tokens, c.embed_dim), POSITION_DIM_MULTIPLE["learned"]),
    "sinusoidal": PositionScheme(lambda c: FixedPosition(sinusoidal_1d(c.tokens, c.embed_dim)),
                                 POSITION_DIM_MULTIPLE["sinusoidal"]),
    "sincos2d": PositionScheme(lambda c: FixedPosition(sincos_2d(c.grid_size, c.embed_dim)),
                               POSITION_DIM_MULTIPLE["sincos2d"]),
    "none": PositionScheme(lambda c: NoPosition(), POSITION_DIM_MULTIPLE["none"]),
}
