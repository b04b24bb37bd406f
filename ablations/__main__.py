"""python -m ablations: sweeps, single training runs and the report.

    python -m ablations sweep default [--dataset mnist5k] [--seeds 0,1,2] [--dry-run]   # patch heads depth
    python -m ablations sweep depth --seeds 0 --cost-rounds 0   # one seed, no cost phase
    python -m ablations train --preset vit_mnist --set depth=6 --set lr=1e-3
    python -m ablations report [--out results]
    python -m ablations compare results-graphs results-eager   # the same sweeps in two folders, point by point
    python -m ablations predict digit.png --run 3f2a9c         # a trained run on your images: top-5, attention
    python -m ablations columns > docs/columns.md
"""

from __future__ import annotations

import argparse
import sys

from . import choices
from .choices import AUTO_CHECKPOINT_S, COST_ROUNDS, MAX_SEED, available_sweeps, default_sweeps


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


def _integer(minimum: int, message: str, auto: bool = False):
    """argparse type: an integer ≥ `minimum` (or "auto" → None where `auto`); else the message and the text."""
    def parse(text: str) -> int | None:
        if auto and text == "auto":
            return None
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{message}, got {text!r}")
        return value
    return parse


def _positive(what: str):
    return _integer(1, f"{what} must be a positive integer")


