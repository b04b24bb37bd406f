"""The ViT core: one config, and registries for attention backends, position encodings, norm
placements, stems and pooling.

Names load on first use: `from vit import ViTConfig` reads configs without importing torch (their
choices are in `vit.names`); the model's parts load with the first name that needs them."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ATTENTION_BACKENDS": "attention", "Attention": "attention", "register_backend": "attention",
    "NORM_PLACEMENTS": "blocks", "Block": "blocks",
    "PRESETS": "config", "ViTConfig": "config",
    "VisionTransformer": "model",
    "POOLINGS": "pooling",
    "POSITION_ENCODINGS": "position", "sincos_2d": "position", "sinusoidal_1d": "position",
    "STEMS": "stems",
    "adapt_timm_state_dict": "timm_interop", "checkpoint_id": "timm_interop", "init_from_checkpoint": "timm_interop",
    "load_timm_weights": "timm_interop", "read_checkpoint": "timm_interop", "timm_to_vit_keys": "timm_interop",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'vit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
