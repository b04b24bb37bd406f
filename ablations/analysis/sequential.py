"""Adaptive seeds: a group-sequential design that trains more seeds only where a sweep's answer is open.

Looking at the data after 3 seeds, deciding what is shown, and adding seeds to the rest would, tested at
α every time, call differences that are not there far more often than α ("add seeds until something is
significant"). A group-sequential design spends α over its looks instead: looks at `LOOKS` = 3, 5, 8, 12,
18 and 24 seeds per setting (the last look is the cap), information fractions t_k = n_k / n_K, and a
spending function α(t) (`spent`), whose nominal two-sided levels (`nominal_levels`) make the probability
of crossing at any look under the null exactly α (computed from the looks by the exact recursion over the
joint normal law of the look statistics: the same digits in every process). The default, Hwang–Shih–DeCani
with γ = −3 (SPENDING), was chosen on the reference's real runs and on simulated sweeps of their regime over
O'Brien–Fleming's (whose first levels, 3e-8 and 2e-5, no 3 or 5 runs can reach on 2 or 4 degrees of
freedom): a 5-point difference is decided at the first or second look rather than the third, with fewer
runs and the same error rates and power at 0.5 and 1 point. For the default looks its levels are about
0.0012, 0.0014, 0.0028, 0.006, 0.017 and 0.041.

At each look (`look`): the sweep's pairs by Holm's step-down with group-sequential levels (Maurer & Bretz
2013: the r-th hypothesis still standing is tested at the level of a design spending α / r), differences
and equivalence within ±margin apart; the leader is the setting with the highest mean; every other
setting whose pair with the leader is decided is frozen (it trains no more seeds), and so is one that no
number of seeds up to the cap could decide (futility: the test set's images alone keep it within reach of
the margin, or it would need more seeds than the cap); the leader and the undecided settings train the
next look's seeds. The sweep stops when every setting but the leader is frozen, or after the last look.
The family-wise error of the different-verdicts is at most α over every look and pair; futility stops
only ever remove decisions. The decisions are a function of the finished runs alone, so a rerun after a
kill takes the same decisions and trains only what is missing.
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

from ablations.analysis.stats import (
    ALPHA,
    MARGIN,
    Comparison,
    Outcome,
    at_chance,
    compare_settings,
    exact_mean,
    leading,
    seed_terms,
)
from ablations.choices import LOOKS, OBRIEN_FLEMING, SPENDING, check_looks, check_spending
from ablations.results.store import SweepPaths, load_preds


def spent(t: float, alpha: float = ALPHA, spending: str = SPENDING) -> float:
    """The α spent by information fraction t. "obf": the O'Brien–Fleming-type Lan–DeMets function
    2 − 2Φ(z_{1−α/2} / √t), which spends almost nothing early (3e-8 at the first of the default looks);
    "hsd:γ": Hwang, Shih & DeCani's α(1 − e^{−γt}) / (1 − e^{−γ}), γ < 0 spending less early, the more so the
    more negative (γ = −4 is close to O'Brien–Fleming's, γ = 1 to Pocock's)."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if spending == OBRIEN_FLEMING:
        return float(2 * sps.norm.sf(sps.norm.isf(alpha / 2) / math.sqrt(t)))
    gamma = check_spending(spending)
    if gamma == 0:
        return float(alpha * t)
    return float(alpha * (1 - math.exp(-gamma * t)) / (1 - math.exp(-gamma)))


GRID = 401   # points of the recursion's grid over the continuation region of each look (odd: Simpson's rule)


def _simpson(n: int) -> np.ndarray:
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w / 3


def _crossing(density: np.ndarray, x: np.ndarray, weights: np.ndarray, bound: float, step: float) -> float:
    """P(still inside after the look before, |S| ≥ bound at this one) for the score S = Σ increments, whose
    sub-density on the grid `x` (inside so far) is `density` and whose increment to this look has variance `step`."""
    sd = math.sqrt(step)
    outside = sps.norm.sf((bound - x) / sd) + sps.norm.sf((bound + x) / sd)
    return float(np.sum(weights * density * outside))


@lru_cache(maxsize=256)
def _levels(looks: tuple[int, ...], alpha: float, spending: str) -> tuple[float, ...]:
    return computed_levels(looks, alpha, spending)


def computed_levels(looks: tuple[int, ...], alpha: float, spending: str = SPENDING) -> tuple[float, ...]:
    """Each look's nominal two-sided level, found look by look so that the chance of a first crossing at look k
    under the null is what the spending function spends there. The joint law of the looks is integrated by
    the exact recursion of Armitage, McPherson & Rowe (1969): the score S_k = Z_k √t_k has independent normal
    increments of variance t_k − t_{k−1}, so its sub-density on the region not yet crossed is carried from
    look to look by one convolution (Simpson's rule on `GRID` points). No random numbers: every process gets
    the same digits."""
    fractions = [n / looks[-1] for n in looks]
    bounds: list[float] = [float(sps.norm.isf(spent(fractions[0], alpha, spending) / 2))]
    # the score's sub-density after look 1, inside its bound: S_1 ~ N(0, t_1)
    edge = bounds[0] * math.sqrt(fractions[0])
    x = np.linspace(-edge, edge, GRID)
    weights = _simpson(GRID) * (x[1] - x[0])
    density = sps.norm.pdf(x, scale=math.sqrt(fractions[0]))
    for k in range(1, len(fractions)):
        step = fractions[k] - fractions[k - 1]
        target = spent(fractions[k], alpha, spending) - spent(fractions[k - 1], alpha, spending)
        crossing = lambda b: _crossing(density, x, weights, b * math.sqrt(fractions[k]), step) - target  # noqa: E731,B023
        bounds.append(float(optimize.brentq(crossing, 0.01, 40.0, xtol=1e-12, rtol=1e-12)))
        edge = bounds[-1] * math.sqrt(fractions[k])
        y = np.linspace(-edge, edge, GRID)
        kernel = sps.norm.pdf((y[:, None] - x[None, :]) / math.sqrt(step)) / math.sqrt(step)
        density, x = kernel @ (weights * density), y
        weights = _simpson(GRID) * (x[1] - x[0])
    return tuple(float(2 * sps.norm.sf(c)) for c in bounds)


def nominal_levels(looks: Sequence[int] = LOOKS, alpha: float = ALPHA, spending: str = SPENDING) -> tuple[float, ...]:
    """The two-sided nominal level of each look: a p under it at look k decides, and the chance of deciding
    at any look when nothing differs is α, spent over the looks by `spending`."""
    check_spending(spending)
    return _levels(check_looks(looks), float(alpha), str(spending))


FUTILITY_COVER = 0.8   # the interval of a pair's difference whose every value must stay undecided for a futility stop


@dataclass(frozen=True)
class Decision:
    """A setting decided against the leader of a look: 'different' (the leader is better), 'equivalent'
    (within ±margin), 'identical' (the same predictions, seed by seed: no test) or 'futile' (no difference its
    data still allow would be decided by the last look: it trains no more seeds and stays undecided), with the
    look it was taken at, the
    p that crossed (0 for identical predictions; for futile, the pair's two-sided p) and the level it crossed
    (`why`: a futile stop's reason)."""
    leader: Hashable
    outcome: Outcome
    look: int
    p: float
    level: float = math.nan
    why: str = ""


@dataclass
class Look:
    """One look at a sweep: its seeds per setting, the pairs, the leader, which settings stand decided against
    the leader (frozen) and which stay open. `level`: the look's nominal level for one comparison;
    `outcomes`: every pair's decision at this look by the step-down over the sweep's pairs ('different',
    'equivalent' or absent)."""
    index: int
    seeds: int
    level: float
    comparisons: list[Comparison]
    leader: Hashable
    decided: dict[Hashable, Decision] = field(default_factory=dict)
    open: tuple[Hashable, ...] = ()       # settings (leader included) that train the next look's seeds
    at_chance: bool = False               # the leader is within noise of guessing: no seeds would help
    outcomes: dict[frozenset, tuple[Outcome, float, float]] = field(default_factory=dict)  # pair -> (outcome, p, level)
    tied: tuple[Hashable, ...] = ()       # settings whose mean equals the leader's exactly (ties go by name)
    twins: tuple[frozenset, ...] = ()     # groups of settings seen identical at this look or before

    @property
    def done(self) -> bool:
        """Nothing left to train for: no open setting but the leader is undecided against it (the leader's
        identical twins train beside it, decided)."""
        return not any(k != self.leader and k not in self.decided for k in self.open)


def step_down(p: Mapping[frozenset, float], index: int, looks: Sequence[int], alpha: float,
              already: Iterable[frozenset] = (), spending: str = SPENDING) -> dict[frozenset, float]:
    """Holm's step-down over the sweep's pairs with group-sequential levels (Maurer & Bretz 2013): with r
    hypotheses still standing, the smallest p is tested at look `index`'s nominal level of a design that spends
    α / r over the looks; on a crossing it falls, r drops by one, and the next smallest is tested the same way.
    Pairs in `already` were rejected at earlier looks (they stay rejected and free their share of α). Returns
    the pairs rejected at this look, each with the level it crossed. The family-wise error over every look is
    at most α, not only close to it."""
    done = set(already)
    standing = sorted(((v, k) for k, v in p.items() if k not in done), key=lambda x: (x[0], sorted(map(str, x[1]))))
    rejected: dict[frozenset, float] = {}
    r = len(standing)
    for value, key in standing:
        level = nominal_levels(looks, alpha / r, spending)[index]
        if not value < level:
            break
        rejected[key] = level
        r -= 1
    return rejected


@dataclass(frozen=True)
class SeedsToDecide:
    """The seeds a setting at which an undecided pair would be decided at a given two-sided level, over the
    differences its data still allow (its FUTILITY_COVER interval): `fewest` for the most favourable of them,
    `every` for all of them (inf: some difference in the interval is never decided on this test set, its
    images alone keeping it within reach of the margin; `fewest` inf: none ever is)."""
    fewest: float
    every: float

    @property
    def test_set(self) -> bool:
        """No number of seeds decides any difference in the interval: the test images' term alone keeps it open."""
        return math.isinf(self.fewest)


def seeds_to_decide(c: Comparison, seeds: int, level: float, cover: float = FUTILITY_COVER) -> SeedsToDecide | None:
    """The design's own rule for what would decide a pair (None for an identical pair or one without variance
    parts): its seed terms (measured at `seeds` a setting) shrink as 1/s, the test images' term stays, and at s
    seeds a difference d is decided when the half-width h(s) = z·√(seed/s + image) of its interval at the
    two-sided `level` falls below max(|d|, margin − |d|) (outside it: different; wholly inside ±margin:
    equivalent). Over the `cover` interval of d that bound is largest at an end and smallest nearest margin/2."""
    if c.parts is None or c.identical or seeds < 1:
        return None
    q2 = float(sps.norm.isf(level / 2)) ** 2
    low, high = c.interval(cover)
    big = max(abs(low), abs(high))
    small = 0.0 if low <= 0 <= high else min(abs(low), abs(high))
    easiest = max(big, c.margin - small)
    hardest = max(min(max(c.margin / 2, small), big), c.margin - min(max(c.margin / 2, small), big))
    seeded, image = seed_terms(c, seeds), c.parts.image

    def needed(bound: float) -> float:
        room = bound * bound - q2 * image
        return math.inf if room <= 0 else max(1.0, math.floor(q2 * seeded / room) + 1.0)

    return SeedsToDecide(needed(easiest), needed(hardest))


def undecidable(c: Comparison, seeds: int, last: int, level: float, cover: float = FUTILITY_COVER) -> str:
    """Why more seeds cannot decide a pair ("" when they can): no difference inside its `cover` interval would be
    decided at `last` seeds a setting (`seeds_to_decide` at the two-sided `level`, the most lenient level the last
    look can give it, so no pair is stopped that a later look could still decide at its own)."""
    need = seeds_to_decide(c, seeds, level, cover)
    if need is None or need.fewest <= last:
        return ""
    return "test set" if need.test_set else "cap"


def look(correct: Mapping[Hashable, np.ndarray], seeds: Mapping[Hashable, Sequence[int]], index: int,
         looks: Sequence[int] = LOOKS, margin: float = MARGIN, alpha: float = ALPHA,
         preds: Mapping[Hashable, np.ndarray] | None = None,
         earlier: Mapping[Hashable, Decision] | None = None, chance: float | None = None,
         twins: Iterable[frozenset] = (), spending: str = SPENDING) -> Look:
    """Look `index` (0-based) of the design at the runs so far: correct[setting] (runs, n) 0/1, seeds[setting]
    the seed of each row. The sweep's pairs are tested by `step_down` (differences and, apart, equivalence
    within ±margin by two one-sided tests); a setting whose pair with the leader is rejected is decided. Before
    the last look, an undecided setting for which no number of seeds up to the last look could decide its pair
    (`undecidable`) is stopped as futile: stopping a pair early never adds a false decision, so the error
    rates hold. `earlier`: the decisions of the look before; one taken against the leader of this look stands
    (a decision is final while its leader leads); a setting decided against a leader that no longer leads is
    tested again against the new one, and trains on if that is open. `chance`: 1 / classes; a leader within
    noise of it (`stats.at_chance`) stops the design: no setting is shown to learn the task, so no comparison
    says anything about the factor until it trains longer. The leader is the setting with the highest mean, a tie
    going to the first name in sorted order (`stats.leading`). Settings identical seed by seed (here, or at an
    earlier look: `twins`) move together: all train the next look's seeds or none do, so they stay paired; a
    setting once seen identical to the leader stays decided identical while that leader leads."""
    looks = check_looks(looks)
    level = nominal_levels(looks, alpha, spending)[index]
    found = compare_settings(correct, margin=margin, seeds=seeds, preds=preds)
    means = {k: exact_mean(v) for k, v in correct.items()}
    leader, tied = leading(means)
    groups = _twin_groups([frozenset((c.a, c.b)) for c in found if c.identical], twins, correct)
    standing = {k: d for k, d in (earlier or {}).items() if d.leader == leader}
    pair = lambda c: frozenset((c.a, c.b))  # noqa: E731
    prior = {o: [frozenset((leader, k)) for k, d in standing.items() if d.outcome == o]
             for o in (Outcome.DIFFERENT, Outcome.EQUIVALENT)}
    different = step_down({pair(c): c.p for c in found if not c.identical}, index, looks, alpha,
                          prior[Outcome.DIFFERENT], spending)
    equivalent = step_down({pair(c): c.p_equiv for c in found if not c.identical}, index, looks, alpha,
                           prior[Outcome.EQUIVALENT], spending)
    outcomes: dict[frozenset, tuple[Outcome, float, float]] = {}
    for c in found:
        if c.identical:
            outcomes[pair(c)] = (Outcome.IDENTICAL, 0.0, level)
        elif pair(c) in equivalent:
            outcomes[pair(c)] = (Outcome.EQUIVALENT, c.p_equiv, equivalent[pair(c)])
        elif pair(c) in different:
            outcomes[pair(c)] = (Outcome.DIFFERENT, c.p, different[pair(c)])
    last = index == len(looks) - 1
    decided = _decide(found, leader, standing, outcomes, groups, index, None if last else looks, alpha, level,
                      spending)
    training = {k for k in correct if k == leader or k not in decided}
    training |= {k for group in groups if group & training for k in group}   # twins: all of a group or none
    still = tuple(k for k in correct if k in training)
    lead = np.asarray(correct[leader])
    guessing = chance is not None and at_chance(float(means[leader]), chance, lead.shape[1], lead.mean(axis=1), lead)
    return Look(index, looks[index], level, found, leader, decided, () if last or guessing else still, guessing,
                outcomes, tied, tuple(groups))


def _decide(found: list[Comparison], leader: Hashable, standing: Mapping[Hashable, Decision],
            outcomes: Mapping[frozenset, tuple[Outcome, float, float]], groups: list[frozenset], index: int,
            looks: Sequence[int] | None, alpha: float, level: float, spending: str = SPENDING
            ) -> dict[Hashable, Decision]:
    """Each setting decided against the leader at look `index`: its twins identical (kept as first seen), a
    decision standing from an earlier look kept, a crossing at this look taken, else (`looks` given: not the
    last look) a futile stop where no number of seeds up to the cap could decide it."""
    decided: dict[Hashable, Decision] = {}
    for group in groups:   # the leader's twins, seen now or before: identical, whatever this look's pairing
        if leader in group:
            for other in sorted(group - {leader}, key=str):
                kept = standing.get(other)
                decided[other] = (kept if kept is not None and kept.outcome == Outcome.IDENTICAL
                                  else Decision(leader, Outcome.IDENTICAL, index, 0.0, level))
    for c in found:
        if leader not in (c.a, c.b) or (c.b if c.a == leader else c.a) in decided:
            continue
        other, key = (c.b if c.a == leader else c.a), frozenset((c.a, c.b))
        if other in standing and standing[other].outcome != Outcome.FUTILE:
            decided[other] = standing[other]
        elif key in outcomes:      # a futile stop binds nothing: a later crossing decides the pair
            outcome, p, crossed = outcomes[key]
            decided[other] = Decision(leader, outcome, index, p, crossed)
        elif other in standing:
            decided[other] = standing[other]
        elif looks is not None:
            why = undecidable(c, looks[index], looks[-1], nominal_levels(looks, alpha, spending)[-1])
            if why:
                decided[other] = Decision(leader, Outcome.FUTILE, index, c.p, math.nan, why)
    return decided


def _twin_groups(pairs: Iterable[frozenset], earlier: Iterable[frozenset], settings: Iterable[Hashable]
                 ) -> list[frozenset]:
    """The groups of settings linked by identical pairs (this look's and earlier groups), each of two or more,
    in a fixed order (by their members' names)."""
    group_of = {k: {k} for k in settings}
    for link in [*pairs, *earlier]:
        members = [k for k in link if k in group_of]
        merged = set().union(*(group_of[k] for k in members)) if members else set()
        for k in merged:
            group_of[k] = merged
    found = {frozenset(g) for g in group_of.values() if len(g) > 1}
    return sorted(found, key=lambda g: sorted(map(str, g)))


@dataclass
class Design:
    """The design replayed on a sweep's finished runs: the looks taken, the seeds each setting has at the
    last of them, and `need`: the seeds each setting must still train before the next look can be taken
    (empty when the design has stopped)."""
    looks: list[Look]
    have: dict[Hashable, int]
    need: dict[Hashable, list[int]]
    schedule: tuple[int, ...] = LOOKS   # the seeds a setting has at each look the design may take
    spending: str = SPENDING            # how α is spent over those looks (`spent`)

    def levels(self, alpha: float = ALPHA) -> tuple[float, ...]:
        """Each look's nominal two-sided level for one pair."""
        return nominal_levels(self.schedule, alpha, self.spending)

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
           seed_order: Sequence[int] | None = None, chance: float | None = None, spending: str = SPENDING) -> Design:
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
        return Design([], have, {}, looks, spending)
    history: list[Look] = []
    decided: dict[Hashable, Decision] = {}
    twins: tuple[frozenset, ...] = ()
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
            return Design(history, have, need, looks, spending)
        pick = lambda k, a: None if a is None else np.asarray(a)[rows[k]]  # noqa: E731
        result = look({k: pick(k, c) for k, (_, c, _) in runs.items()},
                      {k: order[:have[k]] for k in runs}, index, looks, margin, alpha,
                      preds=None if any(p is None for _, _, p in runs.values())
                      else {k: pick(k, p) for k, (_, _, p) in runs.items()},
                      earlier=decided, chance=chance, twins=twins, spending=spending)
        history.append(result)
        decided, twins = result.decided, result.twins
        if result.done:
            break
        for k in result.open:
            have[k] = looks[index + 1]
    return Design(history, have, {}, looks, spending)


