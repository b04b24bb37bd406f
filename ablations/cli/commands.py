"""The commands of `python -m ablations` that train: sweep, and train (a one-point sweep prepared the same way).

`ablations.cli.parser` parses the command line from names alone and imports this module only to run one of
them, so `--help` never loads torch; what a command makes of its arguments is `prepare`, what it says at its
end `outcome`; cost, calibrate and stepbench are `measure_commands`, the commands that only read results
`read_commands` (no trainer, no executor), the SEEDS=auto driver `adaptive`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from ablations.choices import DEFAULT_SEEDS, LARGE_RUNS, MIN_PACK, AutoSeeds, say_out
from ablations.cli.outcome import restarting, summary, timings, write_failed
from ablations.cli.prepare import dry_run, prepare, run_options, stated_changes
from ablations.results import seed_design
from ablations.results.store import SweepError, SweepPaths, keep_spec, sweep_lock
from ablations.running.executors import EXECUTORS, Executor, ExecutorOptions
from ablations.running.executors import OPTIONS as EXECUTOR_OPTIONS
from ablations.running.interrupts import Interrupted
from ablations.running.runner import SweepSummary, run_sweeps
from ablations.running.tasks import RunOptions
from ablations.specs import Point, SpecError, SweepSpec, default_sweeps, find_spec, load_spec
from bench.units import count, macs


def _start_executor(args: argparse.Namespace) -> Executor:
    """Build and start the executor from its declared options; raises ValueError (missing Ray, unreachable
    cluster) before any run."""
    fields = {option.dest: getattr(args, option.dest) for options in EXECUTOR_OPTIONS.values() for option in options}
    if fields.get("gpus_per_task") is None and args.device == "cpu":  # DEVICE=cpu: no GPU for any run
        fields["gpus_per_task"] = 0.0
    executor = EXECUTORS[args.executor](ExecutorOptions(**fields, device=args.device,
                                                        graphs=bool(getattr(args, "graphs", True))))
    print(executor.start(), file=sys.stderr)
    return executor


def _run_all(args: argparse.Namespace, sweep_points: list[tuple[str, list[Point]]],
             options: dict[str, RunOptions], locked: bool = False,
             started: Executor | None = None) -> tuple[list[SweepSummary] | None, int]:
    """Every sweep, through one executor (`runner.run_sweeps`): (summaries, 0), or (None, exit status)
    after one line on stderr for a failure the user must fix (2) or a stop signal (128 + its number).
    `started`: an executor the caller started (and closes); else one is started and closed here."""
    try:
        executor = started or _start_executor(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return None, 2
    recorded: list[str] = []   # the runs written, as they are: what a stop keeps
    try:
        return run_sweeps([(name, points, options[name]) for name, points in sweep_points], executor, recorded=recorded,
                          locked=locked, spent=getattr(args, "spent", None)), 0
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return None, 2
    except OSError as err:  # a full disk, a folder gone read-only: every finished run is kept
        print(write_failed(err, len(recorded)), file=sys.stderr)
        return None, 2
    except KeyboardInterrupt as err:  # the workers are stopped and the locks released by now
        signal_name = str(err) if isinstance(err, Interrupted) else "SIGINT"
        print(f"\ninterrupted ({signal_name}): {count(len(recorded), 'run')} finished and kept"
              f"{restarting(sweep_points, options, recorded)}; rerun the same command to resume", file=sys.stderr)
        return None, err.exit_status if isinstance(err, Interrupted) else 130
    finally:
        if started is None:
            executor.close()


@dataclasses.dataclass
class _SeedPlan:
    """Each sweep's seeds as the command asks: fixed, or adaptive (`auto`, with `most` the cap it may train)."""
    seeds: dict[str, Any]
    auto: dict[str, AutoSeeds]
    most: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, args: argparse.Namespace, specs: list[SweepSpec]) -> _SeedPlan:
        seeds = {spec.name: args.seeds if args.seeds is not None else (spec.seeds or DEFAULT_SEEDS) for spec in specs}
        return cls(seeds, {name: s for name, s in seeds.items() if isinstance(s, AutoSeeds)},
                   {name: s.most if isinstance(s, AutoSeeds) else s for name, s in seeds.items()})


