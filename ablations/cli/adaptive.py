"""SEEDS=auto in the driver: between looks, each adaptive sweep's design is replayed on its finished runs
(`replay_sweep`) and the command trains exactly the seeds it asks for next; since the replay reads finished
runs alone, a command killed at any point and run again takes the same decisions and trains only what
is missing."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

import pandas as pd

from ablations.analysis.designs import select, with_settings
from ablations.analysis.sequential import Design, gather, replay_plan
from ablations.results.plans import first_look_seeds
from ablations.results.schema import read_table
from ablations.results.store import SweepPaths
from ablations.running.tasks import RunOptions, Task, make_tasks
from ablations.specs import Point, SweepSpec


def replay_sweep(points: list[Point], options: RunOptions, paths: SweepPaths, plan: dict[str, Any],
                 spec: SweepSpec | None = None) -> tuple[Design, tuple[str, ...]]:
    """The design on this sweep's finished runs, keyed by point label, and the settings left out (diverged):
    the runs are those of these points under these options at the plan's seeds (the same run ids the
    command trains), read from the table and their saved predictions. A sweep that tunes (`spec.tune`)
    trains every grid value at the first look's seeds, picks each setting's value on them
    (`designs.select`), and the design runs over the picks alone."""
    every = make_tasks(points, dataclasses.replace(options, seeds=tuple(plan["seeds"]), point_seeds=()))
    mine = {t.run_id: t for t in every}
    table = read_table(paths.rows) if paths.rows.exists() else None
    latest = None
    if table is not None and {"run_id", "status"} <= set(table.columns):
        latest = table.assign(run_id=table["run_id"].astype(str)).drop_duplicates("run_id", keep="last")
        latest = latest[latest["run_id"].isin(list(mine))]
    if spec is not None and spec.tune:
        points, need = _picks(spec, points, latest, mine, plan)
        if need:
            return Design([], {}, need, tuple(plan["looks"])), ()
    rows: list[tuple[Hashable, int, str, str]] = []
    if latest is not None:
        labels = {p.label for p in points}
        rows = [(mine[rid].point.label, mine[rid].seed, str(status), rid)
                for rid, status in zip(latest["run_id"], latest["status"]) if mine[rid].point.label in labels]
    runs, left_out = gather(rows, [p.label for p in points], paths)
    return replay_plan(runs, plan), left_out


def _picks(spec: SweepSpec, points: list[Point], latest: pd.DataFrame | None, mine: dict[str, Task],
           plan: dict[str, Any]) -> tuple[list[Point], dict[Hashable, list[int]]]:
    """(each setting's picked point, {}) once every grid value has run at the first look's seeds, else
    ([], the seeds each grid point still needs)."""
    first = first_look_seeds(plan)
    done = {(mine[rid].point.label, mine[rid].seed) for rid in latest["run_id"]} if latest is not None else set()
    need = {p.label: [s for s in first if (p.label, s) not in done] for p in points}
    need = {k: v for k, v in need.items() if v}
    if need:
        return [], need
    chosen, _ = select(spec, with_settings(spec, latest), picked_on=first)
    picked = {mine[rid].point.label for rid in chosen["run_id"][chosen["status"] == "ok"]}
    return [p for p in points if p.label in picked], {}
