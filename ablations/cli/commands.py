"""The commands of `python -m ablations` that train: sweep, and train (a one-point sweep prepared the same way).

`ablations.cli.parser` parses the command line from names alone and imports this module only to run one of
them, so `--help` never loads torch; cost, calibrate and stepbench are `measure_commands`, the commands that
only read results `read_commands` (no trainer, no executor), the SEEDS=auto driver `adaptive`."""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from ablations.choices import DEFAULT_SEEDS, LARGE_RUNS, AutoSeeds, say
from ablations.results import seed_design, tensorboard
from ablations.results.store import SweepError, SweepPaths, finished_ids, keep_spec, model_key, sweep_lock
from ablations.running.cost import CostPlan
from ablations.running.executors import EXECUTORS, Executor, ExecutorOptions
from ablations.running.executors import OPTIONS as EXECUTOR_OPTIONS
from ablations.running.interrupts import Interrupted
from ablations.running.runner import SweepSummary, run_sweeps
from ablations.running.tasks import RunOptions, make_tasks
from ablations.specs import (
    DATASET_FIELDS,
    MODEL_FIELDS,
    TRAIN_FIELDS,
    Point,
    SpecError,
    SweepSpec,
    base_preset,
    default_sweeps,
    find_spec,
    load_spec,
)
from ablations.training.data import cached_dataset, check_recipe
from bench.env import resolve_device
from bench.flops import closed_form_size
from bench.io.overrides import parse_overrides
from bench.reference import refusal
from vit import VisionTransformer, checkpoint_id, init_from_checkpoint


def _train_changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.epochs is not None:
        changes["epochs"] = args.epochs
    if args.dtype:
        changes["dtype"] = args.dtype
    if args.compile:
        changes["compile"] = True
    if pack_width(args):
        changes["packed"] = True
    return changes


def pack_width(args: argparse.Namespace) -> int:
    """The most seeds of a point a pack trains (`--pack`); auto is 0 (none) on either device for now: packing
    is the user's choice until the packed step is graphed and measured faster on CUDA."""
    given = getattr(args, "pack", 0)
    return 0 if given is None else given


def check_device(args: argparse.Namespace) -> None:
    """Raises ValueError for a device that is not there; warns about reduced precision on a CPU. On the CPU
    this process (its cost phase, and its runs where JOBS=1) uses THREADS torch threads, 1 unless asked."""
    if resolve_device(args.device).type == "cpu":
        torch.set_num_threads(getattr(args, "threads", None) or 1)
        if getattr(args, "dtype", None) in ("bf16", "fp16"):
            print(f"note: {args.dtype} autocast on a CPU can be hundreds of times slower than fp32", file=sys.stderr)


DERIVED = {"seeds", "cost", "init", "init_id", "graphs", "data_id", "progress", "point_seeds", "pack"}  # not copied as given


def _options(args: argparse.Namespace, init: str, ident: str, seeds: tuple[int, ...] = DEFAULT_SEEDS) -> RunOptions:
    """The runs' options from the command line: every `RunOptions` field named like a parsed option is
    copied as given; `ident`: the data's `data_id`, from the dataset the command loaded (an image folder's
    names the bytes it parsed); `seeds`: the runs' seeds."""
    init = args.init or init
    init_id = f"timm:{args.pretrained}" if args.pretrained else (checkpoint_id(init) if init else "")
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunOptions)
             if f.name not in DERIVED and hasattr(args, f.name)}
    return RunOptions(**given, seeds=tuple(seeds), init=init, init_id=init_id,
                      cost=CostPlan.before_training(args.cost_rounds, args.cost_budget),
                      graphs=bool(args.graphs), data_id=ident, pack=pack_width(args))


