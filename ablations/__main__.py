"""python -m ablations: sweeps, single training runs and the report.

    python -m ablations sweep default [--dataset mnist5k] [--seeds 0,1,2] [--dry-run]   # patch heads depth
    python -m ablations sweep depth --seeds 0 --cost-rounds 0   # one seed, no cost phase
    python -m ablations train --preset vit_mnist --set depth=6 --set lr=1e-3
    python -m ablations report [--out results]
    python -m ablations compare results-graphs results-eager   # the same sweeps in two folders, point by point
    python -m ablations columns > docs/columns.md
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.csvio import read_rows
from bench.env import resolve_device
from bench.grid import parse_overrides
from bench.measure import cost
from bench.mfu import DTYPES
from vit import PRESETS, ViTConfig, VisionTransformer, checkpoint_id, init_from_checkpoint

from .data import DATASETS, load_dataset
from .cost import CostPlan
from .executors import EXECUTORS, Executor, ExecutorOptions
from .runner import SweepError, SweepPaths, finished_ids, run_sweep
from .tasks import RunOptions, make_tasks
from .specs import DATASET_FIELDS, Point, SpecError, available_sweeps, default_sweeps, find_spec, load_spec
from .train import AUTO_CHECKPOINT_S, TrainConfig

MAX_SEED = 2**32 - 2  # the augmentation generator is seeded with seed + 1; numpy takes seeds below 2**32
MODEL_FIELDS = {f.name for f in dataclasses.fields(ViTConfig)}
TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be comma-separated integers, got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("seeds must name at least one seed")
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"seeds name a seed twice: {text!r}")
    wrong = [s for s in seeds if not 0 <= s <= MAX_SEED]
    if wrong:
        raise argparse.ArgumentTypeError(f"seed {wrong[0]} is out of range: seeds are integers from 0 to {MAX_SEED}")
    return seeds


def _positive(what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{what} must be a positive integer, got {text!r}")
        return value
    return parse


def _jobs(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        return ExecutorOptions(jobs=int(text)).jobs
    except ValueError:
        raise argparse.ArgumentTypeError(f"jobs must be auto or an integer ≥ 1, got {text!r}") from None


def _every(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"checkpoint-every must be auto or an integer ≥ 0 (0: never), got {text!r}")
    return value


def _rounds(text: str) -> int:
    try:
        return CostPlan(rounds=int(text)).rounds
    except ValueError:
        raise argparse.ArgumentTypeError(f"cost rounds must be an integer ≥ 0, got {text!r}") from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="mnist5k", choices=sorted(DATASETS))
    p.add_argument("--data-root", default="data", help="where torchvision datasets live (DATA_ROOT)")
    p.add_argument("--download", action="store_true", help="let torchvision download a missing dataset")
    p.add_argument("--epochs", type=_positive("--epochs (EPOCHS)"), help="override the spec's epochs")
    p.add_argument("--seeds", type=_seeds, default=(0, 1, 2),
                   help="comma-separated training seeds (default 0,1,2: the report's intervals and tests need them)")
    p.add_argument("--cost-rounds", type=_rounds, default=CostPlan().rounds,
                   help=f"interleaved rounds of the cost phase that times every point side by side before "
                        f"training (default {CostPlan().rounds}; 0 skips it and leaves the speed columns empty)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", choices=["auto", *DTYPES], help="default auto: bf16 on CUDA, fp32 on CPU")
    p.add_argument("--compile", type=int, choices=[0, 1], default=0,
                   help="torch.compile the model (1). On the 2-core CPU and, per the H100 measurement in issue 13, "
                        "on CUDA for these small models, compiling costs more time than it saves")
    p.add_argument("--graphs", type=int, choices=[0, 1], default=1,
                   help="on CUDA, capture each training step into a CUDA graph and replay it (default 1; 0: eager). "
                        "fp16, COMPILE=1 or an optimizer without a fused kernel fall back to eager, saying why")
    p.add_argument("--executor", default="local", choices=sorted(EXECUTORS),
                   help="where runs happen: local (this process) or ray (RAY_ADDRESS, or a local cluster)")
    p.add_argument("--cpus-per-task", type=float, help="CPUs each run asks the executor for (ray default 1)")
    p.add_argument("--gpus-per-task", type=float,
                   help="GPUs each run asks for (ray default: 1 where the cluster has GPUs, else 0)")
    p.add_argument("--max-retries", type=int, default=2, help="re-runs of a run whose worker died (default 2)")
    p.add_argument("--jobs", type=_jobs, default=1, metavar="N|auto",
                   help="local executor: runs in flight at once (default 1). On the CPU the cores are split between "
                        "them; on CUDA they share the GPU (or spread over several). auto: half the cores, or 4 per GPU")
    p.add_argument("--init", help="a timm ViT checkpoint (.pth, .bin, .safetensors) to start every run from")
    p.add_argument("--pretrained", help="a timm model name whose pretrained weights timm downloads (network)")
    p.add_argument("--out", default="results")
    p.add_argument("--checkpoint-every", type=_every, default=None, metavar="N|auto",
                   help=f"save a run's full training state every N epochs so a killed run resumes there "
                        f"(default auto: every epoch when the run is projected to last over {AUTO_CHECKPOINT_S:.0f} s; "
                        f"0: never)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and what is done; train nothing")


def _train_changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.epochs is not None:
        changes["epochs"] = args.epochs
    if args.dtype:
        changes["dtype"] = args.dtype
    if args.compile:
        changes["compile"] = True
    return changes


def _check_device(args: argparse.Namespace) -> None:
    """Raises ValueError for a device that is not there; warns about reduced precision on a CPU."""
    if resolve_device(args.device).type == "cpu" and args.dtype in ("bf16", "fp16"):
        print(f"note: {args.dtype} autocast on a CPU can be hundreds of times slower than fp32", file=sys.stderr)


def _options(args: argparse.Namespace, init: str = "") -> RunOptions:
    init = args.init or init
    init_id = f"timm:{args.pretrained}" if args.pretrained else (checkpoint_id(init) if init else "")
    return RunOptions(dataset=args.dataset, data_root=args.data_root, download=args.download, seeds=args.seeds,
                      device=args.device, out=args.out, init=init, init_id=init_id,
                      cost=CostPlan(rounds=args.cost_rounds), checkpoint_every=args.checkpoint_every,
                      graphs=bool(args.graphs))


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


def _dry_run(sweep: str, points: list[Point], options: RunOptions) -> None:
    done = finished_ids(SweepPaths.of(options.out, sweep).rows)
    print(f"sweep {sweep}: {len(points)} points × {len(options.seeds)} seed(s)")
    print(f"  {'factor':<16} {'seed':>4} {'params':>10} {'GMACs':>9} {'tokens':>6}  run_id        done")
    costs = {}
    for task in make_tasks(points, options):
        cfg = task.point.model
        if task.point.value not in costs:
            costs[task.point.value] = cost(VisionTransformer(cfg), (cfg.in_chans, cfg.img_size, cfg.img_size))
        c = costs[task.point.value]
        label = f"{task.point.factor}={task.point.value}"
        print(f"  {label:<16} {task.seed:>4} {c['params']:>10,} {c['gmacs']:>9.5f} {cfg.tokens:>6}  {task.run_id}  "
              f"{'yes' if task.run_id in done else 'no'}")


def _start_executor(args: argparse.Namespace) -> Executor:
    """Build and start the executor; raises ValueError (missing Ray, unreachable cluster) before any run."""
    gpus = 0.0 if args.gpus_per_task is None and args.device == "cpu" else args.gpus_per_task  # DEVICE=cpu: no GPU
    executor = EXECUTORS[args.executor](ExecutorOptions(cpus_per_task=args.cpus_per_task,
                                                        gpus_per_task=gpus,
                                                        max_retries=args.max_retries,
                                                        jobs=args.jobs, device=args.device))
    print(executor.start(), file=sys.stderr)
    return executor


def _run_all(args: argparse.Namespace, plans: list[tuple[str, list[Point]]],
             options: dict[str, RunOptions]) -> list[dict[str, Any]] | None:
    """Every sweep in turn; None (after one line on stderr) for a failure the user must fix."""
    try:
        executor = _start_executor(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    before = _recorded(plans, options)
    try:
        return [run_sweep(name, points, options[name], executor) for name, points in plans]
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    except OSError as err:  # a full disk, a folder gone read-only: every finished run is kept
        where = f"{err.filename}: " if err.filename else ""
        print(f"error: {where}{err.strerror or err}; {_recorded(plans, options) - before} runs finished and kept "
              f"(rerun the same command to resume)", file=sys.stderr)
        return None
    except KeyboardInterrupt as err:
        print(f"\ninterrupted: {_recorded(plans, options) - before} runs finished and kept; rerun the same "
              f"command to resume", file=sys.stderr)
        err.reported = True
        raise
    finally:
        executor.close()


def _recorded(plans: list[tuple[str, list[Point]]], options: dict[str, RunOptions]) -> int:
    """Rows in the sweeps' tables: the difference over a command is the runs it finished."""
    total = 0
    for name, _ in plans:
        rows = SweepPaths.of(options[name].out, name).rows
        total += len(read_rows(rows)) if rows.exists() else 0
    return total