@dataclass
class Trial:
    """A simulated sequential sweep: how it ended and what it cost."""
    looks: list[Look]
    runs: int

    @property
    def final(self) -> Look:
        return self.looks[-1]


def run_design(draw: Mapping[Hashable, np.ndarray], looks: Sequence[int] = LOOKS, margin: float = MARGIN,
               alpha: float = ALPHA, spending: str = SPENDING) -> Trial:
    """The design on runs drawn in advance: draw[setting] (most seeds, n) 0/1, row i being seed i. Each look
    reveals the next seeds of the settings still open; a frozen setting keeps what it had."""
    looks = check_looks(looks)
    design = replay({k: (range(looks[-1]), np.asarray(v)[:looks[-1]], None) for k, v in draw.items()}, looks,
                    margin, alpha, spending=spending)
    return Trial(design.looks, design.runs)


# --- a sweep's design replayed from its table ------------------------------------------------------

def gather(rows: Iterable[tuple[Hashable, int, str, str]], keys: Sequence[Hashable], paths: SweepPaths
           ) -> tuple[dict[Hashable, tuple[list[int], np.ndarray, np.ndarray]], dict[Hashable, set[int]]]:
    """The design's input from a sweep's latest row per run, each given as (setting, seed, status, run_id):
    runs[setting] = (seeds, correct (runs, n), predictions) of its ok runs with saved predictions, and each
    setting's seeds whose run diverged (`replay_gathered` decides what they leave out)."""
    found: dict[Hashable, tuple[list[int], list[np.ndarray], list[np.ndarray]]] = {k: ([], [], []) for k in keys}
    diverged: dict[Hashable, set[int]] = {}
    for key, seed, status, rid in rows:
        if key not in found:
            continue
        if status == "diverged":
            diverged.setdefault(key, set()).add(int(seed))
        if status != "ok" or not paths.preds_file(rid).exists():
            continue
        pred, target = load_preds(paths.preds_file(rid))
        seeds, correct, preds = found[key]
        seeds.append(int(seed))
        correct.append((pred == target).astype(float))
        preds.append(np.asarray(pred))
    runs = {k: (seeds, np.stack(c) if c else np.zeros((0, 0)), np.stack(p) if p else np.zeros((0, 0), dtype=int))
            for k, (seeds, c, p) in found.items()}
    return runs, diverged


