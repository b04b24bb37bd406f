"""A sweep's section of the report: its findings (`findings`), convergence (`budget`), sittings and shared runs
(`sittings`), tuning and grid (`designs`) computed from its rows; its figures drawn (`figures`); its lines written by
`wording`. `report.py` reads the OUT and calls it once per sweep."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablations.analysis import designs, findings, sittings, wording
from ablations.analysis import figures as figs
from ablations.analysis.answers import Answer, answer
from ablations.analysis.budget import (
    below_longer_budget,
    still_learning,
)
from ablations.analysis.stats import MARGIN
from ablations.choices import AUGMENTATION, RelativeMargin, default_augmentation
from ablations.results.schema import DEFAULT_WHEN_BLANK
from ablations.results.store import SweepPaths, Tables, ok_rows
from ablations.specs import SweepSpec
from bench.training.recipe import TrainConfig
from vit.config import ViTConfig


def _order(spec: SweepSpec, rows: pd.DataFrame) -> list:
    """The sweep's settings in the spec's order (settings the spec lacks go last, sorted)."""
    present = list(ok_rows(rows)[spec.factor].unique())
    order = [v for v in dict.fromkeys(designs.setting_order(spec)) if v in present]
    return order + sorted(v for v in present if v not in order)


def _as_spec_names(rows: pd.DataFrame, factor: str, order: list) -> pd.DataFrame:
    """The rows with each setting as its spec names it (a table reads mlp_ratio 1 back as 1.0), so that every
    sentence, table and figure made from them names it one way."""
    if factor not in rows:
        return rows
    named = {value: value for value in order}
    return rows.assign(**{factor: rows[factor].map(lambda v: named.get(v, v))})


def as_analysed(spec: SweepSpec, rows: pd.DataFrame, read: Tables) -> pd.DataFrame:
    """The rows of a sweep's table that its section analyses (under SEEDS=auto, its design's runs alone), each
    setting named as its spec names it."""
    order = _order(spec, rows)
    return _as_spec_names(findings.as_designed(rows, spec.factor, order, read.paths(spec.name), read)[0], spec.factor,
                          order)


def _held_fixed(rows: pd.DataFrame, spec: SweepSpec) -> list[tuple[str, Any, bool]]:
    """What the sweep held fixed, as (field, value, is the dataset's default): every model field, the dataset,
    epochs and lr, any other training field set away from its default (a spec's [train] or --set), and the
    augmentation, each with one value across the sweep's ok runs. An augmentation value None: blank cells
    without a dataset default to fill them."""
    ok = ok_rows(rows)
    recipe = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    fields = [f.name for f in dataclasses.fields(ViTConfig)] + ["dataset", "epochs", "lr"]
    fields += [name for name in recipe if name not in (*fields, *DEFAULT_WHEN_BLANK) and name in ok
               and ok[name].nunique(dropna=False) == 1 and not _is_default(ok[name].iloc[0], recipe[name])]
    fixed: list[tuple[str, Any, bool]] = [(name, ok[name].iloc[0], False) for name in fields
                                          if name not in spec.varied and name in ok and ok[name].nunique(dropna=False) == 1]
    for name in DEFAULT_WHEN_BLANK:
        if name in spec.varied:
            continue
        values = ok[name] if name in ok else pd.Series([None] * len(ok), dtype=object)
        default = _augmentation_default(ok, name)   # a blank cell (older rows) is the dataset's default
        values = values.map(lambda v, d=default: d if (v is None or v != v or v == "") and d is not None else v)
        if values.nunique(dropna=False) == 1:
            value = values.iloc[0]
            if pd.isna(value) or value == "":
                fixed.append((name, None, True))
            else:
                shown = int(value) if name == "crop_padding" else bool(value) if isinstance(value, (bool, np.bool_)) \
                    else value
                fixed.append((name, shown, default is not None and str(shown) == str(default)))
    return fixed


def _augmentation_default(ok: pd.DataFrame, name: str):
    """The dataset's own value of an augmentation field for these runs (one dataset, one image size), or None."""
    datasets = ok["dataset"].dropna().astype(str).unique() if "dataset" in ok else []
    sides = pd.to_numeric(ok["img_size"], errors="coerce").dropna().unique() if "img_size" in ok else []
    if len(datasets) != 1 or len(sides) != 1 or datasets[0] not in (*AUGMENTATION, "imagefolder"):
        return None
    return default_augmentation(datasets[0], int(sides[0]))[name]


def _is_default(value, default) -> bool:
    """A table cell equal to a TrainConfig default (blank cells are the default; 1 and 1.0, "True" and True agree)."""
    if value is None or (isinstance(value, float) and value != value) or value == "":
        return True
    if isinstance(default, bool):
        return str(value).strip().lower() in (("1", "1.0", "true") if default else ("0", "0.0", "false"))
    try:
        return float(value) == float(default)
    except (TypeError, ValueError):
        return str(value) == str(default)

@dataclasses.dataclass
class SweepPage:
    """A sweep's section: its lines, its answer for the report's findings table, its pairs for verdicts.csv and its
    settings for settings.csv."""
    lines: list[str]
    answer: Answer | None = None
    pairs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    settings: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def sweep_section(spec: SweepSpec, rows: pd.DataFrame, read: Tables, figures: Path,
                  tuning: designs.Tuning | None = None, margin: float = MARGIN,
                  sweeps_of: dict[str, set[str]] | None = None, budgets: pd.DataFrame | None = None) -> SweepPage:
    """`read`: the OUT's record; `budgets`: every standing row under it, for runs of the same models trained
    for more epochs."""
    sweep, factor, order = spec.name, spec.factor, _order(spec, rows)
    rows = _as_spec_names(rows, factor, order)
    paths, phase = read.paths(sweep), read.cost_phase(sweep)
    given = spec.margin or margin
    if isinstance(given, RelativeMargin):   # a share of the best setting's error: resolved on these runs
        means = pd.to_numeric(ok_rows(rows)["test_acc"], errors="coerce").groupby(ok_rows(rows)[factor]).mean()
        given = given.resolve(float(means.max())) if len(means) and means.notna().any() else MARGIN
    f, rows, design_note = findings.analyse_sweep(rows, factor, order, paths, phase, given, read)
    margin = f.margin
    ok = ok_rows(rows)
    seeds = sorted({int(s) for s in ok["seed"]})
    devices = ", ".join(f"{d} ({n})" for d, n in ok.groupby(["device", "device_name"]).size().index)
    fig = figures / f"{sweep}.png"
    history = read.history(sweep) if paths.history.exists() else None
    classes = int(pd.to_numeric(ok["num_classes"], errors="coerce").max()) if "num_classes" in ok and \
        pd.to_numeric(ok["num_classes"], errors="coerce").notna().any() else None
    convergence = still_learning(history if history is not None else pd.DataFrame(), ok, factor, classes,
                                 below_longer_budget(ok, budgets if budgets is not None else pd.DataFrame(), factor,
                                                     margin), order)
    said = wording.not_converged(convergence, factor, len(f.settings))
    learning = said if not convergence.converged else ""
    shown = findings.setting_rows(f)
    if len(f.settings) == 1 and isinstance(factor, str):   # one setting: its runs' spread, not six one-point panels
        one = f.settings[0]
        figs.seed_spread(ok.loc[ok[factor] == one.value, "test_acc"].astype(float).tolist(), one.acc, fig,
                         f"{sweep}: {factor}={one.value} over {len(one.seeds)} seeds on {devices}"
                         + (" (not converged)" if learning else ""))
    else:
        figs.sweep_figure(shown, fig, spec.label, device=devices, note="not converged" if learning else "")
    described = f"_{spec.description}._ " if spec.description else ""
    sitting = wording.sittings_line(sittings.check_sittings(ok, factor), factor)
    shared = wording.shared_line(factor, sittings.shared_settings(sweep, factor, f.verdict, ok, sweeps_of or {}))
    context = " ".join(t for t in (wording.cost_sentence(f) if len(f.settings) > 1 else "", shared,
                                   *wording.sharing_note(ok, phase is not None), wording.held_fixed(_held_fixed(rows, spec)))
                       if t)
    lines = [described + wording.runs_line(seeds, sorted(ok["dataset"].astype(str).unique()), f.test_size, devices), "",
             *(_tuning_lines(spec, tuning, figures) if tuning else []),
             wording.unconverged_headline(wording.verdict_sentence(f)) if learning else wording.verdict_sentence(f), "",
             *([said, ""] if said else []), *([wording.design_note(design_note), ""] if design_note else []),
             *([sitting, ""] if sitting else []), context, "",
             wording.table_markdown(f) + (f" {noise}" if (noise := wording.components_markdown(f)) else ""), ""]
    if spec.design == "grid" and len(spec.factors) == 2:
        lines += _grid_lines(spec, f, ok, paths, figures, devices, margin)
    if f.comparisons:
        lines += [wording.comparisons_markdown(f), ""]
    links = [wording.figure_link(f"{sweep}", fig.name)]
    if history is not None:
        curves = figs.learning_curves(history, rows, factor, figures / f"{sweep}-curves.png", order, sweep=sweep)
        links.append(wording.figure_link(f"{sweep} learning curves", curves.name))
    lines += [" ".join(links), "", wording.figure_caption(f, spec.label, devices, shown), ""]
    found = answer(f, sweep, spec.description or spec.label)
    found.unconverged = bool(learning)
    return SweepPage(lines, found, wording.pair_rows(f, sweep), wording.setting_rows_csv(f, sweep))


def _tuning_lines(spec: SweepSpec, tuning: designs.Tuning, figures: Path) -> list[str]:
    curves = {c.setting: c.curve for c in tuning.choices}
    picks = {c.setting: c.chosen for c in tuning.choices}
    fig = figs.tuning_curves(curves, picks, ", ".join(tuning.fields), figures / f"{spec.name}-tuning.png",
                             f"{spec.name}: validation accuracy against {', '.join(tuning.fields)} (ring: the pick)")
    return wording.tuning_lines(tuning, spec.factor, fig.name)


def _grid_lines(spec: SweepSpec, f: findings.SweepFindings, ok: pd.DataFrame, paths: SweepPaths, figures: Path,
                devices: str, margin: float = MARGIN) -> list[str]:
    """A two-factor grid's heat maps (accuracy with its interval, GMACs, training throughput) and its
    interaction test."""
    a, b = spec.factors
    cells = []
    for s in f.settings:
        runs = ok[ok[spec.factor] == s.value]
        step = s.train.get("throughput_img_s")
        cells.append({a: runs[a].iloc[0], b: runs[b].iloc[0], "acc_mean": s.acc.mean, "acc_low": s.acc.low,
                      "acc_high": s.acc.high, "gmacs": s.gmacs,
                      "train_img_s": step.median if step else float(runs["train_throughput_img_s"].median())})
    phase = all(s.train.get("throughput_img_s") for s in f.settings)
    hosts = ", ".join(f"{h} ({n})" for h, n in ok.groupby(["host", "device_name"]).size().index) \
        if "host" in ok and ok["host"].notna().all() else devices
    source = wording.throughput_source(f.cost if phase else None, hosts)
    fig = figs.grid_heatmaps(pd.DataFrame(cells), a, b, figures / f"{spec.name}-grid.png",
                             f"{spec.label} on {devices}: each cell's mean over seeds", throughput_from=source)
    it = designs.interaction(spec, ok, paths.preds, margin)
    return [wording.figure_link(f"{spec.name} grid", fig.name), "",
            wording.grid_caption(source), "",
            *wording.interaction_lines(it)]


