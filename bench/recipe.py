"""The training recipe: one frozen dataclass, validated when it is built."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .precision import DTYPES


@dataclass(frozen=True)
class TrainConfig:
    """epochs, batch_size; lr: peak AdamW rate after `warmup_epochs` of linear warm-up, then cosine to 0.
    weight_decay (AdamW, not on biases/norms/tokens), label_smoothing, grad_clip (max global norm, 0 = off).
    dtype: "fp32" or "bf16"/"fp16" autocast ("auto": bf16 on CUDA, fp32 on CPU). compile: torch.compile.
    layer_decay: fine-tuning's layer-wise lr decay (BEiT/MAE): block i of L trains at lr·decay^(L−i),
    embeddings at lr·decay^(L+1), final norm and head at lr (1.0 = off).
    freeze: "none", or "all_but_head" for a linear probe.
    """

    # defaults: the best mnist5k recipe measured within ~60 s on a 2-core CPU (see README)
    epochs: int = 20
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0
    grad_clip: float = 1.0
    dtype: str = "auto"
    compile: bool = False
    eval_batch_size: int = 500
    layer_decay: float = 1.0
    freeze: str = "none"

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}")
        for name in ("weight_decay", "warmup_epochs", "label_smoothing", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
                raise ValueError(f"TrainConfig.{name} must be a finite number ≥ 0, got {value!r}")
        if not 0 < self.layer_decay <= 1:
            raise ValueError(f"TrainConfig.layer_decay must be in (0, 1], got {self.layer_decay!r}")
        if self.freeze not in ("none", "all_but_head"):
            raise ValueError(f"TrainConfig.freeze={self.freeze!r} is unknown; choose none or all_but_head")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < math.inf:
            raise ValueError(f"TrainConfig.lr must be a finite number > 0, got {self.lr!r}")
        if self.label_smoothing >= 1:
            raise ValueError(f"TrainConfig.label_smoothing must be < 1, got {self.label_smoothing!r}")
        if self.dtype not in ("auto", *DTYPES):
            raise ValueError(f"TrainConfig.dtype={self.dtype!r} is unknown; choose auto, {', '.join(DTYPES)}")

    def resolved_dtype(self, device: torch.device) -> str:
        return ("bf16" if device.type == "cuda" else "fp32") if self.dtype == "auto" else self.dtype

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

