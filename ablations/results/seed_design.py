"""The design a sweep trained under with SEEDS=auto, kept beside its table (`<sweep>-design.json`: the looks, α,
the equivalence margin, the seeds drawn from and chance), so that the driver between looks and the report
afterwards replay the same looks on the same runs (`ablations.analysis.sequential.replay_design`). A sweep
trained at fixed seeds has none."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ablations.choices import LOOKS, OBRIEN_FLEMING, SPENDING, check_looks, check_spending
from bench.io.atomic import write_atomic

PLAN_VERSION = 1


class SweepPaths(Protocol):
    """Where a sweep's design file is (`store.SweepPaths` is one)."""
    design: Path


def new_design(margin: float, alpha: float, classes: int | None = None, looks: Sequence[int] = LOOKS,
             experiment: str = "") -> dict[str, Any]:
    """The design of a sweep trained with SEEDS=auto: its looks, α, the equivalence margin, how α is spent over
    the looks (SPENDING; a file without it was written under O'Brien–Fleming's), the seeds drawn from, in
    order, chance (1 / classes: a leader at chance stops it) and the experiment it is the design of (its runs'
    `experiment_id`: the design is never applied to another experiment's runs in the table)."""
    looks = check_looks(looks)
    return {"version": PLAN_VERSION, "looks": list(looks), "alpha": alpha, "margin": margin, "spending": SPENDING,
            "seeds": list(range(looks[-1])), "chance": 1.0 / classes if classes else None,
            **({"experiment": experiment} if experiment else {})}


def write_design(paths: SweepPaths, design: dict[str, Any]) -> None:
    """Record that the sweep trains under adaptive seeds, with what the report needs to replay its looks."""
    paths.design.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(paths.design, (json.dumps(design, indent=1) + "\n").encode())


def read_design(paths: SweepPaths) -> dict[str, Any] | None:
    """The sweep's adaptive design, or None where it trained under fixed seeds; ValueError naming the file
    for one that cannot be read."""
    path = paths.design
    if not path.exists():
        return None
    try:
        design = json.loads(path.read_text())
        check_looks(design["looks"])
        check_spending(design.get("spending", OBRIEN_FLEMING))
        if len(design["seeds"]) < design["looks"][-1] or not 0 < float(design["alpha"]) < 1 or not 0 < float(design["margin"]):
            raise ValueError("seeds, alpha or margin out of range")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a design file of this version ({err}); remove it, or rerun the sweep "
                         f"with SEEDS=auto to write it again") from None
    return design


def first_look_seeds(design: dict[str, Any]) -> list[int]:
    """The seeds every setting trains for the design's first look (a tuned sweep picks its values on them)."""
    return [int(s) for s in design["seeds"][:design["looks"][0]]]


def forget_design(paths: SweepPaths) -> bool:
    """A command with fixed seeds defines the sweep again: its adaptive design no longer applies."""
    path = paths.design
    if path.exists():
        path.unlink()
        return True
    return False
