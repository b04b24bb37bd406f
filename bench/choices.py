"""The names `python -m bench` offers, without importing torch.

`python -m bench --help` (and argparse's check of a choice) is built from this module alone, so it
answers in a fraction of a second; torch and the models load only once a command runs.
Each list has one source: the presets' names are read from `vit/presets.toml`, the file `vit.PRESETS` is
built from; `bench.training.precision.DTYPES` is built from `DTYPES` here. Attention backends are not listed:
`vit.register_backend` adds them at run time, and `--attn` is checked against the registry itself.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib

PRESETS = tuple(tomllib.loads((Path(__file__).resolve().parents[1] / "vit" / "presets.toml").read_text()))
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # name -> torch dtype attribute
MODES = ("infer", "train")
EPOCHS = 20   # a training run's epochs unless a spec, --epochs or --set says otherwise (TrainConfig's default)
# whether F.scaled_dot_product_attention may run cuDNN's attention kernel on CUDA (`bench.env.set_cudnn_attention`)
CUDNN_ATTENTION = ("auto", "off")


def integer(minimum: int, message: str, auto: bool = False) -> Callable[[str], int | None]:
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


def non_negative(message: str) -> Callable[[str], float]:
    """argparse type: a finite number ≥ 0; else the message and the text."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"{message}, got {text!r}")
        return value
    return parse


class Parser(argparse.ArgumentParser):
    """A refused argument is one line (exit 2) naming it, not the usage block above it; a choice a typo away
    from a known one, or part of just one, is named ('swep': did you mean 'sweep'?)."""

    def error(self, message: str):
        found = re.search(r"invalid choice: '?([^'(]*?)'? \(choose from (.*)\)", message)   # argparse's wording
        known = [n.strip(" '") for n in found[2].split(",")] if found else []
        close = difflib.get_close_matches(found[1], known, n=1, cutoff=0.7) if found else []
        close = close or [k for k in known if found[1] and found[1] in k][:2]   # part of one name: 'vit_tiny'
        # the rule of vit.config.did_you_mean, not imported: a refused argument loads no vit (tests/test_cli.py)
        if len(close) == 1:
            message = message.replace(found[0], found[0].replace(" (choose", f" (did you mean {close[0]!r}?) (choose"))
        commands = next((list(a.choices) for a in self._actions if isinstance(a, argparse._SubParsersAction)), [])
        if commands and message == "the following arguments are required: command":   # a bare `vitbench`
            self.exit(2, f"{self.prog}: error: name a command: {', '.join(commands)} (--help says what each does)\n")
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")