def _summary(results: list[dict[str, Any]], elapsed: float) -> None:
    print(f"\nDone in {elapsed / 60:.1f} min.")
    for r in results:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(r["statuses"].items())) or "nothing new"
        paths = r["paths"]
        reused = f", {r['reused']} reused from other sweeps (same run_id)" if r.get("reused") else ""
        resumed = f", {r['resumable']} resumed from checkpoints" if r.get("resumable") else ""
        stale = f", {r['stale_tmp']} stale temporary files removed" if r.get("stale_tmp") else ""
        print(f"  {r['sweep']:<8} {r['planned']} runs: {r['skipped']} already done{reused}{resumed}, {statuses}{stale}")
        print(f"           rows → {paths.rows}   epochs → {paths.history}   cost → {paths.cost}")
        print(f"           weights → {paths.weights}/   test predictions → {paths.preds}/")
    print("Next: make report (figures and results/REPORT.md from these CSVs)")


def cmd_sweep(args: argparse.Namespace) -> int:
    try:
        _check_device(args)
        names = [n for arg in args.sweeps for n in (default_sweeps() if arg == "default" else [arg])]
        specs = [load_spec(find_spec(name)) for name in dict.fromkeys(names)]
        data = load_dataset(args.dataset, args.data_root, args.download)
        plans = [(s.name, s.points(data.img_size, data.in_chans, data.num_classes, _train_changes(args)))
                 for s in specs]  # every point of every sweep validated before any training
        _fetch_pretrained(args)
        for spec, (_, points) in zip(specs, plans):
            _check_init(args.init or spec.init, points)
    except (SpecError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    options = {spec.name: _options(args, spec.init) for spec in specs}
    if args.dry_run:
        for name, points in plans:
            _dry_run(name, points, options[name])
        return 0
    t0 = time.perf_counter()
    results = _run_all(args, plans, options)
    if results is None:
        return 2
    _summary(results, time.perf_counter() - t0)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    model_changes, train_changes = {}, _train_changes(args)
    try:
        overrides = parse_overrides(args.set)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for key, value in overrides.items():
        if key in DATASET_FIELDS:
            print(f"error: --set {key}={value}: {key} is fixed by the dataset (DATASET={args.dataset}), which "
                  f"sets img_size, in_chans and num_classes of the model; choose another DATASET, or a preset of "
                  f"another patch grid (a timm checkpoint's pos_embed is resampled to it)", file=sys.stderr)
            return 2
        if key in MODEL_FIELDS:
            model_changes[key] = value
        elif key in TRAIN_FIELDS:
            train_changes[key] = value
        else:
            print(f"error: --set {key}: not a ViTConfig or TrainConfig field; model: {sorted(MODEL_FIELDS)}, "
                  f"train: {sorted(TRAIN_FIELDS)}", file=sys.stderr)
            return 2
    try:
        _check_device(args)
        data = load_dataset(args.dataset, args.data_root, args.download)
        model = PRESETS[args.preset].replace(img_size=data.img_size, in_chans=data.in_chans,
                                             num_classes=data.num_classes, **model_changes)
        train_cfg = dataclasses.replace(TrainConfig(), **train_changes)
        _fetch_pretrained(args)
        _check_init(args.init, [Point("train", "preset", args.preset, model, train_cfg)])
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    points = [Point("train", "preset", args.preset, model, train_cfg)]
    options = _options(args)
    if args.dry_run:
        _dry_run("train", points, options)
        return 0
    t0 = time.perf_counter()
    results = _run_all(args, [("train", points)], {"train": options})
    if results is None:
        return 2
    _summary(results, time.perf_counter() - t0)
    table = read_rows(results[0]["paths"].rows)
    mine = [t.run_id for t in make_tasks(points, options)]  # this command's runs, trained now or before
    table = table[table["run_id"].astype(str).isin(mine)].drop_duplicates("run_id", keep="last")
    print(table[["run_id", "seed", "status", "test_acc", "train_time_s", "gmacs",
                 "throughput_img_s"]].to_string(index=False))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report import build_report

    path = build_report(Path(args.out), data_root=args.data_root)
    print(f"report → {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare_outs

    try:
        table = compare_outs(Path(args.a), Path(args.b))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"A = {args.a}   B = {args.b}   (accuracy in %, difference in points with its 95 % interval)")
    shown = table.copy()
    for column in ("acc_a", "acc_b"):
        shown[column] = 100 * shown[column]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"largest |A − B|: {table['diff_pts'].abs().max():.2f} points over {len(table)} points; "
          + ", ".join(f"{label} mean train_util_pct {table[column].mean():.1f}"
                      for label, column in (("A", "util_a"), ("B", "util_b")) if column in table))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"table → {args.csv}")
    return 0


