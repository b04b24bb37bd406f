"""Transformer block and the two LayerNorm placements, keyed by the name users type for `norm`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from .attention import Attention

LN_EPS = 1e-6  # as in ViT and timm

Sublayer = Callable[[Tensor], tuple[Tensor, Tensor | None]]


def _pre_norm(x: Tensor, norm: nn.Module, sublayer: Sublayer) -> tuple[Tensor, Tensor | None]:
    y, aux = sublayer(norm(x))  # x + F(LN(x)): ViT, timm
    return x + y, aux


def _post_norm(x: Tensor, norm: nn.Module, sublayer: Sublayer) -> tuple[Tensor, Tensor | None]:
    y, aux = sublayer(x)        # LN(x + F(x)): the original Transformer
    return norm(x + y), aux


@dataclass(frozen=True)
class NormPlacement:
    residual: Callable[[Tensor, nn.Module, Sublayer], tuple[Tensor, Tensor | None]]
    final_norm: bool  # post-norm output is already normalised by each block's last LN


NORM_PLACEMENTS: dict[str, NormPlacement] = {
    "pre": NormPlacement(_pre_norm, final_norm=True),
    "post": NormPlacement(_post_norm, final_norm=False),
}


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Module):
    """norm1 → attention and norm2 → MLP, each wrapped in a residual by the config's `norm` placement."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.placement = NORM_PLACEMENTS[cfg.norm]
        self.norm1 = nn.LayerNorm(cfg.embed_dim, eps=LN_EPS)
        self.attn = Attention(cfg.embed_dim, cfg.num_heads, cfg.attn, cfg.qkv_bias,
                              cfg.attn_dropout, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.embed_dim, eps=LN_EPS)
        self.mlp = Mlp(cfg.embed_dim, cfg.mlp_dim, cfg.dropout)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        residual = self.placement.residual
        x, probs = residual(x, self.norm1, lambda h: self.attn(h, need_weights))
        x, _ = residual(x, self.norm2, lambda h: (self.mlp(h), None))
        return x, probs
