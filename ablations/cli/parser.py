"""The command line of `python -m ablations` (and of `vitbench`): every command and its options, parsed
without loading torch; each command's work is imported only once its arguments are sound.

    python -m ablations sweep default [--dataset mnist5k] [--seeds 0,1,2] [--dry-run]   # patch heads depth
    python -m ablations sweep depth --seeds 0 --cost-rounds 0   # one seed, no cost phase
    python -m ablations train --preset vit_mnist --set depth=6 --set lr=1e-3
    python -m ablations report [--out results]
    python -m ablations compare results-graphs results-eager   # the same sweeps in two folders, point by point
    python -m ablations predict digit.png --run 3f2a9c         # a trained run on your images: top-5, attention
    python -m ablations cost --out results                       # speed of what is trained there, measured now
    python -m ablations migrate --out old-results                # older tables rewritten in today's format
    python -m ablations columns > docs/columns.md
    python -m ablations known                                    # synthetic tasks whose answers are known
    python -m ablations calibrate --from results/reference        # the report's test against known answers
    python -m ablations stepbench                                # the training step, eager against static
"""

from __future__ import annotations

import argparse
import sys
import time

from ablations import choices
from ablations.choices import available_sweeps, default_sweeps
from ablations.cli import known as known_commands
from ablations.options import COST_FLAGS, DATA_ROOT, INTO_REFERENCE, MARGIN, OUT, add_options, positive, run_options
from ablations.running.executors import OPTIONS as EXECUTOR_OPTIONS
from bench.choices import EPOCHS, Parser, non_negative


def _read_commands(sub) -> None:
    """report and predict: the commands that read results (and never train)."""
    report = sub.add_parser("report", help="figures and REPORT.md from the CSVs; never trains")
    OUT.add_to(report)
    INTO_REFERENCE.add_to(report, help="allow rewriting the report of a folder of committed reference results")
    report.add_argument("--reference", help="reference results to compare with (default: results/reference of "
                                            "this checkout, where there is one; 'none' for no comparison)")
    DATA_ROOT.add_to(report, help="where torchvision datasets live, for the attention maps' few test images "
                                  "(DATA_ROOT)")
    MARGIN.add_to(report)
    predict = sub.add_parser("predict", help="a trained run (or a checkpoint) on your images: the top-5 classes with "
                                             "their probabilities, and a figure of where its classifier looks")
    predict.add_argument("images", nargs="+", help="image files (any format Pillow reads), or folders of them")
    predict.add_argument("--run", help="a finished run's run_id (or its first characters) under --out")
    predict.add_argument("--weights", help="instead of --run: a checkpoint file (a timm ViT, or a vitbench "
                                           "weights/<sweep>/<run_id>.pt) for the model of --preset")
    predict.add_argument("--preset", choices=sorted(choices.PRESETS), help="the model --weights belongs to")
    predict.add_argument("--dataset", choices=sorted(choices.DATASETS),
                         help="with --weights: normalise as this dataset (default: ImageNet's mean and std)")
    OUT.add_to(predict, help="the OUT folder the run was written to (default results)")
    DATA_ROOT.add_to(predict, help="where torchvision datasets live (DATA_ROOT), for the normalisation of a run "
                                   "trained on one")
    predict.add_argument("--figure", help="where to write the attention figure (default "
                                          "<out>/figures/predict-attention.png)")


