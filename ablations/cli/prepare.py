"""What a training command makes of its arguments before any work: the data, each sweep's points with `--set`
applied, the runs' options, and every refusal (a device not there, a recipe the dataset cannot train, an init
that does not load, packing where it cannot run), each a one-line error; and the dry run's listing."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ablations.choices import DEFAULT_SEEDS
from ablations.cli.outcome import packs_text
from ablations.results import tensorboard
from ablations.results.store import SweepPaths, finished_ids, model_key
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions, make_tasks, pack_tasks
from ablations.specs import (
    DATASET_FIELDS,
    MODEL_FIELDS,
    PACKED,
    TRAIN_FIELDS,
    Point,
    SpecError,
    SweepSpec,
    base_preset,
)
from ablations.training.data import cached_dataset, check_recipe, imagefolder_shape
from bench.env import resolve_device
from bench.flops import closed_form_size
from bench.io.overrides import overrides_text, parse_overrides
from bench.reference import refusal
from bench.units import count, macs
from vit import VisionTransformer, checkpoint_id, init_from_checkpoint
from vit.config import did_you_mean


def _train_changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.epochs is not None:
        changes["epochs"] = args.epochs
    if args.dtype:
        changes["dtype"] = args.dtype
    if args.compile:
        changes["compile"] = True
    if pack_width(args):
        from ablations.training.packed import pinned_width

        changes["packed"] = True
        if pinned := pinned_width(pack_width(args), resolve_device(getattr(args, "device", "auto"))):
            changes["pack_width"] = pinned
    return changes


def pack_width(args: argparse.Namespace) -> int:
    """The most seeds of a point a pack trains (`--pack`); auto is 0 (none) on either device for now: packing
    is the user's choice until packs are measured faster than runs alone on CUDA."""
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


def run_options(args: argparse.Namespace, init: str, ident: str, seeds: tuple[int, ...] = DEFAULT_SEEDS) -> RunOptions:
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