def cmd_columns(args: argparse.Namespace) -> int:
    from .schema import columns_markdown

    print(columns_markdown(), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablations", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help=f"run sweeps: {', '.join(available_sweeps())}, a .toml path, or default "
                                         f"({' '.join(default_sweeps())}: what make ablations runs)")
    sweep.add_argument("sweeps", nargs="+")
    _common(sweep)
    one = sub.add_parser("train", help="one config: a preset plus --set overrides; row in train.csv")
    one.add_argument("--preset", default="vit_mnist", choices=sorted(PRESETS))
    one.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a ViTConfig or TrainConfig field (repeatable)")
    _common(one)
    report = sub.add_parser("report", help="figures and REPORT.md from the CSVs; never trains")
    report.add_argument("--out", default="results")
    report.add_argument("--data-root", default="data",
                        help="where torchvision datasets live, for the attention maps' few test images (DATA_ROOT)")
    sub.add_parser("columns", help="the column dictionary of every result table, as markdown (docs/columns.md)")
    compare = sub.add_parser("compare", help="two OUT folders of the same sweeps (e.g. GRAPHS=1 and GRAPHS=0), point "
                                             "by point: accuracy difference with its interval, utilisation, time")
    compare.add_argument("a", help="an OUT folder")
    compare.add_argument("b", help="another OUT folder of the same sweeps")
    compare.add_argument("--csv", help="also write the table here")
    args = parser.parse_args(argv)
    try:
        return {"sweep": cmd_sweep, "train": cmd_train, "report": cmd_report, "columns": cmd_columns,
                "compare": cmd_compare}[args.command](args)
    except KeyboardInterrupt as err:
        if not getattr(err, "reported", False):  # _run_all says what was kept
            print("\ninterrupted before any run finished; rerun the same command to start again", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
