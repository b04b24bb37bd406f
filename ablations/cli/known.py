"""`make known` (`python -m ablations known`): the harness on small synthetic tasks whose answers are known.

Each task is an image folder written as PNG files (the format a user's own images come in) and a sweep
spec; the sweeps run through the same command a user runs (`sweep … --dataset imagefolder`, called in this
process), and the report's own analysis (`ablations.analysis.findings.analyse`) must give the known answer:

- **positions**: the class is the quadrant that holds a bright square, so only a model that knows where
  its tokens are can solve it. pos=none (tokens as a set) stays at chance and is decided worse than
  pos=sincos2d (fixed 2-D positions, which this budget learns fastest). Trained with `--set flip=false`:
  a horizontal flip would move the square to the other side.
- **backends**: attn=bmm and attn=einops compute one function with the same operations: identical
  predictions on every image of every seed.
- **shuffled**: the same images under random labels: nothing can be learned, so every setting is at
  chance and the sweep gives no verdict.
- **planted**: flip=False against flip=True on the quadrant task: flipping loses left from right, about
  half the answers; the difference is decided at 3 seeds.

Prints one line per check and exits 1 if any fails. The runs resume like any sweep (rerun: nothing trains).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SIDE = 16            # px: a 4 × 4 grid of 4 px patches, each quadrant 2 × 2 patches
SQUARE = 4           # px side of the bright square
CLASSES = ("top-left", "top-right", "bottom-left", "bottom-right")
TRAIN_PER_CLASS = 200
TEST_PER_CLASS = 50
SEEDS = "0,1,2"
STOPPED = {130: "SIGINT", 143: "SIGTERM", 129: "SIGHUP"}   # the sweep command's exit status after a stop signal
MODEL = 'preset = "vit_digits"\npatch_size = 4\nembed_dim = 32\ndepth = 2\nnum_heads = 2\npos = "sincos2d"\n'


@dataclass(frozen=True)
class KnownCase:
    """A synthetic task whose answer is known: the sweep it runs (`factor` over `values`, `sets` held) and what its
    report must say."""
    name: str
    data: str            # "quadrants" or "shuffled"
    factor: str
    values: str          # TOML list
    sets: tuple[str, ...]
    expect: str          # what the check requires, for the reader


TASKS = (
    KnownCase("positions", "quadrants", "pos", '["sincos2d", "none"]', ("flip=false",),
              "pos=none at chance (‡) and decided worse than pos=sincos2d"),
    KnownCase("backends", "quadrants", "attn", '["bmm", "einops"]', ("flip=false",),
              "attn=bmm and attn=einops identical (same predictions, every image, every seed)"),
    KnownCase("shuffled", "shuffled", "depth", "[1, 2]", ("flip=false",),
              "every setting at chance: no verdict"),
    KnownCase("planted", "quadrants", "flip", "[false, true]", (),
              "flip=False decided better than flip=True"),
)


def write_quadrants(root: Path, shuffled: bool, seed: int = 0) -> Path:
    """train/ and test/ folders of PNGs, a folder per class: noise with a bright square in the class's quadrant
    (shuffled: the labels drawn at random instead, so they cannot be learned). Written once; reused."""
    import numpy as np
    from PIL import Image

    if (root / "test").is_dir():
        return root
    rng = np.random.default_rng(seed)
    half = SIDE // 2
    for split, per_class in (("train", TRAIN_PER_CLASS), ("test", TEST_PER_CLASS)):
        # shuffled: each class keeps its count, so always answering one class scores exactly chance
        labels = np.repeat(np.arange(len(CLASSES)), per_class)
        folders = rng.permutation(labels) if shuffled else labels
        for i, (label, folder_label) in enumerate(zip(labels, folders)):
            image = rng.integers(0, 80, (SIDE, SIDE, 3), dtype=np.uint8)
            y0, x0 = (label // 2) * half, (label % 2) * half
            dy, dx = rng.integers(0, half - SQUARE + 1, 2)
            image[y0 + dy:y0 + dy + SQUARE, x0 + dx:x0 + dx + SQUARE] = 255
            folder = root / split / CLASSES[folder_label]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{i:04d}.png")
    return root


def write_spec(folder: Path, task: KnownCase, epochs: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"known-{task.name}.toml"
    path.write_text(f'[sweep]\nlabel = "{task.factor} ({task.name})"\ndescription = "known answer: {task.expect}"\n'
                    f'factor = "{task.factor}"\nvalues = {task.values}\n\n[model]\n{MODEL}\n'
                    f"[train]\nepochs = {epochs}\nlr = 0.004\n")
    return path


def check(task: KnownCase, f) -> tuple[bool, str]:
    """(passed, what the analysis said) for one task's findings (under SEEDS=auto, the design's verdicts)."""
    from ablations.analysis.stats import Outcome
    from ablations.analysis.wording import no_test, pair_outcome

    outcome_of = lambda c: pair_outcome(f, c)[0]  # noqa: E731
    settings = ", ".join(f"{f.factor}={s.value} {100 * s.acc.mean:.1f} %{' ‡' if s.at_chance else ''}"
                         for s in f.settings)
    pairs = "; ".join(f"{c.a} vs {c.b}: {outcome_of(c)}" for c in f.comparisons or [])
    design = (f" (SEEDS=auto: stopped at look {f.design.final.index + 1}, {f.design.runs} runs)"
              if f.design is not None and f.design.final is not None else "")
    said = f"{settings}; " + (pairs or f"no verdict ({no_test(f).split(': ', 1)[0].split('. ', 1)[0]})") + design
    by_value = {s.value: s for s in f.settings}
    outcome = {frozenset((c.a, c.b)): c for c in f.comparisons or []}
    if task.name == "positions":
        c = outcome.get(frozenset(("sincos2d", "none")))
        ok = by_value["none"].at_chance and not by_value["sincos2d"].at_chance and c is not None and (
            outcome_of(c) == (Outcome.BETTER if c.a == "sincos2d" else Outcome.WORSE))
    elif task.name == "backends":
        c = outcome.get(frozenset(("bmm", "einops")))
        ok = c is not None and outcome_of(c) == Outcome.IDENTICAL
    elif task.name == "shuffled":
        ok = f.verdict is None and all(s.at_chance for s in f.settings)
    else:
        c = outcome.get(frozenset((False, True)))
        ok = c is not None and outcome_of(c) == (Outcome.BETTER if str(c.a).lower() in ("false", "0") else Outcome.WORSE)
    return bool(ok), said


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`known`'s options, on its subcommand of the one parser (`ablations.cli.parser`)."""
    parser.add_argument("--out", default="results/known", help="where the data, runs and report go "
                                                              "(default results/known)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs of every run (default 10)")
    parser.add_argument("--only", nargs="*", choices=[t.name for t in TASKS], help="run only these tasks")
    parser.add_argument("--seeds", default=SEEDS, help=f"the sweeps' seeds (default {SEEDS}), or auto: adaptive "
                                                       f"seeds, each task's answer decided by the sequential design")
    from ablations.running.executors import OPTIONS as EXECUTOR_OPTIONS

    jobs = next(o for o in EXECUTOR_OPTIONS["local"] if o.flag == "--jobs")
    jobs.add_to(parser, default=1, help="runs in flight at once, as the sweep command's --jobs (default 1: its runs "
                                        "are so short that starting worker processes costs more than it saves)")


