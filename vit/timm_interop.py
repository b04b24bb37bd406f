"""Loading timm `VisionTransformer` state dicts into `vit.VisionTransformer`.

Parameter names already follow timm's; the only renaming is timm's `pos_embed` parameter, which here
lives in the position module as `pos_embed.weight`.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch
from torch import Tensor

from .model import VisionTransformer

_RENAME = {"pos_embed": "pos_embed.weight"}


def timm_to_vit_keys(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """timm key names → this package's key names (values untouched)."""
    return {_RENAME.get(k, k): v for k, v in state_dict.items()}


def load_timm_weights(model: VisionTransformer, state_dict: Mapping[str, Tensor],
                      missing_ok: Iterable[str] = ()) -> VisionTransformer:
    """Copy a timm ViT state dict (fused `qkv`, CLS token, learned `pos_embed`) into `model`, in place.

    Every key must match a parameter of the same shape: an unexpected or missing key, or a shape that
    differs, raises `ValueError` naming the key and both shapes before anything is copied.
    """
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"load_timm_weights needs a vit.VisionTransformer, got {type(model).__name__}")
    source = timm_to_vit_keys(state_dict)
    target = model.state_dict()
    blocks = {int(k.split(".")[1]) for k in source if k.startswith("blocks.")}
    if blocks and max(blocks) + 1 != model.cfg.depth:
        raise ValueError(f"depth mismatch: checkpoint has {max(blocks) + 1} blocks (blocks.0 … blocks.{max(blocks)}), "
                         f"the model depth={model.cfg.depth}")
    unexpected = sorted(set(source) - set(target))
    has_conv_stem = any(k.startswith("patch_embed.backbone.") for k in source)
    if has_conv_stem != (model.cfg.stem == "conv"):
        stem, keys = ("conv", "patch_embed.backbone.*") if has_conv_stem else ("patch", "no patch_embed.backbone.*")
        raise ValueError(f"checkpoint has a {stem} stem ({keys}) but the model has stem={model.cfg.stem!r}; "
                         f"build it with stem={stem!r}")
    if "pos_embed.weight" in unexpected:
        raise ValueError(f"checkpoint has a learned pos_embed but the model has pos={model.cfg.pos!r}; "
                         f"build it with pos='learned'")
    for key, pool in (("fc_norm.weight", "avg"), ("norm.weight", "cls")):
        if key in unexpected:
            raise ValueError(f"checkpoint has {key!r}, the final norm of timm's global_pool={pool!r} "
                             f"(fc_norm after average pooling, norm before CLS pooling), but the model has "
                             f"pool={model.cfg.pool!r}; build it with pool={pool!r}")
    if unexpected:
        raise ValueError(f"checkpoint key(s) not in the model: {unexpected[:5]} "
                         f"(timm features this model lacks, e.g. layer scale, qk-norm, registers)")
    missing = sorted(set(target) - set(source) - set(missing_ok))
    if missing:
        raise ValueError(f"checkpoint lacks key(s) {missing[:5]}")
    for key, value in source.items():
        if tuple(value.shape) != tuple(target[key].shape):
            raise ValueError(f"shape mismatch at {key!r}: checkpoint {tuple(value.shape)}, "
                             f"model {tuple(target[key].shape)}")
    with torch.no_grad():
        model.load_state_dict(source, strict=not set(missing_ok))
    return model


CHECKPOINT_SUFFIXES = (".pth", ".pt", ".bin", ".safetensors")


def _torch_load(path: Path):
    """torch.load with weights only, plus argparse.Namespace: timm's training script saves its arguments as one
    beside the weights, and a Namespace runs no code when it is unpickled."""
    import argparse

    serialization = torch.serialization
    if hasattr(serialization, "safe_globals"):   # torch ≥ 2.5: allowed for this load alone
        with serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    serialization.add_safe_globals([argparse.Namespace])
    return torch.load(path, map_location="cpu", weights_only=True)


