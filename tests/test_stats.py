"""ablations.analysis.stats: the crossed-design estimate against an independent float64 recomputation and against the
true variance of simulated experiments; its false-positive rate and power on simulated crossed data whose
answer is known (and the power against the naive two-level bootstrap it replaces); equivalence by TOST;
intervals inside [0, 100] %; Holm against a hand computation; three-way verdicts that follow the evidence."""

import math

import numpy as np
import pytest
from helpers import naive_bootstrap_p
from scipy import stats as sps
from scipy.special import expit, logit
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from ablations.analysis.stats import (
    ALPHA,
    Comparison,
    accuracy_interval,
    at_chance,
    compare_settings,
    contrast,
    detectable_difference,
    holm,
    interaction_contrasts,
    paired_difference,
    probability_of_improvement,
    seeds_needed,
    verdict,
)

# --- simulated crossed data: known per-image probabilities, independent seeds ------------------------

def population(n, rng):
    """Per-image probabilities of being right, like a ~97 % model's: most images always right, a few
    borderline, a few hard."""
    return rng.beta(0.35, 0.012, n).clip(1e-6, 1 - 1e-6)


def runs(p, seeds, rng, seed_sd=0.2, shift=0.0):
    """(seeds, n) 0/1: each seed shifts every image's logit by one draw (the seed effect), then each image
    is a coin flip at its probability (seed × image)."""
    b = rng.normal(0, seed_sd, (seeds, 1))
    return (rng.random((seeds, len(p))) < expit(logit(p) + b + shift)).astype(float)


def drop_correct(run_set, k, rng):
    """Each run loses k of its correct answers at random: exactly k / n lower accuracy per run."""
    out = run_set.copy()
    for r in out:
        r[rng.choice(np.flatnonzero(r == 1), k, replace=False)] = 0
    return out


def test_the_contrast_equals_an_independent_float64_recomputation():
    rng = np.random.default_rng(3)
    p = population(800, rng)
    a, b = runs(p, 3, rng), runs(p, 4, rng, shift=0.3)
    got = contrast([a, b], [1.0, -1.0])
    # by hand, in float64, from the formulas: binary per-image variance ȳ(1 − ȳ)·s/(s − 1)
    n = 800
    acc_a, acc_b = a.sum(1) / n, b.sum(1) / n
    sa2, sb2 = np.sum((acc_a - acc_a.mean()) ** 2) / 2, np.sum((acc_b - acc_b.mean()) ** 2) / 3
    ya, yb = a.sum(0) / 3, b.sum(0) / 4
    flips = np.mean(ya * (1 - ya) * 3 / 2) / 3 + np.mean(yb * (1 - yb) * 4 / 3) / 4
    d = ya - yb
    spread = np.sum((d - d.mean()) ** 2) / (n - 1)
    image = max(0.0, spread - n / (n - 1) * (flips - sa2 / 3 - sb2 / 4)) / n
    var = sa2 / 3 + sb2 / 4 + image
    assert image > 0   # the case where the image term counts
    # Satterthwaite over the mean squares the variance is made of:
    # V = (sa2/3 + sb2/4)(1 + c/n) + spread/n − c·flips/n with c = n/(n − 1)
    c = n / (n - 1)
    fa, fb = np.mean(ya * (1 - ya) * 3 / 2) / 3, np.mean(yb * (1 - yb) * 4 / 3) / 4
    df = var ** 2 / ((sa2 / 3 * (1 + c / n)) ** 2 / 2 + (sb2 / 4 * (1 + c / n)) ** 2 / 3 + (spread / n) ** 2 / (n - 1)
                     + (c * fa / n) ** 2 / (n * 2) + (c * fb / n) ** 2 / (n * 3))
    assert got.value == pytest.approx(acc_a.mean() - acc_b.mean(), abs=1e-15)
    assert got.se == pytest.approx(math.sqrt(var), rel=1e-12)
    assert got.df == pytest.approx(df, rel=1e-12)
    assert got.parts.total == pytest.approx(var, rel=1e-12)
    assert got.p() == pytest.approx(2 * sps.t.sf(abs(got.value) / got.se, df), rel=1e-12)