def _too_large(args: argparse.Namespace, sweep_points: list[tuple[str, list[Point]]], plan: _SeedPlan) -> str:
    """The refusal of a command of more than LARGE_RUNS runs without --large (or a dry run), else ""."""
    runs = sum(len(points) * len(plan.most[name]) for name, points in sweep_points)
    if runs <= LARGE_RUNS or args.large or args.dry_run:
        return ""
    each = " + ".join(f"{n}: {count(len(p), 'setting')} × {count(len(plan.most[n]), 'seed')}" for n, p in sweep_points)
    return (f"this command may train {'up to ' if plan.auto else ''}{runs:,} runs ({each}), more than "
            f"{LARGE_RUNS:,}; list them with --dry-run (DRY_RUN=1), shrink the grid, or pass --large (LARGE=1) to "
            f"train them all")


def _dry_run_all(args: argparse.Namespace, specs: list[SweepSpec], sweep_points: list[tuple[str, list[Point]]],
                 options: dict[str, RunOptions], plan: _SeedPlan) -> int:
    for name, points in sweep_points:
        dry_run(name, points, options[name])
        if name in plan.auto:
            from ablations.cli import adaptive  # the statistics load only for adaptive seeds

            print(adaptive.dry_run_line(plan.auto[name], len(points), next(s for s in specs if s.name == name),
                                        adaptive.auto_train(args)))
    return 0


def _keep_specs(args: argparse.Namespace, specs: list[SweepSpec], plan: _SeedPlan) -> None:
    """Each spec beside its table, with the command's changes to it (`--set` and the flags that set a field) said
    at its end; a sweep trained under SEEDS=auto before and with fixed seeds now has its design file set aside."""
    changes = stated_changes(args)
    for spec in specs:
        keep_spec(SweepPaths.of(args.out, spec.name), spec.path, changes)
        if spec.name not in plan.auto and seed_design.forget_design(SweepPaths.of(args.out, spec.name)):
            print(f"note: {spec.name} trained under SEEDS=auto before; with fixed seeds now, the report analyses "
                  f"it at fixed seeds", file=sys.stderr)


def _train_locked(args: argparse.Namespace, specs: list[SweepSpec], sweep_points: list[tuple[str, list[Point]]],
                  options: dict[str, RunOptions], plan: _SeedPlan,
                  executor: Executor) -> tuple[list[SweepSummary] | None, int]:
    """Every sweep trained with its table locked (its specs kept and design files read under the locks), at
    fixed seeds or look by look (`adaptive.run_adaptive`)."""
    with contextlib.ExitStack() as locks:
        locks.callback(executor.close)
        try:
            for spec in specs:
                locks.enter_context(sweep_lock(SweepPaths.of(args.out, spec.name), spec.name))
        except SweepError as err:
            print(f"error: {err}", file=sys.stderr)
            return None, 2
        _keep_specs(args, specs, plan)
        if plan.auto:
            from ablations.cli import adaptive  # the statistics load only for adaptive seeds

            return adaptive.run_adaptive(args, specs, sweep_points, options, plan.auto, _run_all, executor)
        return _run_all(args, sweep_points, options, locked=True, started=executor)


def _say_filler(args: argparse.Namespace, sweep_points: list[tuple[str, list[Point]]], plan: _SeedPlan) -> None:
    """One note where a pinned pack width (`pack_width`, CUDA) is wider than the seeds a point trains at once (a
    sweep's fixed seeds, or a SEEDS=auto look's): every pack trains that wide whatever its seeds, the rest of it
    filler; or where packs are not pinned and a point trains one fixed seed: it trains beside a filler copy."""
    alone = [name for name, points in sweep_points if any(p.train.packed and not p.train.pack_width for p in points)
             and name not in plan.auto and len(plan.most[name]) == 1]
    if alone:
        print(f"note: {', '.join(alone)}: with 1 seed a point, each pack is its seed beside a filler copy (a pack "
              f"trains at least {MIN_PACK} wide), twice the work of training it alone; PACK=0 trains it alone "
              f"(under other run ids)", file=sys.stderr)
    for name, points in sweep_points:
        width = max((p.train.pack_width for p in points), default=0)
        if not width:
            continue
        if name in plan.auto:
            from ablations.cli import adaptive  # the statistics load only for adaptive seeds

            looks = plan.auto[name].looks
            more = [b - a for a, b in zip((0, *looks), looks)]
            if adaptive.auto_train(args) == "look" and width > min(more):
                print(f"note: {name}: every pack trains {width} wide (the width is in the run ids), and SEEDS=auto "
                      f"look by look trains {min(more)}–{max(more)} seeds of a setting a look, the rest of each pack "
                      f"filler; AUTO_TRAIN=cap trains each setting's {looks[-1]} seeds at once", file=sys.stderr)
        elif len(plan.most[name]) < width:
            n = len(plan.most[name])
            print(f"note: {name}: every pack trains {width} wide (the width is in the run ids), so with {n} seed"
                  f"{'s' if n > 1 else ''} a point {width - n} of its {width} slots are filler; PACK={max(n, MIN_PACK)} "
                  f"would waste none", file=sys.stderr)


