"""`ViTConfig`, the single source of every size and variant of the model, and `PRESETS`."""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib

from .names import FIELD_CHOICES, POSITION_DIM_MULTIPLE, STEM_CHECKS

_POSITIVE_INTS = ("img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads")


def _doc(unit: str, meaning: str) -> dict[str, str]:
    return {"unit": unit, "doc": meaning}


# The fields run ids have hashed since ids were first written: a field added to ViTConfig is not listed here
ID_FIELDS = ("img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio",
             "attn", "pos", "norm", "pool", "stem", "qkv_bias", "dropout", "attn_dropout")


def floats_as_floats(config: Any) -> None:
    """An int given for a float field becomes that float (mlp_ratio = 2 is 2.0), so one value has one
    spelling in run ids (which hash the fields as JSON, where 2 and 2.0 differ) and in tables."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.type == "float" and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(config, f.name, float(value))


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """' (did you mean 'depth'?)' for a name a typo away from one known name ('dept'), or part of just one
    ('heads' of 'num_heads'); else ''."""
    known = sorted(known)
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.7)
    within = [k for k in known if str(name) and str(name) in k]
    guess = close[0] if close else within[0] if len(within) == 1 else None
    return f" (did you mean {guess!r}?)" if guess else ""


@dataclass(frozen=True)
class ViTConfig:
    """Every hyperparameter of a `VisionTransformer`, each field documented beside it (its metadata
    also gives the unit, and the column dictionary `docs/columns.md` is rendered from it).

    Invalid values raise `ValueError` naming the field and the value.
    """

    img_size: int = field(default=32, metadata=_doc("px", "side of the square input image"))
    patch_size: int = field(default=4, metadata=_doc("px", "side of a square patch: the token grid is img_size / patch_size"))
    in_chans: int = field(default=3, metadata=_doc("", "input channels"))
    num_classes: int = field(default=10, metadata=_doc("", "classifier outputs"))
    embed_dim: int = field(default=128, metadata=_doc("", "token width D"))
    depth: int = field(default=6, metadata=_doc("", "number of transformer blocks"))
    num_heads: int = field(default=4, metadata=_doc("", "attention heads; embed_dim must split evenly"))
    mlp_ratio: float = field(default=4.0, metadata=_doc("", "MLP hidden width / embed_dim"))
    attn: str = field(default="sdpa", metadata=_doc(
        "", "attention backend, one function written four ways: loop (per head), bmm, einops, sdpa "
            "(F.scaled_dot_product_attention)"))
    pos: str = field(default="learned", metadata=_doc(
        "", "position encoding: learned, sinusoidal (1-D, Vaswani et al.), sincos2d (2-D, MAE), none"))
    norm: str = field(default="pre", metadata=_doc(
        "", "LayerNorm placement: pre (LN → sublayer → residual, final LN; ViT) or post (residual → LN)"))
    pool: str = field(default="cls", metadata=_doc(
        "", "what the head reads: cls (the CLS token, ViT) or avg (the mean of the patch tokens, then "
            "LayerNorm: timm's global_pool='avg' with fc_norm; the CLS token stays in the sequence)"))
    stem: str = field(default="patch", metadata=_doc(
        "", "how images become tokens: patch (one patch_size × patch_size convolution of stride patch_size) "
            "or conv (Xiao et al. 2021: ⌈log2 patch_size⌉ 3×3 stride-2 convolutions with BatchNorm and "
            "ReLU, channels doubling up to embed_dim, then a 1×1 projection; the same token grid)"))
    qkv_bias: bool = field(default=True, metadata=_doc("", "bias on the fused qkv projection"))
    dropout: float = field(default=0.0, metadata=_doc(
        "", "dropout after the embeddings, the attention output projection and the MLP"))
    attn_dropout: float = field(default=0.0, metadata=_doc("", "dropout on the attention probabilities"))

    def __post_init__(self) -> None:
        floats_as_floats(self)
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ViTConfig.{name} must be a positive int, got {value!r}")
        for name, registry in FIELD_CHOICES.items():
            value = getattr(self, name)
            if value not in registry:
                raise ValueError(f"ViTConfig.{name}={value!r} is unknown; choose one of {sorted(registry)}")
        if not isinstance(self.mlp_ratio, (int, float)) or isinstance(self.mlp_ratio, bool) or self.mlp_ratio <= 0:
            raise ValueError(f"ViTConfig.mlp_ratio must be a positive number, got {self.mlp_ratio!r}")
        if int(self.embed_dim * self.mlp_ratio) < 1:
            raise ValueError(f"ViTConfig.mlp_ratio={self.mlp_ratio!r} gives an MLP of width 0 at embed_dim={self.embed_dim}")
        for name in ("dropout", "attn_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"ViTConfig.{name} must be in [0, 1), got {value!r}")
        if not isinstance(self.qkv_bias, bool):
            raise ValueError(f"ViTConfig.qkv_bias must be a bool, got {self.qkv_bias!r}")
        if self.embed_dim % self.num_heads:
            raise ValueError(
                f"ViTConfig.embed_dim={self.embed_dim} is not divisible by num_heads={self.num_heads}")
        if self.img_size % self.patch_size:
            raise ValueError(
                f"ViTConfig.img_size={self.img_size} is not divisible by patch_size={self.patch_size}")
        STEM_CHECKS[self.stem](self)
        multiple = POSITION_DIM_MULTIPLE[self.pos]
        if self.embed_dim % multiple:
            raise ValueError(
                f"ViTConfig.embed_dim={self.embed_dim} cannot be split by pos={self.pos!r}, "
                f"which needs a multiple of {multiple}")

    @property
    def stem_convs(self) -> int:
        """The number of 3×3 stride-2 convolutions of the conv stem: ⌈log2 patch_size⌉."""
        return (self.patch_size - 1).bit_length()

    @property
    def stem_sides(self) -> tuple[int, ...]:
        """Output side of each conv-stem convolution: a 3×3 stride-2 convolution with padding 1 maps s to ⌈s / 2⌉."""
        sides = [self.img_size]
        for _ in range(self.stem_convs):
            sides.append(-(-sides[-1] // 2))
        return tuple(sides[1:])

    @property
    def stem_channels(self) -> tuple[int, ...]:
        """Output channels of each conv-stem convolution: doubling, the last one embed_dim (timm's tiers)."""
        n = self.stem_convs
        return tuple(self.embed_dim // 2 ** (n - 1 - i) for i in range(n))

    @property
    def grid_size(self) -> int:
        """Patches along one side of the image."""
        return self.img_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid_size**2

    @property
    def tokens(self) -> int:
        """Sequence length T: patches + the CLS token."""
        return self.num_patches + 1

    @property
    def mlp_dim(self) -> int:
        return int(self.embed_dim * self.mlp_ratio)

    def replace(self, **changes: Any) -> ViTConfig:
        """A copy with `changes` applied (validated); an unknown field raises `ValueError`."""
        unknown = sorted(set(changes) - set(self.to_dict()))
        if unknown:
            raise ValueError(f"ViTConfig has no field {unknown[0]!r}{did_you_mean(unknown[0], self.to_dict())}; "
                             f"fields are {sorted(self.to_dict())}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def identity(self) -> dict[str, Any]:
        """What of the model defines a run (its run id hashes this): every field of `ID_FIELDS`, the fields
        run ids have always hashed, and any field added since only where set away from its default, so a
        new field with a default leaves every existing run id (and the committed results) as it was."""
        defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                    for f in dataclasses.fields(self)}
        return {k: v for k, v in self.to_dict().items() if k in ID_FIELDS or v != defaults[k]}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ViTConfig:
        """The inverse of `to_dict` for a result-table row: every field the row has (blank cells and
        columns older tables lack keep the default), cast to the field's type (numpy scalars from pandas)."""
        values = {}
        for f in dataclasses.fields(cls):
            value = row.get(f.name)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            values[f.name] = type(f.default)(value.item() if hasattr(value, "item") else value)
        return cls(**values)


# Presets are data: vit/presets.toml, read here and (names only, without torch) by the command lines.
PRESETS_FILE = Path(__file__).resolve().parent / "presets.toml"
PRESETS: dict[str, ViTConfig] = {name: ViTConfig(**fields)
                                 for name, fields in tomllib.loads(PRESETS_FILE.read_text()).items()}
