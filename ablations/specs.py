"""Sweep specs: one TOML file per sweep, validated whole before the first run.

    [sweep]
    label = "patch size (px)"      # optional: how figures and the report name the factor
    description = "tokens against detail"   # optional: one line under the report's heading
    default = true                 # optional: one of the sweeps `make ablations` runs
    factor = "patch_size"          # a ViTConfig field
    values = [2, 4, 7, 14]         # one run per value (and per seed)
    values_by_img_size = { 32 = [2, 4, 8, 16] }   # optional: other values for other image sizes
    init = "vit_small.pth"         # optional: a timm checkpoint every run starts from
    [model]                        # the base: a preset plus overrides
    preset = "auto"                # default: the dataset's base (28 px vit_mnist, 8 px vit_digits, 32 px vit_cifar)
    embed_dim = 64
    [train]                        # TrainConfig fields
    epochs = 15

A new sweep is one new TOML file in `ablations/sweeps/` and nothing else: `make ablate-<name>`, the
report's section and the spec tests find it there. The dataset fixes img_size, in_chans and
num_classes of the base. An unknown key, a bad value, or a
point whose config is invalid raises `SpecError` naming the file, the point and the field.
"""

from __future__ import annotations

import dataclasses

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.recipe import TrainConfig
from vit import PRESETS, ViTConfig

from .choices import SPEC_DIR, available_sweeps, default_sweeps

__all__ = ["DATASET_FIELDS", "SPEC_DIR", "Point", "SpecError", "SweepSpec", "available_sweeps", "default_sweeps",
           "find_spec", "load_spec"]

_SECTIONS = {"sweep": {"factor", "values", "values_by_img_size", "description", "label", "default", "init"},
             "model": {"preset", *(f.name for f in dataclasses.fields(ViTConfig))},
             "train": {f.name for f in dataclasses.fields(TrainConfig)}}
DATASET_FIELDS = ("img_size", "in_chans", "num_classes")


class SpecError(ValueError):
    pass


# `preset = "auto"` (the default): the base model for the dataset's image size, so one spec serves
# mnist5k/mnist/fashion-mnist (28 px), digits (8 px) and CIFAR/synthetic (32 px)
BASE_PRESETS = {28: "vit_mnist", 8: "vit_digits", 32: "vit_cifar"}


def base_preset(img_size: int) -> str:
    """The base preset for images of `img_size` px; ValueError naming the bases if there is none."""
    if img_size not in BASE_PRESETS:
        raise ValueError(f"preset=auto has no base for {img_size} px images (bases: {BASE_PRESETS}); name a preset")
    return BASE_PRESETS[img_size]


@dataclass(frozen=True)
class Point:
    sweep: str
    factor: str
    value: Any
    model: ViTConfig
    train: TrainConfig


