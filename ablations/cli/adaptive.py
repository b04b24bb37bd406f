"""SEEDS=auto in the driver (`run_adaptive`): between looks, each adaptive sweep's design is replayed on its
finished runs (`replay_sweep`, the same replay the report makes) and the command trains exactly the seeds it
asks for next; since the replay reads finished runs alone, a command killed at any point and run again takes
the same decisions and trains only what is missing. Also what a dry run says SEEDS=auto may train, and the
summaries of a sweep's looks merged into one."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import math
import sys
from collections.abc import Callable, Hashable
from typing import Any

import pandas as pd

from ablations.analysis.designs import select, with_settings
from ablations.analysis.sequential import Design, gather, replay_gathered
from ablations.analysis.wording.verdicts import seed_ranges
from ablations.choices import OBRIEN_FLEMING, AutoSeeds, RelativeMargin
from ablations.results import seed_design
from ablations.results.identity import experiment_id
from ablations.results.seed_design import first_look_seeds
from ablations.results.store import SweepPaths, Tables, is_ok, ok_rows
from ablations.running.executors import Executor
from ablations.running.runner import SweepSummary
from ablations.running.tasks import RunOptions, Task, make_tasks
from ablations.specs import Point, SweepSpec
from bench.env import resolve_device
from bench.units import count


def replay_sweep(points: list[Point], options: RunOptions, paths: SweepPaths, design_file: dict[str, Any],
                 spec: SweepSpec | None = None) -> tuple[Design, tuple[str, ...]]:
    """The design on this sweep's finished runs, keyed by point label, and the settings left out (diverged):
    the runs are those of these points under these options at the design file's seeds (the same run ids the
    command trains), read from the table and their saved predictions. A sweep that tunes (`spec.tune`)
    trains every grid value at the first look's seeds, picks each setting's value on them
    (`designs.select`), and the design runs over the picks alone."""
    every = make_tasks(points, dataclasses.replace(options, seeds=tuple(design_file["seeds"]), point_seeds=()))
    mine = {t.run_id: t for t in every}
    read = Tables(paths.out)   # read afresh: the runs of the looks so far
    latest = None
    if {"run_id", "status"} <= set(read.rows(paths.rows.stem).columns):
        latest = read.standing(paths.rows.stem)
        latest = latest.assign(run_id=latest["run_id"].astype(str))
        latest = latest[latest["run_id"].isin(list(mine))]
    if spec is not None and spec.tune:
        points, need = _picks(spec, points, latest, mine, design_file)
        if need:
            return Design([], {}, need, tuple(design_file["looks"])), ()
    rows: list[tuple[Hashable, int, str, str]] = []
    if latest is not None:
        labels = {p.label for p in points}
        rows = [(mine[rid].point.label, mine[rid].seed, str(status), rid)
                for rid, status in zip(latest["run_id"], latest["status"]) if mine[rid].point.label in labels]
    return replay_gathered(*gather(rows, [p.label for p in points], paths), design_file)


def _picks(spec: SweepSpec, points: list[Point], latest: pd.DataFrame | None, mine: dict[str, Task],
           design_file: dict[str, Any]) -> tuple[list[Point], dict[Hashable, list[int]]]:
    """(each setting's picked point, {}) once every grid value has run at the first look's seeds, else
    ([], the seeds each grid point still needs)."""
    first = first_look_seeds(design_file)
    done = {(mine[rid].point.label, mine[rid].seed) for rid in latest["run_id"]} if latest is not None else set()
    need = {p.label: [s for s in first if (p.label, s) not in done] for p in points}
    need = {k: v for k, v in need.items() if v}
    if need:
        return [], need
    chosen, _ = select(spec, with_settings(spec, latest), picked_on=first)
    picked = {mine[rid].point.label for rid in ok_rows(chosen)["run_id"]}
    return [p for p in points if p.label in picked], {}


def auto_train(args: argparse.Namespace) -> str:
    """How SEEDS=auto trains its seeds (`--auto-train`): look or cap; auto is look on either device."""
    given = getattr(args, "auto_train", "auto") or "auto"
    return "look" if given == "auto" else given


def to_the_cap(design: Design, order: list[int]) -> dict[Hashable, list[int]]:
    """The seeds a look asks for (`design.need`), widened for AUTO_TRAIN=cap: each setting it asks for trains
    every seed up to the cap (the seeds it needs now and every one past what it has), so the looks after it find
    their runs there. A tuned sweep's grid, asked for before its picks are made (no `have` yet), is asked as is."""
    cap = order[:design.schedule[-1]]
    return {k: [s for i, s in enumerate(cap) if s in need or i >= design.have[k]] if k in design.have else need
            for k, need in design.need.items()}


def dry_run_line(auto: AutoSeeds, points: int, spec: SweepSpec, how: str = "look") -> str:
    """What SEEDS=auto may train: the first look's seeds of every point, then more only where still open
    (of a tuned sweep, only each setting's pick trains past the first look); under AUTO_TRAIN=cap, every
    setting to the cap at once."""
    looks = auto.looks
    grid = math.prod(len(values) for _, values in spec.tune)
    first, most = points * looks[0], points * looks[0] + points // grid * (looks[-1] - looks[0])
    picks = (f" (every value of {', '.join(n for n, _ in spec.tune)} at the first look; then each setting's pick "
             f"alone)" if spec.tune else "")
    if how == "cap":
        return (f"  SEEDS={auto}, AUTO_TRAIN=cap: every setting's seeds 0–{looks[-1] - 1} at once{picks}, then the "
                f"looks at {'/'.join(map(str, looks))} seeds read in order: {most if spec.tune else points * looks[-1]} "
                f"runs; the list shows each point at the cap")
    if len(looks) == 1:   # a design of one look trains its seeds and reads them once, as fixed seeds would
        each = f" at every value of {', '.join(n for n, _ in spec.tune)}" if spec.tune else ""
        return (f"  SEEDS={auto}: one look, at seeds {seed_ranges(list(range(looks[0])))} of every setting{each}: "
                f"{first} runs")
    return (f"  SEEDS={auto}: seeds {', '.join(map(str, range(looks[0])))} of every setting first, then more (looks "
            f"at {'/'.join(map(str, looks))} seeds) only for the settings still open{picks}: {first} to {most} runs; "
            f"the list shows each point at the most seeds it may train")


def trained_as(how: str, phases: int, design: Design, finished: int) -> str:
    """The summary's line on how a sweep's SEEDS=auto seeds trained and what its design reads of them
    (`finished`: the sweep's finished runs)."""
    when = f"in {phases} training phase{'s' * (phases != 1)}" if phases else "all trained before this command"
    took = (f"the design took {len(design.looks)} look{'s' * (len(design.looks) != 1)} and reads {design.runs} runs"
            if design.looks else "the design took no look")
    if how == "cap":
        rest = finished - design.runs if design.looks else 0
        return (f"SEEDS=auto, AUTO_TRAIN=cap: every open setting trained to the cap ({design.schedule[-1]} seeds) at "
                f"once, {when}; {took}" + (f"; the other {rest} stay out of the verdicts" if rest > 0 else ""))
    return f"SEEDS=auto, AUTO_TRAIN=look: each look's seeds trained as the design asked, {when}; {took}"


def _design_files(out: str, specs: list[SweepSpec], sweep_points: list[tuple[str, list[Point]]],
                  options: dict[str, RunOptions], auto: dict[str, AutoSeeds]) -> tuple[dict[str, dict], str]:
    """Each adaptive sweep's design file as this command would write it, and '' or the one-line refusal of a
    design that cannot be (a margin relative to the error) or that differs from the one its runs were read under."""
    from ablations.analysis.stats import ALPHA, MARGIN

    relative = [spec.name for spec in specs if spec.name in auto and isinstance(spec.margin, RelativeMargin)]
    if relative:
        return {}, _relative_margin(relative)
    classes = sweep_points[0][1][0].model.num_classes if sweep_points and sweep_points[0][1] else None
    points_of = dict(sweep_points)
    files = {spec.name: seed_design.new_design(spec.margin or MARGIN, ALPHA, classes, auto[spec.name].looks,
                                               experiment_of(points_of[spec.name], options[spec.name]))
             for spec in specs if spec.name in auto}
    return files, next(filter(None, (_another_design(SweepPaths.of(out, n), n, d) for n, d in files.items())), "")


def _relative_margin(sweeps: list[str]) -> str:
    """The one-line refusal of a margin given as a share of the error under SEEDS=auto."""
    return (f"SEEDS=auto: the sweep {', '.join(sweeps)} sets its margin as a share of the best setting's error, which "
            f"is known only once runs exist, while the design fixes its margin before its first look; give the "
            f"margin in accuracy points (margin = 0.5) or train it at fixed seeds")


def _another_design(paths: SweepPaths, name: str, design: dict[str, Any]) -> str:
    """The one-line refusal of a design other than the one a sweep's runs of this experiment were decided under
    ('' where there is none, or no run of the experiment has finished): a design is fixed once its looks have
    been read, and other looks, α or margin on the same runs would re-read them at other levels (a shorter
    schedule drops runs and reads the rest at its more lenient levels)."""
    read = Tables(paths.out)
    try:
        before = read.design(name)
    except ValueError:
        return ""   # unreadable: written again, as before
    keys = ("looks", "alpha", "margin", "seeds", "spending")
    was = {**before, "spending": before.get("spending", OBRIEN_FLEMING)} if before is not None else None
    if was is None or was.get("experiment") != design.get("experiment") \
            or all(was.get(k) == design.get(k) for k in keys):
        return ""
    rows = read.finished(name) if paths.rows.exists() else None
    mine = design.get("experiment")
    if rows is None or rows.empty or (mine and "experiment_id" in rows and not (rows["experiment_id"].astype(str) == mine).any()):
        return ""
    looks = "/".join(map(str, was["looks"]))
    again = ",".join(map(str, was["looks"]))
    spending = "" if was["spending"] == design.get("spending") else f", spending {was['spending']}"
    rerun = (f"Rerun with SEEDS=auto:{again}" if not spending else
             f"Remove {paths.design.name} to read them again under this version's design (a new sitting of the same "
             f"runs)")
    return (f"sweep {name} was trained under SEEDS=auto with looks at {looks} seeds (α = {was['alpha']}, margin "
            f"{100 * float(was['margin']):g} points{spending}; {paths.design}), and its looks were read under that "
            f"design: another on the same runs would read them again at other levels. {rerun}, or train the other "
            f"design into another OUT")


def run_adaptive(args: argparse.Namespace, specs: list[SweepSpec], sweep_points: list[tuple[str, list[Point]]],
                 options: dict[str, RunOptions], auto: dict[str, AutoSeeds], run_all: Callable[..., tuple],
                 executor: Executor | None = None) -> tuple[list[SweepSummary] | None, int]:
    """Sweeps of which some (`auto`) train under adaptive seeds: look by look, replay each such sweep's design
    on its finished runs and train the seeds it asks for; the sweeps with fixed seeds train beside the first
    look. Every point stays in the command, so each look's cost phase is the first one, reused (or none, where the
    first gave it up: `cost.GIVEN_UP`). The summaries of all looks merged, or (None, status) as `run_all` (the
    command's way to train a step of sweep_points)."""
    from ablations.analysis.wording import design_progress  # the statistics load only for adaptive seeds

    design_files, refused = _design_files(args.out, specs, sweep_points, options, auto)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return None, 2
    for name in design_files:
        seed_design.write_design(SweepPaths.of(args.out, name), design_files[name])
    merged: dict[str, SweepSummary] = {}
    asked_before: dict[str, dict] = {}
    how, designs, phases = auto_train(args), {}, collections.Counter()
    # a look per step, and a step more for each look whose lost runs are retried: past that, unfinished
    limit = 2 * (max(len(p["looks"]) for p in design_files.values()) + 1)
    for step in itertools.count():
        asked: dict[str, dict] = {}
        for name, points in sweep_points:
            if name not in design_files:
                if step == 0:
                    asked[name] = {p.label: options[name].seeds for p in points}
                continue
            design, left_out = replay_sweep(points, options[name], SweepPaths.of(args.out, name), design_files[name],
                                            next(s for s in specs if s.name == name))
            print(design_progress(design, name, left_out, cap=how == "cap"), file=sys.stderr)
            designs[name] = design
            if design.need:
                asked[name] = design.need if how == "look" else to_the_cap(design, list(design_files[name]["seeds"]))
                phases[name] += 1
        if not asked:
            break
        if asked == asked_before:
            where = "; ".join(f"{n}: {count(len(v), 'setting')}" for n, v in asked.items())
            print(f"error: SEEDS=auto: runs the design needs did not finish ({where}); their rows say why (status, "
                  f"error); fix that and rerun the same command to go on", file=sys.stderr)
            return (list(merged.values()) or None), 1
        if step == limit:
            print(f"error: SEEDS=auto: the design is unfinished after {limit} steps (runs it needs keep failing: "
                  f"their rows say why); rerun the same command to go on", file=sys.stderr)
            return (list(merged.values()) or None), 1
        asked_before = asked
        # every sweep of the command in every look (those not asked for runs train none), so that each look's
        # cost phase is the first look's, reused, and every row carries its config's figures from that sitting
        step_options = {name: dataclasses.replace(options[name], point_seeds=tuple(
            (p.label, tuple(asked.get(name, {}).get(p.label, ()))) for p in points)) for name, points in sweep_points}
        results, status = run_all(args, sweep_points, step_options, locked=True, started=executor)
        if results is None:
            return None, status
        for r in results:
            merged[r.sweep] = merged[r.sweep].merge(r) if r.sweep in merged else r
    summaries = [merged.get(name) or SweepSummary(name, SweepPaths.of(args.out, name)) for name, _ in sweep_points]
    return [dataclasses.replace(r, said=trained_as(how, phases[r.sweep], designs[r.sweep], sum(map(is_ok, r.rows))))
            if r.sweep in designs else r for r in summaries], 0


def experiment_of(points: list[Point], options: RunOptions) -> str:
    """The experiment id the sweep's runs get (every point of a sweep shares it)."""
    if not points:
        return ""
    return experiment_id(points[0], options.dataset, options.init_id, options.data_id, resolve_device(options.device))
