"""Sweep specs: one TOML file per sweep, validated whole before the first run.

    [sweep]
    label = "patch size (px)"      # optional: how figures and the report name the factor
    description = "tokens against detail"   # optional: one line under the report's heading
    default = true                 # optional: one of the sweeps `make ablations` runs
    margin = 0.5                   # optional: the report's equivalence margin for this sweep, in points (or "20%")
    seeds = "auto"                 # optional: its seeds when SEEDS is not given ([0, 1, 2], "auto", "auto:3,5,8")
    factor = "patch_size"          # any ViTConfig field the dataset does not fix, or any TrainConfig field
    values = [2, 4, 7, 14]         # one setting per value (each trained once per seed)
    values_by_img_size = { 32 = [2, 4, 8, 16] }   # optional: other values for other image sizes
    init = "vit_small.pth"         # optional: a timm checkpoint every run starts from
    [model]                        # the base: a preset plus overrides
    preset = "auto"                # default: the dataset's base (28 px vit_mnist, 8 px vit_digits, 32 px vit_cifar)
    embed_dim = 64
    [train]                        # TrainConfig fields
    epochs = 15

Several factors at once: `factors = ["patch_size", "depth"]` in [sweep], their values in a [values]
table (`patch_size = [4, 7]`, `depth = [2, 4]`), and `design = "grid"` (every combination, the default)
or `"paired"` (the i-th values of each list together; the lists of equal length).

Tuned comparisons: a [tune] table of training fields and their grids (`lr = [1e-3, 2e-3, 4e-3]`) trains
every setting at every grid value on the training set less a validation split (`holdout`, default 0.1
of it, drawn with `holdout_seed`, default 0, stratified by class unless `holdout_split = "random"`);
the report picks each setting's value by validation accuracy and compares the settings at their picks
on the test set.

A new sweep is one new TOML file in `ablations/sweeps/` and nothing else: `make ablate-<name>`, the
report's section and the spec tests find it there. The dataset fixes img_size, in_chans and
num_classes of the base. An unknown key, a bad value, or a point whose config is invalid raises
`SpecError` naming the file, the point and the field.
"""

from __future__ import annotations

import dataclasses
import itertools

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablations.choices import (
    SIDE_TABLES,
    SPEC_DIR,
    AutoSeeds,
    RelativeMargin,
    available_sweeps,
    default_sweeps,
    parse_margin,
    parse_seeds,
)
from bench.training.recipe import TrainConfig
from vit import PRESETS, ViTConfig
from vit.config import did_you_mean

__all__ = ["DATASET_FIELDS", "FACTOR_FIELDS", "SPEC_DIR", "Point", "SpecError", "SweepSpec", "available_sweeps", "default_sweeps",
           "find_spec", "load_spec"]

MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ViTConfig))
TRAIN_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig))
DATASET_FIELDS = ("img_size", "in_chans", "num_classes")
TUNE_SPLIT = ("holdout", "holdout_seed", "holdout_split")  # set by [tune], not factors or tuned fields themselves
PACKED = "packed"   # set by PACK (--pack), which also decides how the runs train: never by a spec or --set
FACTOR_FIELDS = tuple(f for f in MODEL_FIELDS if f not in DATASET_FIELDS) + tuple(
    f for f in TRAIN_FIELDS if f not in (*TUNE_SPLIT, PACKED))
DESIGNS = ("grid", "paired")
DEFAULT_HOLDOUT = 0.1
_SECTIONS = {"sweep": {"factor", "values", "factors", "design", "values_by_img_size", "description", "label", "default",
                       "init", "margin", "seeds"},
             "values": set(FACTOR_FIELDS),
             "tune": {*(f for f in TRAIN_FIELDS if f not in (*TUNE_SPLIT, PACKED)), *TUNE_SPLIT},
             "model": {"preset", *MODEL_FIELDS},
             "train": set(TRAIN_FIELDS) - {PACKED}}


class SpecError(ValueError):
    pass