def data_id(dataset: str, data_root: str, img_size: int | None, native: int | None = None, digest: str = "") -> str:
    """What names the data beyond the dataset's name, for run ids: an image folder's contents (each file's
    path under the folder and its bytes, symlinked class folders followed, wherever the folder lies) and a
    resize; "" for a named dataset at its own size. `native`: the side the images have without IMG_SIZE
    (an image folder's default storage side): an IMG_SIZE equal to it changes nothing and names nothing.
    `digest`: the folder's contents as the loaded dataset parsed them (else the files are read for it)."""
    from ablations.training.data import IMAGEFOLDER_SIZE, folder_digest

    parts = []
    if dataset == "imagefolder":
        parts.append(f"files:{(digest or folder_digest(Path(data_root).expanduser().resolve()))[:12]}")
        native = IMAGEFOLDER_SIZE
    if img_size and img_size != native:
        parts.append(f"resized:{img_size}")
    return ",".join(parts)


def _say_what_was_loaded(args: argparse.Namespace, data) -> None:
    """An image folder: one line of what was read (images per split, the classes, the side), so a user sees
    their own data as the runs will."""
    if args.dataset != "imagefolder":
        return
    from ablations.training.data import imagefolder_skipped

    classes = ", ".join(data.classes[:8]) + (f", … ({len(data.classes)} in all)" if len(data.classes) > 8 else "")
    left = imagefolder_skipped(args.data_root)
    named = ", ".join(str(Path(f).relative_to(Path(args.data_root))) for f in left[:3]) + (", …" if len(left) > 3 else "")
    print(f"imagefolder {args.data_root}: {len(data.train_y):,} training and {len(data.test_y):,} test images, "
          f"{len(data.classes)} classes ({classes}), read at {data.img_size} px"
          + (f"; {len(left)} other entr{'y' if len(left) == 1 else 'ies'} in the class folders not read (not an "
             f"image by its suffix, or a folder): {named}" if left else ""), file=sys.stderr)


def _say_what_auto_is(data, presets: list[str]) -> None:
    """preset = "auto" (the default of every built-in sweep and of train): one line naming the base model it
    stands for at this dataset's image size, and the augmentation the dataset trains with by default."""
    if "auto" not in presets:
        return
    from bench.flops import param_count
    from vit import PRESETS, VisionTransformer

    name = base_preset(data.img_size)
    cfg = PRESETS[name].replace(img_size=data.img_size, in_chans=data.in_chans, num_classes=data.num_classes)
    params = param_count(VisionTransformer(cfg))
    crops = f"random crops padded {data.crop_padding} px" if data.crop_padding else "no random crops"
    print(f"model: preset auto is {name} at {data.img_size} px ({data.name}): patch {cfg.patch_size}, width "
          f"{cfg.embed_dim}, depth {cfg.depth}, {cfg.num_heads} heads, {cfg.stem} stem, {params:,} parameters, before "
          f"each sweep's own changes; trained with {crops} and {'horizontal flips' if data.flip else 'no flips'} "
          f"(the dataset's default; --set crop_padding=N, --set flip=true|false change them)", file=sys.stderr)


def _fetch_pretrained(args: argparse.Namespace) -> None:
    """PRETRAINED=<timm name>: timm downloads the weights (network needed); they become args.init."""
    if not args.pretrained:
        return
    if args.init:
        raise ValueError("give INIT (a file) or PRETRAINED (a timm name), not both")
    import timm

    target = Path.home() / ".cache" / "vitbench" / "pretrained" / f"{args.pretrained}.pth"
    if not target.exists():
        try:
            model = timm.create_model(args.pretrained, pretrained=True)
        except Exception as err:
            raise ValueError(f"could not fetch timm weights {args.pretrained!r} ({type(err).__name__}: "
                             f"{str(err)[:200]}); with no network, download the checkpoint file yourself and pass "
                             f"INIT=<file> (--init)") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), target)
    args.init = str(target)


def _check_init(init: str, points: list[Point]) -> None:
    """Load the checkpoint into every point's model before any training: a mismatch fails here."""
    if init:
        for point in points:
            init_from_checkpoint(VisionTransformer(point.model), init, log=lambda message: None)


def _check_recipes(sweep: str, points: list[Point], data) -> None:
    """Every point's recipe against the dataset (its validation split, its crop), before any run."""
    for point in points:
        try:
            check_recipe(data, point.train)
        except ValueError as err:
            raise ValueError(f"sweep {sweep}, point {point.label}: {err}") from None


DRY_RUN_COUNTING_S = 5.0   # how long a dry run spends building models to count their params