@pytest.mark.slow
def test_the_estimated_variance_is_the_true_one_and_the_naive_bootstrap_counts_coin_flips_twice():
    # 1,500 simulated experiments: test images drawn from a population, seeds with their own effect
    rng = np.random.default_rng(11)
    diffs, estimated, naive = [], [], []
    for k in range(1500):
        p = population(1000, rng)
        q = np.clip(p - 0.02 * rng.random(1000), 1e-6, 1)          # a second setting, per image a little worse
        a, b = runs(p, 3, rng), runs(q, 3, rng)
        est = contrast([a, b], [1.0, -1.0])
        diffs.append(est.value)
        estimated.append(est.se ** 2)
        if k < 150:   # the naive bootstrap's spread, on a subset (it is slow)
            n = 1000
            w = rng.multinomial(n, np.full(n, 1 / n), size=400) / n
            rep = [(x @ w.T)[rng.integers(0, 3, (3, 400)), np.arange(400)].mean(0) * math.sqrt(1.5)
                   - (x @ w.T).mean(0) * (math.sqrt(1.5) - 1) for x in (a, b)]
            naive.append(np.var(rep[0] - rep[1], ddof=1))
    true_var = np.var(diffs, ddof=1)
    assert np.mean(estimated) == pytest.approx(true_var, rel=0.12)     # unbiased within simulation error
    assert np.mean(naive) > 1.4 * true_var                             # double-counted: too wide


def test_false_positives_on_simulated_aa_data_are_not_above_alpha_and_the_test_is_not_deaf():
    rng = np.random.default_rng(2024)
    trials = 1000
    p_values = []
    for _ in range(trials):
        p = population(1000, rng)
        [c] = compare_settings({"A": runs(p, 3, rng), "B": runs(p, 3, rng)})
        p_values.append(c.p)
    p_values = np.array(p_values)
    hits = int((p_values < ALPHA).sum())
    low, high = proportion_confint(hits, trials, alpha=0.05, method="beta")
    assert low <= ALPHA, f"{hits}/{trials} false positives: above α"
    assert high >= ALPHA / 2, f"{hits}/{trials} false positives: far below α, the test is deaf"
    # p about uniform; Welch–Satterthwaite degrees of freedom from 3 seeds a side make it a little conservative
    assert 0.45 < p_values.mean() < 0.6 and 0.12 < (p_values < 0.2).mean() < 0.25


@pytest.mark.slow
def test_power_at_a_planted_one_point_beats_the_naive_bootstrap_on_the_same_trials():
    rng = np.random.default_rng(7)
    ours = theirs = 0
    trials = 120
    for _ in range(trials):
        p = population(1000, rng)
        a, b = runs(p, 3, rng), drop_correct(runs(p, 3, rng), 10, rng)   # exactly 1 point lower
        [c] = compare_settings({"A": a, "B": b})
        ours += c.p < ALPHA and c.diff > 0
        theirs += naive_bootstrap_p(a, b, rng) < ALPHA and a.mean() > b.mean()
    assert ours > theirs + 0.15 * trials, (ours, theirs)


def test_tost_calls_identical_settings_equivalent_with_enough_seeds_and_refuses_one_seed():
    rng = np.random.default_rng(5)
    p = population(1000, rng)
    same = {"A": runs(p, 10, rng), "B": runs(p, 10, rng)}
    [c] = compare_settings(same, margin=0.01)
    assert c.p_equiv_holm < ALPHA and c.outcome() == "equivalent"
    assert c.low > -0.01 and c.high < 0.01
    apart = {"A": runs(p, 10, rng), "B": drop_correct(runs(p, 10, rng), 20, rng)}   # 2 points apart
    [d] = compare_settings(apart, margin=0.01)
    assert d.p_equiv_holm > 0.5 and d.outcome() == "better"
    with pytest.raises(ValueError, match="at least 2 seeds per setting"):
        compare_settings({"A": same["A"][:1], "B": same["B"][:1]}, margin=0.01)
    for bad in (0, -0.5, float("nan"), 1.5, "0.5", True):
        with pytest.raises(ValueError, match="margin must be a number"):
            compare_settings(same, margin=bad)


