"""SEEDS=auto: a sweep trained look by look (`ablations.analysis.sequential`), more seeds only where its answer
is still open.

The design a sweep ran under is kept beside its table (`<sweep>-design.json`: the looks, α, the equivalence
margin and the seeds drawn from), so the report replays the same looks on the same runs. Between looks the
driver replays the design on the runs finished so far (`replay_sweep`) and trains exactly the seeds it asks
for next; since the replay reads finished runs alone, a command killed at any point and run again takes
the same decisions and trains only what is missing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ablations.analysis.sequential import Design, replay
from ablations.analysis.stats import ALPHA, MARGIN
from ablations.choices import LOOKS, check_looks
from ablations.results.schema import read_table
from ablations.results.store import SweepPaths, load_preds
from ablations.running.tasks import RunOptions, make_tasks
from ablations.specs import Point
from bench.io.atomic import write_atomic

PLAN_VERSION = 1


def plan_file(paths: SweepPaths) -> Path:
    return paths.rows.with_name(f"{paths.rows.stem}-design.json")


def new_plan(margin: float | None = None, classes: int | None = None, looks: Sequence[int] = LOOKS,
             alpha: float = ALPHA) -> dict[str, Any]:
    """The design of a sweep trained with SEEDS=auto: its looks, α, the equivalence margin (the spec's, else
    the default), the seeds drawn from, in order, and chance (1 / classes: a leader at chance stops it)."""
    looks = check_looks(looks)
    return {"version": PLAN_VERSION, "looks": list(looks), "alpha": alpha, "margin": margin or MARGIN,
            "seeds": list(range(looks[-1])), "chance": 1.0 / classes if classes else None}


def write_plan(paths: SweepPaths, plan: dict[str, Any]) -> None:
    """Record that the sweep trains under adaptive seeds, with what the report needs to replay its looks."""
    plan_file(paths).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(plan_file(paths), (json.dumps(plan, indent=1) + "\n").encode())


def read_plan(paths: SweepPaths) -> dict[str, Any] | None:
    """The sweep's adaptive design, or None where it trained under fixed seeds; ValueError naming the file
    for one that cannot be read."""
    path = plan_file(paths)
    if not path.exists():
        return None
    try:
        plan = json.loads(path.read_text())
        check_looks(plan["looks"])
        if len(plan["seeds"]) < plan["looks"][-1] or not 0 < float(plan["alpha"]) < 1 or not 0 < float(plan["margin"]):
            raise ValueError("seeds, alpha or margin out of range")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a design file of this version ({err}); remove it, or rerun the sweep "
                         f"with SEEDS=auto to write it again") from None
    return plan


def forget_plan(paths: SweepPaths) -> bool:
    """A command with fixed seeds defines the sweep again: its adaptive design no longer applies."""
    path = plan_file(paths)
    if path.exists():
        path.unlink()
        return True
    return False


def gather(rows: Iterable[tuple[Hashable, int, str, str]], keys: Sequence[Hashable], paths: SweepPaths
           ) -> tuple[dict[Hashable, tuple[list[int], np.ndarray, np.ndarray]], tuple[Hashable, ...]]:
    """The design's input from a sweep's latest row per run, each given as (setting, seed, status, run_id):
    runs[setting] = (seeds, correct (runs, n), predictions) of its ok runs with saved predictions, and the
    settings left out because one of their runs diverged (it would diverge again at the same seed, so the
    setting cannot reach the seeds a look needs; the report lists its failed runs)."""
    found: dict[Hashable, tuple[list[int], list[np.ndarray], list[np.ndarray]]] = {k: ([], [], []) for k in keys}
    diverged: set = set()
    for key, seed, status, rid in rows:
        if key not in found:
            continue
        if status == "diverged":
            diverged.add(key)
        if status != "ok" or not paths.preds_file(rid).exists():
            continue
        pred, target = load_preds(paths.preds_file(rid))
        seeds, correct, preds = found[key]
        seeds.append(int(seed))
        correct.append((pred == target).astype(float))
        preds.append(np.asarray(pred))
    runs = {k: (seeds, np.stack(c) if c else np.zeros((0, 0)), np.stack(p) if p else np.zeros((0, 0), dtype=int))
            for k, (seeds, c, p) in found.items() if k not in diverged}
    return runs, tuple(k for k in keys if k in diverged)


def replay_plan(runs: dict[Hashable, tuple[list[int], np.ndarray, np.ndarray]], plan: dict[str, Any]) -> Design:
    """The plan's design on `gather`'s runs."""
    return replay(runs, plan["looks"], float(plan["margin"]), float(plan["alpha"]), plan["seeds"], plan.get("chance"))


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


def describe(design: Design, name: str, left_out: Sequence[Hashable] = ()) -> str:
    """One line: where the sweep's design stands."""
    if left_out:
        name = f"{name} (left out, diverged: {', '.join(map(str, left_out))})"
    if not design.looks:
        return f"{name}: look 1 of {len(design.plan)} needs {design.plan[0]} seeds of every setting"
    last = design.final
    assert last is not None
    decided = ", ".join(f"{k} ({d.outcome} at look {d.look + 1})" for k, d in last.decided.items()) or "none"
    if last.at_chance:
        return (f"{name}: stopped at look {last.index + 1}: even the leader, {last.leader}, is within noise of "
                f"chance (nothing learned the task at this budget; more seeds would not change that)")
    if design.done:
        return (f"{name}: stopped at look {last.index + 1} of {len(design.plan)} ({last.seeds} seeds); leader "
                f"{last.leader}; decided against it: {decided}")
    return (f"{name}: look {last.index + 1} ({last.seeds} seeds) leaves {len(design.need)} setting(s) open "
            f"(leader {last.leader}; decided: {decided}); they train to {design.plan[last.index + 1]} seeds")
