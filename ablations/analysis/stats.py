"""Statistics behind the report's intervals and verdicts: seeds crossed with test images, each source of
variation counted once.

Every run of a sweep is scored on the same test images, so a setting's results form a seeds × images
table of 0/1 answers. Its mean accuracy varies for three reasons:

- **seed**: a training seed (initial weights, batch order, augmentation) lifts or lowers a run's accuracy
  on all images at once;
- **seed × image**: which borderline images a run happens to get right ("coin flips"), independently
  of the other images;
- **test image**: which images the test set happens to contain (the population a reader cares about is
  all images like these, not these 1,000).

The spread of the runs' accuracies between seeds already contains the first two. A test that also
resamples the test images (a two-level bootstrap) counts the coin flips a second time and is
conservative: deaf to real differences (Owen 2007, "The pigeonhole bootstrap"). Here every estimate is a
linear contrast c = Σ_j w_j · acc_j of settings' mean accuracies (a difference: w = (1, −1); an interaction:
(1, −1, −1, 1); one setting: (1)) with the variance that counts each source once:

    V = Σ_j w_j² S_j² / s_j  +  v_image

S_j² is the variance between setting j's s_j runs (seed and seed × image); v_image is the variance the
finite test set adds, estimated from the per-image contrast D_i = Σ_j w_j ȳ_ji net of its coin flips:
v_image = max(0, var_i(D_i) − n/(n−1) · (Σ_j w_j² m_j / s_j − Σ_j w_j² S_j² / s_j)) / n, with m_j the mean
over images of the per-image variance between seeds (unbiased for the coin-flip share of var_i(D_i)).
The test statistic c / √V has Satterthwaite degrees of freedom over the mean squares V is made of (each
setting's spread between seeds with s_j − 1, var_i(D_i) with n − 1, each coin-flip mean with n(s_j − 1)):
an image term that is a small difference of two large estimates gets the few degrees of freedom it has.

- `accuracy_interval`: one setting's mean with the 95 % interval of that contrast (seeds and test
  images), clipped to [0, 1]; from the runs' accuracies alone (no per-image answers) a t-interval over
  seeds that holds the test set fixed; one seed: the exact binomial interval over the test images.
- `compare_settings`: every pair, with a two-sided p (Holm's step-down adjustment over the sweep's pairs),
  two one-sided tests (TOST) against an equivalence margin ±δ (Holm-adjusted likewise), and the
  probability that a fresh seed of one setting beats one of the other (the Mann–Whitney estimate over
  the runs' accuracies; rliable's probability of improvement).
- Settings trained under the same seeds are compared seed by seed (the mean of the per-seed differences,
  the same variance applied to those differences); runs that predict the same class on every image of
  every seed are *identical*, which is an observation, not a test.
- `verdict`: per pair *identical* / *better* / *equivalent within ±δ* / *inconclusive*; a best setting is
  named only if it is better than every other one.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
POWER = 0.80
MARGIN = 0.005      # default equivalence margin δ: ±0.5 points
MIN_SEEDS = 2       # a test needs the spread between seeds
MIN_WIN_SEEDS = 5   # P(a beats b) is given from this many runs a side
CHANCE_SDS = 3.0    # a setting is "at chance" within this many binomial s.d. of 1 / classes (and s.e. of its mean)
CHANCE_LEVEL = float(2 * sps.norm.cdf(CHANCE_SDS) - 1)   # the two-sided confidence of ±CHANCE_SDS s.d.: 0.9973
MOST_SEEDS = 10_000  # the most seeds a setting that `seeds_needed` counts up to
FLOOR_QUANTILE = ALPHA / 2   # a run variance is floored where coin flips alone would give less this rarely


@dataclass(frozen=True)
class Interval:
    """mean, low, high: fractions in [0, 1]. kind: what the interval covers, for the reader."""
    mean: float
    low: float
    high: float
    kind: str


@dataclass(frozen=True)
class Components:
    """The variance of a contrast split by source (fractions², each already divided by its sample size):
    seed (between-run shifts over all images), seed × image (coin flips), test image."""
    seed: float
    seed_image: float
    image: float

    @property
    def total(self) -> float:
        return self.seed + self.seed_image + self.image

    def shares(self) -> tuple[float, float, float]:
        t = self.total
        return (self.seed / t, self.seed_image / t, self.image / t) if t > 0 else (math.nan,) * 3


@dataclass(frozen=True)
class Estimate:
    """A contrast's value, standard error, Welch–Satterthwaite degrees of freedom and its variance split."""
    value: float
    se: float
    df: float
    parts: Components

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        half = sps.t.ppf(0.5 + confidence / 2, self.df) * self.se if self.se > 0 else 0.0
        return self.value - half, self.value + half

    def p(self) -> float:
        """Two-sided p of value = 0."""
        if self.se == 0:
            return 1.0 if self.value == 0 else 0.0
        return float(2 * sps.t.sf(abs(self.value) / self.se, self.df))

    def p_equivalent(self, margin: float) -> float:
        """TOST: the larger of the one-sided p's of value ≤ −margin and value ≥ +margin."""
        if self.se == 0:
            return 0.0 if abs(self.value) < margin else 1.0
        lower = sps.t.sf((self.value + margin) / self.se, self.df)
        upper = sps.t.cdf((self.value - margin) / self.se, self.df)
        return float(max(lower, upper))