@dataclass(frozen=True)
class SweepSpec:
    name: str
    path: Path
    factor: str
    values: tuple[Any, ...]
    values_by_img_size: dict[int, tuple[Any, ...]]
    preset: str
    model_overrides: dict[str, Any]
    train_overrides: dict[str, Any]
    init: str = ""  # a timm checkpoint every run starts from (relative paths: from the spec's folder)
    label: str = ""        # the factor as figures name it; default: the factor
    description: str = ""
    default: bool = False  # run by `make ablations`

    def points(self, img_size: int, in_chans: int, num_classes: int,
               train_changes: dict[str, Any] | None = None) -> list[Point]:
        """Every point for a dataset of this shape; any invalid point raises SpecError before any work."""
        values = self.values_by_img_size.get(img_size, self.values)
        preset = self.preset
        if preset == "auto":
            try:
                preset = base_preset(img_size)
            except ValueError as err:
                raise SpecError(f"{self.path}: [model] {err} in [model]") from None
        try:
            train_cfg = dataclasses.replace(TrainConfig(**self.train_overrides), **(train_changes or {}))
        except (TypeError, ValueError) as err:
            raise SpecError(f"{self.path}: [train]: {err}") from None
        points = []
        for value in values:
            changes = {**self.model_overrides, "img_size": img_size, "in_chans": in_chans,
                       "num_classes": num_classes, self.factor: value}
            try:
                model = PRESETS[preset].replace(**changes)
            except ValueError as err:
                raise SpecError(f"{self.path}: point {self.factor}={value!r}: {err}") from None
            twin = next((p for p in points if p.model == model), None)
            if twin is not None:
                raise SpecError(f"{self.path}: points {self.factor}={twin.value!r} and {self.factor}={value!r} "
                                f"are the same model; list each setting once")
            points.append(Point(self.name, self.factor, value, model, train_cfg))
        return points


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"no sweep spec at {path}") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: not valid TOML: {err}") from None
    for section, table in data.items():
        if section not in _SECTIONS:
            raise SpecError(f"{path}: unknown section [{section}]; sections are {sorted(_SECTIONS)}")
        unknown = sorted(set(table) - _SECTIONS[section])
        if unknown:
            raise SpecError(f"{path}: [{section}] has unknown key {unknown[0]!r}; known: {sorted(_SECTIONS[section])}")
    sweep, model = data.get("sweep", {}), dict(data.get("model", {}))
    factor = sweep.get("factor")
    if factor not in {f.name for f in dataclasses.fields(ViTConfig)} - set(DATASET_FIELDS) - {"img_size"}:
        raise SpecError(f"{path}: [sweep] factor={factor!r} is not a ViTConfig field a sweep can vary")
    values = sweep.get("values")
    if not isinstance(values, list) or not values:
        raise SpecError(f"{path}: [sweep] values must be a non-empty list, got {values!r}")
    if len(set(map(repr, values))) != len(values):
        raise SpecError(f"{path}: [sweep] values has duplicates: {values!r}")
    by_size = {}
    for size, vals in sweep.get("values_by_img_size", {}).items():
        if not str(size).isdigit() or not isinstance(vals, list) or not vals:
            raise SpecError(f"{path}: [sweep] values_by_img_size.{size} must map an image size to a non-empty list")
        if len(set(map(repr, vals))) != len(vals):
            raise SpecError(f"{path}: [sweep] values_by_img_size.{size} has duplicates: {vals!r}")
        by_size[int(size)] = tuple(vals)
    preset = model.pop("preset", "auto")
    if preset != "auto" and preset not in PRESETS:
        raise SpecError(f"{path}: [model] preset={preset!r} is unknown; choose auto or one of {sorted(PRESETS)}")
    fixed = sorted(set(model) & set(DATASET_FIELDS))
    if fixed:
        raise SpecError(f"{path}: [model] {fixed[0]} is set by the dataset, not the spec")
    train = data.get("train", {})
    try:
        TrainConfig(**train)
    except (TypeError, ValueError) as err:
        raise SpecError(f"{path}: [train]: {err}") from None
    init = sweep.get("init", "")
    if init:
        init_path = (path.parent / Path(init).expanduser()).resolve()
        if not init_path.is_file():
            raise SpecError(f"{path}: [sweep] init={init!r}: no file at {init_path}")
        init = str(init_path)
    for key, kind in (("label", str), ("description", str), ("default", bool)):
        if key in sweep and not isinstance(sweep[key], kind):
            raise SpecError(f"{path}: [sweep] {key} must be a {kind.__name__}, got {sweep[key]!r}")
    return SweepSpec(path.stem, path, factor, tuple(values), by_size, preset, model, dict(train), init,
                     sweep.get("label", factor), sweep.get("description", ""), sweep.get("default", False))


def find_spec(name: str, spec_dir: Path = SPEC_DIR) -> Path:
    path = Path(name)
    if path.suffix == ".toml":
        return path
    candidate = spec_dir / f"{name}.toml"
    if not candidate.exists():
        raise SpecError(f"no sweep named {name!r} in {spec_dir}; available: {available_sweeps()}")
    return candidate
