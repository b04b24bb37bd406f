"""What the model's registries are keyed by, and what a config needs to know of each entry, without torch:
a `ViTConfig` is validated, and a table of configs read, without loading the code that builds the model.
The modules that build each part (`vit.attention`, `vit.position`, `vit.blocks`, `vit.pooling`,
`vit.stems`) key their registries by these names; the attention backends' registry lives here."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any


def registered_backends() -> tuple[str, ...]:
    """The names `vit/attention.py` registers (`@register_backend("…")` over each backend), read from its source
    without importing it (it loads torch): a backend is written in that one file."""
    tree = ast.parse(Path(__file__).with_name("attention.py").read_text())
    return tuple(d.args[0].value for node in tree.body if isinstance(node, ast.FunctionDef)
                 for d in node.decorator_list
                 if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "register_backend")


# the attention registry itself: its names here, each backend's function set when `vit.attention` loads
# (`register_backend`); one dict, so a backend registered or removed is a config's choice or not at once
ATTENTION_BACKENDS: dict[str, Any] = dict.fromkeys(registered_backends())
POSITION_DIM_MULTIPLE: dict[str, int] = {"learned": 1, "sinusoidal": 2, "sincos2d": 4, "none": 1}  # embed_dim's
NORM_NAMES: dict[str, None] = dict.fromkeys(("pre", "post"))
POOLING_READERS: dict[str, str] = {"cls": "CLS", "avg": "mean patch-token"}   # what the head reads, for titles


def check_conv_stem(cfg: Any) -> None:
    """The stride-2 stack must land on the patch grid, and the halved widths must leave channels."""
    side = cfg.stem_sides[-1] if cfg.stem_convs else cfg.img_size
    if side != cfg.grid_size:
        raise ValueError(
            f"ViTConfig.stem='conv' with patch_size={cfg.patch_size}: its {cfg.stem_convs} stride-2 "
            f"convolutions turn img_size={cfg.img_size} into a {side}×{side} grid, not the "
            f"{cfg.grid_size}×{cfg.grid_size} of the patches; use a power-of-2 patch_size or stem='patch'")
    if cfg.stem_channels and cfg.stem_channels[0] < 1:
        raise ValueError(
            f"ViTConfig.stem='conv' halves embed_dim={cfg.embed_dim} {cfg.stem_convs - 1} times for its "
            f"first convolution, leaving no channels; use a larger embed_dim or a smaller patch_size")


# each stem's check: raises ValueError naming the field for a config it cannot serve
STEM_CHECKS: dict[str, Callable[[Any], None]] = {"patch": lambda cfg: None, "conv": check_conv_stem}

FIELD_CHOICES: dict[str, dict] = {"attn": ATTENTION_BACKENDS, "pos": POSITION_DIM_MULTIPLE, "norm": NORM_NAMES,
                                  "pool": POOLING_READERS, "stem": STEM_CHECKS}