def test_intervals_never_leave_0_to_100_percent():
    two_seeds = accuracy_interval([0.1, 0.8834])      # mean 49.17 %, t with 1 degree of freedom: ±700 points
    assert two_seeds.low == 0.0 and two_seeds.high == 1.0 and two_seeds.mean == pytest.approx(0.4917)
    near_top = np.ones((2, 500))
    near_top[0, 0] = 0
    top = accuracy_interval(near_top.mean(1), 500, near_top)
    assert 0 <= top.low <= top.mean <= top.high <= 1
    assert "seeds and 500 test images" in top.kind


def test_a_setting_interval_adds_the_test_images_to_the_seeds():
    rng = np.random.default_rng(9)
    correct = runs(population(1000, rng), 3, rng)
    accs = correct.mean(1)
    both = accuracy_interval(accs, 1000, correct)
    seeds_only = accuracy_interval(accs, 1000)
    est = contrast([correct], [1.0])
    assert est.se ** 2 > accs.var(ddof=1) / 3 and est.parts.image > 0     # the test images add variance
    half = sps.t.ppf(0.975, est.df) * est.se                              # with their own degrees of freedom
    assert (both.low, both.high) == pytest.approx((accs.mean() - half, accs.mean() + half), abs=1e-12)
    assert seeds_only.kind == "t over 3 seeds, test set held fixed"
    mean, sd = accs.mean(), accs.std(ddof=1)
    assert seeds_only.low == pytest.approx(max(0, mean - 4.302652729911275 * sd / math.sqrt(3)), abs=1e-12)
    assert (seeds_only.low, seeds_only.high) == pytest.approx(DescrStatsW(accs).tconfint_mean(0.05), abs=1e-12)


def test_one_seed_gets_the_exact_binomial_interval_of_its_test_set():
    got = accuracy_interval([0.979], test_size=1000)
    low, high = proportion_confint(979, 1000, alpha=0.05, method="beta")  # Clopper–Pearson
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-9)
    assert "binomial over 1,000 test images" in got.kind
    assert math.isnan(accuracy_interval([0.9]).low)  # no test-set size: no interval, and it says so
    with pytest.raises(ValueError, match="at least one"):
        accuracy_interval([])


def test_holm_adjustment_equals_the_hand_computation():
    # sorted 0.02, 0.04, 0.6 → 3·0.02 = 0.06, max(0.06, 2·0.04) = 0.08, max(0.08, 0.6) = 0.6
    assert holm([0.04, 0.6, 0.02]) == pytest.approx([0.08, 0.6, 0.06])
    assert holm([0.3]) == [0.3]
    from statsmodels.stats.multitest import multipletests  # the reference implementation

    rng = np.random.default_rng(8)
    for m in (2, 3, 6, 15, 66):
        p = np.concatenate([rng.random(m - 2) ** 3, [0.01, 0.01]])   # ties included
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]), abs=1e-15)


def comparison(a, b, diff, p_holm, p_equiv_holm=1.0):
    return Comparison(a, b, diff, 0, 0, 0.005, p_holm, p_holm, p_equiv_holm=p_equiv_holm)


def test_holm_correction_turns_a_borderline_winner_into_an_inconclusive_sweep():
    means = {"a": 0.98, "b": 0.97, "c": 0.969}
    raw = {("a", "b"): 0.04, ("a", "c"): 0.02, ("b", "c"): 0.6}
    adjusted = dict(zip(raw, holm(list(raw.values()))))
    unadjusted = verdict(means, [comparison(a, b, means[a] - means[b], raw[a, b]) for a, b in raw])
    corrected = verdict(means, [comparison(a, b, means[a] - means[b], adjusted[a, b]) for a, b in raw])
    assert unadjusted.winner and unadjusted.best == "a" and unadjusted.beats == ("b", "c")
    assert not corrected.winner and corrected.best == "a" and corrected.inconclusive == ("b", "c")


def test_the_verdict_sorts_each_other_setting_into_better_equivalent_or_inconclusive():
    means = {"a": 0.98, "b": 0.979, "c": 0.975, "d": 0.95}
    found = [comparison("a", "b", 0.001, 1.0, p_equiv_holm=0.01),   # shown within the margin
             comparison("a", "c", 0.005, 0.3, p_equiv_holm=0.4),    # neither
             comparison("d", "a", -0.03, 0.001)]                    # a shown better (a is b here)
    v = verdict(means, found)
    assert (v.beats, v.equivalent, v.inconclusive) == (("d",), ("b",), ("c",))
    assert not v.winner