def _cells(correct: Sequence[np.ndarray], what: str) -> list[np.ndarray]:
    arrays = [np.atleast_2d(np.asarray(a, dtype=float)) for a in correct]
    sizes = {a.shape[1] for a in arrays}
    if len(sizes) != 1:
        raise ValueError(f"{what} were evaluated on different numbers of test images: {sorted(sizes)}")
    few = min(len(a) for a in arrays)
    if few < MIN_SEEDS:
        raise ValueError(f"{what}: a test needs at least {MIN_SEEDS} seeds per setting (the spread between seeds), "
                         f"got {few}")
    return arrays


def contrast(correct: Sequence[np.ndarray], weights: Sequence[float], what: str = "settings") -> Estimate:
    """Σ_j weights[j] · mean accuracy of correct[j], with the crossed-design variance of the module docstring.
    correct[j]: (seeds, n) 0/1 array of setting j, ≥ 2 seeds; every setting on the same n images in order.
    ValueError (naming `what`) for fewer seeds or different image counts."""
    cells = _cells(correct, what)
    n = cells[0].shape[1]
    value = sum(w * float(a.mean()) for w, a in zip(weights, cells))
    seed_terms = [w * w * _run_variance(a) / len(a) for w, a in zip(weights, cells)]
    flips = [w * w * float(a.var(0, ddof=1).mean()) / len(a) for w, a in zip(weights, cells)]
    per_image = sum(w * a.mean(0) for w, a in zip(weights, cells))
    spread = float(per_image.var(ddof=1)) if n > 1 else 0.0
    c = n / max(n - 1, 1)
    image = max(0.0, spread - c * (sum(flips) - sum(seed_terms))) / n
    seed_image = min(sum(flips) / n, sum(seed_terms))         # the coin-flip share of the seed terms
    parts = Components(sum(seed_terms) - seed_image, seed_image, image)
    variance = sum(seed_terms) + image
    if image > 0 and n > 1:
        # V = Σ T_j (1 + c/n) + spread/n − c Σ F_j/n: Satterthwaite over the mean squares it is made of, so an
        # image term that is a small difference of two large ones gets the few degrees of freedom it has
        dof = (sum((t * (1 + c / n)) ** 2 / (len(a) - 1) for t, a in zip(seed_terms, cells))
               + (spread / n) ** 2 / (n - 1)
               + sum((c * f / n) ** 2 / (n * (len(a) - 1)) for f, a in zip(flips, cells)))
    else:
        dof = sum(t * t / (len(a) - 1) for t, a in zip(seed_terms, cells))
    df = variance * variance / dof if dof > 0 else math.inf
    return Estimate(value, math.sqrt(variance), df, parts)