def build(prog: str = "python -m ablations") -> Parser:
    """The whole command tree."""
    parser = Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    named = (f"{', '.join(available_sweeps())}, a .toml path, or default ({' '.join(default_sweeps())}: what make "
             f"ablations runs)")
    sweep = sub.add_parser("sweep", help=f"run sweeps: {named}")
    sweep.add_argument("sweeps", nargs="+", help=f"the sweeps to run, one or more: {named}")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="hold a ViTConfig or TrainConfig field at this value in every point of every sweep "
                            "named (repeatable; e.g. --set flip=false); not a field a sweep varies, nor one the "
                            "dataset fixes")
    add_options(sweep, run_options(EXECUTOR_OPTIONS))
    one = sub.add_parser("train", help="one config (a preset plus --set overrides), once per seed; rows in "
                                       "<out>/ablations/train.csv")
    one.add_argument("--preset", default="auto", choices=["auto", *sorted(choices.PRESETS)],
                     help="the model (default auto: the dataset's base, as in the sweeps: vit_mnist at 28 px, "
                          "vit_digits at 8 px, vit_cifar at 32 px)")
    one.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a ViTConfig or TrainConfig field (repeatable)")
    add_options(one, run_options(EXECUTOR_OPTIONS), changes={
        "--seeds": {"help": "comma-separated training seeds, one run each (the intervals need two or more; "
                            "default 0,1,2)"},
        "--epochs": {"help": f"training epochs (default {EPOCHS})"},
        "--auto-train": {"help": argparse.SUPPRESS}})  # SEEDS=auto is a sweep's
    _read_commands(sub)
    cost = sub.add_parser("cost", help="measure the speed of every point trained under an OUT in one interleaved "
                                       "cost phase (for sweeps run with COST_ROUNDS=0 or on a busy machine); "
                                       "never trains")
    run_flags = {o.flag: o for o in run_options(EXECUTOR_OPTIONS)}
    for flag in COST_FLAGS:
        run_flags[flag].add_to(cost, **({"help": "seconds the phase may take (default: no limit)"}
                                        if flag == "--cost-budget" else {}))
    migrate = sub.add_parser("migrate", help="rewrite an OUT's sweep tables in the current format, in place: "
                                             "no retraining, every run_id kept")
    OUT.add_to(migrate)
    INTO_REFERENCE.add_to(migrate, help="allow rewriting a folder of committed reference results")
    sub.add_parser("columns", help="the column dictionary of every result table, as markdown (docs/columns.md)")
    known = sub.add_parser("known", help="the harness on small synthetic tasks whose answers are known (positions "
                                         "needed, identical backends, shuffled labels, a planted difference); exits 1 "
                                         "if one fails", description=known_commands.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    known_commands.add_arguments(known)
    compare = sub.add_parser("compare", help="two OUT folders of the same sweeps (e.g. GRAPHS=1 and GRAPHS=0), point "
                                             "by point: accuracy difference with its interval, utilisation, time")
    compare.add_argument("a", help="an OUT folder")
    compare.add_argument("b", help="another OUT folder of the same sweeps")
    compare.add_argument("--csv", help="also write the table here")
    _calibrate(sub)
    _stepbench(sub)
    return parser


def _calibrate(sub) -> None:
    calibrate = sub.add_parser("calibrate", help="the report's comparison against cases whose answer is known: A/A "
                                                 "false positives, planted differences found, the sequential "
                                                 "design's rates (make calibrate)",
                               description="The report's comparison against known answers: from the saved "
                                           "predictions of the runs under --from (no training), or by training "
                                           "a small ViT on digits (--train). Writes <out>/calibrate/calibration.csv.")
    mode = calibrate.add_mutually_exclusive_group()
    mode.add_argument("--from", dest="source", metavar="OUT",
                      help="calibrate on the saved predictions of the runs under OUT (default: this checkout's "
                           "results/reference)")
    mode.add_argument("--train", action="store_true", help="calibrate by training a small ViT on digits")
    calibrate.add_argument("--seeds", type=int, default=3, help="runs per group, as the sweeps' seeds (default 3)")
    calibrate.add_argument("--trials", type=int, default=400, help="--from: trials per case (default 400)")
    calibrate.add_argument("--design-trials", type=int, default=200,
                           help="--from: trials per case of the sequential design on one setting's seeds (default 200)")
    calibrate.add_argument("--pairs", type=int, default=100, help="--train: A/A pairs (default 100)")
    calibrate.add_argument("--planted-pairs", type=int, default=30, help="--train: pairs with a planted difference")
    calibrate.add_argument("--label-noise", type=float, default=0.3,
                           help="--train: share of training labels randomised in the planted setting (default 0.3)")
    OUT.add_to(calibrate, help="writes <out>/calibrate/calibration.csv (default results)")
    INTO_REFERENCE.add_to(calibrate, help="allow writing into a folder of committed reference results")


def _stepbench(sub) -> None:
    step = sub.add_parser("stepbench", help="the training step alone, eager against static buffers (a CUDA graph "
                                            "on CUDA), in interleaved rounds (make bench-step)")
    step.add_argument("--preset", default="auto", choices=["auto", *sorted(choices.PRESETS)],
                      help="the model whose training step is timed (default auto: the dataset's base, as in the "
                           "sweeps)")
    step.add_argument("--dataset", default="mnist5k", choices=sorted(choices.DATASETS),
                      help="gives the image shape and classes (default mnist5k: 28×28, 1 channel, 10 classes)")
    DATA_ROOT.add_to(step, help="where torchvision datasets and an image folder live (DATA_ROOT), read for their "
                                "shape and classes")
    step.add_argument("--batch-size", type=positive("--batch-size"), default=64,
                      help="images per training step (default 64, the default recipe's)")
    step.add_argument("--device", default="auto", help="auto (CUDA where there is one), cpu, cuda or cuda:N")
    step.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16"],
                      help="autocast dtype (auto: bf16 on CUDA, fp32 on the CPU; fp16 has no graphed step)")
    step.add_argument("--rounds", type=positive("--rounds"), default=7,
                      help="interleaved rounds, each timing both step kinds (default 7)")
    step.add_argument("--min-time", type=non_negative("--min-time must be a number of seconds ≥ 0"), default=0.5,
                      help="seconds timed per step kind and round (default 0.5)")


RUNS = {"sweep", "train", "cost", "calibrate", "stepbench"}   # they train or time models: their module loads torch
# what a command loads besides its module, before its work starts (the report's figures and statistics)
PRELOAD = {"report": "ablations.analysis.report"}


def _load(command: str):
    """The module of `command`'s function, with what it loads on its way (torch, pandas, scipy, matplotlib),
    loaded once the command line is known to be sound, without the garbage collector's passes meanwhile
    (`bench.loading`)."""
    import importlib

    from bench.loading import without_gc

    with without_gc():
        if command in ("sweep", "train"):
            from ablations.cli import commands
        elif command in RUNS:
            from ablations.cli import measure_commands as commands
        else:
            from ablations.cli import read_commands as commands
        if command in PRELOAD:
            importlib.import_module(PRELOAD[command])
    return commands


def main(argv: list[str] | None = None, prog: str = "python -m ablations") -> int:
    started = time.perf_counter()   # the command's start, for its closing summary's timings
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build(prog).parse_args(argv)
    args.started = started
    if args.command == "known":   # it runs sweep commands of its own, through this command line
        return known_commands.cmd_known(args, run_command=main)
    from ablations.running.interrupts import Interrupted, signals_raise

    try:
        with signals_raise():
            commands = _load(args.command)
            return getattr(commands, f"cmd_{args.command}")(args)
    except Interrupted as err:  # a sweep's runs say what was kept themselves (commands._run_all)
        runs = " before any run finished; rerun the same command to start again" if args.command in ("sweep", "train") else ""
        print(f"\ninterrupted ({err}){runs}", file=sys.stderr)
        return err.exit_status
