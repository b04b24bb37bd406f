"""The Vision Transformer: patchify (or a conv stem) → CLS + positions → blocks → norm → head on the
CLS token (or the mean of the patch tokens)."""

from __future__ import annotations

from typing import Union

import torch
from torch import Tensor, nn

from .blocks import LN_EPS, Block
from .config import ViTConfig
from .position import POSITION_ENCODINGS


class PatchEmbed(nn.Module):
    """Non-overlapping patches projected to D by a strided convolution (timm's `patch_embed.proj`)."""

    def __init__(self, cfg: ViTConfig) -> None:
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

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        chans = (cfg.in_chans, *cfg.stem_channels)
        self.backbone = nn.Sequential(*(ConvBNReLU(a, b) for a, b in zip(chans, chans[1:])))
        self.proj = nn.Conv2d(chans[-1], cfg.embed_dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.backbone(x)).flatten(2).transpose(1, 2)  # (B, N, D), row-major grid


STEMS = {"patch": PatchEmbed, "conv": ConvStem}


class VisionTransformer(nn.Module):
    """ViT (Dosovitskiy et al.) built from one `ViTConfig`; parameter names follow timm's.

    forward(images) -> logits (B, num_classes);
    forward(images, return_attn=True) -> (logits, [probs (B, H, T, T) for each block]).
    """

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        if not isinstance(cfg, ViTConfig):
            raise ValueError(f"VisionTransformer needs a ViTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.patch_embed = STEMS[cfg.stem](cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim))
        self.pos_embed = POSITION_ENCODINGS[cfg.pos].build(cfg)
        self.pos_drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        final_norm = self.blocks[0].placement.final_norm
        # timm's layout: the final LN before CLS pooling (`norm`), after average pooling (`fc_norm`)
        self.norm = nn.LayerNorm(cfg.embed_dim, eps=LN_EPS) if final_norm and cfg.pool == "cls" else nn.Identity()
        self.fc_norm = nn.LayerNorm(cfg.embed_dim, eps=LN_EPS) if final_norm and cfg.pool == "avg" else nn.Identity()
        self.head = nn.Linear(cfg.embed_dim, cfg.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """timm's ViT init: trunc-normal(0.02) linears with zero bias, CLS ~ N(0, 1e-6), LN ones/zeros."""
        nn.init.normal_(self.cls_token, std=1e-6)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @property
    def expected_input_shape(self) -> tuple[int, int, int]:
        return (self.cfg.in_chans, self.cfg.img_size, self.cfg.img_size)

    def forward(self, images: Tensor, return_attn: bool = False) -> Union[Tensor, tuple[Tensor, list[Tensor]]]:
        if images.dim() != 4 or tuple(images.shape[1:]) != self.expected_input_shape:
            raise ValueError(f"VisionTransformer expected input of shape (B, "
                             f"{', '.join(map(str, self.expected_input_shape))}), got {tuple(images.shape)}")
        x = self.patch_embed(images)                                          # (B, N, D)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, T, D)
        x = self.pos_drop(self.pos_embed(x))
        attns = []
        for block in self.blocks:
            x, probs = block(x, return_attn)
            attns.append(probs)
        x = self.norm(x)
        pooled = x[:, 0] if self.cfg.pool == "cls" else x[:, 1:].mean(dim=1)    # (B, D)
        logits = self.head(self.fc_norm(pooled))                              # (B, num_classes)
        return (logits, attns) if return_attn else logits