def _run_variance(a: np.ndarray) -> float:
    """The variance of one run's accuracy between seeds, from the runs' counts of right answers as integers (equal
    counts give exactly 0, never floating residue), and never below a floor. The floor is what the spread of s
    runs falls below in only FLOOR_QUANTILE of draws when runs differ by coin flips alone (each image's variance
    between seeds, averaged over the n images, over n; scaled by that quantile of χ²_{s−1}/(s−1)): a spread
    under it is a few seeds' luck or the counts' granularity (three runs with exactly the same count), not
    evidence of a standard error near 0, and a spread above it is kept as measured (the t-test's own degrees of
    freedom carry its uncertainty). Where no image varies between seeds either (every seed answered alike on
    every image), the floor is the variance of one run's accuracy over n independent answers at the cells'
    rate with one imagined extra answer each way (Laplace), q / n: a setting at 100 % on every seed gets a
    small interval, never ±0."""
    seeds, n = a.shape
    counts = a.sum(1)
    whole = np.rint(counts)
    if np.array_equal(whole, counts):   # 0/1 answers or their differences: exact integer arithmetic
        c = [int(x) for x in whole]
        spread = (seeds * sum(x * x for x in c) - sum(c) ** 2) / (seeds * (seeds - 1)) / (n * n)
    else:
        spread = float(a.mean(1).var(ddof=1))
    flips = float(a.var(0, ddof=1).mean()) / n
    if flips > 0:
        return max(spread, flips * _chi2_floor(seeds - 1))
    cells = a.size
    q = (float((a * a).sum()) + 1) / (cells + 2) - (float(a.sum()) / (cells + 2)) ** 2
    return max(spread, q / n)


@functools.lru_cache(maxsize=64)
def _chi2_floor(df: int) -> float:
    """The FLOOR_QUANTILE quantile of χ²_df / df: the share of its true variance below which a sample variance on
    df degrees of freedom falls in only that share of draws."""
    return float(sps.chi2.ppf(FLOOR_QUANTILE, df)) / df


def accuracy_interval(accs: Sequence[float], test_size: int | None = None, correct: np.ndarray | None = None,
                      confidence: float = 0.95) -> Interval:
    """One setting's mean accuracy and 95 % interval, never outside [0, 1]: over seeds and test images
    from `correct` ((seeds, n) 0/1, ≥ 2 seeds); without it, over seeds with the test set held fixed; one
    seed: the exact binomial interval over its `test_size` test images."""
    accs = np.asarray(accs, dtype=float)
    if len(accs) == 0:
        raise ValueError("accuracy_interval needs at least one accuracy")
    mean = float(accs.mean())
    if len(accs) >= MIN_SEEDS and correct is not None and len(correct) >= MIN_SEEDS:
        est = contrast([correct], [1.0], "a setting")
        low, high = est.interval(confidence)
        return Interval(est.value, max(0.0, low), min(1.0, high),
                        f"t over {len(correct)} seeds and {correct.shape[1]:,} test images")
    if len(accs) >= MIN_SEEDS:
        half = sps.t.ppf(0.5 + confidence / 2, len(accs) - 1) * accs.std(ddof=1) / math.sqrt(len(accs))
        return Interval(mean, max(0.0, mean - half), min(1.0, mean + half),
                        f"t over {len(accs)} seeds, test set held fixed")
    if test_size:
        ci = sps.binomtest(round(mean * test_size), test_size).proportion_ci(confidence, method="exact")
        return Interval(mean, ci.low, ci.high, f"binomial over {test_size:,} test images (1 seed)")
    return Interval(mean, math.nan, math.nan, "none (1 seed, test-set size unknown)")


class Outcome(str, Enum):
    """What the harness finds of two settings, everywhere it says it (tests, the sequential design, verdicts,
    the report's words and markers, `make known`): of a pair, a above b (better), below (worse), within the
    margin (equivalent), neither shown (inconclusive) or the same predictions (identical, an observation);
    of a setting the sequential design decided against its leader, different, equivalent or futile (stopped:
    no number of seeds up to the cap could decide it). Each reads and prints as its value."""
    BETTER = "better"
    WORSE = "worse"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"
    IDENTICAL = "identical"
    DIFFERENT = "different"
    FUTILE = "futile"

    __str__ = str.__str__
    __format__ = str.__format__


