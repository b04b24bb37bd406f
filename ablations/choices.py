"""What the command line offers, by name, without importing torch.

`python -m ablations --help` (and every subcommand's `--help`, and argparse's check of a choice) is
built from this module alone, so it answers in a fraction of a second; torch, pandas and the models
load only once a command runs. Presets and dtypes come from `bench.choices`, their one source. The
datasets are named here, their one list; `ablations.training.data.loader(name)` finds each one's `load_<name>`
(a test checks that every name has one).
"""

from __future__ import annotations

import math
import re
import shlex

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.choices import DTYPES, PRESETS

__all__ = ["AUGMENTATION", "AUTO_CHECKPOINT_S", "AUTO_TRAINS", "COST_ROUNDS", "DATASETS", "DEFAULT_SEEDS", "DTYPES",
           "LARGE_RUNS", "LOOKS", "MAX_SEED", "MIN_PACK", "PRESETS", "SPEC_DIR", "AutoSeeds", "available_sweeps",
           "check_looks", "default_augmentation", "default_sweeps", "parse_seeds"]

DATASETS = ("mnist5k", "digits", "synthetic", "mnist", "fashion-mnist", "cifar10", "cifar100", "imagefolder")

# each dataset's augmentation where a recipe sets none: (random-crop padding in px, horizontal flip)
AUGMENTATION = {"mnist5k": (1, False), "digits": (1, False), "synthetic": (0, False), "mnist": (2, False),
                "fashion-mnist": (2, False), "cifar10": (4, True), "cifar100": (4, True)}