def replay_gathered(runs: dict[Hashable, tuple[list[int], np.ndarray, np.ndarray]],
                    diverged: dict[Hashable, set[int]], design_file: dict[str, Any]) -> tuple[Design, tuple]:
    """The design on `gather`'s runs, and the settings it leaves out: a setting whose run the design needs has
    diverged (it would diverge again at that seed, so the setting cannot reach the look; the report lists its failed
    runs) is left out, and the design replayed without it, until no needed run has diverged. So a setting is left
    out exactly where the design trained look by look would have met the divergence; a diverged run at a seed the
    design never reads (trained ahead of its looks, AUTO_TRAIN=cap, or by another command) leaves nothing out."""
    out: set = set()
    while True:
        design = replay_design({k: v for k, v in runs.items() if k not in out}, design_file)
        met = {k for k, need in design.need.items() if diverged.get(k, set()) & set(need)}
        if not met:
            return design, tuple(k for k in runs if k in out)
        out |= met


def replay_design(runs: dict[Hashable, tuple[list[int], np.ndarray, np.ndarray]], design_file: dict[str, Any]) -> Design:
    """The design a sweep's design file (`results.seed_design`) describes, replayed on `gather`'s runs."""
    f = design_file
    return replay(runs, f["looks"], float(f["margin"]), float(f["alpha"]), f["seeds"], f.get("chance"),
                  f.get("spending", OBRIEN_FLEMING))
