"""What a training command says when it ends: each sweep's summary and where its files are, where the time
went, and on a stop what was kept and what a rerun resumes."""

from __future__ import annotations

import argparse
import contextvars
import os
import time

from ablations.choices import MIN_PACK
from ablations.results import tensorboard
from ablations.results.store import SweepPaths
from ablations.running.runner import SweepSummary
from ablations.running.tasks import RunOptions, make_tasks
from ablations.specs import Point
from bench.io.atomic import WRITE_FIX
from bench.units import count


def packs_text(widths: list[int], pinned: int = 0, verb: str = "trained") -> str:
    """"; 12 trained as 4 packs of 3 seeds" (of 2–3 seeds), with ", each 3 wide (the width is in their run ids;
    2 of 12 slots filler)" where the width is pinned (`pinned`), or "" where none trained packed. Unpinned, a pack
    narrower than `MIN_PACK` trains that wide beside filler copies (`training.packed.train_pack`), said too.
    `verb`: "runs would train" for a plan."""
    if not widths:
        return ""
    low, high = min(widths), max(widths)
    seeds = f"{low}" if low == high else f"{low}–{high}"
    said = (f"; {sum(widths)} {verb} as {len(widths)} pack{'s' if len(widths) > 1 else ''} of {seeds} "
            f"seed{'s' if high > 1 else ''}")
    if not pinned:
        slots = sum(max(w, MIN_PACK) for w in widths)
        return said + (f" ({slots - sum(widths)} of {slots} slots filler: a pack trains at least {MIN_PACK} wide)"
                       if slots > sum(widths) else "")
    filler = len(widths) * pinned - sum(widths)
    return (f"{said}, {'each ' if len(widths) > 1 else ''}{pinned} wide (the width is in their run ids"
            + (f"; {filler} of {len(widths) * pinned} slots filler)" if filler else ")"))


def restarting(sweep_points: list[tuple[str, list[Point]]], options: dict[str, RunOptions],
               recorded: list[str]) -> str:
    """What a rerun does with the runs not finished: those with a checkpoint named (up to 3) with the epoch they
    go on after, the rest said to start from their first epoch."""
    from ablations.training.checkpoints import saved_epoch

    kept, resumed, left = set(recorded), [], 0
    for name, points in sweep_points:
        paths = SweepPaths.of(options[name].out, name)
        for task in make_tasks(points, options[name]):
            if task.run_id in kept:
                continue
            epoch = saved_epoch(paths.checkpoint(task.run_id)) if paths.checkpoint(task.run_id).exists() else None
            if epoch is None:
                left += 1
            else:
                resumed.append(f"{task.point.label} seed {task.seed} after epoch {epoch}")
    said = ""
    if resumed:
        more = f" and {len(resumed) - 3} more" if len(resumed) > 3 else ""
        runs = "1 unfinished run goes" if len(resumed) == 1 else f"{len(resumed)} unfinished runs go"
        said += f"; {runs} on from a checkpoint ({', '.join(resumed[:3])}{more})"
    if left:
        said += f"; {'the 1 run left starts' if left == 1 else f'the {left} runs left start'} from epoch 1"
    return said


# whether a command ends by telling the user their next step (`known`, which runs sweeps and then writes the
# report itself, turns it off for the sweeps it runs)
NEXT_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("next_step", default=True)


REPORT_FOLLOWS = "VITBENCH_REPORT_FOLLOWS"   # set by `make ablations`, which writes the report next: no "Next:" line


def write_failed(err: OSError, kept: int) -> str:
    """The one line a command ends with when a file could not be written (a full disk, a folder gone read-only):
    what failed, the runs kept, and the next step, once and last (a writer's own fix where it names one)."""
    where = f"{err.filename}: " if err.filename and str(err.filename) not in str(err.strerror) else ""
    said = str(err.strerror or err).removesuffix(WRITE_FIX).rstrip("; ")
    fix = WRITE_FIX if said != str(err.strerror or err) else "rerun the same command to resume"
    return f"error: {where}{said}; {count(kept, 'run')} finished and kept; {fix}"


def _took(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds / 60:.1f} min"


def timings(args: argparse.Namespace, work_started: float) -> str:
    """Where the command's time went, from its start (`args.started`, set by the parser) to now: the start
    before any work (imports, the data, the checks, among them the packs' one-step trials, `args.pack_trials_s`),
    the cost phase and the training (`args.spent`, which `run_sweeps` fills), and the rest (the workers' start,
    reading and writing the tables, SEEDS=auto's looks)."""
    now, spent = time.perf_counter(), getattr(args, "spent", None) or {}
    trials = getattr(args, "pack_trials_s", 0.0)
    started = getattr(args, "started", work_started)
    parts = [("start", work_started - started), ("cost phase", spent.get("cost phase", 0.0)),
             ("training", spent.get("training", 0.0))]
    rest = (now - started) - sum(seconds for _, seconds in parts)
    phases = spent.get("training phases", 0)
    said = [f"{what} {_took(seconds)}" + (f" in {phases} phases" if what == "training" and phases > 1 else "")
            + (f" (the packs' trials {_took(trials)})" if what == "start" and trials >= 0.05 else "")
            for what, seconds in parts if seconds >= 0.05]
    return f"Done in {_took(now - started)}: " + ", ".join([*said, f"the rest {_took(max(rest, 0.0))}"]) + "."


def summary(results: list[SweepSummary], done: str, report_hint: str = "") -> None:
    """`done` (where the time went), then each sweep's runs by outcome and where its files are; `report_hint`: the
    next step, unless a caller writes the report itself (`NEXT_STEP`, `REPORT_FOLLOWS`)."""
    print(f"\n{done}")
    for r in results:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(r.statuses.items())) or "nothing new"
        paths = r.paths
        reused = f", {r.reused} reused from other sweeps (same run_id)" if r.reused else ""
        resumed = f", {r.resumable} resumed from checkpoints" if r.resumable else ""
        stale = f", {r.stale_tmp} stale temporary files removed" if r.stale_tmp else ""
        print(f"  {r.sweep:<8} {count(r.planned, 'run')}: {r.skipped} already done{reused}{resumed}, {statuses}{stale}"
              f"{packs_text(r.packs, r.pack_width)}")
        if r.said:
            print(f"           {r.said}")
        if r.starved:
            low = r.starved
            print(f"           note: {count(len(low), 'run')}: busy only {min(low):.0f}–{max(low):.0f} % of the cores they "
                  f"were given (train_util_pct): the cores were shared (with other processes, or with more runs than "
                  f"cores), so their train_time_s and train_mfu are not a run's alone")
        tables = [f"{what} → {path}" for what, path in (("rows", paths.rows), ("epochs", paths.history),
                                                          ("cost", paths.cost)) if path.exists()]
        folders = [f"{what} → {path}/" for what, path in (("weights", paths.weights), ("test predictions", paths.preds),
                                                          ("tensorboard", tensorboard.sweep_folder(paths.out, r.sweep)))
                   if path.is_dir() and any(path.iterdir())]
        for written in (tables, folders):
            if written:
                print("           " + "   ".join(written))
    if report_hint and NEXT_STEP.get() and os.environ.get(REPORT_FOLLOWS) != "1":
        print(report_hint)