PAIR_OUTCOMES = (Outcome.BETTER, Outcome.WORSE, Outcome.EQUIVALENT, Outcome.INCONCLUSIVE, Outcome.IDENTICAL)


@dataclass(frozen=True)
class Comparison:
    """Setting a against b: diff = acc(a) − acc(b) (fractions), its 95 % interval, standard error, degrees of
    freedom and two-sided p; p_holm after Holm's adjustment over the sweep's pairs; p_equiv, the TOST p
    against ±margin (Holm-adjusted likewise: p_equiv_holm); win, the probability that a run of a on a fresh
    seed beats b's (on the same seed where the pair is paired; ties count half; nan below MIN_WIN_SEEDS runs
    and for identical pairs)."""
    a: Hashable
    b: Hashable
    diff: float
    low: float
    high: float
    se: float
    p: float
    p_holm: float
    df: float = math.inf
    margin: float = MARGIN
    p_equiv: float = 1.0
    p_equiv_holm: float = 1.0
    win: float = math.nan
    parts: Components | None = None
    win_low: float = math.nan   # win's 95 % interval (`win_interval`, or `sign_interval` paired); nan with win
    win_high: float = math.nan
    paired: bool = False      # compared seed by seed (the two settings' runs share their seeds)
    identical: bool = False   # every seed's run predicted the same class as its twin on every test image

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """diff's t-interval at `confidence` (`low`, `high` are the 95 % one), from its s.e. and df, never past
        what a difference of two accuracies can be (±1)."""
        low, high = Estimate(self.diff, self.se, self.df, self.parts).interval(confidence)
        return max(-1.0, low), min(1.0, high)

    def outcome(self, alpha: float = ALPHA) -> Outcome:
        """IDENTICAL (the same predictions, not a statistical verdict), BETTER (a above b), WORSE, EQUIVALENT
        (within ±margin) or INCONCLUSIVE, by the Holm-adjusted p-values."""
        if self.identical:
            return Outcome.IDENTICAL
        if self.p_holm < alpha:
            return Outcome.BETTER if self.diff > 0 else Outcome.WORSE
        return Outcome.EQUIVALENT if self.p_equiv_holm < alpha else Outcome.INCONCLUSIVE


def at_chance(mean: float, chance: float, test_size: int | None, accs: Sequence[float] | None = None,
              correct: np.ndarray | None = None) -> bool:
    """Whether a mean accuracy is within noise of guessing: under 1 / classes + CHANCE_SDS binomial s.d. over
    the test images, a rule of the test set alone (two seeds far apart are not called chance because their
    interval is wide), and, given the runs (`accs`, and `correct` as for `accuracy_interval`), within CHANCE_SDS
    standard errors of it over the seeds and test images (a setting whose runs show it above guessing has learned
    something, however little; at CHANCE_SDS, not 95 %, so that a leader chosen among guessers is still one)."""
    noise = CHANCE_SDS * math.sqrt(chance * (1 - chance) / test_size) if test_size else 0.0
    if not mean < chance + noise:
        return False
    if accs is None or len(accs) == 0:
        return True
    low = accuracy_interval(accs, test_size, correct, confidence=CHANCE_LEVEL).low
    return not low > chance


