"""The names `python -m bench` offers, without importing torch.

`python -m bench --help` (and argparse's check of a choice) is built from this module alone, so it
answers in a fraction of a second; torch and the models load only once a command runs.
The objects behind the names live in their registries (`vit.PRESETS`, `bench.mfu.DTYPES`); a command
compares each with its list here when it starts (`same_names`), so a name added on one side only fails
at once, naming both lists. Attention backends are not listed: `vit.register_backend` adds them at
run time, and `--attn` is checked against the registry itself.
"""

from __future__ import annotations

from collections.abc import Iterable

PRESETS = ("vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224", "vit_mnist", "vit_digits",
           "vit_cifar")
DTYPES = ("fp32", "bf16", "fp16")
MODES = ("infer", "train")


def same_names(what: str, listed: Iterable[str], registry: Iterable[str]) -> None:
    """Raise RuntimeError unless the command line's list of `what` names exactly the registry's entries."""
    listed, real = sorted(listed), sorted(registry)
    if listed != real:
        raise RuntimeError(f"the command line lists the {what} {listed}, but the registry holds {real}; "
                           f"add or remove the name in both")
