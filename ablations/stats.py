"""Statistics behind the report's intervals and verdicts: seeds and test images, compared honestly.

A sweep's accuracy varies for two reasons: the training seed (initial weights, batch order,
augmentation) and the finite test set (1,000 images in mnist5k: one accuracy's binomial standard error
there is about 0.5 points). Every setting is evaluated on the same test images, so two settings can be
compared image by image, which removes the variation they share.

- `accuracy_interval`: 95 % t-interval of the mean over seeds (training variation; the test set is
  fixed); with one seed, the exact binomial (Clopper–Pearson) interval over the test images.
- `compare_settings`: every pair of settings by a two-level paired bootstrap (Davison & Hinkley 1997,
  §3.8, hierarchical data; as advocated for ML benchmarks by Bouthillier et al. 2021): each replicate
  draws the test images with replacement (the same draw for both settings: paired) and, independently
  per setting, the seeds with replacement. With s seeds the seed-level deviations are scaled by
  √(s/(s−1)), so the seed variance is not understated (a plain bootstrap of 3 seeds shrinks it by 2/3).
  The p-value is two-sided from the null-centred replicates, P(|d* − d| ≥ |d|) (Hall & Wilson 1991).
  p-values of all pairs of a sweep are adjusted together by Holm's step-down method (Holm 1979).
- `verdict`: names a best setting only if it beats every other one after the adjustment; otherwise
  which settings it cannot be told apart from, and the smallest difference the sweep could detect
  (80 % power at the strictest Holm level) from the bootstrap standard error.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

ALPHA = 0.05
POWER = 0.80
REPLICATES = 4000
BOOTSTRAP_SEED = 0  # fixed: the same CSVs and predictions give the same report


@dataclass(frozen=True)
class Interval:
    """mean, low, high: fractions in [0, 1]. kind: what the interval covers, for the reader."""
    mean: float
    low: float
    high: float
    kind: str


def accuracy_interval(accs: Sequence[float], test_size: int | None = None, confidence: float = 0.95) -> Interval:
    """t-interval over seeds (≥ 2 seeds), or the exact binomial interval of one run over its test images."""
    accs = np.asarray(accs, dtype=float)
    if len(accs) == 0:
        raise ValueError("accuracy_interval needs at least one accuracy")
    mean = float(accs.mean())
    if len(accs) >= 2:
        half = sps.t.ppf(0.5 + confidence / 2, len(accs) - 1) * accs.std(ddof=1) / math.sqrt(len(accs))
        return Interval(mean, mean - half, mean + half, f"t over {len(accs)} seeds")
    if test_size:
        ci = sps.binomtest(round(mean * test_size), test_size).proportion_ci(confidence, method="exact")
        return Interval(mean, ci.low, ci.high, f"binomial over {test_size} test images (1 seed)")
    return Interval(mean, math.nan, math.nan, "none (1 seed, test-set size unknown)")


@dataclass(frozen=True)
class Comparison:
    """Setting a against b: diff = acc(a) − acc(b) (fractions), its bootstrap 95 % interval, standard
    error and p-value, and the p-value after Holm's adjustment over every pair of the sweep."""
    a: Hashable
    b: Hashable
    diff: float
    low: float
    high: float
    se: float
    p: float
    p_holm: float


def _replicate_means(correct: np.ndarray, image_weights: np.ndarray, seed_draws: np.ndarray) -> np.ndarray:
    """Accuracy of one setting in each replicate. correct: (s, n) 0/1; image_weights: (R, n), each row
    the multiplicities of a resample of the n images divided by n; seed_draws: (s, R) seed indices."""
    per_seed = correct @ image_weights.T                          # (s, R): each seed's accuracy on each resample
    if len(correct) == 1:
        return per_seed[0]
    centre = per_seed.mean(0)                                     # (R,)
    drawn = np.take_along_axis(per_seed, seed_draws, axis=0).mean(0)
    scale = math.sqrt(len(correct) / (len(correct) - 1))          # unbiased seed variance
    return centre + scale * (drawn - centre)