def probability_of_improvement(a: np.ndarray, b: np.ndarray) -> float:
    """P(a run of a scores above a run of b), ties counting half: the Mann–Whitney U over the runs'
    accuracies divided by the number of pairs (Agarwal et al. 2021, rliable)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if np.all(a == a[0]) and np.all(b == b[0]):
        return 1.0 if a[0] > b[0] else 0.0 if a[0] < b[0] else 0.5
    return float(sps.mannwhitneyu(a, b).statistic) / (len(a) * len(b))


def win_interval(win: float, m: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """A confidence interval for P(a run of a scores above a run of b) from `win`, its Mann–Whitney estimate over m
    and n runs: Newcombe's (2006) score interval (his method 5), which solves |θ̂ − θ| = q·√V(θ) for θ with the
    Hanley–McNeil variance V(θ) = θ(1−θ)/(mn) · [1 + (N* − 1)((1−θ)/(2−θ) + θ/(1+θ))], N* = (m + n)/2 − 1, and q
    the t quantile on m + n − 2 degrees of freedom: the normal quantile undercovers at a handful of runs a side
    (tests/test_stats.py checks the coverage on random splits of real same-setting runs)."""
    z = float(sps.t.ppf(0.5 + level / 2, m + n - 2))
    star = (m + n) / 2 - 1

    def gap(theta: float) -> float:
        var = theta * (1 - theta) / (m * n) * (1 + (star - 1) * ((1 - theta) / (2 - theta) + theta / (1 + theta)))
        return abs(win - theta) - z * math.sqrt(max(var, 0.0))

    from scipy.optimize import brentq

    # at win = 0 or 1 the variance vanishes there, so θ = win is a root of its own: search beside it
    inner = 1e-9
    low = 0.0 if win <= 0 or gap(0.0) <= 0 else brentq(gap, 0.0, win - inner if win >= 1 else win)
    high = 1.0 if win >= 1 or gap(1.0) <= 0 else brentq(gap, win + inner if win <= 0 else win, 1.0)
    return float(low), float(high)


def _compared(label_a, label_b, est: Estimate, margin: float, win: float) -> Comparison:
    low, high = est.interval()
    low, high = max(-1.0, low), min(1.0, high)   # a difference of two accuracies
    return Comparison(label_a, label_b, est.value, low, high, est.se, est.p(), math.nan, est.df, margin,
                      est.p_equivalent(margin), math.nan, win, est.parts)


def _adjusted(found: list[Comparison]) -> list[Comparison]:
    p_holm, equiv_holm = holm([c.p for c in found]), holm([c.p_equiv for c in found])
    return [dataclasses.replace(c, p_holm=float(p), p_equiv_holm=float(q)) for c, p, q in zip(found, p_holm, equiv_holm)]


def compare_settings(correct: Mapping[Hashable, np.ndarray], margin: float = MARGIN,
                     seeds: Mapping[Hashable, Sequence[int]] | None = None,
                     preds: Mapping[Hashable, np.ndarray] | None = None) -> list[Comparison]:
    """Every pair of settings. correct[setting]: (seeds, n) array, 1 where that seed's model classified
    test image i correctly; every setting evaluated on the same n images in the same order, ≥ 2 seeds.

    seeds[setting]: the seed of each row of correct[setting]. Two settings trained under the same seeds
    (the same initial weights, batch order and augmentation where the models allow) are compared seed by
    seed: the contrast is the mean of the per-seed differences, whose spread between seeds leaves out
    what a seed does to both. preds[setting]: each row's predicted classes; a paired pair whose
    predictions agree on every image of every seed is `identical` (difference 0, no test)."""
    check_margin(margin)
    arrays = dict(zip(correct, _cells(list(correct.values()), "settings")))
    found = []
    for a, b in itertools.combinations(arrays, 2):
        order = _shared_seeds(seeds, a, b)
        if order is None:
            found.append(_with_win(_compared(a, b, contrast([arrays[a], arrays[b]], [1.0, -1.0]), margin, math.nan),
                                   arrays[a].mean(1), arrays[b].mean(1)))
            continue
        ia, ib = order
        if preds is not None and a in preds and b in preds and np.array_equal(preds[a][ia], preds[b][ib]):
            found.append(_identical(a, b, margin))
            continue
        d = arrays[a][ia] - arrays[b][ib]
        est = contrast([d], [1.0], "paired runs")
        found.append(_with_win(dataclasses.replace(_compared(a, b, est, margin, math.nan), paired=True), d.sum(1)))
    return _adjusted(found)


def _with_win(c: Comparison, a: np.ndarray, b: np.ndarray | None = None) -> Comparison:
    """c with P(a beats b) and its 95 % interval, withheld (nan) below MIN_WIN_SEEDS runs a side (from 3 against
    3 it takes one of a handful of values and reads as certainty). Unpaired (a, b: each setting's run
    accuracies): the Mann–Whitney share over every pair of runs with Newcombe's interval. Paired (a: each
    seed's difference a − b, as in the verdicts): the share of seeds whose run of a scored above its twin of b,
    ties half, with the Clopper–Pearson interval over the seeds."""
    if b is None:
        if len(a) < MIN_WIN_SEEDS:
            return c
        win = float((np.sum(a > 0) + 0.5 * np.sum(a == 0)) / len(a))
        low, high = sign_interval(win, len(a))
    else:
        if min(len(a), len(b)) < MIN_WIN_SEEDS:
            return c
        win = probability_of_improvement(a, b)
        low, high = win_interval(win, len(a), len(b))
    return dataclasses.replace(c, win=win, win_low=low, win_high=high)


def sign_interval(win: float, seeds: int, level: float = 0.95) -> tuple[float, float]:
    """The Clopper–Pearson interval of a share of `seeds` paired seeds won (ties counting half, so the count
    may be a half): the beta quantiles of the exact binomial interval, which cover at least `level` at every
    true share and never have width 0."""
    x, tail = win * seeds, (1 - level) / 2
    low = 0.0 if x <= 0 else float(sps.beta.ppf(tail, x, seeds - x + 1))
    high = 1.0 if x >= seeds else float(sps.beta.ppf(1 - tail, x + 1, seeds - x))
    return low, high


def _shared_seeds(seeds: Mapping[Hashable, Sequence[int]] | None, a: Hashable, b: Hashable):
    """(rows of a, rows of b) in seed order where a and b were trained under the same seeds, else None."""
    if seeds is None or a not in seeds or b not in seeds:
        return None
    sa, sb = [int(x) for x in seeds[a]], [int(x) for x in seeds[b]]
    if sorted(sa) != sorted(sb) or len(set(sa)) != len(sa) or len(sa) < MIN_SEEDS:
        return None
    return np.argsort(sa, kind="stable"), np.argsort(sb, kind="stable")


def _identical(a: Hashable, b: Hashable, margin: float) -> Comparison:
    """Two settings whose runs predicted the same class on every image, seed by seed: no difference to test,
    and no chance of one beating the other (win nan). Its p-values (1 against 0, 0 against ±margin) take part
    in Holm's adjustment as the exact answers."""
    return Comparison(a, b, 0.0, 0.0, 0.0, 0.0, 1.0, math.nan, math.inf, margin, 0.0, math.nan, math.nan,
                      Components(0.0, 0.0, 0.0), paired=True, identical=True)