def _why_unreadable(err: Exception) -> str:
    """A load's error in a few words: its first sentence, or the object a weights-only load refused (torch's
    own text goes on to advise loading with weights_only=False, which vitbench does not do)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    refused = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if refused:
        return f"it pickles a {refused[1]} object, which a weights-only load refuses; save the state dict alone"
    first = re.split(r"\.\s", text.strip(), maxsplit=1)[0].splitlines()[0] if text.strip() else "empty or truncated"
    return f"{type(err).__name__}: {first}"


def read_checkpoint(path: str | Path) -> dict[str, Tensor]:
    """A state dict from `.pth`/`.pt`/`.bin` (torch.load, weights_only) or `.safetensors`."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    if path.suffix not in CHECKPOINT_SUFFIXES:
        raise ValueError(f"checkpoint {path}: unknown format {path.suffix!r}; use one of {CHECKPOINT_SUFFIXES}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = _torch_load(path)
    except Exception as err:  # EOFError, UnpicklingError, SafetensorError, RuntimeError (zip), ...
        raise ValueError(f"checkpoint {path}: not a readable {path.suffix} file ({_why_unreadable(err)}); "
                         f"check the file or download it again") from None
    if not isinstance(state, dict) or not state:
        raise ValueError(f"checkpoint {path}: holds no state dict (got {type(state).__name__})")
    for wrapper in ("model", "state_dict", "model_ema"):  # training checkpoints wrap the weights
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    return dict(state)


def checkpoint_id(path: str | Path) -> str:
    """`<file name>:<sha256 prefix>`, what a result row records as its `init`."""
    path = Path(path).expanduser()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return f"{path.name}:{digest}"


def adapt_timm_state_dict(model: VisionTransformer, state_dict: Mapping[str, Tensor],
                          log: Callable[[str], None] = print) -> tuple[dict[str, Tensor], list[str]]:
    """Fit a timm checkpoint to `model`: resample a learned pos_embed to the model's patch grid (timm's
    `resample_abs_pos_embed`, bicubic, CLS position kept apart), fit an RGB stem's first convolution to the
    model's input channels (timm's `adapt_input_conv`: summed for one channel, else repeated and scaled), and
    drop a head of another class count (the model's fresh head stays). Returns the state dict and the keys the
    model keeps its own values for."""
    from timm.layers import resample_abs_pos_embed

    cfg, state, keep = model.cfg, dict(state_dict), []
    pos = state.get("pos_embed")
    if pos is not None and cfg.pos == "learned" and pos.shape[1] != cfg.tokens and pos.shape[-1] == cfg.embed_dim:
        old = math.isqrt(pos.shape[1] - 1)
        if old * old != pos.shape[1] - 1:
            raise ValueError(f"pos_embed of shape {tuple(pos.shape)} is not a square grid plus CLS")
        state["pos_embed"] = resample_abs_pos_embed(pos, [cfg.grid_size, cfg.grid_size], num_prefix_tokens=1)
        log(f"init: resampled pos_embed from a {old}×{old} to a {cfg.grid_size}×{cfg.grid_size} patch grid "
            f"(bicubic, CLS position kept)")
    target = model.state_dict()
    for key, weight in list(state.items()):   # an RGB stem's first convolution, for images of other channels
        ours = target.get(_RENAME.get(key, key))
        if (ours is not None and weight.ndim == 4 and ours.ndim == 4 and weight.shape[1] == 3 != cfg.in_chans
                and ours.shape[1] == cfg.in_chans and weight.shape[:1] + weight.shape[2:] == ours.shape[:1] + ours.shape[2:]):
            from timm.models import adapt_input_conv

            state[key] = adapt_input_conv(cfg.in_chans, weight)
            how = "summed over its channels" if cfg.in_chans == 1 else "its channels repeated and scaled"
            log(f"init: {key} takes {weight.shape[1]}-channel images, the model {cfg.in_chans}: {how} (timm's "
                f"adapt_input_conv)")
    head = state.get("head.weight")
    if head is not None and head.shape[0] != cfg.num_classes and head.shape[1:] == (cfg.embed_dim,):
        state.pop("head.weight")
        state.pop("head.bias", None)
        keep = ["head.weight", "head.bias"]
        log(f"init: checkpoint head has {head.shape[0]} classes, the model {cfg.num_classes}: head freshly initialised")
    return state, keep


def init_from_checkpoint(model: VisionTransformer, path: str | Path,
                         log: Callable[[str], None] = print) -> VisionTransformer:
    """Load a timm ViT checkpoint file into `model`, adapting grid, input channels and head; other mismatches raise."""
    state, keep = adapt_timm_state_dict(model, read_checkpoint(path), log)
    return load_timm_weights(model, state, missing_ok=keep)