def _dry_run(sweep: str, points: list[Point], options: RunOptions) -> None:
    paths = SweepPaths.of(options.out, sweep)
    done = finished_ids(paths)
    print(f"sweep {sweep}: {len(points)} points × {len(options.seeds)} seed(s)")
    print(f"  {'factor':<16} {'seed':>4} {'params':>10} {'GMACs':>9} {'tokens':>6}  run_id        done")
    costs: dict[str, dict[str, float] | None] = {}
    until = time.perf_counter() + DRY_RUN_COUNTING_S
    for task in make_tasks(points, options):
        cfg = task.point.model
        key = model_key(cfg)
        if key not in costs:   # counted once per model, for as many as a few seconds allow: a big grid lists fast
            costs[key] = closed_form_size(VisionTransformer(cfg), cfg) if time.perf_counter() < until else None
        c = costs[key]
        size = f"{c['params']:>10,} {c['gmacs']:>9.5f}" if c else f"{'—':>10} {'—':>9}"
        print(f"  {task.point.label:<16} {task.seed:>4} {size} {cfg.tokens:>6}  {task.run_id}  "
              f"{'yes' if task.run_id in done else 'no'}")
    counted = sum(c is not None for c in costs.values())
    if counted < len(costs):
        print(f"  (params and GMACs of the first {counted} of {len(costs):,} models, counted in "
              f"{DRY_RUN_COUNTING_S:.0f} s; each run records its own)")


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
        where = f"{err.filename}: " if err.filename and str(err.filename) not in str(err.strerror) else ""
        print(f"error: {where}{err.strerror or err}; {_runs(len(recorded))} finished and kept "
              f"(rerun the same command to resume)", file=sys.stderr)
        return None, 2
    except KeyboardInterrupt as err:  # the workers are stopped and the locks released by now
        signal_name = str(err) if isinstance(err, Interrupted) else "SIGINT"
        print(f"\ninterrupted ({signal_name}): {_runs(len(recorded))} finished and kept"
              f"{_restarting(sweep_points, options, recorded)}; rerun the same command to resume", file=sys.stderr)
        return None, err.exit_status if isinstance(err, Interrupted) else 130
    finally:
        if started is None:
            executor.close()


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def _restarting(sweep_points: list[tuple[str, list[Point]]], options: dict[str, RunOptions],
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


def _took(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds / 60:.1f} min"


def _timings(args: argparse.Namespace, work_started: float) -> str:
    """Where the command's time went, from its start (`args.started`, set by the parser) to now: the start
    before any work (imports, the data, the checks), the cost phase and the training (`args.spent`, which
    `run_sweeps` fills), and the rest (the workers' start, reading and writing the tables, SEEDS=auto's looks)."""
    now, spent = time.perf_counter(), getattr(args, "spent", None) or {}
    started = getattr(args, "started", work_started)
    parts = [("start", work_started - started), ("cost phase", spent.get("cost phase", 0.0)),
             ("training", spent.get("training", 0.0))]
    rest = (now - started) - sum(seconds for _, seconds in parts)
    phases = spent.get("training phases", 0)
    said = [f"{what} {_took(seconds)}" + (f" in {phases} phases" if what == "training" and phases > 1 else "")
            for what, seconds in parts if seconds >= 0.05]
    return f"Done in {_took(now - started)}: " + ", ".join([*said, f"the rest {_took(max(rest, 0.0))}"]) + "."


def _summary(results: list[SweepSummary], done: str, report_hint: str = "") -> None:
    print(f"\n{done}")
    for r in results:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(r.statuses.items())) or "nothing new"
        paths = r.paths
        reused = f", {r.reused} reused from other sweeps (same run_id)" if r.reused else ""
        resumed = f", {r.resumable} resumed from checkpoints" if r.resumable else ""
        stale = f", {r.stale_tmp} stale temporary files removed" if r.stale_tmp else ""
        print(f"  {r.sweep:<8} {r.planned} runs: {r.skipped} already done{reused}{resumed}, {statuses}{stale}")
        if r.starved:
            low = r.starved
            print(f"           note: {len(low)} run(s) were busy only {min(low):.0f}–{max(low):.0f} % of the cores they "
                  f"were given (train_util_pct): other work held the machine, so their train_time_s and "
                  f"train_mfu understate it")
        cost = f"   cost → {paths.cost}" if paths.cost.exists() else ""
        print(f"           rows → {paths.rows}   epochs → {paths.history}{cost}")
        print(f"           weights → {paths.weights}/   test predictions → {paths.preds}/")
    if report_hint and NEXT_STEP.get() and os.environ.get(REPORT_FOLLOWS) != "1":
        print(report_hint)