# `preset = "auto"` (the default): the base model for the dataset's image size, so one spec serves
# mnist5k/mnist/fashion-mnist (28 px), digits (8 px) and CIFAR/synthetic (32 px)
BASE_PRESETS = {28: "vit_mnist", 8: "vit_digits", 32: "vit_cifar"}


def base_preset(img_size: int) -> str:
    """The base preset for images of `img_size` px; ValueError naming the bases if there is none."""
    if img_size not in BASE_PRESETS:
        bases = ", ".join(f"{size} px {name}" for size, name in sorted(BASE_PRESETS.items()))
        sizes = [str(size) for size in sorted(BASE_PRESETS)]
        raise ValueError(f"preset=auto has no base model for {img_size} px images (bases: {bases}): set IMG_SIZE "
                         f"(--img-size) to {', '.join(sizes[:-1])} or {sizes[-1]}, or name a preset (`preset = \"…\"` "
                         f"in the spec's [model] table; --preset for train)")
    return BASE_PRESETS[img_size]


@dataclass(frozen=True)
class Point:
    """One setting of a sweep (at one value of its tuned fields, if any): its model and recipe."""
    sweep: str
    factor: str      # the factor; several factors: their names joined by " × "
    value: Any       # the setting: the factor's value, or a tuple of the factors' values
    model: ViTConfig
    train: TrainConfig
    factors: tuple[str, ...] = ()                 # the fields varied, when more than one
    tuned: tuple[tuple[str, Any], ...] = ()       # (field, value) of each tuned field at this point

    @property
    def label(self) -> str:
        """"depth=4", "patch_size=7, depth=2", "norm=pre, lr=0.001": the setting and any tuned values."""
        names = self.factors or (self.factor,)
        values = self.value if self.factors else (self.value,)
        return ", ".join(f"{k}={v}" for k, v in (*zip(names, values), *self.tuned))

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field that differs between the sweep's points: the factors and the tuned fields."""
        return (*(self.factors or (self.factor,)), *(name for name, _ in self.tuned))