def test_predictions_differing_on_3_of_1000_images_are_not_called_different():
    n = 1000
    rng = np.random.default_rng(4)
    p = population(n, rng)
    a = runs(p, 3, rng)
    b = a.copy()
    b[:, np.flatnonzero(a.min(0) == 1)[:3]] = 0            # every seed misses 3 more images
    [c] = compare_settings({"a": a, "b": b})
    assert c.diff == pytest.approx(0.003)
    assert c.p_holm > 0.05 and c.outcome() != "better"


def test_settings_ten_points_apart_name_the_right_winner():
    n = 1000
    rng = np.random.default_rng(1)
    settings = {"weak": (rng.random((3, n)) < 0.87).astype(float),
                "strong": (rng.random((3, n)) < 0.97).astype(float),
                "mid": (rng.random((3, n)) < 0.90).astype(float)}
    comparisons = compare_settings(settings)
    v = verdict({k: s.mean() for k, s in settings.items()}, comparisons)
    assert v.winner and v.best == "strong" and set(v.beats) == {"weak", "mid"}
    assert all(c.p_holm < 0.01 for c in comparisons if "strong" in (c.a, c.b))


def test_seed_variation_widens_the_interval_of_a_difference():
    # the same mean gap, but one setting's seeds disagree a lot: its comparison is less certain
    n = 1000
    def rows(*wrong_counts):
        out = np.ones((len(wrong_counts), n))
        for i, k in enumerate(wrong_counts):
            out[i, :k] = 0
        return out
    base = rows(30, 30, 30)
    [c_steady] = compare_settings({"x": rows(20, 20, 20), "base": base})
    [c_shaky] = compare_settings({"x": rows(0, 20, 40), "base": base})
    assert c_steady.diff == pytest.approx(c_shaky.diff)
    assert c_shaky.se > 2 * c_steady.se


def test_comparison_refuses_settings_evaluated_on_different_test_sets():
    with pytest.raises(ValueError, match="different numbers of test images"):
        compare_settings({"a": np.ones((2, 100)), "b": np.ones((2, 90))})


def test_probability_of_improvement_is_the_share_of_run_pairs_won_ties_half():
    a, b = np.array([0.97, 0.98, 0.99]), np.array([0.96, 0.98, 0.985])
    # pairs (9): 0.97 beats 0.96 only (1); 0.98 beats 0.96, ties 0.98 (1.5); 0.99 beats all three (3)
    assert probability_of_improvement(a, b) == pytest.approx(5.5 / 9)
    assert probability_of_improvement(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 0.5


def test_detectable_difference_is_the_power_formula():
    # z_{1-0.05/2} + z_{0.8} = 1.959964 + 0.841621 for one comparison with many degrees of freedom
    assert detectable_difference(0.01, 1) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)
    assert detectable_difference(0.01, 6) > detectable_difference(0.01, 1)  # Holm's strictest level is α/m
    assert detectable_difference(0.01, 1, df=4) == pytest.approx(
        (sps.t.ppf(0.975, 4) + sps.t.ppf(0.8, 4)) * 0.01, rel=1e-12)


def test_the_seeds_needed_for_a_difference_follow_the_variance_model():
    seed_var, image_var, delta = 0.004 ** 2, 0.0005 ** 2, 0.005

    def fits(s):
        q = sps.t.ppf(1 - 0.05 / 2, 2 * (s - 1)) + sps.t.ppf(0.8, 2 * (s - 1))
        return q * math.sqrt(2 * seed_var / s + image_var) <= delta
    s = seeds_needed(seed_var, image_var, delta, 1)
    assert fits(s) and not fits(s - 1)
    z = sps.norm.ppf(1 - 0.05 / 2) + sps.norm.ppf(0.8)
    assert seeds_needed(seed_var, (delta / z) ** 2 * 1.01, delta, 1) is None   # the test set alone is too noisy