def _say_what_auto_is(data, presets: list[str], train: bool) -> None:
    """preset = "auto" (the default of every built-in sweep and of train): one line naming the base model it
    stands for at this dataset's image size, and the augmentation the dataset trains with by default."""
    if "auto" not in presets:
        return
    from bench.flops import param_count
    from vit import PRESETS, VisionTransformer

    name = base_preset(data.img_size)
    cfg = PRESETS[name].replace(img_size=data.img_size, in_chans=data.in_chans, num_classes=data.num_classes)
    params = param_count(VisionTransformer(cfg))
    before = "its --set overrides" if train else "each sweep's own changes"
    crops = f"random crops padded {data.crop_padding} px" if data.crop_padding else "no random crops"
    print(f"model: preset auto is {name} at {data.img_size} px ({data.name}): patch {cfg.patch_size}, width "
          f"{cfg.embed_dim}, depth {cfg.depth}, {cfg.num_heads} heads, {cfg.stem} stem, {params:,} parameters, before "
          f"{before}; trained with {crops} and {'horizontal flips' if data.flip else 'no flips'} "
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


def dry_run(sweep: str, points: list[Point], options: RunOptions) -> None:
    """The sweep's runs, one line each (its setting, seed, size, run id, and whether it is done), with no training."""
    paths = SweepPaths.of(options.out, sweep)
    done = finished_ids(paths)
    print(f"sweep {sweep}: {count(len(points), 'point')} × {count(len(options.seeds), 'seed')}")
    print(f"  {'factor':<16} {'seed':>4} {'params':>10} {'GMACs':>10} {'tokens':>6}  run_id        done")
    costs: dict[str, dict[str, float] | None] = {}
    until = time.perf_counter() + DRY_RUN_COUNTING_S
    tasks = make_tasks(points, options)
    for task in tasks:
        cfg = task.point.model
        key = model_key(cfg)
        if key not in costs:   # counted once per model, for as many as a few seconds allow: a big grid lists fast
            costs[key] = closed_form_size(VisionTransformer(cfg), cfg) if time.perf_counter() < until else None
        c = costs[key]
        size = f"{c['params']:>10,} {macs(c['gmacs']):>10}" if c else f"{'—':>10} {'—':>10}"
        print(f"  {task.point.label:<16} {task.seed:>4} {size} {cfg.tokens:>6}  {task.run_id}  "
              f"{'yes' if task.run_id in done else 'no'}")
    todo = [task for task in tasks if task.run_id not in done]
    packs = [len(task.members) for task in pack_tasks(todo) if task.members]
    if packs:
        pinned = max((task.point.train.pack_width for task in todo), default=0)
        verb = f"run{'s' * (len(todo) != 1)} would train"
        print(f"  PACK={options.pack}:{packs_text(packs, pinned, verb)[1:]}")
    counted = sum(c is not None for c in costs.values())
    if counted < len(costs):
        print(f"  (params and GMACs of the first {counted} of {len(costs):,} models, counted in "
              f"{DRY_RUN_COUNTING_S:.0f} s; each run records its own)")


def check_out(args: argparse.Namespace) -> None:
    """ValueError for an OUT that holds the committed reference results, unless --into-reference; for
    TENSORBOARD=1 without the package."""
    message = refusal(args.out, args.into_reference) or (tensorboard.available() if getattr(args, "tensorboard", False) else "")
    if message:
        raise ValueError(message)


def prepare(args: argparse.Namespace, specs: list[SweepSpec] | None
            ) -> tuple[list[SweepSpec], list[tuple[str, list[Point]]], Any, str]:
    """What a command trains, checked before anything is written: (its sweeps' specs with --set applied, each
    sweep's points, the dataset, its data id). `specs` None: `train`, a one-point sweep of --preset. Raises
    SpecError, ValueError or FileNotFoundError with the one-line message."""
    check_out(args)
    check_device(args)
    model_changes, train_changes = _overrides(args, specs or [])
    # an image folder's shape comes from its listing, so its points are checked before its images are read (long)
    shape = imagefolder_shape(args.data_root, args.img_size) if args.dataset == "imagefolder" else None
    data = None if shape else cached_dataset(args.dataset, args.data_root, args.download, args.img_size)
    sizes = shape or data
    presets, train = [args.preset] if specs is None else [spec.preset for spec in specs], specs is None
    if specs is None:
        preset = base_preset(sizes.img_size) if args.preset == "auto" else args.preset
        specs = [SweepSpec.one_run("train", preset, model_changes, {})]
    else:
        specs = [dataclasses.replace(s, model_overrides={**s.model_overrides, **model_changes}) for s in specs]
    sweep_points = [(s.name, _points(args, s, sizes, {**_train_changes(args), **train_changes}))
                    for s in specs]  # every point of every sweep validated before any training
    if data is None:
        data = cached_dataset(args.dataset, args.data_root, args.download, args.img_size)  # the runs reuse it
    _say_what_was_loaded(args, data)
    tried: dict[tuple, str] = {}   # a model shared by sweeps is tried packed once a command
    for name, points in sweep_points:
        _check_recipes(name, points, data)
        _check_packing(args, points, tried)
    _fetch_pretrained(args)
    for spec, (_, points) in zip(specs, sweep_points):
        _check_init(args.init or spec.init, points)
    _say_what_auto_is(data, presets, train)   # once every point is valid: a refusal is the command's one line
    return specs, sweep_points, data, data_id(args.dataset, args.data_root, args.img_size,
                                              native=data.train_x.shape[-1], digest=data.digest)


def _points(args: argparse.Namespace, spec: SweepSpec, data: Any, train_changes: dict[str, Any]) -> list[Point]:
    """The sweep's points for this dataset; a point the command's --set made invalid is refused naming the --set
    as well as the spec (which the value is not in)."""
    try:
        return spec.points(data.img_size, data.in_chans, data.num_classes, train_changes)
    except SpecError as err:
        text = str(err)
        given = parse_overrides(getattr(args, "set", None) or [])
        said = overrides_text(given) if given else ""
        if text.startswith(f"{spec.path}:") and spec.path == Path("--set"):   # `train`'s one-run spec is named --set
            raise SpecError(_train_refusal(text[len("--set"):], given, said, spec, data, train_changes)) from None
        if not given:
            raise
        raise SpecError(f"{text} (with {said} at every point)") from None


def _train_refusal(reason: str, given: dict[str, Any], said: str, spec: SweepSpec, data: Any,
                   train_changes: dict[str, Any]) -> str:
    """`train`'s refusal of its one point: led by the --set (`said`), unless the point without it is refused for the
    same reason (the preset itself does not fit the dataset), then by "train" with the --set named after it."""
    if said:
        without = {k: v for k, v in train_changes.items() if k not in given}
        try:
            dataclasses.replace(spec, model_overrides={}).points(data.img_size, data.in_chans, data.num_classes, without)
        except SpecError as err:
            if str(err).endswith(reason):
                return f"train{reason} (with {said})"
        return said + reason
    return "train" + reason


def _check_packing(args: argparse.Namespace, points: list[Point], tried: dict[tuple, str]) -> None:
    """ValueError in one line where packed runs cannot train: on Ray, a recipe that cannot (`pack_refusal`), or a
    model whose one packed step fails on the device (`pack_trial`, once per model and recipe: `tried` holds what each
    trial said, across the command's sweeps)."""
    if not any(p.train.packed for p in points):
        return
    if getattr(args, "executor", "local") != "local":
        raise ValueError("packed runs train on the local executor; set PACK=0 (--pack 0) with EXECUTOR=ray")
    narrow = min((p.train.pack_width for p in points if p.train.pack_width), default=0)
    if narrow and narrow < pack_width(args):
        raise ValueError(f"pack_width={narrow} is narrower than PACK={pack_width(args)}: a pack trains at its pinned "
                         f"width, so set PACK={narrow} or pack_width={pack_width(args)}")
    from ablations.training.packed import pack_refusal, pack_trial
    from bench.loading import without_gc

    device = resolve_device(args.device)
    for point in points:
        said = pack_refusal(point.train, max(point.model.dropout, point.model.attn_dropout), device)
        if not said:
            if (point.model, point.train) not in tried:
                with without_gc():   # what the first optimizer loads, packed or not: outside the trials' own time
                    importlib.import_module("torch._dynamo")
                start = time.perf_counter()
                tried[point.model, point.train] = pack_trial(point.model, point.train, device)
                args.pack_trials_s = getattr(args, "pack_trials_s", 0.0) + time.perf_counter() - start
            said = tried[point.model, point.train]
        if said:
            raise ValueError(f"sweep {point.sweep}, point {point.label}: {said}")


FLAGS = {"epochs": "--epochs", "dtype": "--dtype", "compile": "--compile"}   # training fields a flag sets too


def _overrides(args: argparse.Namespace, specs: list[SweepSpec] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """--set KEY=VALUE as (model changes, training changes); ValueError in one line for an item that is not
    key=value, a field that is neither, one the dataset fixes, a factor a sweep varies, or one its own flag
    (`FLAGS`) sets to another value."""
    model_changes, train_changes = {}, {}
    flags = _train_changes(args)
    for key, value in parse_overrides(getattr(args, "set", None) or []).items():
        if key == PACKED:
            raise ValueError(f"--set {key}={value}: whether runs train packed is set by PACK (--pack N), not by --set")
        if key in FLAGS and key in flags and flags[key] != value:
            given = next((item for item in reversed(args.set) if item.split("=", 1)[0].strip() == key), key)
            raise ValueError(f"--set {given} and {FLAGS[key]} {getattr(args, key)} both set {key}; give it once")
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
            raise ValueError(f"--set {key}: not a ViTConfig or TrainConfig field"
                             f"{did_you_mean(key, set(MODEL_FIELDS) | set(TRAIN_FIELDS) - {PACKED})}; model: "
                             f"{sorted(MODEL_FIELDS)}, train: {sorted(set(TRAIN_FIELDS) - {PACKED})}")
    return model_changes, train_changes


def stated_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The command's changes to its sweeps' fields as given: `--set` and the flags that set a field."""
    return {**parse_overrides(getattr(args, "set", None) or []), **_train_changes(args)}
