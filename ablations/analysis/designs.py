"""What a sweep of several factors or with tuned fields adds to the one-factor analysis (`findings`).

- Several factors: each setting is a combination, labelled "7 × 2" in a column named after the factors
  ("patch_size × depth"), so the pairwise analysis runs over combinations as over one factor's values.
  A full grid of two factors also gets the interaction test (`stats.interaction_contrasts`): does the
  effect of one factor depend on the other?
- Tuned fields: every setting was trained at every value of a small grid on the training set less a
  validation split; `select` picks each setting's value by mean validation accuracy over seeds (never
  test accuracy) and keeps the runs at the picks, which are then compared on the test set as usual.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ablations.analysis.predictions import load_correct
from ablations.analysis.stats import MARGIN, Comparison, detectable_difference, interaction_contrasts
from ablations.results.store import failed_rows, ok_rows
from ablations.specs import SweepSpec


def label_text(value) -> str:
    """A factor value as a label: 7 (not 7.0), 0.001, pre."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def setting_label(values: Sequence) -> str:
    return " × ".join(label_text(v) for v in values)


def with_settings(spec: SweepSpec, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with a column named `spec.factor` holding each row's setting: for several factors, the
    label of its combination; for one factor the column is already there."""
    if len(spec.factors) == 1 or rows.empty:
        return rows
    rows = rows.copy()
    rows[spec.factor] = [setting_label(v) for v in rows[list(spec.factors)].itertuples(index=False)]
    return rows


def setting_order(spec: SweepSpec) -> list:
    """Every setting the spec lists (at any image size), as the factor column holds it."""
    if len(spec.factors) == 1:
        return [v for values in (spec.values, *spec.values_by_img_size.values()) for v in values]
    sizes = [None, *spec.levels_by_img_size]
    return [setting_label(s) for size in sizes for s in spec.settings_for(size)]


# --- tuned settings --------------------------------------------------------------------------------

@dataclass
class Choice:
    """One setting's tuning: the validation accuracy at each grid value (mean over seeds) and the pick."""
    setting: Hashable
    curve: dict[tuple, float]          # tuned values -> mean validation accuracy
    seeds: dict[tuple, int]            # tuned values -> seeds behind the mean
    chosen: tuple
    at_edge: list[str] = field(default_factory=list)   # tuned fields whose pick is the first or last grid value
    lead: float | None = None          # the pick's mean validation accuracy above the runner-up's (None: one value)
    runner_up: tuple | None = None
    lead_se: float | None = None       # the standard error of that lead over seeds (None: fewer than 2 seeds a side)


@dataclass
class Tuning:
    fields: tuple[str, ...]
    grids: tuple[tuple, ...]
    holdout: float
    val_size: int | None
    choices: list[Choice]
    split: str = "random"      # how the validation split was drawn: stratified by class, or random
    picked_on: tuple[int, ...] | None = None   # the seeds the picks were made on (None: every seed)


def _close(a, b) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _grid_index(value, grid: tuple) -> int | None:
    return next((i for i, g in enumerate(grid) if _close(value, g)), None)


def select(spec: SweepSpec, rows: pd.DataFrame, picked_on: Sequence[int] | None = None) -> tuple[pd.DataFrame, Tuning]:
    """(each setting's ok rows at its picked values, how each was picked). The pick maximises the mean
    validation accuracy over seeds (only those `picked_on` where given: a SEEDS=auto sweep picks at its first look and
    trains more seeds of the pick alone); a tie goes to the value listed first. ValueError when the rows
    carry no validation accuracy (a table from before tuning, or runs without a holdout)."""
    names = [name for name, _ in spec.tune]
    grids = tuple(grid for _, grid in spec.tune)
    ok = ok_rows(rows)
    if "val_acc" not in ok or ok["val_acc"].isna().any():
        raise ValueError("some runs have no validation accuracy (val_acc): a tuned sweep selects on it; rerun them")
    keep, choices = [], []
    for setting, every in ok.groupby(spec.factor, sort=False):
        tuned = every[names].itertuples(index=False)
        order = [tuple(_grid_index(v, g) for v, g in zip(t, grids)) for t in tuned]
        every = every.assign(_grid=order)
        group = every if picked_on is None else every[every["seed"].astype(int).isin(list(picked_on))]
        if group.empty:
            continue
        curve = group.groupby("_grid")["val_acc"].mean()
        seeds = group.groupby("_grid")["seed"].nunique()
        best = max(curve.index, key=lambda k: (curve[k], [-(i if i is not None else 1e9) for i in k]))
        values = {k: tuple(g[i] if i is not None else None for i, g in zip(k, grids)) for k in curve.index}
        edge = [name for name, i, g in zip(names, best, grids) if len(g) > 1 and i in (0, len(g) - 1)]
        others = [k for k in curve.index if k != best]
        second = max(others, key=lambda k: curve[k]) if others else None
        choices.append(Choice(setting, {values[k]: float(curve[k]) for k in sorted(curve.index, key=str)},
                              {values[k]: int(seeds[k]) for k in curve.index}, values[best], edge,
                              None if second is None else float(curve[best] - curve[second]),
                              None if second is None else values[second],
                              None if second is None else _lead_se(group, best, second)))
        keep.append(every[every["_grid"] == best].drop(columns="_grid"))
    val_size = int(ok["val_size"].dropna().iloc[0]) if "val_size" in ok and ok["val_size"].notna().any() else None
    chosen = pd.concat(keep) if keep else ok.iloc[0:0]
    failed = failed_rows(rows)
    splits = ok["holdout_split"].dropna().astype(str).unique() if "holdout_split" in ok else []
    split = splits[0] if len(splits) == 1 else "random"   # blank: drawn before the split was recorded
    return pd.concat([chosen, failed]), Tuning(tuple(names), grids, spec.holdout, val_size, choices, split,
                                               None if picked_on is None else tuple(int(s) for s in picked_on))


def _lead_se(group: pd.DataFrame, best: tuple, second: tuple) -> float | None:
    """The standard error over seeds of the pick's lead in mean validation accuracy: from the per-seed
    differences where both values ran under the same seeds, else Welch's; None below 2 seeds a side."""
    a = group[group["_grid"] == best].groupby("seed")["val_acc"].mean()
    b = group[group["_grid"] == second].groupby("seed")["val_acc"].mean()
    if min(len(a), len(b)) < 2:
        return None
    if set(a.index) == set(b.index):
        d = (a - b.loc[a.index]).to_numpy(dtype=float)
        return float(d.std(ddof=1) / math.sqrt(len(d)))
    return float(math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))