@pytest.mark.slow
def test_the_seeds_needed_are_the_first_count_a_scan_from_two_seeds_finds():
    """Against a scan of every seed count from 2, one scipy quantile pair at a time (float64), over spreads from
    a few seeds to thousands, paired and not, with the test set's share small and near the limit."""
    rng = np.random.default_rng(3)

    def scan(seed_var, image_var, delta, m, paired_var, most):
        for s in range(2, most + 1):
            spread, df = (2 * seed_var, 2 * (s - 1)) if paired_var is None else (paired_var, s - 1)
            q = sps.t.ppf(1 - 0.05 / (2 * m), df) + sps.t.ppf(0.8, df)
            if q * q * (spread / s + image_var) <= delta ** 2:
                return s
        return None
    found = []
    for _ in range(60):
        delta, m = 0.005, int(rng.integers(1, 8))
        seed_var = (delta * 10 ** rng.uniform(-1, 1.2)) ** 2
        paired_var = None if rng.random() < 0.5 else 2 * seed_var * rng.uniform(0.2, 1)
        z = sps.norm.ppf(1 - 0.05 / (2 * m)) + sps.norm.ppf(0.8)
        image_var = (delta / z) ** 2 * rng.uniform(0, 0.95)
        most = int(rng.choice([50, 10_000]))
        got = seeds_needed(seed_var, image_var, delta, m, paired_var=paired_var, most=most)
        assert got == scan(seed_var, image_var, delta, m, paired_var, most), (seed_var, image_var, m, paired_var, most)
        found.append(got)
    assert any(f is None for f in found) and any(f is not None and f > 64 for f in found)  # both ends exercised


def test_interaction_contrasts_count_each_source_once():
    rng = np.random.default_rng(8)
    p = population(1000, rng)
    cells = {(i, j): runs(p, 3, rng) for i in range(2) for j in range(2)}
    [c] = interaction_contrasts(cells, [0, 1], [0, 1])
    direct = contrast([cells[1, 1], cells[0, 1], cells[1, 0], cells[0, 0]], [1, -1, -1, 1])
    assert (c.diff, c.se, c.df) == pytest.approx((direct.value, direct.se, direct.df), rel=1e-12)
    assert c.p_holm == pytest.approx(c.p)


def test_a_paired_difference_is_the_float64_difference_with_an_interval_narrower_than_unpaired():
    rng = np.random.default_rng(5)
    a = (rng.random((3, 2000)) < 0.9).astype(float)   # 3 seeds, 2000 images
    b = a.copy()
    flip = rng.random(a.shape) < 0.03                 # the same runs, a few answers changed
    b[flip] = 1 - b[flip]
    paired = paired_difference(a, b)
    assert paired.diff == pytest.approx(float(a.astype(np.float64).mean() - b.astype(np.float64).mean()), abs=1e-15)
    assert paired.low <= paired.diff <= paired.high
    (unpaired,) = compare_settings({"a": a, "b": b})
    assert paired.high - paired.low < unpaired.high - unpaired.low   # seeds paired: their shared noise cancels
    same = paired_difference(a, a.copy())   # the same answers: 0, bounded but not known to ±0
    assert (same.diff, same.p) == (0.0, 1.0) and same.low < 0 < same.high and same.high < 0.001
    # the same pair as settings trained under the same seeds is this paired comparison, whatever the row order
    (by_seed,) = compare_settings({"a": a, "b": b[::-1]}, seeds={"a": [0, 1, 2], "b": [2, 1, 0]})
    assert by_seed.paired and (by_seed.diff, by_seed.se, by_seed.df) == pytest.approx((paired.diff, paired.se, paired.df))
    one = paired_difference(a[:1], b[:1])   # one seed: McNemar's variance over the test images
    d = a[0] - b[0]
    assert one.se == pytest.approx(math.sqrt(d.var(ddof=1) / 2000), rel=1e-12)
    with pytest.raises(ValueError, match="same seeds and test images"):
        paired_difference(a, b[:2])