@dataclass(frozen=True)
class SweepSpec:
    name: str
    path: Path
    factors: tuple[str, ...]
    levels: tuple[tuple[Any, ...], ...]     # each factor's values, in order
    levels_by_img_size: dict[int, tuple[tuple[Any, ...], ...]]   # other levels for other image sizes
    preset: str
    model_overrides: dict[str, Any]
    train_overrides: dict[str, Any]
    init: str = ""  # a timm checkpoint every run starts from (relative paths: from the spec's folder)
    label: str = ""        # the factor as figures name it; default: the factor
    description: str = ""
    default: bool = False  # run by `make ablations`
    design: str = "one"    # one factor, or several: grid or paired
    tune: tuple[tuple[str, tuple[Any, ...]], ...] = ()   # (training field, its grid) of each tuned field
    holdout: float = 0.0   # the validation share when tuning
    holdout_seed: int = 0
    holdout_split: str = "stratified"
    margin: float | RelativeMargin | None = None   # equivalence margin (fraction, or a share of the error); None: the report's
    seeds: tuple[int, ...] | AutoSeeds | None = None   # its seeds when the command names none

    @classmethod
    def one_run(cls, name: str, preset: str, model_overrides: dict[str, Any],
                train_overrides: dict[str, Any]) -> SweepSpec:
        """A sweep of one point, the preset with these overrides (`python -m ablations train`): its factor is
        `preset`, its errors name `--set`."""
        return cls(name, Path("--set"), ("preset",), ((preset,),), {}, preset, dict(model_overrides),
                   dict(train_overrides))

    @property
    def factor(self) -> str:
        return " × ".join(self.factors)

    @property
    def varied(self) -> tuple[str, ...]:
        """Every field that differs between the sweep's runs of one seed: the factors and the tuned fields."""
        return (*self.factors, *(name for name, _ in self.tune))

    def settings_for(self, img_size: int | None = None) -> tuple[tuple[Any, ...], ...]:
        """One tuple of the factors' values per setting, in order: every combination (grid), the i-th values
        together (paired), or each value of the one factor."""
        levels = self.levels_by_img_size.get(img_size, self.levels) if img_size is not None else self.levels
        return tuple(itertools.product(*levels)) if self.design == "grid" else tuple(zip(*levels))

    @property
    def settings(self) -> tuple[tuple[Any, ...], ...]:
        return self.settings_for()

    @property
    def values(self) -> tuple[Any, ...]:
        """The settings: each factor value for one factor, each tuple of values for several."""
        return tuple(s[0] for s in self.settings) if len(self.factors) == 1 else self.settings

    @property
    def values_by_img_size(self) -> dict[int, tuple[Any, ...]]:
        """{image size: its settings} where the spec gives other values for other image sizes."""
        return {size: tuple(s[0] if len(self.factors) == 1 else s for s in self.settings_for(size))
                for size in self.levels_by_img_size}

    def points(self, img_size: int, in_chans: int, num_classes: int,
               train_changes: dict[str, Any] | None = None) -> list[Point]:
        """Every point for a dataset of this shape; any invalid point raises SpecError before any work."""
        settings = self.settings_for(img_size)
        preset = self.preset
        if preset == "auto":
            try:
                preset = base_preset(img_size)
            except ValueError as err:
                raise SpecError(f"{self.path}: [model] {err}") from None
        base_train = {**self.train_overrides, **(train_changes or {})}
        if self.tune:
            base_train.update(holdout=self.holdout, holdout_seed=self.holdout_seed, holdout_split=self.holdout_split)
        try:
            TrainConfig(**base_train)
        except (TypeError, ValueError) as err:
            raise SpecError(f"{self.path}: [train]: {err}") from None
        tune_grid = list(itertools.product(*(values for _, values in self.tune))) or [()]
        points: list[Point] = []
        seen: dict[tuple, Point] = {}
        for setting in settings:
            chosen = dict(zip(self.factors, setting))
            label = ", ".join(f"{k}={v!r}" for k, v in chosen.items())
            for tuned_values in tune_grid:
                tuned = tuple(zip((name for name, _ in self.tune), tuned_values))
                where = label + "".join(f", {k}={v!r}" for k, v in tuned)
                model_changes = {k: v for k, v in chosen.items() if k in MODEL_FIELDS}
                train = {**base_train, **{k: v for k, v in chosen.items() if k in TRAIN_FIELDS}, **dict(tuned)}
                try:
                    model = PRESETS[preset].replace(**{**self.model_overrides, "img_size": img_size,
                                                       "in_chans": in_chans, "num_classes": num_classes,
                                                       **model_changes})
                except ValueError as err:
                    patch = {**PRESETS[preset].to_dict(), **self.model_overrides, **model_changes}["patch_size"]
                    hint = (f"; IMG_SIZE (--img-size) shows the {img_size} px images at a side the patch size divides"
                            if isinstance(patch, int) and patch > 0 and img_size % patch and "patch_size" in str(err)
                            else "")   # only under the error it fixes, not under another field's that came first
                    raise SpecError(f"{self.path}: point {where}: {err}{hint}") from None
                try:
                    train_cfg = TrainConfig(**train)
                except (TypeError, ValueError) as err:
                    raise SpecError(f"{self.path}: point {where}: {err}") from None
                twin = seen.get((model, train_cfg))
                if twin is not None:
                    raise SpecError(f"{self.path}: points {twin.factor}={twin.value!r} and {where} are the same "
                                    f"model and recipe; list each setting once")
                value = setting[0] if len(self.factors) == 1 else tuple(setting)
                point = Point(self.name, self.factor, value, model, train_cfg,
                              self.factors if len(self.factors) > 1 else (), tuned)
                seen[(model, train_cfg)] = point
                points.append(point)
        return points


def _value_list(path: Path, where: str, values: Any, unique: bool = True) -> list[Any]:
    if not isinstance(values, list) or not values:
        raise SpecError(f"{path}: {where} must be a non-empty list, got {values!r}")
    if unique and len(set(map(repr, values))) != len(values):
        raise SpecError(f"{path}: {where} has duplicates: {values!r}")
    return values


