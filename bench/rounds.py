"""Alternatives timed side by side: interleaved rounds, then median and interquartile range per item, and a test
of whether two items differ.

Timing one configuration after another lets drift of the machine (thermal state, other load, a
background job) land on some of them only. In interleaved rounds every item is measured once per
round, the round's starting item rotating, so drift hits all items alike; each item's figure is the
median over rounds with the interquartile range as its spread. Two items are called different only
when each rests on at least `MIN_ROUNDS` rounds and a t-test of the logarithms of their figures gives
p < `ALPHA`: paired by round where both were timed in the same rounds (what a round's drift does to
both cancels), else Welch's test over their rounds. Otherwise they are the same within noise (or, with
fewer rounds, not measured well enough to say).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from bench.units import ratio

Item = TypeVar("Item")
MIN_ROUNDS = 3   # rounds per item below which no ratio is stated (two rounds have no spread to speak of)
ALPHA = 0.05     # two-sided level of the test that calls two items' speeds different


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
    """Median and quartiles of one item's figures over rounds, with the figures themselves and, where known, the
    round each was taken in (`rounds`), by which two items timed in the same rounds are compared pairwise."""
    median: float
    q1: float
    q3: float
    n: int
    values: tuple[float, ...] = ()
    rounds: tuple[Hashable, ...] | None = None

    @classmethod
    def of(cls, values: Sequence[float], rounds: Sequence[Hashable] | None = None) -> Spread:
        """Over `values`, NaN (a failed round) dropped; `rounds[i]` names the round of `values[i]`."""
        values = [float(v) for v in values]
        if rounds is not None:
            rounds = list(rounds)
            if len(rounds) != len(values):
                raise ValueError(f"{len(values)} values but {len(rounds)} rounds")
        kept = [i for i, v in enumerate(values) if v == v]
        values = np.asarray([values[i] for i in kept], dtype=float)
        named = tuple(rounds[i] for i in kept) if rounds is not None else None
        if not len(values):
            return cls(float("nan"), float("nan"), float("nan"), 0)
        q1, med, q3 = np.percentile(values, [25, 50, 75])
        return cls(float(med), float(q1), float(q3), len(values), tuple(values.tolist()), named)

    @classmethod
    def by_round(cls, values: Sequence[float]) -> Spread:
        """Over figures taken one a round, in order: `values[r]` from round r."""
        return cls.of(values, range(len(values)))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def p_value(self, other: Spread, least: int = MIN_ROUNDS) -> float:
        """Two-sided p of "the two are one speed": a t-test of the logarithms (the ratio is what is compared; the
        raw figures where one is not positive), paired over the rounds both were timed in where they share at
        least `least`, else Welch's over each one's figures. 0 or 1 where the figures do not vary (a step's peak
        memory): 0 where they differ, 1 where they are equal; NaN where a side has no figures."""
        from scipy import stats

        if not (self.n and other.n):
            return float("nan")
        a, b = np.asarray(self.values), np.asarray(other.values)
        log = bool((a > 0).all() and (b > 0).all())
        a, b = (np.log(a), np.log(b)) if log else (a, b)
        common = sorted(set(self.rounds) & set(other.rounds), key=str) \
            if self.rounds is not None and other.rounds is not None else []
        if len(common) >= least:
            at_a, at_b = dict(zip(self.rounds, a)), dict(zip(other.rounds, b))
            d = np.asarray([at_a[r] - at_b[r] for r in common])
            if np.ptp(d) == 0:
                return 0.0 if d[0] != 0 else 1.0
            return float(stats.ttest_1samp(d, 0.0).pvalue)
        if np.ptp(a) == 0 and np.ptp(b) == 0:
            return 0.0 if a[0] != b[0] else 1.0
        if len(a) < 2 or len(b) < 2:
            return float("nan")
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)

    def apart(self, other: Spread, least: int = MIN_ROUNDS) -> bool:
        """Both rest on ≥ `least` measurements and the test gives p < ALPHA: a difference worth a ratio."""
        if min(self.n, other.n) < least:
            return False
        p = self.p_value(other, least)
        return not math.isnan(p) and p < ALPHA


def ratio_or_noise(new: Spread, old: Spread, fmt: Callable[[float], str] = ratio,
                   least: int = MIN_ROUNDS) -> str:
    """`new / old` (of the medians) as a ratio where both rest on ≥ `least` measurements and the test calls them
    different (`Spread.apart`), else "same within noise" (or why there is no ratio). `least` = 1 for a figure that
    is the same every time it is measured (a step's peak memory)."""
    if not (new.n and old.n) or old.median == 0:
        return "not measured"
    if new.apart(old, least):
        return fmt(new.median / old.median)
    if min(new.n, old.n) < least:
        return f"not compared (fewer than {least} measurements on a side)"
    return "same within noise"