def _shared_seed_runs(rng, seeds: int, n: int = 1000, delta: float = 0.0) -> dict[str, np.ndarray]:
    """Two settings trained under the same seeds: per image a fixed difficulty, per seed a shift both share
    and a smaller one of each setting's own, and half of each answer's coin flip shared between the two
    (same initial weights and batch order). B loses `delta` of its answers, exactly, in every run."""
    from scipy.special import expit

    base, shared_shift = rng.normal(6.0, 3.0, n), rng.normal(0, 0.15, seeds)
    shared_draw = rng.random((seeds, n))
    out = {}
    for name in "AB":
        p = expit(base[None] + (shared_shift + rng.normal(0, 0.1, seeds))[:, None])
        draw = np.where(rng.random((seeds, n)) < 0.5, shared_draw, rng.random((seeds, n)))
        c = (draw < p).astype(float)
        if name == "B" and delta:
            for s in range(seeds):
                right = np.flatnonzero(c[s])
                c[s, rng.choice(right, int(round(delta * n)), replace=False)] = 0
        out[name] = c
    return out


def test_pairing_by_seed_keeps_alpha_and_false_equivalence_and_finds_more_than_unpaired():
    """Known answers on simulated same-seed settings at 3 seeds: A/A false positives within α (exact 95 %
    interval), an exact 0.5-point difference called equivalent within ±0.5 at most α of the time, and
    power at 1 point at least the unpaired test's on the same trials."""
    rng = np.random.default_rng(21)
    trials, seeds = 400, {"A": [0, 1, 2], "B": [0, 1, 2]}
    found = {"aa": 0, "equiv": 0, "paired": 0, "unpaired": 0}
    for _ in range(trials):
        [c] = compare_settings(_shared_seed_runs(rng, 3), seeds=seeds)
        found["aa"] += c.outcome() in ("better", "worse")
        [c] = compare_settings(_shared_seed_runs(rng, 3, delta=0.005), seeds=seeds)
        found["equiv"] += c.outcome() == "equivalent"
        one = _shared_seed_runs(rng, 3, delta=0.01)
        [p], [u] = compare_settings(one, seeds=seeds), compare_settings(one)
        assert p.paired and not u.paired
        found["paired"] += p.outcome() == "better"
        found["unpaired"] += u.outcome() == "better"
    for key in ("aa", "equiv"):
        low = sps.binomtest(found[key], trials).proportion_ci(0.95, method="exact").low
        assert low <= ALPHA, (key, found[key])
    assert found["paired"] >= found["unpaired"] and found["paired"] / trials > 0.15, found


def test_identical_runs_are_identical_and_a_setting_with_no_spread_is_not_known_to_zero():
    rng = np.random.default_rng(4)
    a = (rng.random((3, 360)) < 0.95).astype(float)
    preds = {"bmm": np.where(a == 1, 3, 5), "einops": np.where(a == 1, 3, 5), "loop": np.where(a == 1, 3, 6)}
    found = compare_settings({k: a for k in preds}, seeds={k: [0, 1, 2] for k in preds}, preds=preds)
    by_pair = {(c.a, c.b): c for c in found}
    assert by_pair["bmm", "einops"].outcome() == "identical" and by_pair["bmm", "einops"].identical
    # the same answers but other wrong classes: not identical; equivalent, with an interval that is not ±0
    loop = by_pair["bmm", "loop"]
    assert not loop.identical and loop.paired and loop.low < 0 < loop.high
    v = verdict({"bmm": 0.95, "einops": 0.95, "loop": 0.95}, found)
    assert v.identical == ("einops",) and not v.winner
    perfect = np.ones((3, 360))
    i = accuracy_interval(perfect.mean(1), 360, perfect)
    assert i.mean == 1.0 and 0.99 < i.low < 1.0 and i.high == 1.0
    [c] = compare_settings({"a": perfect, "b": np.pad(np.ones((3, 359)), ((0, 0), (0, 1)))})
    assert c.se > 0 and c.p_equiv > 0 and 0 < c.p < 1