def _factor_name(path: Path, factor: Any) -> str:
    if factor in FACTOR_FIELDS:
        return factor
    fixed = " (the dataset sets it)" if factor in DATASET_FIELDS else (
        " (set in [tune])" if factor in TUNE_SPLIT else " (set by PACK, --pack)" if factor == PACKED else
        did_you_mean(factor, FACTOR_FIELDS))
    raise SpecError(f"{path}: [sweep] factor={factor!r} is not a field a sweep can vary{fixed}; a ViTConfig "
                    f"field but {', '.join(DATASET_FIELDS)}, or a TrainConfig field but {', '.join(TUNE_SPLIT)} "
                    f"and {PACKED}")


def load_spec(path: str | Path, check_files: bool = True) -> SweepSpec:
    """The validated spec at `path`; `check_files=False` for a copy kept beside a sweep's results, whose
    `init` path (relative to where the spec was) is not read."""
    path = Path(path)
    if path.stem.endswith(SIDE_TABLES):
        raise SpecError(f"{path}: a sweep's name may not end in {' or '.join(SIDE_TABLES)}: its rows would be "
                        f"taken for another sweep's {'/'.join(t[1:] for t in SIDE_TABLES)} table "
                        f"(<sweep>{SIDE_TABLES[1]}.csv); rename the file")
    data = _read_sections(path)
    sweep, model = data.get("sweep", {}), dict(data.get("model", {}))
    factors, levels, design = _factors(path, sweep, data)
    by_size = _levels_by_size(path, sweep, factors, levels, design)
    _check_paired(path, design, factors, (levels, *by_size.values()))
    preset = _preset(path, model)
    train = data.get("train", {})
    try:
        TrainConfig(**train)
    except (TypeError, ValueError) as err:
        raise SpecError(f"{path}: [train]: {err}") from None
    tune, holdout, holdout_seed, holdout_split = _tune(path, data, factors, train)
    init = _init(path, sweep.get("init", ""), check_files)
    for key, kind in (("label", str), ("description", str), ("default", bool)):
        if key in sweep and not isinstance(sweep[key], kind):
            raise SpecError(f"{path}: [sweep] {key} must be a {kind.__name__}, got {sweep[key]!r}")
    margin = _margin(path, sweep.get("margin"))
    seeds = _seeds(path, sweep)
    factor = " × ".join(factors)
    return SweepSpec(path.stem, path, factors, levels, by_size, preset, model, dict(train), init,
                     sweep.get("label", factor), sweep.get("description", ""), sweep.get("default", False),
                     design, tune, float(holdout) if tune else 0.0, int(holdout_seed) if tune else 0,
                     holdout_split, margin, seeds)