def default_augmentation(dataset: str, side: int) -> dict[str, int | bool]:
    """{crop_padding, flip} a dataset trains with where the recipe sets neither; an image folder's scale with
    the side its images are read at (natural photographs: flipped)."""
    if dataset == "imagefolder":
        return {"crop_padding": max(1, side // 16), "flip": True}
    pad, flip = AUGMENTATION[dataset]
    return {"crop_padding": pad, "flip": flip}


SIDE_TABLES = ("-history", "-cost")  # suffixes of a sweep's other tables beside <sweep>.csv: no sweep name ends so
COST_ROUNDS = 5           # interleaved rounds of the cost phase when COST_ROUNDS is not given
AUTO_CHECKPOINT_S = 60.0  # checkpoint every epoch when a run is projected to last longer than this
LARGE_RUNS = 1000         # a command planning more runs than this needs --large (it would train for days)
MAX_SEED = 2**32 - 2      # the augmentation generator is seeded with seed + 1; numpy takes seeds below 2**32
MAX_LOOK = 100            # SEEDS=auto: the most seeds a setting may reach (more: fixed SEEDS and --large)

DEFAULT_SEEDS = (0, 1, 2)  # a sweep's seeds when neither SEEDS nor its spec names any
RUN_ORDERS = ("listed", "longest")   # the orders a command's runs may start in (`ablations.running.order`)
LOOKS = (3, 5, 8, 12, 18, 24)  # SEEDS=auto: seeds per setting at each look of the sequential design (the last: the cap)
MIN_PACK = 2   # the narrowest a pack trains (a stacked model of one runs other kernels than of two): filler below
AUTO_TRAINS = ("auto", "look", "cap")   # how SEEDS=auto trains its seeds (`ablations.cli.adaptive`); auto: look
SPENDING = "hsd:-3"   # SEEDS=auto: how a new design spends α over its looks (`analysis.sequential.spent`)
OBRIEN_FLEMING = "obf"  # the spending of designs whose file names none (written before it was chosen)

SPEC_DIR = Path(__file__).resolve().parent / "sweeps"


def with_makefile() -> bool:
    """Whether vitbench runs from a checkout that has its Makefile (a pip install has none): its `make`
    targets are then commands the user has."""
    return (SPEC_DIR.parents[1] / "Makefile").is_file()


def say(make: str, cli: str) -> str:
    """A command to tell the user: the `make …` form with the `vitbench …` one beside it in a checkout, the
    `vitbench …` form alone where there is no Makefile."""
    return f"{make} (or {cli})" if with_makefile() else cli


def say_out(target: str, out: str | Path) -> str:
    """`say` for a command on an OUT folder: `make <target> OUT=…` beside `vitbench <target> --out …`, the folder
    quoted for a POSIX shell where it needs it; the vitbench form alone for a folder whose name holds a single
    quote, which the Makefile's own quoting cannot pass on."""
    word = shlex.quote(str(out))
    cli = f"vitbench {target} --out {word}"
    return cli if "'" in str(out) else say(f"make {target} OUT={word}", cli)


def check_looks(looks: Sequence[int], most: int | None = None) -> tuple[int, ...]:
    """The looks of a sequential design as a tuple; ValueError in one line for fewer than 3 seeds at the first
    look, looks that do not increase, or a last look above `most`."""
    looks = tuple(looks)
    if not looks or any(isinstance(n, bool) or not isinstance(n, int) for n in looks):
        raise ValueError(f"adaptive seeds need looks given as whole numbers of seeds, got {list(looks)!r}")
    if looks[0] < 3:
        raise ValueError(f"adaptive seeds need at least 3 seeds at the first look (the spread between seeds), "
                         f"got {looks[0]}")
    if any(b <= a for a, b in zip(looks, looks[1:])):
        raise ValueError(f"adaptive seeds need looks that increase, got {list(looks)}")
    if most is not None and looks[-1] > most:
        raise ValueError(f"adaptive seeds: the last look ({looks[-1]} seeds) is above the {most} seeds allowed")
    return looks


@dataclass(frozen=True)
class AutoSeeds:
    """SEEDS=auto (or auto:3,5,8,12): seeds chosen by the sequential design, seeds 0, 1, … in order, at
    most the last look's number a setting."""
    looks: tuple[int, ...] = LOOKS

    @property
    def most(self) -> tuple[int, ...]:
        """Every seed the design may train, in order."""
        return tuple(range(self.looks[-1]))

    def __str__(self) -> str:
        return "auto" if self.looks == LOOKS else "auto:" + ",".join(map(str, self.looks))


MAX_RANGE = 10_000   # seeds one range of SEEDS may name ("0-17")


def _seed_items(value: str) -> tuple[int, ...]:
    """'0,1,2' and ranges as the report writes them, both ends included ('0-17', '0–17', '0-4,10'); ValueError in
    one line naming what is wrong."""
    found: list[int] = []
    for item in (s.strip() for s in value.split(",")):
        ends = re.fullmatch(r"(\d+)\s*[-–]\s*(\d+)", item)
        if ends is not None:
            first, last = int(ends[1]), int(ends[2])
            if not first <= last < first + MAX_RANGE:
                raise ValueError(f"a range of seeds runs upward over at most {MAX_RANGE:,} of them, got {item!r}")
            found.extend(range(first, last + 1))
        elif item:
            try:
                found.append(int(item))
            except ValueError:
                raise ValueError(f"seeds must be comma-separated integers, ranges (0-17) or auto, got {value!r}") \
                    from None
    return tuple(found)


def parse_seeds(value) -> tuple[int, ...] | AutoSeeds:
    """SEEDS as text ("0,1,2", "0-17", "auto", "auto:3,5,8,12") or as a spec gives it (a list, or one of those
    strings); ValueError in one line naming what is wrong."""
    if isinstance(value, str) and value.strip().startswith("auto"):
        text = value.strip()
        if text == "auto":
            return AutoSeeds()
        if not text.startswith("auto:"):
            raise ValueError(f"seeds: auto takes its looks as auto:3,5,8,12, got {value!r}")
        try:
            looks = tuple(int(s) for s in text[5:].split(",") if s.strip())
        except ValueError:
            raise ValueError(f"seeds: the looks of auto must be comma-separated integers, got {value!r}") from None
        return AutoSeeds(check_looks(looks, most=MAX_LOOK))
    if isinstance(value, str):
        values = _seed_items(value)
    elif isinstance(value, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        values = tuple(value)
    else:
        raise ValueError(f"seeds must be a list of integers or \"auto\", got {value!r}")
    if not values:
        raise ValueError("seeds must name at least one seed")
    if len(set(values)) != len(values):
        raise ValueError(f"seeds name a seed twice: {value!r}")
    wrong = [s for s in values if not 0 <= s <= MAX_SEED]
    if wrong:
        raise ValueError(f"seed {wrong[0]} is out of range: seeds are integers from 0 to {MAX_SEED}")
    return values


def _is_default(path: Path) -> bool:
    """`default = true` in the file's [sweep] table; a file that does not parse is listed, not default
    (running it reports what is wrong with it)."""
    try:
        table = tomllib.loads(path.read_text()).get("sweep", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(table, dict) and table.get("default") is True


def available_sweeps(spec_dir: Path = SPEC_DIR) -> list[str]:
    """Every sweep name (a TOML file's stem), the `default = true` ones (those `make ablations` runs)
    first, each group by name."""
    paths = sorted(spec_dir.glob("*.toml"))
    return [p.stem for p in sorted(paths, key=lambda p: (not _is_default(p), p.stem))]


def default_sweeps(spec_dir: Path = SPEC_DIR) -> list[str]:
    return [name for name in available_sweeps(spec_dir) if _is_default(spec_dir / f"{name}.toml")]


def check_spending(spending: str) -> float:
    """γ of an "hsd:γ" spending (0.0 for "obf"); ValueError naming the value otherwise."""
    if spending == OBRIEN_FLEMING:
        return 0.0
    try:
        kind, value = str(spending).split(":", 1)
        gamma = float(value)
    except ValueError:
        kind, gamma = "", math.nan
    if kind != "hsd" or not math.isfinite(gamma) or not -20 <= gamma <= 5:
        raise ValueError(f"the spending function must be 'obf' or 'hsd:γ' with γ between -20 and 5, got {spending!r}")
    return gamma


@dataclass(frozen=True)
class RelativeMargin:
    """An equivalence margin given as a share of the best setting's error rate ("20%" of what the best setting gets
    wrong), resolved on each sweep's runs: on an easy task a fixed ±0.5 points is a large part of the error."""
    share: float

    def resolve(self, best_accuracy: float) -> float:
        """The margin as a fraction of accuracy, for a sweep whose best setting scores `best_accuracy`."""
        return max(self.share * (1 - best_accuracy), 1e-4)

    def __str__(self) -> str:
        return f"{100 * self.share:g} % of the best setting's error"


def parse_margin(value, where: str) -> float | RelativeMargin:
    """An equivalence margin as a user gives it: accuracy points (0.5) → a fraction, or "N%" of the best setting's
    error rate → RelativeMargin; ValueError naming `where` otherwise."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            if 0 < share <= 1:
                return RelativeMargin(share)
        elif not isinstance(value, bool):
            points = float(text)
            if 0 < points < 100:
                return points / 100
    except ValueError:
        pass
    raise ValueError(f"{where} must be a number of accuracy points above 0 and below 100 (0.5), or a share of the "
                     f"best setting's error above 0 % and at most 100 % (20%), got {value!r}")

