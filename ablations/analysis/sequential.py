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
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize
from scipy import stats as sps

from ablations.analysis.stats import ALPHA, MARGIN, Comparison, at_chance, compare_settings
from ablations.choices import LOOKS, check_looks
from ablations.results.store import SweepPaths, load_preds


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
    # Genz's integration draws random points: a fixed seed gives every process the same figure to the last digit
    return float(sps.multivariate_normal(np.zeros(k), cov, seed=0).cdf(b, lower_limit=-b))


# `_levels` of the standard designs, as it computes them (a test recomputes each): no integration at report time
STANDARD_LEVELS: dict[tuple[tuple[int, ...], float], tuple[float, ...]] = {
    ((3, 5, 8, 12), 0.05): (8.857543832148674e-05, 0.002359323791109487, 0.015456961961896661, 0.04374539452923114),
}


@lru_cache(maxsize=32)
def _levels(looks: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    if (looks, alpha) in STANDARD_LEVELS:
        return STANDARD_LEVELS[(looks, alpha)]
    return computed_levels(looks, alpha)


def computed_levels(looks: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    """Each look's nominal two-sided level, found look by look so that the chance of a first crossing at look k
    under the null is what the spending function spends there (root-finding over `_inside`)."""
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


@dataclass(frozen=True)
class Decision:
    """A setting decided against the leader of a look: 'different' (the leader is better) or 'equivalent'
    (within ±margin, or identical predictions), with the look it was taken at and the Holm-adjusted p that
    crossed that look's level (0 for identical predictions)."""
    leader: Hashable
    outcome: str
    look: int
    p: float


@dataclass
class Look:
    """One look at a sweep: its seeds per setting, the pairs (Holm over the sweep), the leader, which
    settings stand decided against the leader (frozen) and which stay open."""
    index: int
    seeds: int
    level: float
    comparisons: list[Comparison]
    leader: Hashable
    decided: dict[Hashable, Decision] = field(default_factory=dict)
    open: tuple[Hashable, ...] = ()       # settings (leader included) that train the next look's seeds
    at_chance: bool = False               # the leader is within noise of guessing: no seeds would help

    @property
    def done(self) -> bool:
        return self.open == (self.leader,) or not self.open


def look(correct: Mapping[Hashable, np.ndarray], seeds: Mapping[Hashable, Sequence[int]], index: int,
         looks: Sequence[int] = LOOKS, margin: float = MARGIN, alpha: float = ALPHA,
         preds: Mapping[Hashable, np.ndarray] | None = None,
         earlier: Mapping[Hashable, Decision] | None = None, chance: float | None = None) -> Look:
    """Look `index` (0-based) of the design at the runs so far: correct[setting] (runs, n) 0/1, seeds[setting]
    the seed of each row. `earlier`: the decisions of the look before; one taken against the leader of this
    look stands (a decision is final while its leader leads); a setting decided against a leader that no
    longer leads is tested again against the new one, and trains on if that is open. `chance`: 1 / classes;
    a leader within noise of it (`stats.at_chance`) stops the design: nothing has learned the task, and
    more seeds of the same budget will not change that."""
    looks = check_looks(looks)
    level = nominal_levels(looks, alpha)[index]
    found = compare_settings(correct, margin=margin, seeds=seeds, preds=preds)
    means = {k: float(np.asarray(v).mean()) for k, v in correct.items()}
    leader = max(means, key=lambda k: means[k])
    decided: dict[Hashable, Decision] = {}
    for c in found:
        if leader not in (c.a, c.b):
            continue
        other = c.b if c.a == leader else c.a
        before = (earlier or {}).get(other)
        if before is not None and before.leader == leader:
            decided[other] = before
        elif c.identical or c.p_equiv_holm < level:
            decided[other] = Decision(leader, "equivalent", index, 0.0 if c.identical else c.p_equiv_holm)
        elif c.p_holm < level:
            decided[other] = Decision(leader, "different", index, c.p_holm)
    last = index == len(looks) - 1
    still = tuple(k for k in correct if k == leader or k not in decided)
    guessing = chance is not None and at_chance(means[leader], chance, np.asarray(correct[leader]).shape[1])
    return Look(index, looks[index], level, found, leader, decided, () if last or guessing else still, guessing)


@dataclass
class Design:
    """The design replayed on a sweep's finished runs: the looks taken, the seeds each setting has at the
    last of them, and `need`: the seeds each setting must still train before the next look can be taken
    (empty when the design has stopped)."""
    looks: list[Look]
    have: dict[Hashable, int]
    need: dict[Hashable, list[int]]
    plan: tuple[int, ...] = LOOKS

    @property
    def final(self) -> Look | None:
        return self.looks[-1] if self.looks else None

    @property
    def done(self) -> bool:
        return not self.need

    @property
    def runs(self) -> int:
        return sum(self.have.values())


def replay(runs: Mapping[Hashable, tuple[Sequence[int], np.ndarray, np.ndarray | None]],
           looks: Sequence[int] = LOOKS, margin: float = MARGIN, alpha: float = ALPHA,
           seed_order: Sequence[int] | None = None, chance: float | None = None) -> Design:
    """The design on the runs finished so far: runs[setting] = (seeds, correct (runs, n), preds or None).
    Look k uses each setting's first `have` seeds of `seed_order` (default 0, 1, 2, …) and nothing else, so
    the decisions are a function of those runs alone: a rerun after a kill, or with more runs on disk
    (another command's seeds), takes the same decisions and asks for exactly what is missing."""
    looks = check_looks(looks)
    order = list(seed_order) if seed_order is not None else list(range(looks[-1]))
    if len(order) < looks[-1]:
        raise ValueError(f"adaptive seeds need {looks[-1]} seeds to draw from, got {len(order)}")
    have = {k: looks[0] for k in runs}
    if not runs:
        return Design([], have, {}, looks)
    history: list[Look] = []
    decided: dict[Hashable, Decision] = {}
    for index in range(len(looks)):
        rows = {}
        need: dict[Hashable, list[int]] = {}
        for k, (seeds, _, _) in runs.items():
            where = {int(s): i for i, s in enumerate(seeds)}
            wanted = order[:have[k]]
            need_k = [s for s in wanted if s not in where]
            if need_k:
                need[k] = need_k
            rows[k] = [where.get(s) for s in wanted]
        if need:
            return Design(history, have, need, looks)
        pick = lambda k, a: None if a is None else np.asarray(a)[rows[k]]  # noqa: E731
        result = look({k: pick(k, c) for k, (_, c, _) in runs.items()},
                      {k: order[:have[k]] for k in runs}, index, looks, margin, alpha,
                      preds=None if any(p is None for _, _, p in runs.values())
                      else {k: pick(k, p) for k, (_, _, p) in runs.items()},
                      earlier=decided, chance=chance)
        history.append(result)
        decided = result.decided
        if result.done:
            break
        for k in result.open:
            have[k] = looks[index + 1]
    return Design(history, have, {}, looks)


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
    design = replay({k: (range(looks[-1]), np.asarray(v)[:looks[-1]], None) for k, v in draw.items()}, looks,
                    margin, alpha)
    return Trial(design.looks, design.runs)


# --- a sweep's design replayed from its table ------------------------------------------------------

def gather(rows: Iterable[tuple[Hashable, int, str, str]], keys: Sequence[Hashable], paths: SweepPaths
           ) -> tuple[dict[Hashable, tuple[list[int], np.ndarray, np.ndarray]], tuple[Hashable, ...]]:
    """The design's input from a sweep's latest row per run, each given as (setting, seed, status, run_id):
    runs[setting] = (seeds, correct (runs, n), predictions) of its ok runs with saved predictions, and the
    settings left out because one of their runs diverged (it would diverge again at the same seed, so the
    setting cannot reach the seeds a look needs; the report lists its failed runs)."""
    found: dict[Hashable, tuple[list[int], list[np.ndarray], list[np.ndarray]]] = {k: ([], [], []) for k in keys}
    diverged: set = set()
    for key, seed, status, rid in rows:
        if key not in found:
            continue
        if status == "diverged":
            diverged.add(key)
        if status != "ok" or not paths.preds_file(rid).exists():
            continue
        pred, target = load_preds(paths.preds_file(rid))
        seeds, correct, preds = found[key]
        seeds.append(int(seed))
        correct.append((pred == target).astype(float))
        preds.append(np.asarray(pred))
    runs = {k: (seeds, np.stack(c) if c else np.zeros((0, 0)), np.stack(p) if p else np.zeros((0, 0), dtype=int))
            for k, (seeds, c, p) in found.items() if k not in diverged}
    return runs, tuple(k for k in keys if k in diverged)


def replay_plan(runs: dict[Hashable, tuple[list[int], np.ndarray, np.ndarray]], plan: dict[str, Any]) -> Design:
    """The plan's design on `gather`'s runs."""
    return replay(runs, plan["looks"], float(plan["margin"]), float(plan["alpha"]), plan["seeds"], plan.get("chance"))


def describe(design: Design, name: str, left_out: Sequence[Hashable] = ()) -> str:
    """One line: where the sweep's design stands."""
    if left_out:
        name = f"{name} (left out, diverged: {', '.join(map(str, left_out))})"
    if not design.looks:
        return f"{name}: look 1 of {len(design.plan)} needs {design.plan[0]} seeds of every setting"
    last = design.final
    assert last is not None
    decided = ", ".join(f"{k} ({d.outcome} at look {d.look + 1})" for k, d in last.decided.items()) or "none"
    if last.at_chance:
        return (f"{name}: stopped at look {last.index + 1}: even the leader, {last.leader}, is within noise of "
                f"chance (nothing learned the task at this budget; more seeds would not change that)")
    if design.done:
        return (f"{name}: stopped at look {last.index + 1} of {len(design.plan)} ({last.seeds} seeds); leader "
                f"{last.leader}; decided against it: {decided}")
    return (f"{name}: look {last.index + 1} ({last.seeds} seeds) leaves {len(design.need)} setting(s) open "
            f"(leader {last.leader}; decided: {decided}); they train to {design.plan[last.index + 1]} seeds")
