"""Loading timm `VisionTransformer` state dicts into `vit.VisionTransformer`.

Parameter names already follow timm's; the only renaming is timm's `pos_embed` parameter, which here
lives in the position module as `pos_embed.weight`.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor

from .model import VisionTransformer

_RENAME = {"pos_embed": "pos_embed.weight"}


def timm_to_vit_keys(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """timm key names → this package's key names (values untouched)."""
    return {_RENAME.get(k, k): v for k, v in state_dict.items()}


def load_timm_weights(model: VisionTransformer, state_dict: Mapping[str, Tensor]) -> VisionTransformer:
    """Copy a timm ViT state dict (fused `qkv`, CLS token, learned `pos_embed`) into `model`, in place.

    Every key must match a parameter of the same shape: an unexpected or missing key, or a shape that
    differs, raises `ValueError` naming the key and both shapes before anything is copied.
    """
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"load_timm_weights needs a vit.VisionTransformer, got {type(model).__name__}")
    source = timm_to_vit_keys(state_dict)
    target = model.state_dict()
    unexpected = sorted(set(source) - set(target))
    if "pos_embed.weight" in unexpected:
        raise ValueError(f"checkpoint has a learned pos_embed but the model has pos={model.cfg.pos!r}; "
                         f"build it with pos='learned'")
    if unexpected:
        raise ValueError(f"checkpoint key(s) not in the model: {unexpected[:5]} "
                         f"(timm features this model lacks, e.g. layer scale, qk-norm, registers, fc_norm)")
    missing = sorted(set(target) - set(source))
    if missing:
        raise ValueError(f"checkpoint lacks key(s) {missing[:5]}")
    for key, value in source.items():
        if tuple(value.shape) != tuple(target[key].shape):
            raise ValueError(f"shape mismatch at {key!r}: checkpoint {tuple(value.shape)}, "
                             f"model {tuple(target[key].shape)}")
    with torch.no_grad():
        model.load_state_dict(source, strict=True)
    return model
