"""What the command line offers, by name, without importing torch.

`python -m ablations --help` (and every subcommand's `--help`, and argparse's check of a choice) is
built from this module alone, so it answers in a fraction of a second; torch, pandas and the models
load only once a command runs. Presets and dtypes come from `bench.choices`, their one source. The
datasets are named here, their one list; `ablations.training.data.loader(name)` finds each one's `load_<name>`
(a test checks that every name has one).
"""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib
from pathlib import Path

from bench.choices import DTYPES, PRESETS

__all__ = ["AUTO_CHECKPOINT_S", "COST_ROUNDS", "DATASETS", "DTYPES", "LARGE_RUNS", "MAX_SEED", "PRESETS", "SPEC_DIR",
           "available_sweeps", "default_sweeps"]

DATASETS = ("mnist5k", "digits", "synthetic", "mnist", "fashion-mnist", "cifar10", "cifar100", "imagefolder")

COST_ROUNDS = 5           # interleaved rounds of the cost phase when COST_ROUNDS is not given
AUTO_CHECKPOINT_S = 60.0  # checkpoint every epoch when a run is projected to last longer than this
LARGE_RUNS = 1000         # a command planning more runs than this needs --large (it would train for days)
MAX_SEED = 2**32 - 2      # the augmentation generator is seeded with seed + 1; numpy takes seeds below 2**32

SPEC_DIR = Path(__file__).resolve().parent / "sweeps"


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