def test_three_runs_with_equal_or_nearly_equal_differences_get_a_floored_standard_error_not_a_p_of_1e_minus_32():
    """Three seeds whose paired differences are exactly +0.3 points each (3 of 1,000 answers lost, on other images
    each seed): the spread is 0 from the integer counts (in floating point it was 2.8e-37, which skipped the
    floor and gave s.e. 3e-19 and p = 1e-32). Counts within one answer of each other get the same floor: no
    standard error below it, ever. The floor, computed here independently: the coin flips' variance of one run
    (each image's variance between seeds, averaged, over n) times the 2.5 % quantile of χ²₂ / 2."""
    rng = np.random.default_rng(0)
    a = (rng.random((3, 1000)) < 0.97).astype(float)

    def losing(counts):
        b = a.copy()
        for s, k in enumerate(counts):
            b[s, rng.choice(np.flatnonzero(a[s] == 1), k, replace=False)] = 0
        return b

    for lost in (losing((3, 3, 3)), losing((3, 3, 4))):     # exactly equal, then within one answer
        d = a - lost
        floor = d.var(0, ddof=1).mean() / 1000 * sps.chi2.ppf(0.025, 2) / 2
        [c] = compare_settings({"a": a, "b": lost}, seeds={"a": [0, 1, 2], "b": [0, 1, 2]})
        assert c.paired and c.se >= math.sqrt(floor / 3) * (1 - 1e-12)
        assert c.p > 1e-3 and c.p_equiv > 1e-3 and c.high - c.low > 0.001   # not 1e-32, not ±0
    spread = contrast([np.vstack([d[0]] * 3)], [1.0])    # three identical runs: Laplace's q / n, never 0
    assert spread.se > 0


@pytest.mark.parametrize("seeds", [12, 20])
def test_per_pair_false_positives_stay_within_alpha_at_many_seeds_where_settings_differ_image_by_image(seeds):
    """A/A where each setting finds its own images easier or harder (a true test-image term, equal means over
    the population of images): the image term's degrees of freedom come from its own mean squares, so the
    false-positive rate does not grow with seeds."""
    rng = np.random.default_rng(seeds)
    trials, hits = 300, 0
    for _ in range(trials):
        base = logit(population(1000, rng))
        sets = {}
        for name in "AB":
            q = expit(base + rng.normal(0, 0.8, 1000))
            sets[name] = (rng.random((seeds, 1000)) < expit(logit(q) + rng.normal(0, 0.2, (seeds, 1)))).astype(float)
        [c] = compare_settings(sets)
        hits += c.p < ALPHA
    low, high = proportion_confint(hits, trials, alpha=0.05, method="beta")
    assert low <= ALPHA, f"{hits}/{trials} false positives at {seeds} seeds: above α"
    assert high >= ALPHA / 2, f"{hits}/{trials}: far below α, the test is deaf"


@pytest.mark.slow
def test_the_interval_of_p_a_beats_b_covers_a_coin_flip_on_real_same_setting_runs_and_excludes_it_when_runs_separate():
    """P(a beats b) with Newcombe's score interval: on real runs of one setting (the reference's seeds sweep, 48
    seeds), split at random into a and b (true P = 1/2), the 95 % interval covers 1/2 at least 95 % of the time at 5
    and at 12 runs a side; runs that separate completely (8 against 8) exclude it."""
    from pathlib import Path

    from ablations.analysis.stats import probability_of_improvement, win_interval
    from ablations.results.schema import read_table

    table = read_table(Path(__file__).resolve().parents[1] / "results" / "reference" / "ablations" / "seeds.csv")
    acc = table.loc[table["status"] == "ok", "test_acc"].astype(float).to_numpy()
    assert len(acc) == 48
    rng = np.random.default_rng(0)
    for k in (5, 12):
        covered = []
        for _ in range(4000):
            draw = rng.permutation(acc)[:2 * k]
            win = probability_of_improvement(draw[:k], draw[k:])
            low, high = win_interval(win, k, k)
            covered.append(low <= 0.5 <= high)
        assert np.mean(covered) >= 0.945, (k, np.mean(covered))   # ≥ 95 % less 2 s.e. of 4,000 draws
    low, high = win_interval(probability_of_improvement(np.arange(8) + 10.0, np.arange(8)), 8, 8)
    assert high == 1.0 and 0.5 < low < 1.0
    assert win_interval(0.5, 5, 5)[0] < 0.5 < win_interval(0.5, 5, 5)[1]


