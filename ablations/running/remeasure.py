"""`make cost OUT=…` (`python -m ablations cost`): the speed of every point already trained under an OUT,
measured again in one interleaved cost phase (`ablations.running.cost`), for a sweep run with `COST_ROUNDS=0` or
on a machine too busy to time (a laptop, a shared server). Each sweep's cost table gets the phase (the
report reads its newest complete phase), and its training rows get their config's inference figures,
as a sweep's own phase would have given them. Never trains."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pandas as pd
import torch

from ablations.results.migrate import check_rewritable, rewrite_table
from ablations.results.schema import ABLATION_COLUMNS
from ablations.results.store import (
    SweepPaths,
    Tables,
    is_ok,
    model_key,
    ok_rows,
    out_refusal,
    row_figures,
    sweep_lock,
)
from ablations.running.cost import CostPlan, run_cost_phases
from ablations.specs import Point, SpecError, load_spec, spec_of_table
from bench.env import environment
from bench.training.recipe import TrainConfig
from vit import ViTConfig


def trained_points(out: Path) -> dict[str, list[Point]]:
    """{sweep: one point per distinct model and recipe among its finished runs} under `out`: of each sweep's
    table, the rows its report shows (`Tables.shown`: its newest experiment, or its SEEDS=auto design's)."""
    found: dict[str, list[Point]] = {}
    read = Tables(out)
    for sweep in read.names():
        rows = ok_rows(_shown(read, sweep))
        points: dict[tuple, Point] = {}
        for _, row in rows.iterrows() if "run_id" in rows else ():
            model, recipe = ViTConfig.from_row(row), TrainConfig.from_row(row)
            points.setdefault((model_key(model), str(sorted(recipe.identity().items()))),
                              Point(sweep, "", None, model, recipe))
        if points:
            found[sweep] = list(points.values())
    return found


def _shown(read: Tables, sweep: str) -> pd.DataFrame:
    """The standing rows its report shows (`Tables.shown`), by the varied factors of the spec that wrote the table
    (every standing row where no spec can be read: a `train` table)."""
    paths, rows = read.paths(sweep), read.standing(sweep)
    source = spec_of_table(paths.spec, sweep)
    if source is None or rows.empty:
        return rows
    try:
        varied = load_spec(source, check_files=False).varied
    except SpecError:
        return rows
    return read.shown(sweep, varied)[0] if set(varied) <= set(rows.columns) else rows


def fill_rows(path: Path, phase: pd.DataFrame, device_name: str | None = None) -> tuple[int, int]:
    """The table's finished rows trained on `device_name` (every row where None) get their config's inference
    figures from `phase`: (rows changed, rows trained on another device, left as they were: a row's speed
    columns describe the device it names)."""
    figures = row_figures(phase)
    other = 0

    def change(row: dict[str, str], as_read: dict) -> bool:
        nonlocal other
        if not is_ok(row):
            return False
        if device_name is not None and row.get("device_name", "") not in ("", device_name):
            other += 1
            return False
        mine = figures.get(model_key(ViTConfig.from_row(as_read)))
        if not mine:
            return False
        before = dict(row)
        # what a sweep's own cost phase gives its rows (the worker keeps the figures the table has columns for)
        row.update({k: "" if v is None else str(v) for k, v in mine.items() if k in ABLATION_COLUMNS})
        return row != before
    return rewrite_table(path, change), other


def measure_out(out: Path, plan: CostPlan, device: torch.device, graphs: bool = True,
                progress: bool = True) -> dict[str, tuple[int, int, int]]:
    """{sweep: (points measured, rows filled, rows trained on another device and left as they were)}; the
    phase itself goes to each sweep's cost table under its own device. ValueError naming `out` when it
    holds no finished run."""
    refused = out_refusal(out)
    if refused:
        raise ValueError(refused)
    points_of = trained_points(out)
    if not points_of:
        raise ValueError(f"--out {out}: no finished run under {out / 'ablations'}; run a sweep into it first")
    with contextlib.ExitStack() as locks:   # no sweep writes these tables meanwhile
        for sweep in points_of:
            locks.enter_context(sweep_lock(SweepPaths.of(out, sweep), sweep))
        for sweep in points_of:   # a table the rows' figures cannot be written into is said before measuring
            check_rewritable(SweepPaths.of(out, sweep).rows)
        phases = run_cost_phases([(sweep, points, SweepPaths.of(out, sweep).cost) for sweep, points in points_of.items()],
                                 plan, device, progress=progress, graphs=graphs, reuse=False)
        name = environment(device)["device_name"]
        return {sweep: (len(points_of[sweep]), *fill_rows(SweepPaths.of(out, sweep).rows, phases[sweep], name))
                for sweep in points_of}
