"""Stems, keyed by the name users type for `ViTConfig.stem`: how an image becomes the grid of tokens.

Each builds a module mapping (B, C, H, W) images to (B, N, D) tokens in row-major grid order, and
checks the config it is asked for (the conv stem must land on the patch grid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from .names import STEM_CHECKS


class PatchEmbed(nn.Module):
    """Non-overlapping patches projected to D by a strided convolution (timm's `patch_embed.proj`)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_chans, cfg.embed_dim, cfg.patch_size, stride=cfg.patch_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, C, H, W) -> (B, N, D), row-major patches


class ConvBNReLU(nn.Module):
    """3×3 stride-2 convolution, BatchNorm, ReLU (timm's `ConvNormAct` names: conv, bn)."""

    def __init__(self, in_chans: int, out_chans: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chans, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_chans)
        self.act = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class ConvStem(nn.Module):
    """Xiao et al. 2021's convolutional stem: `cfg.stem_convs` ConvBNReLU layers halving the image each
    time, channels `cfg.stem_channels` (doubling, the last one D), then a 1×1 projection to D. The token
    grid equals the patchify stem's. Names follow timm's `HybridEmbed` (`backbone`, `proj`)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        chans = (cfg.in_chans, *cfg.stem_channels)
        self.backbone = nn.Sequential(*(ConvBNReLU(a, b) for a, b in zip(chans, chans[1:])))
        self.proj = nn.Conv2d(chans[-1], cfg.embed_dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.backbone(x)).flatten(2).transpose(1, 2)  # (B, N, D), row-major grid


@dataclass(frozen=True)
class StemScheme:
    build: Callable[[Any], nn.Module]  # ViTConfig -> module (B, C, H, W) -> (B, N, D)
    check: Callable[[Any], None]       # raises ValueError naming the field for a config it cannot serve


STEMS: dict[str, StemScheme] = {
    "patch": StemScheme(PatchEmbed, STEM_CHECKS["patch"]),
    "conv": StemScheme(ConvStem, STEM_CHECKS["conv"]),
}
