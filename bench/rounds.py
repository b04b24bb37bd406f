"""Alternatives timed side by side: interleaved rounds, then median and interquartile range per item.

Timing one configuration after another lets drift of the machine (thermal state, other load, a
background job) land on some of them only. In interleaved rounds every item is measured once per
round, the round's starting item rotating, so drift hits all items alike; each item's figure is the
median over rounds with the interquartile range as its spread. Two items are called different only
when each rests on at least `MIN_ROUNDS` rounds and their IQRs do not overlap; otherwise they are the
same within noise (or, with fewer rounds, not measured well enough to say).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from bench.units import ratio

Item = TypeVar("Item")
MIN_ROUNDS = 3   # rounds per item below which no ratio is stated (two rounds have no spread to speak of)


def interleaved(items: Sequence[Item], rounds: int) -> Iterator[tuple[int, Item]]:
    """(round, item) in measuring order: every item once per round, round r starting at item r mod k."""
    if rounds < 1:
        raise ValueError(f"rounds must be ≥ 1, got {rounds!r}")
    k = len(items)
    for r in range(rounds):
        for i in range(k):
            yield r, items[(r + i) % k]


@dataclass(frozen=True)
class Spread:
    """Median and quartiles of one item's figures over rounds."""
    median: float
    q1: float
    q3: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        values = np.asarray([v for v in values if v == v], dtype=float)  # drop NaN (a failed round)
        if not len(values):
            return cls(float("nan"), float("nan"), float("nan"), 0)
        q1, med, q3 = np.percentile(values, [25, 50, 75])
        return cls(float(med), float(q1), float(q3), len(values))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def overlaps(self, other: Spread) -> bool:
        return self.q1 <= other.q3 and other.q1 <= self.q3

    def apart(self, other: Spread, least: int = MIN_ROUNDS) -> bool:
        """Both rest on ≥ `least` measurements and their IQRs do not overlap: a difference worth a ratio."""
        return min(self.n, other.n) >= least and not self.overlaps(other)


def ratio_or_noise(new: Spread, old: Spread, fmt: Callable[[float], str] = ratio,
                   least: int = MIN_ROUNDS) -> str:
    """`new / old` as a ratio where both rest on ≥ `least` measurements and their IQRs are apart, else "same
    within noise" (or why there is no ratio). `least` = 1 for a figure that is the same every time it is
    measured (a step's peak memory)."""
    if not (new.n and old.n) or old.median == 0:
        return "not measured"
    if new.apart(old, least):
        return fmt(new.median / old.median)
    if min(new.n, old.n) < least:
        return f"not compared (fewer than {least} measurements on a side)"
    return "same within noise (IQRs overlap)"
