"""The Vision Transformer: patchify (or a conv stem) → CLS + positions → blocks → norm → head on the
CLS token (or the mean of the patch tokens)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .blocks import LN_EPS, Block
from .config import ViTConfig
from .pooling import POOLINGS
from .position import POSITION_ENCODINGS
from .stems import STEMS


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
        self.patch_embed = STEMS[cfg.stem].build(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim))
        self.pos_embed = POSITION_ENCODINGS[cfg.pos].build(cfg)
        self.pos_drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        final_norm = self.blocks[0].placement.final_norm
        # timm's layout: the final LN before CLS pooling (`norm`), after average pooling (`fc_norm`)
        after = POOLINGS[cfg.pool].norm_after
        self.norm = nn.LayerNorm(cfg.embed_dim, eps=LN_EPS) if final_norm and not after else nn.Identity()
        self.fc_norm = nn.LayerNorm(cfg.embed_dim, eps=LN_EPS) if final_norm and after else nn.Identity()
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

    def forward(self, images: Tensor, return_attn: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
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
        pooled = POOLINGS[self.cfg.pool].pool(x)                              # (B, D)
        logits = self.head(self.fc_norm(pooled))                              # (B, num_classes)
        return (logits, attns) if return_attn else logits