def interaction_contrasts(correct: Mapping[tuple[Hashable, Hashable], np.ndarray], levels_a: Sequence[Hashable],
                          levels_b: Sequence[Hashable], margin: float = MARGIN) -> list[Comparison]:
    """Does the effect of factor A depend on factor B? For a full grid of two factors, one contrast per
    cell (a_i, b_j) off the first row and column: the difference of differences
    acc(a_i, b_j) − acc(a_1, b_j) − acc(a_i, b_1) + acc(a_1, b_1) (0 where A's effect is the same at b_j as
    at b_1), with the crossed-design variance of `contrast` and Holm's adjustment over the contrasts.
    correct[(a, b)]: (seeds, n) 0/1, as in `compare_settings`."""
    missing = [(a, b) for a in levels_a for b in levels_b if (a, b) not in correct]
    if missing or len(levels_a) < 2 or len(levels_b) < 2:
        raise ValueError(f"an interaction needs every cell of a grid of at least 2 × 2 settings; missing {missing}")
    check_margin(margin)
    a1, b1 = levels_a[0], levels_b[0]
    found = []
    for ai in levels_a[1:]:
        for bj in levels_b[1:]:
            cells = [correct[c] for c in ((ai, bj), (a1, bj), (ai, b1), (a1, b1))]
            found.append(_compared((ai, bj), (a1, b1), contrast(cells, [1.0, -1.0, -1.0, 1.0], "cells"), margin,
                                   math.nan))
    return _adjusted(found)