def close_pick(c: Choice, image: float | None) -> str:
    """Why a pick is close ("" when it is not): a lead under 2 standard errors over seeds, or under one
    validation image per seed."""
    if c.lead is None:
        return ""
    if c.lead_se is not None and c.lead < 2 * c.lead_se:
        return f"under 2 standard errors of that lead over seeds ({100 * 2 * c.lead_se:.2f} points)"
    if image is not None and c.lead < image:
        return f"less than one validation image per seed ({100 * image:.2f} points)"
    return ""


# --- two-factor grids ------------------------------------------------------------------------------

@dataclass
class Interaction:
    factors: tuple[str, str]
    levels: tuple[list, list]
    contrasts: list[Comparison] | None
    reason: str = ""            # why there is no test
    detectable: float = math.nan
    margin: float = MARGIN


def interaction(spec: SweepSpec, ok: pd.DataFrame, preds_dir, margin: float = MARGIN) -> Interaction:
    """The interaction test of a full two-factor grid over its ok runs (each cell needs two seeds)."""
    a, b = spec.factors
    levels_a = [v for v in dict.fromkeys(ok[a])]
    levels_b = [v for v in dict.fromkeys(ok[b])]
    levels_a = sorted(levels_a, key=lambda v: _order_key(spec, 0, v))
    levels_b = sorted(levels_b, key=lambda v: _order_key(spec, 1, v))
    found = Interaction((a, b), (levels_a, levels_b), None, margin=margin)
    cells = {(x, y): g for (x, y), g in ok.groupby([a, b])}
    if len(cells) < len(levels_a) * len(levels_b) or len(levels_a) < 2 or len(levels_b) < 2:
        found.reason = "the grid has an empty cell or a factor with one level"
        return found
    if min(g["seed"].nunique() for g in cells.values()) < 2:
        found.reason = "one seed per cell: an interaction needs the spread between seeds (SEEDS=0,1,2)"
        return found
    correct, reason = load_correct(ok, spec.factor, preds_dir)
    if correct is None:
        found.reason = reason
        return found
    by_cell = {(x, y): correct[setting_label((x, y))] for (x, y) in cells}
    found.contrasts = interaction_contrasts(by_cell, levels_a, levels_b, margin)
    found.detectable = detectable_difference(float(np.median([c.se for c in found.contrasts])), len(found.contrasts),
                                             float(np.median([c.df for c in found.contrasts])))
    return found


def _order_key(spec: SweepSpec, i: int, value) -> tuple:
    levels = [lv[i] for lv in (spec.levels, *spec.levels_by_img_size.values())]
    flat = [v for lv in levels for v in lv]
    index = next((k for k, v in enumerate(flat) if _close(v, value)), len(flat))
    return (index, str(value))