_jobs = _integer(1, "jobs must be auto or an integer ≥ 1", auto=True)
_every = _integer(0, "checkpoint-every must be auto or an integer ≥ 0 (0: never)", auto=True)
_rounds = _integer(0, "cost rounds must be an integer ≥ 0")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="mnist5k", choices=sorted(choices.DATASETS))
    p.add_argument("--data-root", default="data", help="where torchvision datasets live (DATA_ROOT)")
    p.add_argument("--download", action="store_true", help="let torchvision download a missing dataset")
    p.add_argument("--epochs", type=_positive("--epochs (EPOCHS)"), help="override the spec's epochs")
    p.add_argument("--seeds", type=_seeds, default=(0, 1, 2),
                   help="comma-separated training seeds (default 0,1,2: the report's intervals and tests need them)")
    p.add_argument("--cost-rounds", type=_rounds, default=COST_ROUNDS,
                   help=f"interleaved rounds of the cost phase that times every point side by side before "
                        f"training (default {COST_ROUNDS}; 0 skips it and leaves the speed columns empty)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", choices=["auto", *choices.DTYPES], help="default auto: bf16 on CUDA, fp32 on CPU")
    p.add_argument("--compile", type=int, choices=[0, 1], default=0,
                   help="torch.compile the model (1). For these small models, on a CPU and on a GPU, compiling "
                        "costs more time than it saves")
    p.add_argument("--graphs", type=int, choices=[0, 1], default=1,
                   help="on CUDA, capture each training step into a CUDA graph and replay it (default 1; 0: eager). "
                        "fp16, COMPILE=1 or an optimizer without a fused kernel fall back to eager, saying why")
    p.add_argument("--executor", default="local", choices=sorted(choices.EXECUTORS),
                   help="where runs happen: local (this process) or ray (RAY_ADDRESS, or a local cluster)")
    p.add_argument("--cpus-per-task", type=float, help="CPUs each run asks the executor for (ray default 1)")
    p.add_argument("--gpus-per-task", type=float,
                   help="GPUs each run asks for (ray default: 1 where the cluster has GPUs, else 0)")
    p.add_argument("--max-retries", type=int, default=2, help="re-runs of a run whose worker died (default 2)")
    p.add_argument("--jobs", type=_jobs, default=1, metavar="N|auto",
                   help="local executor: runs in flight at once (default 1). On the CPU the cores are split between "
                        "them; on CUDA they share the GPU (or spread over several). auto: half the cores, or 4 per GPU")
    p.add_argument("--threads", type=_positive("--threads (THREADS)"),
                   help="local executor on the CPU: torch threads per run (default: the cores // JOBS). Runs "
                        "with the same count give the same floats whatever JOBS is; a different count changes "
                        "the order of reductions")
    p.add_argument("--init", help="a timm ViT checkpoint (.pth, .bin, .safetensors) to start every run from")
    p.add_argument("--pretrained", help="a timm model name whose pretrained weights timm downloads (network)")
    p.add_argument("--out", default="results")
    p.add_argument("--checkpoint-every", type=_every, default=None, metavar="N|auto",
                   help=f"save a run's full training state every N epochs so a killed run resumes there "
                        f"(default auto: every epoch when the run is projected to last over {AUTO_CHECKPOINT_S:.0f} s; "
                        f"0: never)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and what is done; train nothing")
    p.add_argument("--into-reference", action="store_true",
                   help="allow writing into a folder of committed reference results (results/reference)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablations", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help=f"run sweeps: {', '.join(available_sweeps())}, a .toml path, or default "
                                         f"({' '.join(default_sweeps())}: what make ablations runs)")
    sweep.add_argument("sweeps", nargs="+")
    _common(sweep)
    one = sub.add_parser("train", help="one config (a preset plus --set overrides), once per seed; rows in <out>/ablations/train.csv")
    one.add_argument("--preset", default="auto", choices=["auto", *sorted(choices.PRESETS)],
                     help="the model (default auto: the dataset's base, as in the sweeps: vit_mnist at 28 px, "
                          "vit_digits at 8 px, vit_cifar at 32 px)")
    one.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a ViTConfig or TrainConfig field (repeatable)")
    _common(one)
    report = sub.add_parser("report", help="figures and REPORT.md from the CSVs; never trains")
    report.add_argument("--out", default="results")
    report.add_argument("--into-reference", action="store_true",
                        help="allow rewriting the report of a folder of committed reference results")
    report.add_argument("--reference", help="reference results to compare with (default: results/reference of "
                                            "this checkout, where there is one; 'none' for no comparison)")
    report.add_argument("--data-root", default="data",
                        help="where torchvision datasets live, for the attention maps' few test images (DATA_ROOT)")
    predict = sub.add_parser("predict", help="a trained run (or a checkpoint) on your images: the top-5 classes with "
                                             "their probabilities, and a figure of where its classifier looks")
    predict.add_argument("images", nargs="+", help="image files (any format Pillow reads)")
    predict.add_argument("--run", help="a finished run's run_id (or its first characters) under --out")
    predict.add_argument("--weights", help="instead of --run: a checkpoint file (a timm ViT, or a vitbench "
                                           "weights/<sweep>/<run_id>.pt) for the model of --preset")
    predict.add_argument("--preset", choices=sorted(choices.PRESETS), help="the model --weights belongs to")
    predict.add_argument("--dataset", choices=sorted(choices.DATASETS),
                         help="with --weights: normalise as this dataset (default: ImageNet's mean and std)")
    predict.add_argument("--out", default="results", help="the OUT folder the run was written to (default results)")
    predict.add_argument("--data-root", default="data", help="where torchvision datasets live (DATA_ROOT), for the "
                                                             "normalisation of a run trained on one")
    predict.add_argument("--figure", help="where to write the attention figure (default "
                                          "<out>/figures/predict-attention.png)")
    sub.add_parser("columns", help="the column dictionary of every result table, as markdown (docs/columns.md)")
    compare = sub.add_parser("compare", help="two OUT folders of the same sweeps (e.g. GRAPHS=1 and GRAPHS=0), point "
                                             "by point: accuracy difference with its interval, utilisation, time")
    compare.add_argument("a", help="an OUT folder")
    compare.add_argument("b", help="another OUT folder of the same sweeps")
    compare.add_argument("--csv", help="also write the table here")
    args = parser.parse_args(argv)
    from .interrupts import Interrupted, signals_raise

    try:
        with signals_raise():
            from . import commands  # torch and the rest load here, once the command line is known to be sound

            return getattr(commands, f"cmd_{args.command}")(args)
    except Interrupted as err:  # a sweep's runs say what was kept themselves (commands._run_all)
        runs = " before any run finished; rerun the same command to start again" if args.command in ("sweep", "train") else ""
        print(f"\ninterrupted ({err}){runs}", file=sys.stderr)
        return err.exit_status


if __name__ == "__main__":
    sys.exit(main())