def _read_sections(path: Path) -> dict[str, Any]:
    """The file's TOML, every section a table of known keys."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"no sweep spec at {path}") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: not valid TOML: {err}") from None
    for section, table in data.items():
        if section not in _SECTIONS:
            raise SpecError(f"{path}: unknown section [{section}]; sections are {sorted(_SECTIONS)}")
        if not isinstance(table, dict):
            raise SpecError(f"{path}: {section} must be a table ([{section}]), got {table!r}")
        unknown = sorted(set(table) - _SECTIONS[section])
        if PACKED in unknown:
            raise SpecError(f"{path}: [{section}] {PACKED}: whether runs train packed is set by PACK (--pack), not "
                            f"by a spec")
        if unknown:
            raise SpecError(f"{path}: [{section}] has unknown key {unknown[0]!r}"
                            f"{did_you_mean(unknown[0], _SECTIONS[section])}; known: {sorted(_SECTIONS[section])}")
    return data


def _factors(path: Path, sweep: dict, data: dict) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...], str]:
    """(factors, each factor's values, design): one factor and its values, or several and a [values] table."""
    if "factors" not in sweep:
        if "values" in data or "design" in sweep:
            raise SpecError(f"{path}: a [values] table and design belong to several factors (factors = [...])")
        factor = _factor_name(path, sweep.get("factor"))
        return (factor,), (tuple(_value_list(path, "[sweep] values", sweep.get("values"))),), "one"
    if "factor" in sweep:
        raise SpecError(f"{path}: [sweep] give factor (one field) or factors (several), not both")
    if "values" in sweep:
        names = sweep["factors"] if isinstance(sweep["factors"], list) and sweep["factors"] else ["depth"]
        raise SpecError(f"{path}: [sweep] values is one factor's list; with factors, give each factor's list in a "
                        f"[values] table ([values] {names[0]} = [...]), or name one factor (factor = "
                        f"\"{names[0]}\")")
    names = sweep["factors"]
    if not isinstance(names, list) or len(names) < 2:
        raise SpecError(f"{path}: [sweep] factors must list two or more fields, got {names!r}")
    factors = tuple(_factor_name(path, f) for f in names)
    if len(set(factors)) != len(factors):
        raise SpecError(f"{path}: [sweep] factors names a field twice: {names!r}")
    table = data.get("values", {})
    missing = [f for f in factors if f not in table]
    extra = sorted(set(table) - set(factors))
    if missing or extra:
        raise SpecError(f"{path}: [values] must give a list for each factor and nothing else "
                        f"({'missing ' + ', '.join(missing) if missing else 'not a factor: ' + ', '.join(extra)})")
    design = sweep.get("design", "grid")
    if design not in DESIGNS:
        raise SpecError(f"{path}: [sweep] design={design!r} is unknown; choose grid or paired")
    # paired lists may repeat a value (embed_dim = [32, 32, 64] with depth = [1, 2, 1]); the settings they
    # pair into may not
    return factors, tuple(tuple(_value_list(path, f"[values] {f}", table[f], unique=design == "grid"))
                          for f in factors), design


def _levels_by_size(path: Path, sweep: dict, factors: tuple[str, ...], levels: tuple, design: str) -> dict[int, tuple]:
    """{image size: each factor's values at it} of `values_by_img_size`."""
    by_size = {}
    for size, vals in sweep.get("values_by_img_size", {}).items():
        where = f"[sweep] values_by_img_size.{size}"
        if not str(size).isdigit():
            raise SpecError(f"{path}: {where} must map an image size to {'a list' if design == 'one' else 'a table'}")
        if design == "one":
            by_size[int(size)] = (tuple(_value_list(path, where, vals)),)
            continue
        if not isinstance(vals, dict) or not vals or not set(vals) <= set(factors):
            raise SpecError(f"{path}: {where} must map factors to their lists at that size, e.g. "
                            f"{{ {factors[0]} = [...] }}")
        by_size[int(size)] = tuple(tuple(_value_list(path, f"{where}.{f}", vals[f], unique=design == "grid"))
                                   if f in vals else lv
                                   for f, lv in zip(factors, levels))
    return by_size


def _check_paired(path: Path, design: str, factors: tuple[str, ...], all_levels: tuple) -> None:
    """A paired design's lists are of one length and pair no setting twice."""
    if design != "paired":
        return
    for lv in all_levels:
        if len({len(v) for v in lv}) != 1:
            raise SpecError(f"{path}: [sweep] design = \"paired\" needs lists of one length, got "
                            f"{', '.join(f'{f}: {len(v)}' for f, v in zip(factors, lv))}")
        if len(set(map(repr, zip(*lv)))) != len(lv[0]):
            raise SpecError(f"{path}: [values] pair the same setting twice: "
                            f"{[dict(zip(factors, s)) for s in zip(*lv)]!r}")


def _preset(path: Path, model: dict) -> str:
    """The [model] preset (taken out of `model`), auto or a known one; no field the dataset sets."""
    preset = model.pop("preset", "auto")
    if preset != "auto" and preset not in PRESETS:
        raise SpecError(f"{path}: [model] preset={preset!r} is unknown; choose auto or one of {sorted(PRESETS)}")
    fixed = sorted(set(model) & set(DATASET_FIELDS))
    if fixed:
        raise SpecError(f"{path}: [model] {fixed[0]} is set by the dataset, not the spec")
    return preset


def _tune(path: Path, data: dict, factors: tuple[str, ...], train: dict) -> tuple[tuple, Any, Any, Any]:
    """(each tuned field and its grid, holdout, holdout_seed, holdout_split) of the [tune] table; a split
    set in [train] without tuning is refused."""
    tune_table = dict(data.get("tune", {}))
    holdout = tune_table.pop("holdout", DEFAULT_HOLDOUT)
    holdout_seed = tune_table.pop("holdout_seed", 0)
    holdout_split = tune_table.pop("holdout_split", "stratified")
    tune = tuple((name, tuple(_value_list(path, f"[tune] {name}", values))) for name, values in tune_table.items())
    clash = sorted({name for name, _ in tune} & set(factors))
    if clash:
        raise SpecError(f"{path}: [tune] {clash[0]} is a factor of the sweep; tune other fields")
    if data.get("tune") is not None:
        if isinstance(holdout, list):
            raise SpecError(f"{path}: [tune] holdout must be one fraction, the validation share, got {holdout!r}: "
                            f"the split is what every tuned value is judged on, so it is not tuned itself")
        try:
            TrainConfig(holdout=holdout, holdout_seed=holdout_seed, holdout_split=holdout_split)
        except (TypeError, ValueError) as err:
            raise SpecError(f"{path}: [tune]: {err}") from None
        if not holdout:
            raise SpecError(f"{path}: [tune] holdout must be above 0: tuning selects on a validation split")
        if not tune:
            raise SpecError(f"{path}: [tune] names no field to tune (e.g. lr = [1e-3, 2e-3, 4e-3])")
    split_defaults = {"holdout": 0.0, "holdout_seed": 0, "holdout_split": "stratified"}
    held = sorted(k for k in set(train) & set(TUNE_SPLIT) if train[k] != split_defaults[k])   # a default is no split
    if held and not tune:
        raise SpecError(f"{path}: [train] {held[0]} sets a validation split, which only a [tune] table uses (the "
                        f"runs would train on less data and nothing would read the split); move it to [tune] "
                        f"or remove it")
    return tune, holdout, holdout_seed, holdout_split


def _init(path: Path, init: str, check_files: bool) -> str:
    """The [sweep] init checkpoint, resolved against the spec's folder and checked to exist (`check_files`)."""
    if init and check_files:
        init_path = (path.parent / Path(init).expanduser()).resolve()
        if not init_path.is_file():
            raise SpecError(f"{path}: [sweep] init={init!r}: no file at {init_path}")
        return str(init_path)
    return init


def _margin(path: Path, margin) -> float | RelativeMargin | None:
    """The [sweep] margin: accuracy points → a fraction, or "N%" of the best setting's error (None: the report's)."""
    if margin is None:
        return None
    try:
        return parse_margin(margin, f"{path}: [sweep] margin")
    except ValueError as err:
        raise SpecError(str(err)) from None


def _seeds(path: Path, sweep: dict) -> tuple[int, ...] | AutoSeeds | None:
    """The [sweep] seeds (None: the command's or the default)."""
    if "seeds" not in sweep:
        return None
    try:
        seeds = parse_seeds(sweep["seeds"])
    except ValueError as err:
        raise SpecError(f"{path}: [sweep] {err}") from None
    return seeds


def spec_of_table(beside: Path, name: str) -> Path | None:
    """The spec that wrote sweep `name`'s table: the copy kept beside it (`beside`; it wins), else, for a table
    written before every sweep kept one, the shipped ablations/sweeps/<name>.toml, else None."""
    shipped = SPEC_DIR / f"{name}.toml"
    return beside if beside.exists() else shipped if shipped.exists() else None


def find_spec(name: str, spec_dir: Path = SPEC_DIR) -> Path:
    path = Path(name)
    if path.suffix == ".toml":
        return path
    candidate = spec_dir / f"{name}.toml"
    if not candidate.exists():
        raise SpecError(f"no sweep named {name!r} in {spec_dir}{did_you_mean(name, available_sweeps(spec_dir))}; "
                        f"available: {available_sweeps(spec_dir)}")
    return candidate