def paired_difference(a: np.ndarray, b: np.ndarray, margin: float = MARGIN) -> Comparison:
    """The same runs under two conditions: a[i] and b[i] are seed i's (0/1 per test image, same images).
    acc(a) − acc(b) from the per-seed differences: with ≥ 2 seeds the crossed-design variance of their
    mean; with one seed, the test images' alone (that seed's run, as McNemar's test has it). Two equal
    folders give exactly 0 with the interval [0, 0]."""
    a, b = np.atleast_2d(np.asarray(a, dtype=float)), np.atleast_2d(np.asarray(b, dtype=float))
    if a.shape != b.shape:
        raise ValueError(f"paired runs must cover the same seeds and test images: {a.shape} against {b.shape}")
    d = a - b
    if len(d) >= MIN_SEEDS:
        est = contrast([d], [1.0], "paired runs")
    else:
        n = d.shape[1]
        var = float(d[0].var(ddof=1)) / n if n > 1 else 0.0
        est = Estimate(float(d.mean()), math.sqrt(var), n - 1, Components(0.0, 0.0, var))
    c = _compared("a", "b", est, margin, math.nan)
    return dataclasses.replace(c, p_holm=c.p, p_equiv_holm=c.p_equiv)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: the i-th smallest becomes the running maximum of (m − j + 1)·p_(j),
    j ≤ i, capped at 1. Equal to statsmodels' `multipletests(method="holm")` (tests/test_stats.py checks
    it), without the garbage collection that call runs each time, which a sequential design's many looks
    would pay for."""
    p = np.asarray(pvalues, dtype=float)
    if len(p) <= 1:
        return [float(x) for x in p]
    order = np.argsort(p, kind="stable")
    steps = np.minimum(1.0, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    adjusted = np.empty_like(p)
    adjusted[order] = steps
    return [float(x) for x in adjusted]


def check_margin(margin) -> float:
    """The equivalence margin as a fraction > 0 and < 1; ValueError naming it otherwise."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin < 1:
        raise ValueError(f"the equivalence margin must be a number of points above 0 and below 100, "
                         f"got {margin * 100 if isinstance(margin, (int, float)) else margin!r}")
    return float(margin)


def _quantiles(comparisons: int, df: float, alpha: float, power: float) -> float:
    """t_{1−α/2m} + t_power at `df` degrees of freedom: a difference this many standard errors from 0 is
    detected with `power` at the strictest Holm level α/m."""
    return float(_quantile_sums(comparisons, df if math.isfinite(df) else 1e9, alpha, power))


def _quantile_sums(comparisons: int, df, alpha: float, power: float):
    """`_quantiles` at finite degrees of freedom, one or an array of them."""
    return sps.t.ppf(1 - alpha / (2 * max(comparisons, 1)), df) + sps.t.ppf(power, df)


def detectable_difference(se: float, comparisons: int, df: float = math.inf, alpha: float = ALPHA,
                          power: float = POWER) -> float:
    """The difference a two-sided test at the strictest Holm level α/m detects with `power`, given the
    standard error of the difference and its degrees of freedom: (t_{1−α/2m} + t_power) · se."""
    return _quantiles(comparisons, df, alpha, power) * se


