"""The ViT core: one config, and registries for attention backends, position encodings, norm
placements, stems and pooling."""

from .attention import ATTENTION_BACKENDS, Attention, register_backend
from .blocks import NORM_PLACEMENTS, Block
from .config import PRESETS, ViTConfig
from .model import VisionTransformer
from .pooling import POOLINGS
from .position import POSITION_ENCODINGS, sincos_2d, sinusoidal_1d
from .stems import STEMS
from .timm_interop import (
                           adapt_timm_state_dict,
                           checkpoint_id,
                           init_from_checkpoint,
                           load_timm_weights,
                           read_checkpoint,
                           timm_to_vit_keys,
)

__all__ = [
    "ATTENTION_BACKENDS", "Attention", "Block", "NORM_PLACEMENTS", "POOLINGS", "POSITION_ENCODINGS", "PRESETS", "STEMS",
    "ViTConfig", "VisionTransformer", "adapt_timm_state_dict", "checkpoint_id", "init_from_checkpoint",
    "load_timm_weights", "read_checkpoint", "register_backend", "sincos_2d", "sinusoidal_1d", "timm_to_vit_keys",
]