def check_out(args: argparse.Namespace) -> None:
    """ValueError for an OUT that holds the committed reference results, unless --into-reference; for
    TENSORBOARD=1 without the package."""
    message = refusal(args.out, args.into_reference) or (tensorboard.available() if getattr(args, "tensorboard", False) else "")
    if message:
        raise ValueError(message)


def _prepare(args: argparse.Namespace, specs: list[SweepSpec] | None
             ) -> tuple[list[SweepSpec], list[tuple[str, list[Point]]], Any, str]:
    """What a command trains, checked before anything is written: (its sweeps' specs with --set applied, each
    sweep's points, the dataset, its data id). `specs` None: `train`, a one-point sweep of --preset. Raises
    SpecError, ValueError or FileNotFoundError with the one-line message."""
    check_out(args)
    check_device(args)
    model_changes, train_changes = _overrides(args, specs or [])
    data = cached_dataset(args.dataset, args.data_root, args.download, args.img_size)  # the runs reuse it
    _say_what_was_loaded(args, data)
    _say_what_auto_is(data, [args.preset] if specs is None else [spec.preset for spec in specs])
    if specs is None:
        preset = base_preset(data.img_size) if args.preset == "auto" else args.preset
        specs = [SweepSpec.one_run("train", preset, model_changes, {})]
    else:
        specs = [dataclasses.replace(s, model_overrides={**s.model_overrides, **model_changes}) for s in specs]
    sweep_points = [(s.name, s.points(data.img_size, data.in_chans, data.num_classes,
                                      {**_train_changes(args), **train_changes}))
                    for s in specs]  # every point of every sweep validated before any training
    for name, points in sweep_points:
        _check_recipes(name, points, data)
        _check_packing(args, points)
    _fetch_pretrained(args)
    for spec, (_, points) in zip(specs, sweep_points):
        _check_init(args.init or spec.init, points)
    return specs, sweep_points, data, data_id(args.dataset, args.data_root, args.img_size,
                                              native=data.train_x.shape[-1], digest=data.digest)


def _check_packing(args: argparse.Namespace, points: list[Point]) -> None:
    """ValueError in one line where packed runs cannot train: on Ray, or a recipe that cannot (`packed.refusal`)."""
    if not any(p.train.packed for p in points):
        return
    if getattr(args, "executor", "local") != "local":
        raise ValueError("packed runs train on the local executor; set PACK=0 (--pack 0) with EXECUTOR=ray")
    from ablations.training.packed import refusal as pack_refusal

    device = resolve_device(args.device)
    for point in points:
        said = pack_refusal(point.train, max(point.model.dropout, point.model.attn_dropout), device)
        if said:
            raise ValueError(f"{point.sweep} {point.label}: {said}")


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
    each = " + ".join(f"{n}: {len(p):,} settings × {len(plan.most[n])} seed(s)" for n, p in sweep_points)
    return (f"this command may train {'up to ' if plan.auto else ''}{runs:,} runs ({each}), more than "
            f"{LARGE_RUNS:,}; list them with --dry-run (DRY_RUN=1), shrink the grid, or pass --large (LARGE=1) to "
            f"train them all")


def _dry_run_all(specs: list[SweepSpec], sweep_points: list[tuple[str, list[Point]]],
                 options: dict[str, RunOptions], plan: _SeedPlan) -> int:
    for name, points in sweep_points:
        _dry_run(name, points, options[name])
        if name in plan.auto:
            from ablations.cli import adaptive  # the statistics load only for adaptive seeds

            print(adaptive.dry_run_line(plan.auto[name], len(points), next(s for s in specs if s.name == name)))
    return 0