def seeds_needed(seed_var: float, image_var: float, delta: float, comparisons: int, alpha: float = ALPHA,
                 power: float = POWER, most: int = MOST_SEEDS, paired_var: float | None = None) -> int | None:
    """Seeds per setting for a two-sided test at the strictest Holm level α/m to detect a difference
    `delta` (fraction) with `power`, when the difference of two settings' means over s seeds has
    variance 2·seed_var/s + image_var with 2(s − 1) degrees of freedom (seed_var: the variance of one
    run's accuracy between seeds, coin flips included; image_var: what the finite test set adds, which
    more seeds do not remove). Settings compared seed by seed: `paired_var`, the variance of one seed's
    difference, in place of 2·seed_var, with s − 1 degrees of freedom. None when the test set's share
    alone is too large for `delta` (`detectable_difference` of its s.e. is at least `delta`), or when more than
    `most` seeds would be needed."""
    if _quantiles(comparisons, math.inf, alpha, power) ** 2 * image_var >= delta ** 2:
        return None

    def fits(s: int) -> bool:
        spread, df = (2 * seed_var, 2 * (s - 1)) if paired_var is None else (paired_var, s - 1)
        return _quantiles(comparisons, df, alpha, power) ** 2 * (spread / s + image_var) <= delta ** 2

    # the least s that fits, found on arrays of s (a block at a time, each 4× the last), then confirmed with
    # `fits` itself: the fewest s where it holds, as a scan from MIN_SEEDS would find it
    lo, block = MIN_SEEDS, 64
    while lo <= most:
        s = np.arange(lo, min(lo + block, most + 1))
        spread, df = (2 * seed_var, 2.0 * (s - 1)) if paired_var is None else (paired_var, s - 1.0)
        q = _quantile_sums(comparisons, df, alpha, power)
        hit = np.flatnonzero(q * q * (spread / s + image_var) <= delta ** 2)
        if hit.size:
            found = int(s[hit[0]])
            while found > MIN_SEEDS and fits(found - 1):
                found -= 1
            while found <= most and not fits(found):
                found += 1
            return found if found <= most else None
        lo, block = lo + block, block * 4
    return None


def seed_terms(c: Comparison, seeds: int) -> float:
    """The seed terms of a pair's variance (`c.parts`, measured at `seeds` a setting) as they would be at one seed:
    divided by s, they are the terms at s seeds."""
    assert c.parts is not None
    return (c.parts.seed + c.parts.seed_image) * seeds


@dataclass(frozen=True)
class Verdict:
    best: Hashable                        # the setting with the highest mean accuracy
    winner: bool                          # it is better than every other setting after Holm's adjustment
    beats: tuple[Hashable, ...]           # settings it is shown better than
    equivalent: tuple[Hashable, ...]      # settings shown equivalent to it within ±margin
    inconclusive: tuple[Hashable, ...]    # neither
    detectable: float                     # smallest detectable difference (fraction), from the median s.e.
    margin: float = MARGIN
    identical: tuple[Hashable, ...] = ()  # settings whose runs predicted exactly what the best's did
    tied: tuple[Hashable, ...] = ()       # settings whose mean equals the best's exactly (the best is first by name)


def leading(means: Mapping[Hashable, float | Fraction]) -> tuple[Hashable, tuple[Hashable, ...]]:
    """The setting with the highest mean and the others tied with it (the same mean exactly). A tie is broken by
    the settings' names as text, in sorted order: a stated rule that does not depend on the order the settings
    are listed in."""
    top = max(means.values())
    tied = sorted((k for k, v in means.items() if v == top), key=str)
    return tied[0], tuple(tied[1:])


def exact_mean(correct: np.ndarray) -> Fraction:
    """A (runs, n) 0/1 array's mean accuracy as an exact fraction: equal means compare equal, whatever the runs."""
    a = np.asarray(correct)
    return Fraction(int(np.rint(a.sum())), max(a.size, 1))


def verdict(means: Mapping[Hashable, float], comparisons: Sequence[Comparison], alpha: float = ALPHA) -> Verdict:
    best, tied = leading(means)
    found: dict[Outcome, list] = {Outcome.BETTER: [], Outcome.EQUIVALENT: [], Outcome.INCONCLUSIVE: [],
                                  Outcome.IDENTICAL: []}
    for c in comparisons:
        if best not in (c.a, c.b):
            continue
        other = c.b if c.a == best else c.a
        outcome = c.outcome(alpha)
        found[Outcome.BETTER if outcome in (Outcome.BETTER, Outcome.WORSE) else outcome].append(other)
    order = list(means)
    beats, equivalent, inconclusive, identical = (tuple(sorted(v, key=order.index)) for v in found.values())
    tested = [c for c in comparisons if not c.identical]
    se = float(np.median([c.se for c in tested])) if tested else math.nan
    df = float(np.median([c.df for c in tested])) if tested else math.inf
    margin = comparisons[0].margin if comparisons else MARGIN
    return Verdict(best, bool(comparisons) and not (equivalent or inconclusive or identical), beats, equivalent,
                   inconclusive, detectable_difference(se, len(comparisons), df, alpha), margin, identical, tied)