@pytest.mark.parametrize("runs", [5, 12])
@pytest.mark.slow
def test_p_a_beats_b_never_has_a_zero_width_interval_and_covers_at_least_93_percent_paired_or_not(runs):
    """Complete separation (every run of a above every run of b) gave P = 0.00 [0.00, 0.00]: the root finder took
    the trivial root at the estimate. Now the interval is never of width 0, and over 600 draws per regime (true
    P from 0.5 to about 0.97, where 5 runs a side separate completely in most draws) it covers the true P at
    least 93 % of the time: unpaired runs by Newcombe's interval, runs paired by seed (as the verdicts compare
    them) by the exact interval of the share of seeds won. Accuracies are counts of right answers, so runs tie
    at times; the true P (ties half) is that of 200,000 draws of the same process."""
    from ablations.analysis.stats import compare_settings

    rng = np.random.default_rng(runs)
    n = 200

    def counts(shift, paired, size):
        """(counts of a, counts of b): a seed's draw shared by a run of b and its twin of a where paired."""
        b = rng.normal(0, 1, size)
        a = (b + rng.normal(0, 1, size) if paired else rng.normal(0, 1, size)) + shift
        return np.rint(100 + 10 * a), np.rint(100 + 10 * b)

    for shift in (0.0, 0.74, 1.81, 2.66):
        for paired in (False, True):
            big_a, big_b = counts(shift, paired, 200_000)
            other = big_b if paired else rng.permutation(big_b)
            truth = float(np.mean(big_a > other) + 0.5 * np.mean(big_a == other))
            covered, widths = 0, []
            for _ in range(600):
                ca, cb = counts(shift, paired, runs)
                a = (np.arange(n)[None, :] < ca[:, None]).astype(float)
                b = (np.arange(n)[None, :] < cb[:, None]).astype(float)
                seeds = {"a": list(range(runs)), "b": list(range(runs))} if paired else None
                [c] = compare_settings({"a": a, "b": b}, seeds=seeds)
                assert c.paired == paired
                covered += c.win_low <= truth <= c.win_high
                widths.append(c.win_high - c.win_low)
            assert min(widths) > 0.05, (runs, shift, paired)
            assert covered / 600 >= 0.93, (runs, shift, paired, truth, covered)


def test_one_outcome_vocabulary_with_words_and_markers_for_every_kind_a_pair_can_have():
    """Every outcome a pair can have has its words in the pair table and, as the verdict says it of a setting
    against the best, its marker in the accuracy panel; an outcome reads and prints as its plain value (the
    report, `make known` and CSVs say 'better', never 'Outcome.BETTER')."""
    from ablations.analysis.stats import PAIR_OUTCOMES, Outcome
    from ablations.analysis.wording import OUTCOME_MARKERS, OUTCOME_WORDS

    assert set(PAIR_OUTCOMES) <= set(OUTCOME_WORDS)
    assert set(PAIR_OUTCOMES) - {Outcome.BETTER} <= set(OUTCOME_MARKERS)   # a setting against the best: never above it
    assert [f"{o}" for o in Outcome] == [str(o) for o in Outcome] == [o.value for o in Outcome]
    assert Outcome.BETTER == "better" and {"worse": 1}[Outcome.WORSE] == 1


def test_the_chance_rule_calls_a_guessing_leader_learned_rarely_and_a_weak_learner_learned_at_24_seeds():
    """Both rates of `at_chance` on simulated runs whose answer is known (ten classes, 360 test images, the digits
    regime): the leader of five settings that all guess, chosen for its high mean, is called above chance in under
    3 % of sweeps at 24 seeds (the 3-standard-error rule: 0.1 % of 1,000 sweeps; its 95 % interval clear of chance:
    8.8 %), and a setting that learned 3 points beyond guessing, under the 3 binomial s.d. of the test set alone (4.7
    points), is called above chance in over 95 % of sweeps at 24 seeds, where the test-set rule alone called it
    chance in 300 of 300."""
    rng = np.random.default_rng(0)
    n, seeds, chance = 360, 24, 0.1

    def learned(p: float, k: int) -> bool:
        runs = [(rng.random((seeds, n)) < p).astype(float) for _ in range(k)]
        lead = max(runs, key=lambda c: c.mean())
        assert at_chance(lead.mean(), chance, n) == (lead.mean() < chance + 3 * math.sqrt(chance * 0.9 / n))
        return not at_chance(lead.mean(), chance, n, lead.mean(axis=1), lead)

    false = sum(learned(chance, 5) for _ in range(300))
    assert false < 9, false   # under 3 %
    weak = sum(learned(chance + 0.03, 1) for _ in range(100))
    assert weak >= 95 and at_chance(chance + 0.03, chance, n), weak