def _keep_specs(args: argparse.Namespace, specs: list[SweepSpec], plan: _SeedPlan) -> None:
    """Each spec beside its table, with the command's changes to it (`--set` and the flags that set a field) said
    at its end; a sweep trained under SEEDS=auto before and with fixed seeds now has its design file set aside."""
    changes = {**parse_overrides(getattr(args, "set", None) or []), **_train_changes(args)}
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


def cmd_sweep(args: argparse.Namespace) -> int:
    try:
        names = [n for arg in args.sweeps for n in (default_sweeps() if arg == "default" else [arg])]
        specs, sweep_points, data, ident = _prepare(args, [load_spec(find_spec(name)) for name in dict.fromkeys(names)])
    except (SpecError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plan = _SeedPlan.of(args, specs)
    options = {spec.name: _options(args, spec.init, ident, plan.most[spec.name]) for spec in specs}
    refused = _too_large(args, sweep_points, plan)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    if args.dry_run:
        return _dry_run_all(specs, sweep_points, options, plan)
    t0, args.spent = time.perf_counter(), Counter()   # the work's start; the cost phase's and training's seconds
    try:
        executor = _start_executor(args)   # before anything is written: a cluster too small is refused first
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results, status = _train_locked(args, specs, sweep_points, options, plan, executor)
    if results is None:
        return status
    quoted = f"'{Path(args.out)}'"
    _summary(results, _timings(args, t0),
             f"Next: {say(f'make report OUT={quoted}', f'vitbench report --out {quoted}')}: figures and "
             f"{Path(args.out) / 'REPORT.md'} from these tables")
    return status   # 1 where an adaptive design is left unfinished (said above the summary)


def _overrides(args: argparse.Namespace, specs: list[SweepSpec] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """--set KEY=VALUE as (model changes, training changes); ValueError in one line for an item that is not
    key=value, a field that is neither, one the dataset fixes, or a factor a sweep varies."""
    model_changes, train_changes = {}, {}
    for key, value in parse_overrides(getattr(args, "set", None) or []).items():
        if key in DATASET_FIELDS:
            raise ValueError(f"--set {key}={value}: {key} is fixed by the dataset (DATASET={args.dataset}), which "
                             f"sets img_size, in_chans and num_classes of the model; choose another DATASET, or a "
                             f"preset of another patch grid (a timm checkpoint's pos_embed is resampled to it)")
        varying = next((spec for spec in specs if key in spec.varied), None)
        if varying is not None:
            raise ValueError(f"--set {key}={value}: {key} is what sweep {varying.name} varies "
                             f"({', '.join(map(str, varying.values))}); --set holds a field fixed at every point")
        if key in MODEL_FIELDS:
            model_changes[key] = value
        elif key in TRAIN_FIELDS:
            train_changes[key] = value
        else:
            raise ValueError(f"--set {key}: not a ViTConfig or TrainConfig field; model: {sorted(MODEL_FIELDS)}, "
                             f"train: {sorted(TRAIN_FIELDS)}")
    return model_changes, train_changes


def cmd_train(args: argparse.Namespace) -> int:
    if isinstance(args.seeds, AutoSeeds):
        print("error: SEEDS=auto compares a sweep's settings and decides how many seeds each needs; train has one "
              "setting: give its seeds (SEEDS=0,1,2)", file=sys.stderr)
        return 2
    try:
        _, [(_, points)], _, ident = _prepare(args, None)
    except (SpecError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    options = _options(args, "", ident, args.seeds or DEFAULT_SEEDS)
    if args.dry_run:
        _dry_run("train", points, options)
        return 0
    t0, args.spent = time.perf_counter(), Counter()
    results, status = _run_all(args, [("train", points)], {"train": options})
    if results is None:
        return status
    _summary(results, _timings(args, t0))
    shown = ["run_id", "seed", "status", "test_acc", "train_time_s", "gmacs", "throughput_img_s"]
    print(pd.DataFrame(results[0].rows, columns=shown).to_string(index=False))  # its runs, trained now or before
    return 0