def _say_fixed(args: argparse.Namespace, adaptive_seeds: bool) -> None:
    """One note where AUTO_TRAIN is given and no sweep of the command trains under SEEDS=auto."""
    given = getattr(args, "auto_train", "auto")
    if given not in (None, "auto") and not adaptive_seeds:
        print(f"note: AUTO_TRAIN={given} says how SEEDS=auto trains its seeds; these seeds are fixed, so it changes "
              f"nothing", file=sys.stderr)


def cmd_sweep(args: argparse.Namespace) -> int:
    try:
        names = [n for arg in args.sweeps for n in (default_sweeps() if arg == "default" else [arg])]
        specs, sweep_points, data, ident = prepare(args, [load_spec(find_spec(name)) for name in dict.fromkeys(names)])
    except (SpecError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plan = _SeedPlan.of(args, specs)
    options = {spec.name: run_options(args, spec.init, ident, plan.most[spec.name]) for spec in specs}
    refused = _too_large(args, sweep_points, plan)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    _say_filler(args, sweep_points, plan)
    _say_fixed(args, bool(plan.auto))
    if args.dry_run:
        return _dry_run_all(args, specs, sweep_points, options, plan)
    t0, args.spent = time.perf_counter(), Counter()   # the work's start; the cost phase's and training's seconds
    try:
        executor = _start_executor(args)   # before anything is written: a cluster too small is refused first
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results, status = _train_locked(args, specs, sweep_points, options, plan, executor)
    if results is None:
        return status
    summary(results, timings(args, t0),
             f"Next: {say_out('report', Path(args.out))}: figures and "
             f"{Path(args.out) / 'REPORT.md'} from these tables")
    return status   # 1 where an adaptive design is left unfinished (said above the summary)


def cmd_train(args: argparse.Namespace) -> int:
    if isinstance(args.seeds, AutoSeeds):
        print("error: SEEDS=auto compares a sweep's settings and decides how many seeds each needs; train has one "
              "setting: give its seeds (SEEDS=0,1,2)", file=sys.stderr)
        return 2
    try:
        _, [(_, points)], _, ident = prepare(args, None)
    except (SpecError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    options = run_options(args, "", ident, args.seeds or DEFAULT_SEEDS)
    _say_fixed(args, False)
    if args.dry_run:
        dry_run("train", points, options)
        return 0
    t0, args.spent = time.perf_counter(), Counter()
    results, status = _run_all(args, [("train", points)], {"train": options})
    if results is None:
        return status
    summary(results, timings(args, t0))
    print(_runs_table(results[0].rows))  # its runs, trained now or before
    return 0


def _runs_table(rows: list[dict]) -> str:
    """`train`'s runs, one line each, in the units the report uses (a blank figure as a dash)."""
    columns = {"run_id": ("run_id", str), "seed": ("seed", str), "status": ("status", str),
               "test_acc": ("test acc %", lambda v: f"{100 * v:.2f}"), "train_time_s": ("train s", lambda v: f"{v:.1f}"),
               "gmacs": ("GMACs", macs),
               "throughput_img_s": ("infer img/s (cost phase)", lambda v: f"{v:,.0f}")}
    table = pd.DataFrame(rows, columns=list(columns))
    shown = {label: [fmt(v) if v == v and v is not None else "—" for v in table[name]]
             for name, (label, fmt) in columns.items()}
    packed = (pd.to_numeric(pd.Series([r.get("packed") for r in rows], dtype=object), errors="coerce") == 1).any()
    return pd.DataFrame(shown).to_string(index=False) + ("\ntrain s: a packed run's is its whole pack's (its members "
                                                         "trained at once)" if packed else "")