def _bootstrap_means(correct: Mapping[Hashable, np.ndarray], replicates: int, seed: int,
                     what: str) -> tuple[dict[Hashable, float], dict[Hashable, np.ndarray]]:
    """({key: observed accuracy}, {key: its R bootstrap replicates}) of (seeds, n) 0/1 arrays: the n test
    images are drawn once for every key (paired), the seeds within each key; ValueError naming `what` when
    the arrays cover different numbers of images."""
    arrays = {k: np.atleast_2d(np.asarray(v, dtype=float)) for k, v in correct.items()}
    sizes = {a.shape[1] for a in arrays.values()}
    if len(sizes) != 1:
        raise ValueError(f"{what} were evaluated on different numbers of test images: {sorted(sizes)}")
    n = sizes.pop()
    rng = np.random.default_rng(seed)
    image_weights = rng.multinomial(n, np.full(n, 1.0 / n), size=replicates) / n   # (R, n), paired across keys
    boot = {k: _replicate_means(a, image_weights, rng.integers(0, len(a), size=(len(a), replicates)))
            for k, a in arrays.items()}
    return {k: float(a.mean()) for k, a in arrays.items()}, boot


def compare_settings(correct: Mapping[Hashable, np.ndarray], replicates: int = REPLICATES,
                     seed: int = BOOTSTRAP_SEED) -> list[Comparison]:
    """Every pair of settings. correct[setting]: (seeds, n) array, 1 where that seed's model classified
    test image i correctly; every setting must be evaluated on the same n images in the same order."""
    observed, boot = _bootstrap_means(correct, replicates, seed, "settings")
    pairs = [(a, b, *_bootstrap_figures(observed[a] - observed[b], boot[a] - boot[b]))
             for a, b in itertools.combinations(observed, 2)]
    adjusted = holm([p[-1] for p in pairs])
    return [Comparison(*pair, p_holm=float(q)) for pair, q in zip(pairs, adjusted)]


def interaction_contrasts(correct: Mapping[tuple[Hashable, Hashable], np.ndarray], levels_a: Sequence[Hashable],
                          levels_b: Sequence[Hashable], replicates: int = REPLICATES,
                          seed: int = BOOTSTRAP_SEED) -> list[Comparison]:
    """Does the effect of factor A depend on factor B? For a full grid of two factors, one contrast per
    cell (a_i, b_j) off the first row and column: the difference of differences
    acc(a_i, b_j) − acc(a_1, b_j) − acc(a_i, b_1) + acc(a_1, b_1) (0 where A's effect is the same at b_j as
    at b_1), with the bootstrap of `compare_settings` (test images drawn once for every cell, seeds within
    each cell) and Holm's adjustment over the contrasts. correct[(a, b)]: (seeds, n) 0/1, as there."""
    missing = [(a, b) for a in levels_a for b in levels_b if (a, b) not in correct]
    if missing or len(levels_a) < 2 or len(levels_b) < 2:
        raise ValueError(f"an interaction needs every cell of a grid of at least 2 × 2 settings; missing {missing}")
    observed, boot = _bootstrap_means(correct, replicates, seed, "cells")
    a1, b1 = levels_a[0], levels_b[0]
    found = []
    for ai in levels_a[1:]:
        for bj in levels_b[1:]:
            cells = ((ai, bj), (a1, bj), (ai, b1), (a1, b1))
            signs = (1, -1, -1, 1)
            d = sum(s * observed[c] for s, c in zip(signs, cells))
            dstar = sum(s * boot[c] for s, c in zip(signs, cells))
            found.append(((ai, bj), (a1, b1), *_bootstrap_figures(d, dstar)))
    adjusted = holm([f[-1] for f in found])
    return [Comparison(*f, p_holm=float(q)) for f, q in zip(found, adjusted)]


