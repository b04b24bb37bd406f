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

from ablations.analysis.findings import load_correct, pct, seed_ranges
from ablations.analysis.stats import ALPHA, MARGIN, Comparison, Outcome, detectable_difference, interaction_contrasts
from ablations.results.store import ok_rows
from ablations.specs import SweepSpec


def _text(value) -> str:
    """A factor value as a label: 7 (not 7.0), 0.001, pre."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def setting_label(values: Sequence) -> str:
    return " × ".join(_text(v) for v in values)


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
    failed = rows[rows["status"] != "ok"]
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


def tuning_lines(t: Tuning, factor: str, figure_name: str) -> list[str]:
    """The report's account of a tuning: the split, each setting's pick, and any pick at a grid's edge."""
    grid = "; ".join(f"{name} ∈ {{{', '.join(_text(v) for v in g)}}}" for name, g in zip(t.fields, t.grids))
    size = f"{t.val_size:,} images, " if t.val_size else ""
    drawn = "stratified by class" if t.split == "stratified" else "drawn at random, not stratified by class"
    lines = [f"Tuned: every setting was trained at each {grid} on the training set less a validation split "
             f"({size}{100 * t.holdout:.0f} % of it, {drawn}, the same split for every run), and is compared below "
             f"at the value its mean validation accuracy over seeds picks (never the test set). The test "
             f"accuracies below are those of the runs that made each pick: a seed that did well on validation "
             f"may do well on test too, so they can lean slightly high."
             + (f" Under SEEDS=auto the picks were made at the first look, on seeds {seed_ranges(list(t.picked_on))}; "
                f"only the picks trained more seeds after it." if t.picked_on else ""), "",
             f"| {factor} | picked | validation accuracy % at each value (seeds) |", "|---|---|---|"]
    for c in t.choices:
        picked = ", ".join(f"{n}={_text(v)}" for n, v in zip(t.fields, c.chosen))
        curve = "; ".join(f"{setting_label(k)}: {pct(acc)} ({c.seeds[k]})" for k, acc in c.curve.items())
        lines.append(f"| {_text(c.setting)} | {picked} | {curve} |")
    lines.append("")
    for c in t.choices:
        for name in c.at_edge:
            lines.append(f"- **Widen the grid**: {_text(c.setting)} picked {name}="
                         f"{_text(c.chosen[t.fields.index(name)])}, an end of its grid; a value beyond it may be "
                         f"better, so this setting may be compared below its best.")
    image = 1 / t.val_size if t.val_size else None
    for c in t.choices:
        why = close_pick(c, image)
        if why:
            runner = ", ".join(f"{n}={_text(v)}" for n, v in zip(t.fields, c.runner_up))
            lines.append(f"- **A close pick**: {_text(c.setting)} leads {runner} by {100 * c.lead:.2f} points of mean "
                         f"validation accuracy, {why}: another split or another seed could pick the other.")
    if any(c.at_edge for c in t.choices) or any(close_pick(c, image) for c in t.choices):
        lines.append("")
    return lines + [f"![tuning](figures/{figure_name})", ""]


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


def interaction_lines(it: Interaction) -> list[str]:
    a, b = it.factors
    if it.contrasts is None:
        return [f"**Interaction of {a} and {b}: no test** ({it.reason}).", ""]
    shown = [c for c in it.contrasts if c.p_holm < ALPHA]
    within = f"±{100 * it.margin:g} points"
    a1, b1 = it.levels[0][0], it.levels[1][0]
    table = [f"| {a} | {b} | difference of differences (points) [95 % interval] | Holm p: differ / within {within} "
             f"| verdict |", "|---|---|---|---|---|"]
    for c in it.contrasts:
        (ai, bj) = c.a
        outcome = "interaction" if c.outcome() in (Outcome.BETTER, Outcome.WORSE) else c.outcome()
        table.append(f"| {_text(ai)} | {_text(bj)} | {100 * c.diff:+.2f} [{100 * c.low:+.2f}, {100 * c.high:+.2f}] | "
                     f"{c.p_holm:.3f} / {c.p_equiv_holm:.3f} | {outcome} |")
    what = (f"each row: ({a}={{a}} − {a}={_text(a1)}) at {b}={{b}} minus the same at {b}={_text(b1)}; 0 where the "
            f"effect of {a} does not depend on {b}")
    if shown:
        cells = ", ".join(f"{a}={_text(c.a[0])} at {b}={_text(c.a[1])} ({100 * c.diff:+.2f} points)" for c in shown)
        head = (f"**Interaction of {a} and {b} detected** (Holm-adjusted p < {ALPHA}): the effect of {a} depends on "
                f"{b}: {cells}.")
    elif all(c.p_equiv_holm < ALPHA for c in it.contrasts):
        head = (f"**No interaction of {a} and {b} beyond {within}**: every difference of differences is shown "
                f"within {within} (two one-sided tests, Holm-adjusted); read each factor's effect as the same at "
                f"every level of the other, up to that margin.")
    else:
        head = (f"**Interaction of {a} and {b}: inconclusive.** No difference of differences is detected (smallest "
                f"detectable with these seeds and test images ≈ {100 * it.detectable:.1f} points at 80 % power), "
                f"but not every one is shown within {within} either: this does not show that each factor's effect "
                f"is the same at every level of the other.")
    return [head, "", *table, "", f"_{what.format(a='a', b='b')}._", ""]
