"""The ViT core: one config, four attention backends, four position schemes, two norm placements."""

from .attention import ATTENTION_BACKENDS, Attention
from .blocks import NORM_PLACEMENTS, Block
from .config import PRESETS, ViTConfig
from .model import VisionTransformer
from .position import POSITION_ENCODINGS, sincos_2d, sinusoidal_1d
from .timm_interop import (adapt_timm_state_dict, checkpoint_id, init_from_checkpoint, load_timm_weights,
                           read_checkpoint, timm_to_vit_keys)

__all__ = [
    "ATTENTION_BACKENDS", "Attention", "Block", "NORM_PLACEMENTS", "POSITION_ENCODINGS", "PRESETS",
    "ViTConfig", "VisionTransformer", "adapt_timm_state_dict", "checkpoint_id", "init_from_checkpoint",
    "load_timm_weights", "read_checkpoint", "sincos_2d", "sinusoidal_1d", "timm_to_vit_keys",
]
