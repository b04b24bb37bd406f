"""SEEDS=auto in the driver: between looks, each adaptive sweep's design is replayed on its finished runs
(`replay_sweep`) and the command trains exactly the seeds it asks for next; since the replay reads finished
runs alone, a command killed at any point and run again takes the same decisions and trains only what
is missing."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from ablations.analysis.sequential import Design, gather, replay_plan
from ablations.results.schema import read_table
from ablations.results.store import SweepPaths
from ablations.running.tasks import RunOptions, make_tasks
from ablations.specs import Point


def replay_sweep(points: list[Point], options: RunOptions, paths: SweepPaths, plan: dict[str, Any]
                 ) -> tuple[Design, tuple[str, ...]]:
    """The design on this sweep's finished runs, keyed by point label, and the settings left out (diverged):
    the runs are those of these points under these options at the plan's seeds (the same run ids the
    command trains), read from the table and their saved predictions."""
    every = make_tasks(points, dataclasses.replace(options, seeds=tuple(plan["seeds"]), point_seeds=()))
    mine = {t.run_id: t for t in every}
    table = read_table(paths.rows) if paths.rows.exists() else None
    rows: list[tuple[Hashable, int, str, str]] = []
    if table is not None and {"run_id", "status"} <= set(table.columns):
        latest = table.assign(run_id=table["run_id"].astype(str)).drop_duplicates("run_id", keep="last")
        rows = [(mine[rid].point.label, mine[rid].seed, str(status), rid)
                for rid, status in zip(latest["run_id"], latest["status"]) if rid in mine]
    runs, left_out = gather(rows, [p.label for p in points], paths)
    return replay_plan(runs, plan), left_out
