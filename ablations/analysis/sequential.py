"""Adaptive seeds: a group-sequential design that trains more seeds only where a sweep's answer is open.

Looking at the data after 3 seeds, deciding what is shown, and adding seeds to the rest would, tested at
α every time, call differences that are not there far more often than α ("add seeds until something is
significant"). A group-sequential design spends α over its looks instead: looks at `LOOKS` = 3, 5, 8 and
12 seeds per setting, information fractions t_k = n_k / n_K, and an O'Brien–Fleming-type Lan–DeMets
spending function α(t) = 2 − 2Φ(z_{1−α/2} / √t), whose nominal two-sided levels (`nominal_levels`) make
the probability of crossing at any look under the null exactly α (computed here from the looks with
the joint normal law of the look statistics, corr(Z_i, Z_j) = √(t_i / t_j)). For 3/5/8/12 they are about
0.00008, 0.0024, 0.0153 and 0.0436: strict early, close to α at the end.

At each look (`look`): the sweep's pairs with Holm's adjustment (as the report); a pair is decided
*different* when its adjusted p is under the look's level, *equivalent* when its adjusted TOST p is; the
leader is the setting with the highest mean; every other setting whose pair with the leader is decided
is frozen (it trains no more seeds); the leader and the undecided settings train the next look's seeds.
The sweep stops when every setting but the leader is frozen, or after the last look. The decisions are
a function of the finished runs alone, so a rerun after a kill takes the same decisions and trains only
what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import optimize
from scipy import stats as sps

from ablations.analysis.stats import ALPHA, MARGIN, Comparison, compare_settings

LOOKS = (3, 5, 8, 12)   # seeds per setting at each look


def check_looks(looks: Sequence[int], most: int | None = None) -> tuple[int, ...]:
    """The looks as a tuple; ValueError in one line for fewer than 3 seeds at the first look, looks that do
    not increase, or a last look above `most` (the seeds the dataset allows)."""
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


def spent(t: float, alpha: float = ALPHA) -> float:
    """The O'Brien–Fleming-type Lan–DeMets spending function: the α spent by information fraction t."""
    if t <= 0:
        return 0.0
    return float(2 - 2 * sps.norm.cdf(sps.norm.ppf(1 - alpha / 2) / math.sqrt(t)))


def _inside(bounds: Sequence[float], fractions: Sequence[float]) -> float:
    """P(|Z_j| < bounds[j] for every look j) for look statistics with corr √(t_i / t_j)."""
    k = len(bounds)
    if k == 1:
        return float(1 - 2 * sps.norm.sf(bounds[0]))
    t = np.asarray(fractions[:k])
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    b = np.asarray(bounds)
    return float(sps.multivariate_normal(np.zeros(k), cov).cdf(b, lower_limit=-b))


@lru_cache(maxsize=32)
def _levels(looks: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    fractions = [n / looks[-1] for n in looks]
    bounds: list[float] = []
    for k, t in enumerate(fractions):
        target = spent(t, alpha) - spent(fractions[k - 1], alpha) if k else spent(t, alpha)
        before = _inside(bounds, fractions) if bounds else 1.0
        # P(inside so far, outside at look k) = before − P(inside at every look up to k) = the α of this look
        crossing = lambda c: before - _inside([*bounds, c], fractions) - target  # noqa: E731
        bounds.append(float(optimize.brentq(crossing, 0.5, 12.0, xtol=1e-10)))
    return tuple(float(2 * sps.norm.sf(c)) for c in bounds)


def nominal_levels(looks: Sequence[int] = LOOKS, alpha: float = ALPHA) -> tuple[float, ...]:
    """The two-sided nominal level of each look: a p under it at look k decides, and the chance of deciding
    at any look when nothing differs is α."""
    return _levels(check_looks(looks), float(alpha))


@dataclass
class Look:
    """One look at a sweep: its seeds per setting, the pairs (Holm over the sweep), the leader, and which
    settings are decided against the leader (frozen) and which stay open."""
    index: int
    seeds: int
    level: float
    comparisons: list[Comparison]
    leader: Hashable
    decided: dict[Hashable, str] = field(default_factory=dict)   # setting -> 'different' or 'equivalent'
    open: tuple[Hashable, ...] = ()                               # settings (leader included) that train on

    @property
    def done(self) -> bool:
        return self.open == (self.leader,) or not self.open


def look(correct: Mapping[Hashable, np.ndarray], seeds: Mapping[Hashable, Sequence[int]], index: int,
         looks: Sequence[int] = LOOKS, margin: float = MARGIN, alpha: float = ALPHA,
         preds: Mapping[Hashable, np.ndarray] | None = None, frozen: frozenset = frozenset()) -> Look:
    """Look `index` (0-based) of the design at the runs so far: correct[setting] (runs, n) 0/1, seeds[setting]
    the seed of each row. `frozen`: settings decided at an earlier look, which keep their fewer seeds (unless
    one leads now)."""
    looks = check_looks(looks)
    level = nominal_levels(looks, alpha)[index]
    found = compare_settings(correct, margin=margin, seeds=seeds, preds=preds)
    means = {k: float(np.asarray(v).mean()) for k, v in correct.items()}
    leader = max(means, key=lambda k: means[k])
    decided: dict[Hashable, str] = {}
    for c in found:
        if leader not in (c.a, c.b):
            continue
        other = c.b if c.a == leader else c.a
        if c.identical or c.p_equiv_holm < level:
            decided[other] = "equivalent"
        elif c.p_holm < level:
            decided[other] = "different"
    last = index == len(looks) - 1
    still = tuple(k for k in correct if k == leader or (k not in decided and k not in frozen and not last))
    return Look(index, looks[index], level, found, leader, decided, () if last else still)


@dataclass
class Trial:
    """A simulated sequential sweep: how it ended and what it cost."""
    looks: list[Look]
    runs: int

    @property
    def final(self) -> Look:
        return self.looks[-1]


def run_design(draw: Mapping[Hashable, np.ndarray], looks: Sequence[int] = LOOKS, margin: float = MARGIN,
               alpha: float = ALPHA) -> Trial:
    """The design on runs drawn in advance: draw[setting] (most seeds, n) 0/1, row i being seed i. Each look
    reveals the next seeds of the settings still open; a frozen setting keeps what it had."""
    looks = check_looks(looks)
    have = {k: looks[0] for k in draw}
    history: list[Look] = []
    frozen: set = set()
    for index in range(len(looks)):
        seen = {k: np.asarray(v)[:have[k]] for k, v in draw.items()}
        result = look(seen, {k: list(range(have[k])) for k in draw}, index, looks, margin, alpha,
                      frozen=frozenset(frozen))
        history.append(result)
        frozen |= set(draw) - set(result.open)
        if result.done or index == len(looks) - 1:
            break
        for k in result.open:
            have[k] = looks[index + 1]
    return Trial(history, sum(have.values()))