def _bootstrap_figures(d: float, dstar: np.ndarray) -> tuple[float, float, float, float, float]:
    """(difference, 2.5 and 97.5 percentiles, standard error, two-sided p) from its bootstrap replicates."""
    p = (1 + np.count_nonzero(np.abs(dstar - d) >= abs(d) - 1e-12)) / (len(dstar) + 1)
    low, high = np.percentile(dstar, [2.5, 97.5])
    return d, float(low), float(high), float(dstar.std(ddof=1)), float(p)


def paired_difference(a: np.ndarray, b: np.ndarray, replicates: int = REPLICATES,
                      seed: int = BOOTSTRAP_SEED) -> Comparison:
    """The same runs under two conditions: a[i] and b[i] are seed i's (0/1 per test image, same images).
    acc(a) − acc(b) with a bootstrap that draws the same seeds and images for both (paired), so two equal
    folders give exactly 0 with the interval [0, 0]."""
    a, b = np.atleast_2d(np.asarray(a, dtype=float)), np.atleast_2d(np.asarray(b, dtype=float))
    if a.shape != b.shape:
        raise ValueError(f"paired runs must cover the same seeds and test images: {a.shape} against {b.shape}")
    d = a - b
    n = d.shape[1]
    rng = np.random.default_rng(seed)
    image_weights = rng.multinomial(n, np.full(n, 1.0 / n), size=replicates) / n
    dstar = _replicate_means(d, image_weights, rng.integers(0, len(d), size=(len(d), replicates)))
    figures = _bootstrap_figures(float(d.mean()), dstar)
    return Comparison("a", "b", *figures, p_holm=figures[-1])


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (statsmodels' implementation)."""
    if len(pvalues) == 0:
        return []
    return list(multipletests(pvalues, method="holm")[1])


def detectable_difference(se: float, comparisons: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference a two-sided test at the strictest Holm level α/m detects with `power`, given the
    standard error of the difference: (z_{1−α/2m} + z_power) · se."""
    return (sps.norm.ppf(1 - alpha / (2 * max(comparisons, 1))) + sps.norm.ppf(power)) * se


def seeds_needed(seed_var: float, image_var: float, delta: float, comparisons: int, alpha: float = ALPHA,
                 power: float = POWER) -> int | None:
    """Seeds per setting for a two-sided test at the strictest Holm level α/m to detect a difference
    `delta` (fraction) with `power`, when the difference of two settings' means over s seeds has
    variance 2·seed_var/s + image_var (seed_var: the variance of one run's accuracy between seeds;
    image_var: the variance the finite, shared test set adds to a paired difference, which more seeds
    do not remove). None when the test set's variance alone is too large for `delta`."""
    z = sps.norm.ppf(1 - alpha / (2 * max(comparisons, 1))) + sps.norm.ppf(power)
    room = (delta / z) ** 2 - image_var
    if room <= 0:
        return None
    return max(2, math.ceil(2 * seed_var / room))


@dataclass(frozen=True)
class Verdict:
    best: Hashable                      # the setting with the highest mean accuracy
    winner: bool                        # it beats every other setting after Holm's adjustment
    tied_with: tuple[Hashable, ...]     # settings it cannot be told apart from
    beats: tuple[Hashable, ...]         # settings it is shown better than
    detectable: float                   # smallest detectable difference (fraction), median over pairs


def verdict(means: Mapping[Hashable, float], comparisons: Sequence[Comparison], alpha: float = ALPHA) -> Verdict:
    best = max(means, key=lambda k: means[k])
    tied, beats = [], []
    for c in comparisons:
        if best not in (c.a, c.b):
            continue
        other = c.b if c.a == best else c.a
        (beats if c.p_holm < alpha else tied).append(other)
    order = list(means)
    tied.sort(key=order.index)
    beats.sort(key=order.index)
    se = float(np.median([c.se for c in comparisons])) if comparisons else math.nan
    return Verdict(best, winner=bool(comparisons) and not tied, tied_with=tuple(tied), beats=tuple(beats),
                   detectable=detectable_difference(se, len(comparisons), alpha))
