"""The training recipe: one frozen dataclass, validated when it is built."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from bench.choices import DTYPES, EPOCHS
from vit.config import floats_as_floats

if TYPE_CHECKING:
    import torch


def _doc(unit: str, meaning: str, kind: str = "number") -> dict[str, str]:
    return {"unit": unit, "doc": meaning, "kind": kind}


# The fields run ids have always hashed. Any other field (those added since, and any added later) enters a
# run's identity only where set away from its default, so every run defined before it keeps its id.
ID_FIELDS = ("epochs", "batch_size", "lr", "weight_decay", "warmup_epochs", "label_smoothing", "grad_clip", "dtype",
             "compile", "eval_batch_size", "layer_decay", "freeze")
HOLDOUT_SPLITS = ("stratified", "random")
# how a packed run's members are computed (the model's stacked twin, `vit.stacked`), in a packed run's identity
PACKING = "stacked"


@dataclass(frozen=True)
class TrainConfig:
    """How a model is trained; each field is a column of a training row (`docs/columns.md`). The defaults
    are the best mnist5k recipe measured within ~60 s on a 2-core CPU (docs/robustness.md)."""

    epochs: int = field(default=EPOCHS, metadata=_doc("", "training epochs", "int"))
    batch_size: int = field(default=64, metadata=_doc("images", "training images per optimisation step", "int"))
    lr: float = field(default=2e-3, metadata=_doc("", "peak AdamW learning rate, reached after warmup_epochs of "
                                                      "linear warm-up, then cosine decay to 0"))
    weight_decay: float = field(default=0.05, metadata=_doc("", "AdamW weight decay (not on biases, norms, the "
                                                                "CLS token or positions)"))
    warmup_epochs: float = field(default=1.0, metadata=_doc("epochs", "linear learning-rate warm-up"))
    label_smoothing: float = field(default=0.0, metadata=_doc("", "label smoothing of the training loss"))
    grad_clip: float = field(default=1.0, metadata=_doc("", "maximum global gradient norm (0: no clipping)"))
    dtype: str = field(default="auto", metadata=_doc("", "fp32, or bf16/fp16 autocast (auto: bf16 on CUDA, "
                                                         "fp32 on the CPU)", "text"))
    compile: bool = field(default=False, metadata=_doc("0/1", "whether the model ran under torch.compile", "int"))
    eval_batch_size: int = field(default=500, metadata=_doc("images", "images per evaluation step", "int"))
    layer_decay: float = field(default=1.0, metadata=_doc("", "layer-wise lr decay for fine-tuning (BEiT/MAE): "
                                                              "block i of L trains at lr·decay^(L−i), embeddings "
                                                              "at lr·decay^(L+1), head at lr (1: off)"))
    freeze: str = field(default="none", metadata=_doc("", "none, or all_but_head for a linear probe", "text"))
    crop_padding: int | None = field(default=None, metadata=_doc(
        "px", "zero padding of the random-crop augmentation (blank: the dataset's default; 0: no crop)", "int"))
    flip: bool | None = field(default=None, metadata=_doc(
        "", "random horizontal flips (blank: the dataset's default: on for CIFAR only)", "bool"))
    holdout: float = field(default=0.0, metadata=_doc(
        "fraction", "share of the training set held out as a validation split for tuning, never trained on "
                    "(0: none)"))
    holdout_seed: int = field(default=0, metadata=_doc("", "seed of the validation split's draw", "int"))
    holdout_split: str = field(default="stratified", metadata=_doc(
        "", "how the validation split is drawn: stratified (each class in its training-set share) or random "
            "(blank: random, as older rows drew it)", "text"))
    packed: bool = field(default=False, metadata=_doc(
        "0/1", "whether the run trained as a member of a pack: the seeds of its point stacked into one model "
               "(PACK)", "int"))
    pack_width: int = field(default=0, metadata=_doc(
        "members", "the width every pack of the run trained at, where a member's figures depend on it (CUDA: PACK, "
                   "at least 2, a narrower pack filled out with dropped copies of its first member); blank or 0: "
                   "they do not (CPU)", "int"))

    def __post_init__(self) -> None:
        floats_as_floats(self)
        self._check_switches()
        for name in ("epochs", "batch_size", "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}")
        for name in ("weight_decay", "warmup_epochs", "label_smoothing", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
                raise ValueError(f"TrainConfig.{name} must be a finite number ≥ 0, got {value!r}")
        if isinstance(self.layer_decay, bool) or not isinstance(self.layer_decay, (int, float)) \
                or not 0 < self.layer_decay <= 1:
            raise ValueError(f"TrainConfig.layer_decay must be in (0, 1], got {self.layer_decay!r}")
        if self.freeze not in ("none", "all_but_head"):
            raise ValueError(f"TrainConfig.freeze={self.freeze!r} is unknown; choose none or all_but_head")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < math.inf:
            raise ValueError(f"TrainConfig.lr must be a finite number > 0, got {self.lr!r}")
        if self.label_smoothing >= 1:
            raise ValueError(f"TrainConfig.label_smoothing must be < 1, got {self.label_smoothing!r}")
        if self.dtype not in ("auto", *DTYPES):
            raise ValueError(f"TrainConfig.dtype={self.dtype!r} is unknown; choose auto, {', '.join(DTYPES)}")
        if self.crop_padding is not None and (isinstance(self.crop_padding, bool) or not isinstance(self.crop_padding, int)
                                              or self.crop_padding < 0):
            raise ValueError(f"TrainConfig.crop_padding must be an int ≥ 0 (or unset), got {self.crop_padding!r}")
        if self.flip is not None and not isinstance(self.flip, bool):
            raise ValueError(f"TrainConfig.flip must be true or false (or unset), got {self.flip!r}")
        if isinstance(self.holdout, bool) or not isinstance(self.holdout, (int, float)) or not 0 <= self.holdout < 1:
            raise ValueError(f"TrainConfig.holdout must be a fraction in [0, 1), got {self.holdout!r}")
        if isinstance(self.holdout_seed, bool) or not isinstance(self.holdout_seed, int) or self.holdout_seed < 0:
            raise ValueError(f"TrainConfig.holdout_seed must be an int ≥ 0, got {self.holdout_seed!r}")
        if self.holdout_split not in HOLDOUT_SPLITS:
            raise ValueError(f"TrainConfig.holdout_split={self.holdout_split!r} is unknown; choose "
                             f"{' or '.join(HOLDOUT_SPLITS)}")

    def _check_switches(self) -> None:
        """compile and packed: 0 and 1 (COMPILE=0/1, `--set compile=1`) are the booleans: one training, one run id;
        a pack's pinned width is at least 2, and only for a packed run."""
        for name in ("compile", "packed"):
            value = getattr(self, name)
            if not isinstance(value, bool) and isinstance(value, int) and value in (0, 1):
                object.__setattr__(self, name, bool(value))
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TrainConfig.{name} must be 0 or 1 (false or true), got {value!r}")
        if isinstance(self.pack_width, bool) or not isinstance(self.pack_width, int) or self.pack_width < 0 \
                or self.pack_width == 1 or (self.pack_width and not self.packed):
            raise ValueError(f"TrainConfig.pack_width must be 0, or an int ≥ 2 for a packed run, got "
                             f"{self.pack_width!r}{'' if self.packed else ' (packed is 0)'}")

    @classmethod
    def from_row(cls, row: Any) -> TrainConfig:
        """The recipe a result-table row trained with: every field the row has (blank cells keep the default),
        cast to the field's type; the row's dtype is what ran (bf16 for a CUDA run of `DTYPE=auto`)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = row.get(f.name)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            value = value.item() if hasattr(value, "item") else value
            kind = bool if isinstance(f.default, bool) else {"int": int, "bool": bool, "text": str}.get(
                f.metadata.get("kind", ""), float)
            values[f.name] = str(value).strip().lower() in ("1", "1.0", "true") if kind is bool else kind(value)
        return cls(**values)

    def resolved_dtype(self, device: torch.device) -> str:
        return ("bf16" if device.type == "cuda" else "fp32") if self.dtype == "auto" else self.dtype

    def resolved_on(self, device: torch.device) -> TrainConfig:
        """This recipe with `auto` replaced by what it trains in on `device` (a run's identity names that)."""
        return self if self.dtype != "auto" else dataclasses.replace(self, dtype=self.resolved_dtype(device))

    def to_dict(self) -> dict[str, Any]:
        """The recipe's columns: the 0/1 switches (compile, packed) as the integers the tables hold."""
        return {**asdict(self), "compile": int(self.compile), "packed": int(self.packed)}

    def identity(self) -> dict[str, Any]:
        """What of the recipe defines a run: the `ID_FIELDS`, any other field only where set away from its
        default, and `holdout_split` only where a split is drawn and it is not the random draw that runs
        used before the field existed (so a run keeps the id it had before those fields existed); for a packed run,
        how it was packed (`PACKING`)."""
        defaults = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(self)}
        found = {k: v for k, v in asdict(self).items() if k in (*ID_FIELDS, "holdout_split") or v != defaults[k]}
        # the precision a run trains in, fp32 named as runs of the default recipe on a CPU always named it; `auto`
        # where the caller has not resolved it for a device (`resolved_on`)
        found["dtype"] = "auto" if self.dtype == "fp32" else self.dtype
        if not self.holdout or self.holdout_split == "random":
            del found["holdout_split"]
        if self.packed:   # how: so runs packed another way (whose members are other bits) never share an id
            found["packed"] = PACKING
        return found