def _judge(task: KnownCase, out: Path, sweep: str) -> tuple[bool, str]:
    """`check` of the task's sweep on the rows its report shows (`Tables.shown`: the newest experiment of its
    table): an earlier `known` into the same OUT with other epochs is another experiment, never pooled with this
    one."""
    import pandas as pd

    from ablations.analysis.findings import analyse_sweep
    from ablations.results.store import SweepPaths, Tables, ok_rows

    read = Tables(out)
    rows, _ = read.shown(sweep, [task.factor])
    values = list(pd.unique(ok_rows(rows)[task.factor]))
    return check(task, analyse_sweep(rows, task.factor, values, SweepPaths.of(out, sweep), None, read=read)[0])


def cmd_known(args: argparse.Namespace, run_command: Callable[[list[str]], int]) -> int:
    """`known`; `run_command`: the `python -m ablations` command line, called in this process with each task's
    sweep."""
    if args.epochs < 1:
        print(f"error: --epochs must be a positive integer, got {args.epochs}", file=sys.stderr)
        return 2
    from bench.reference import WRITTEN, refusal

    out = Path(args.out)
    message = refusal(str(out), False, (*WRITTEN, "data"))   # its images go under data/ too
    if message:
        print(f"error: {message}", file=sys.stderr)
        return 2
    from ablations.analysis.report import build_report
    from ablations.cli.outcome import NEXT_STEP

    t0 = time.perf_counter()
    tasks = [t for t in TASKS if not args.only or t.name in args.only]
    try:   # everything a task needs written before the first sweep: an OUT that cannot take it is one line
        data = {name: write_quadrants(out / "data" / name, shuffled=name == "shuffled")
                for name in sorted({t.data for t in tasks})}
        specs = {task.name: write_spec(out / "specs", task, args.epochs) for task in tasks}
    except OSError as err:
        print(f"error: OUT={out}: cannot write {err.filename or out} ({err.strerror or err}); choose another OUT "
              f"(--out) or fix its permissions", file=sys.stderr)
        return 2
    results = []
    for task in tasks:
        spec = specs[task.name]
        argv = ["sweep", str(spec), "--dataset", "imagefolder", "--data-root", str(data[task.data]),
                "--img-size", str(SIDE), "--seeds", args.seeds, "--cost-rounds", "0", "--out", str(out),
                "--jobs", "auto" if args.jobs is None else str(args.jobs),
                *(x for s in task.sets for x in ("--set", s))]
        print(f"\n== {task.name}: {task.expect}", flush=True)
        token = NEXT_STEP.set(False)   # `known` writes the report itself: no "Next: make report" per task
        try:
            status = run_command(argv)   # the sweep command itself, in this process
        finally:
            NEXT_STEP.reset(token)
        if status in STOPPED:   # Ctrl-C, SIGTERM, SIGHUP: the command stops here, as the sweep did
            left = [t.name for t in tasks[tasks.index(task) + 1:]]   # the sweep said what it kept and how to resume
            print(f"\nknown: stopped by {STOPPED[status]} during {task.name}"
                  + (f"; {', '.join(left)} did not start" if left else ""), file=sys.stderr)
            return status
        if status != 0:
            results.append((task, False, f"the sweep command exited {status}"))
            continue
        results.append((task, *_judge(task, out, spec.stem)))
    report = build_report(out, reference=None)
    seeds = "adaptive seeds" if args.seeds == "auto" else f"{args.seeds.count(',') + 1} seeds"
    print(f"\nKnown answers ({time.perf_counter() - t0:.0f} s, {seeds}, {args.epochs} epochs, "
          f"{SIDE} px, {TRAIN_PER_CLASS * len(CLASSES)} training and {TEST_PER_CLASS * len(CLASSES)} test images):")
    for task, passed, said in results:
        print(f"  {'PASS' if passed else 'FAIL'}  {task.name:<10} expected {task.expect}\n"
              f"        got: {said}")
    print(f"Report: {report}   runs: {out / 'ablations'}/")
    return 0 if all(passed for _, passed, _ in results) else 1
