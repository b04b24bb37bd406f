"""Adaptive seeds (a group-sequential design) on simulated sweeps whose answers are known: the nominal
levels spend exactly α, A/A sweeps keep their family-wise false positives within α, a planted 0.5-point
difference is rarely called equivalent within ±0.5, and a 1-point winner is found at far fewer runs than
12 fixed seeds would take."""

import numpy as np
import pytest
from scipy import stats as sps
from scipy.special import expit

from ablations.analysis.sequential import (
    LOOKS,
    Decision,
    check_looks,
    look,
    nominal_levels,
    replay,
    replay_gathered,
    run_design,
    spent,
)
from ablations.analysis.stats import ALPHA


@pytest.mark.parametrize("spending", ["obf", "hsd:-3"])
def test_the_nominal_levels_spend_alpha_as_their_function_says_and_one_look_is_alpha(spending):
    """O'Brien–Fleming's levels against the published ones (Jennison & Turnbull's table for 4 equally informative
    looks at these fractions); Hwang–Shih–DeCani's spend α(1 − e^{−γt}) / (1 − e^{−γ}) by t, computed by hand;
    either way one look is α and the chance of crossing at some look under the null, simulated, is α."""
    import math

    if spending == "obf":
        assert nominal_levels((3, 5, 8, 12), spending="obf") == pytest.approx((0.00008, 0.0024, 0.0153, 0.0436),
                                                                               rel=0.08, abs=2e-5)
    else:
        assert spent(0.25, spending=spending) == pytest.approx(ALPHA * (1 - math.exp(0.75)) / (1 - math.exp(3)))
    assert nominal_levels((12,), spending=spending) == pytest.approx((ALPHA,), rel=1e-6)
    assert spent(1.0, spending=spending) == pytest.approx(ALPHA)
    assert spent(0.25, spending=spending) < spent(0.5, spending=spending) < ALPHA
    levels = nominal_levels(LOOKS, spending=spending)
    # the chance of crossing at some look under the null, by simulation of the looks' joint law
    rng = np.random.default_rng(0)
    t = np.array(LOOKS) / LOOKS[-1]
    increments = rng.normal(size=(200_000, len(t))) * np.sqrt(np.diff(np.concatenate([[0], t])))
    z = np.cumsum(increments, 1) / np.sqrt(t)
    crossed = (2 * sps.norm.sf(np.abs(z)) < np.array(levels)).any(1).mean()
    assert crossed == pytest.approx(ALPHA, abs=0.003)


@pytest.mark.slow
def test_the_recursion_agrees_with_an_independent_integration_and_gives_the_same_digits_in_any_process():
    """The levels from the exact recursion against the same spending solved with scipy's multivariate normal
    (Genz's integration, another method) wherever that one is precise (levels above 1e-4), a refined grid giving
    the same levels to 1e-8, and a fresh process
    computing the same digits twice."""
    import subprocess
    import sys

    from scipy import optimize

    from ablations.analysis.sequential import computed_levels

    def genz(looks, alpha):
        t = np.array(looks) / looks[-1]
        inside = lambda b: (1 - 2 * sps.norm.sf(b[0]) if len(b) == 1 else sps.multivariate_normal(  # noqa: E731
            np.zeros(len(b)), np.sqrt(np.minimum.outer(t[:len(b)], t[:len(b)]) / np.maximum.outer(t[:len(b)], t[:len(b)])),
            seed=0).cdf(np.array(b), lower_limit=-np.array(b)))
        bounds = []
        for k in range(len(t)):
            target = spent(t[k], alpha) - (spent(t[k - 1], alpha) if k else 0)
            before = inside(bounds) if bounds else 1.0
            bounds.append(optimize.brentq(lambda c: before - inside([*bounds, c]) - target, 0.5, 12, xtol=1e-10))
        return [2 * sps.norm.sf(c) for c in bounds]

    for looks, alpha in [((3, 5, 8, 12), 0.05), (LOOKS, 0.05), (LOOKS, 0.05 / 3)]:
        ours, theirs = computed_levels(looks, alpha), genz(looks, alpha)
        for a, b in zip(ours, theirs):
            if b > 1e-4:   # Genz's error is about 1e-5 in probability: compared as the look's z bound
                assert sps.norm.isf(a / 2) == pytest.approx(sps.norm.isf(b / 2), abs=0.01)
    import ablations.analysis.sequential as sequential
    coarse = computed_levels(LOOKS, 0.05 / 7)
    monkey = pytest.MonkeyPatch()
    monkey.setattr(sequential, "GRID", 4 * sequential.GRID + 1)
    assert computed_levels(LOOKS, 0.05 / 7) == pytest.approx(coarse, rel=1e-8)
    monkey.undo()
    code = ("from ablations.analysis.sequential import computed_levels; "
            "print(repr([computed_levels((3, 5, 8, 12, 18, 24), a) for a in (0.05, 0.01, 0.05 / 7)]))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(runs) == 1


@pytest.mark.parametrize("looks,said", [((2, 5), "at least 3 seeds at the first look"),
                                        ((3, 8, 5), "looks that increase"),
                                        ((3, 3), "looks that increase"),
                                        ((3, 5, 40), "above the 20 seeds allowed")])
def test_bad_looks_are_refused_in_one_line(looks, said):
    with pytest.raises(ValueError, match=said):
        check_looks(looks, most=20)


def sweep(rng, settings=4, seeds=LOOKS[-1], n=1000, winner_by=0.0):
    """A sweep of settings trained under shared seeds (0..seeds−1), in the regime of the mnist5k reference
    (about 98 % accuracy, a seed's difference between two settings about 0.3 points): per image a fixed
    difficulty, per seed a shift all settings share and a smaller one of each setting's own, most of each
    coin flip shared. Every setting but the first loses `winner_by` of its answers in every run, so the
    first leads by exactly that."""
    base, shift = rng.normal(5.0, 1.5, n), rng.normal(0, 0.08, seeds)
    shared = rng.random((seeds, n))
    out = {}
    for k in range(settings):
        p = expit(base[None] + (shift + rng.normal(0, 0.05, seeds))[:, None])
        c = (np.where(rng.random((seeds, n)) < 0.85, shared, rng.random((seeds, n))) < p).astype(float)
        if k and winner_by:
            for s in range(seeds):
                c[s, rng.choice(np.flatnonzero(c[s]), int(round(winner_by * n)), replace=False)] = 0
        out[k] = c
    return out


@pytest.mark.slow
def test_aa_sweeps_keep_family_wise_false_positives_within_alpha():
    rng = np.random.default_rng(1)
    trials = 200
    wrong = sum(any(v.outcome == "different" for lk in run_design(sweep(rng)).looks for v in lk.decided.values())
                for _ in range(trials))
    assert sps.binomtest(wrong, trials).proportion_ci(0.95, method="exact").low <= ALPHA, wrong


def test_a_planted_half_point_is_rarely_called_equivalent_within_half_a_point():
    rng = np.random.default_rng(2)
    trials = 200
    equivalent = sum(any(getattr(lk.decided.get(1), "outcome", "") == "equivalent"
                         for lk in run_design(sweep(rng, 2, winner_by=0.005)).looks)
                     for _ in range(trials))
    assert sps.binomtest(equivalent, trials).proportion_ci(0.95, method="exact").low <= ALPHA, equivalent


def test_a_one_point_winner_is_found_and_the_design_stops_early():
    """Found: the planted winner leads at the end and is decided different from every other setting. The runs it
    took are printed (`-s`) against fixed seeds at the cap (24 a setting: about 0.48 here) and at 12."""
    rng = np.random.default_rng(3)
    trials, found, runs = 80, 0, []
    for _ in range(trials):
        result = run_design(sweep(rng, winner_by=0.01))
        decided = {k: v.outcome for k, v in result.final.decided.items() if v.leader == 0}
        found += result.final.leader == 0 and all(decided.get(k) == "different" for k in (1, 2, 3))
        runs.append(result.runs)
    share = float(np.mean(runs)) / (LOOKS[-1] * 4)
    print(f"1-point winner found in {found}/{trials} sweeps with {share:.2f} × the runs of {LOOKS[-1]} fixed seeds "
          f"({float(np.mean(runs)) / 48:.2f} × those of 12)")
    assert found / trials >= 0.95, found
    assert share < 0.6 and min(runs) < 12 * 4


def _runs(draw, seeds_of):
    """replay's input: each setting's rows at the given seeds (in any order), predictions left out."""
    return {k: (list(seeds_of[k]), np.asarray(draw[k])[list(seeds_of[k])], None) for k in draw}


def test_replay_asks_for_exactly_the_missing_seeds_and_decides_the_same_with_extra_runs_on_disk():
    """A kill between looks leaves some runs: the replay asks for exactly the rest of the look. Runs the design
    did not ask for (another command's seeds) change nothing: each look reads only its own seeds."""
    rng = np.random.default_rng(4)
    draw = sweep(rng, settings=3, winner_by=0.01)
    complete = replay(_runs(draw, {k: range(12) for k in draw}))
    assert complete.done and complete.looks
    # only some of the first look's runs finished: the rest of seeds 0-2, nothing of later looks
    partial = replay(_runs(draw, {0: [0, 2], 1: [0, 1, 2], 2: []}))
    assert not partial.looks and partial.need == {0: [1], 2: [0, 1, 2]}
    # the runs the design used, and nothing else: the same looks
    used = replay(_runs(draw, {k: range(n) for k, n in complete.have.items()}))
    assert [lk.decided for lk in used.looks] == [lk.decided for lk in complete.looks] and used.done
    # killed during the second look: one open setting has its new seeds, the others not yet
    first = complete.looks[0]
    assert not first.done and len(first.open) >= 2
    some = first.open[0]
    killed = replay(_runs(draw, {k: range(LOOKS[1] if k == some else LOOKS[0]) for k in draw}))
    assert len(killed.looks) == 1 and killed.looks[0].decided == first.decided
    assert killed.need == {k: list(range(LOOKS[0], LOOKS[1])) for k in first.open if k != some}


def _look_by_look(draw, diverges, file):
    """The driver look by look (`adaptive.run_adaptive`) on drawn runs: each step trains what the replay asks for;
    a run in `diverges` (setting, seed) diverges. The final design and the settings it left out."""
    trained = {k: set() for k in draw}
    while True:
        design, left = _replayed(draw, trained, diverges, file)
        if not design.need:
            return design, left
        for k, seeds in design.need.items():
            trained[k] |= set(seeds)


def _replayed(draw, trained, diverges, file):
    ok = {k: sorted(s for s in seeds if (k, s) not in diverges) for k, seeds in trained.items()}
    failed = {k: {s for s in seeds if (k, s) in diverges} for k, seeds in trained.items()}
    return replay_gathered(_runs(draw, ok), {k: v for k, v in failed.items() if v}, file)


@pytest.mark.parametrize("where", ["read", "past"])
def test_a_diverged_run_leaves_its_setting_out_only_where_the_design_needs_it(where):
    """The same runs trained look by look and all to the cap at once (AUTO_TRAIN=cap) give the same design and leave
    the same settings out: a run that diverges at a seed the design reads leaves its setting out either way; one at a
    seed past where the design stops (trained only by the cap) leaves nothing out, as look by look it never trained,
    where leaving out every setting with a diverged run would have dropped it."""
    from ablations.results.seed_design import new_design

    file = new_design(0.005, ALPHA)
    draw = sweep(np.random.default_rng(4), settings=3, winner_by=0.01)
    complete = replay(_runs(draw, {k: range(LOOKS[-1]) for k in draw}))
    short = next(k for k, n in complete.have.items() if n < LOOKS[-1])   # a setting the design stops early
    diverges = {(short, 1 if where == "read" else LOOKS[-1] - 1)}
    look, left_look = _look_by_look(draw, diverges, file)
    cap, left_cap = _replayed(draw, {k: set(range(LOOKS[-1])) for k in draw}, diverges, file)
    assert left_cap == left_look == ((short,) if where == "read" else ())
    assert [lk.decided for lk in cap.looks] == [lk.decided for lk in look.looks] and cap.have == look.have
    if where == "past":
        assert [lk.decided for lk in cap.looks] == [lk.decided for lk in complete.looks]
        assert replay_gathered({k: v for k, v in _runs(draw, {k: range(LOOKS[-1]) for k in draw}).items()
                                if k != short}, {}, file)[0].looks != cap.looks   # what leaving it out would do


def test_a_decision_stands_while_its_leader_leads_and_is_taken_again_under_a_new_leader():
    c = {0: np.ones((3, 10)), 1: np.zeros((3, 10)), 2: np.full((3, 10), 0.5)}
    before = {1: Decision(0, "different", 0, 1e-9), 2: Decision(7, "equivalent", 0, 1e-9)}
    seen = look(c, {k: [0, 1, 2] for k in c}, 1, earlier=before)
    assert seen.leader == 0 and seen.decided[1] is before[1] and 1 not in seen.open
    # the decision about 2 was taken against another leader: tested again now, never carried over
    assert seen.decided.get(2) is not before[2]
    assert (2 in seen.open) == (2 not in seen.decided)
    assert 2 not in seen.decided or (seen.decided[2].leader, seen.decided[2].look) == (0, 1)


def test_a_leader_at_chance_stops_the_design_at_its_first_look():
    rng = np.random.default_rng(5)
    guessing = {k: (rng.random((12, 400)) < 0.25).astype(float) for k in range(3)}
    design = replay({k: (range(12), v, None) for k, v in guessing.items()}, chance=0.25)
    assert len(design.looks) == 1 and design.final.at_chance and design.done
    assert design.runs == 3 * LOOKS[0]
    learned = replay({k: (range(12), v, None) for k, v in guessing.items()}, chance=0.1)
    assert not learned.final.at_chance
    # a leader under 25 % + 3 binomial s.d. (31.5 % on 400 images), but 12 seeds at 29 % put it more than 3 standard
    # errors above guessing: it learned a little, and the design goes on; at 3 seeds it cannot show that yet
    weak = {0: (rng.random((12, 400)) < 0.29).astype(float), 1: guessing[1], 2: guessing[2]}
    assert weak[0].mean() < 0.315
    learned = replay({k: (range(12), v, None) for k, v in weak.items()}, looks=(12, 24), chance=0.25)
    assert learned.looks[0].leader == 0 and not learned.looks[0].at_chance
    assert replay({k: (range(12), v, None) for k, v in weak.items()}, chance=0.25).final.at_chance


def test_the_step_down_spends_alpha_per_pair_so_the_family_wise_bound_is_alpha():
    """With m pairs standing, each is tested at the levels of a design spending α / m: the chance that one null
    pair crosses at any look, computed with scipy's multivariate normal (another integration than the
    recursion's), is α / m, so m of them cross with probability at most α. Holm at the look's level for α
    divided by m, the rule this replaces, spends more than α / m."""
    t = np.array(LOOKS) / LOOKS[-1]
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))

    def crossing(levels):
        b = sps.norm.isf(np.asarray(levels) / 2)
        return 1 - sps.multivariate_normal(np.zeros(len(t)), cov, seed=0).cdf(b, lower_limit=-b)

    for m in (2, 6, 15):
        ours = crossing(nominal_levels(LOOKS, ALPHA / m))
        assert m * ours == pytest.approx(ALPHA, abs=4e-4)
        divided = crossing(np.array(nominal_levels(LOOKS, ALPHA)) / m)
        assert m * divided > ALPHA * 1.01


def test_the_step_down_tests_the_smallest_p_at_alpha_over_those_standing_and_frees_alpha_on_a_rejection():
    from ablations.analysis.sequential import step_down

    a, b, c = frozenset("ab"), frozenset("ac"), frozenset("bc")
    last = len(LOOKS) - 1
    strict, loose = nominal_levels(LOOKS, ALPHA / 3)[last], nominal_levels(LOOKS, ALPHA / 2)[last]
    # a crosses the level for α/3, b then the level for α/2 (not for α/3): both fall; c stays
    p = {a: strict * 0.9, b: (strict + loose) / 2, c: 0.5}
    assert step_down(p, last, LOOKS, ALPHA) == {a: strict, b: loose}
    # the smallest fails: nothing falls, however small the others' p relative to their own levels
    assert step_down({a: strict * 1.1, b: strict * 1.1, c: 0.5}, last, LOOKS, ALPHA) == {}
    # a pair rejected at an earlier look frees its share: the next is tested at α / 2
    assert step_down({b: (strict + loose) / 2, c: 0.5}, last, LOOKS, ALPHA, already=[a]) == {b: loose}


def _pair(diff, se, seed_sd, image_sd, margin=0.005):
    """A Comparison of two settings at 3 seeds: difference and s.e. in fractions; the seed terms (per seed) and
    the test images' term given as standard deviations."""
    from ablations.analysis.stats import Comparison, Components

    parts = Components(seed=seed_sd ** 2 / 3, seed_image=0.0, image=image_sd ** 2)
    return Comparison("a", "b", diff, diff - 1.96 * se, diff + 1.96 * se, se, 0.5, 0.5, margin=margin, parts=parts)


def test_a_pair_is_stopped_as_futile_only_where_no_difference_its_data_allow_could_be_decided_at_the_cap():
    from ablations.analysis.sequential import undecidable

    level = nominal_levels(LOOKS)[-1]
    # the images alone: half-width 2.04 × 0.26 points > the margin, and every difference in the interval below it
    assert undecidable(_pair(0.001, 0.001, 0.001, 0.0026), 3, LOOKS[-1], level) == "test set"
    # a small image term: the same pair can be decided with enough seeds, and 24 are enough
    assert undecidable(_pair(0.001, 0.001, 0.001, 0.0005), 3, LOOKS[-1], level) == ""
    # seeds could decide it, but not 24 of them: the seed term at 24 still keeps it open
    assert undecidable(_pair(0.0025, 0.0006, 0.012, 0.0008), 3, LOOKS[-1], level) == "cap"
    assert undecidable(_pair(0.0025, 0.0006, 0.012, 0.0008), 3, 200, level) == ""
    # a wide interval reaches differences the cap could decide: never futile, whatever the point estimate
    assert undecidable(_pair(0.001, 0.004, 0.001, 0.0026), 3, LOOKS[-1], level) == ""


def _image_bound(rng, apart=1):
    """Two settings that differ on 9 fixed test images of 1,000 (a wins 5 of them, b 4, in every run: a test-image
    term of 0.3 points, 0.1 points apart on top of the seeds' noise): no number of seeds decides them at ±0.5."""
    draw = sweep(rng, 2)
    images = rng.choice(1000, 9, replace=False)
    for k, (wins, loses) in enumerate(((images[:5], images[5:]), (images[5:], images[:5]))):
        draw[k][:, wins], draw[k][:, loses] = 1.0, 0.0
    return draw


def test_futility_stops_pairs_no_seeds_can_decide_early_and_costs_no_power_at_one_point():
    """Pairs that only the test set's images keep apart are stopped before the cap in most sweeps, saying why,
    at fewer runs than the cap; a 1-point difference is found as often as without futility."""
    import ablations.analysis.sequential as sequential

    rng = np.random.default_rng(7)
    stopped, runs = 0, []
    for _ in range(40):
        result = run_design(_image_bound(rng))
        futile = [d for d in result.final.decided.values() if d.outcome == "futile"]
        stopped += bool(futile) and futile[0].why == "test set" and result.final.index < len(LOOKS) - 1
        runs.append(result.runs)
    assert stopped >= 20, stopped
    assert np.mean(runs) < 2 * LOOKS[-1] * 0.8, np.mean(runs)
    found = {}
    for cover in (sequential.FUTILITY_COVER, 0.0):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sequential, "FUTILITY_COVER", cover)
            rng = np.random.default_rng(8)
            found[cover] = sum(result.final.decided.get(1, Decision(0, "", 0, 1)).outcome == "different"
                               for result in (run_design(sweep(rng, 2, winner_by=0.01)) for _ in range(60)))
    assert found[sequential.FUTILITY_COVER] >= found[0.0] - 2 and found[sequential.FUTILITY_COVER] >= 57, found


def _with_twin(rng, names=("loop", "bmm", "einops", "sdpa")):
    """A sweep whose second and third settings are twins (the same answers and predicted classes on every image
    of every seed, as two attention backends that compute the same thing), the settings close enough that the
    design runs several looks, the twins ahead by 0.2 points. replay's input, in the order `names` lists them."""
    draw = sweep(rng, settings=3, n=600, winner_by=0.002)
    answers = {names[0]: draw[1], names[1]: draw[0], names[2]: draw[0], names[3]: draw[2]}
    return {k: (list(range(LOOKS[-1])), answers[k], np.where(answers[k] == 1, 3, 5 + (k == names[0])))
            for k in names}


def test_identical_settings_train_together_and_stay_identical_to_the_end():
    """Two settings that predict the same on every image tie for the lead: each look trains both or neither, so
    they keep the same seeds and the last look still pairs them as identical (the reference's attn sweep froze
    einops at 12 seeds while bmm went on to 18, then compared them unpaired as 'equivalent')."""
    rng = np.random.default_rng(8)
    led = 0
    for _ in range(5):
        design = replay(_with_twin(rng))
        for lk in design.looks:
            assert ("bmm" in lk.open) == ("einops" in lk.open) and frozenset(("bmm", "einops")) in lk.twins
        assert design.have["bmm"] == design.have["einops"]
        final = design.final
        if final.leader in ("bmm", "einops"):
            led += 1
            other = "einops" if final.leader == "bmm" else "bmm"
            assert final.decided[other].outcome == "identical" and other in final.tied
        pair = next(c for c in final.comparisons if {c.a, c.b} == {"bmm", "einops"})
        assert pair.identical and pair.paired and len(design.looks) > 1
    assert led >= 3


def test_an_identical_verdict_once_seen_is_kept_while_its_leader_leads():
    """A setting seen identical to the leader stays decided identical at later looks even where a later look's
    pairing no longer shows it (twins given from before)."""
    c = {"a": np.ones((5, 10)), "b": np.ones((5, 10)), "c": np.zeros((5, 10))}
    before = {"b": Decision("a", "identical", 0, 0.0, 1e-8)}
    seen = look(c, {"a": range(5), "b": [0, 1, 2, 5, 6], "c": range(5)}, 1, earlier=before,
                twins=(frozenset(("a", "b")),))
    assert seen.decided["b"] is before["b"] and frozenset(("a", "b")) in seen.twins


def test_a_tie_for_the_lead_goes_by_name_whatever_order_the_settings_are_listed_in():
    """Equal means exactly (identical twins, or two settings with the same count of right answers): the leader is
    the first name in sorted order, the same decisions follow in any listing order, and the look says who tied."""
    rng = np.random.default_rng(9)
    forward = _with_twin(rng)
    backward = dict(reversed(list(forward.items())))
    a, b = replay(forward), replay(backward)
    assert [lk.leader for lk in a.looks] == [lk.leader for lk in b.looks]
    assert [lk.decided for lk in a.looks] == [lk.decided for lk in b.looks] and a.have == b.have
    tie = {"x": np.eye(4)[[0, 1, 2]], "w": np.eye(4)[[1, 2, 3]], "v": np.zeros((3, 4))}   # x and w: 3 of 12 right
    for order in (("x", "w", "v"), ("w", "v", "x")):
        seen = look({k: tie[k] for k in order}, {k: [0, 1, 2] for k in order}, 0)
        assert seen.leader == "w" and seen.tied == ("x",)


def test_what_would_decide_a_pair_is_the_design_rule_over_the_interval_of_its_difference():
    """seeds_to_decide, against a brute-force scan of the condition it solves: at the last look's level for one pair
    (the level the futility stop uses), over a fine grid of differences in the pair's 80 % interval, each needs
    the least s whose half-width z·√(seed/s + image) is below max(|d|, margin − |d|); the fewest and the most of
    those are the range said. A pair is stopped as futile exactly where the fewest is beyond the cap, and 'not
    decidable on this test set' exactly where no s decides any difference in the interval."""
    import dataclasses
    import math

    from ablations.analysis.sequential import seeds_to_decide, undecidable
    from ablations.analysis.stats import Comparison, Components

    level = nominal_levels(LOOKS)[-1]
    z = sps.norm.isf(level / 2)
    for diff, parts, seeds in [(0.003, Components(2e-6, 1e-6, 1e-7), 3), (-0.001, Components(4e-6, 2e-6, 4e-7), 8),
                               (0.0005, Components(1e-5, 5e-6, 3e-6), 12), (0.004, Components(1e-6, 1e-6, 0.0), 5)]:
        se = math.sqrt(parts.seed + parts.seed_image + parts.image)
        c = Comparison("a", "b", diff, diff - 2 * se, diff + 2 * se, se, 0.5, 0.5, df=2 * seeds - 2, margin=0.005,
                       parts=parts)
        need = seeds_to_decide(c, seeds, level)
        low, high = c.interval(0.8)
        per_seed = (parts.seed + parts.seed_image) * seeds
        s = np.arange(1, 20_001)
        half = z * np.sqrt(per_seed / s + parts.image)
        scanned = []
        for d in np.linspace(low, high, 2001):
            hits = np.flatnonzero(half < max(abs(d), 0.005 - abs(d)))
            scanned.append(float(s[hits[0]]) if hits.size else math.inf)
        assert need.fewest == min(scanned) and need.every == pytest.approx(max(scanned), rel=0.01), (diff, need)
        futile = undecidable(c, seeds, LOOKS[-1], level)
        assert bool(futile) == (need.fewest > LOOKS[-1])
        assert (futile == "test set") == need.test_set
    images = Comparison("a", "b", 0.002, 0, 0, 0.0032, 0.5, 0.5, df=30, margin=0.005, parts=Components(1e-7, 1e-7, 1e-5))
    assert seeds_to_decide(images, 12, level).test_set     # the images alone: ±0.65 points at any seeds
    assert seeds_to_decide(dataclasses.replace(images, identical=True), 12, level) is None


def test_a_five_point_winner_is_decided_by_the_second_look_with_fewer_runs_than_obrien_fleming():
    """The default spending (Hwang–Shih–DeCani, γ = −3) against O'Brien–Fleming's on the same simulated sweeps of 4
    settings: a 5-point winner decided against every other setting by the second look in nearly every sweep
    (O'Brien–Fleming's 3e-8 and 2e-5 wait for the third), and a 1-point winner found as often with fewer runs."""
    rng = np.random.default_rng(11)
    draws = [(sweep(rng, winner_by=0.05), sweep(rng, winner_by=0.01)) for _ in range(40)]
    early, runs = {}, {}
    for spending in ("hsd:-3", "obf"):
        early[spending] = runs[spending] = 0
        for five, one in draws:
            result = run_design(five, spending=spending)
            decided = {k: v.outcome for k, v in result.final.decided.items()}
            early[spending] += len(result.looks) <= 2 and all(decided.get(k) == "different" for k in (1, 2, 3))
            found = run_design(one, spending=spending)
            assert found.final.leader == 0 and all(v.outcome == "different" for v in found.final.decided.values())
            runs[spending] += found.runs
    assert early["hsd:-3"] >= 38 and early["obf"] == 0, early
    assert runs["hsd:-3"] < runs["obf"], runs


def test_a_design_file_without_a_spending_function_is_replayed_as_obrien_flemings():
    """Design files written before the spending was chosen name none: their looks were read under O'Brien–Fleming's
    levels and are replayed with them; a new design names its own; an unknown one is refused naming it."""
    from ablations.analysis.sequential import replay_design
    from ablations.choices import SPENDING
    from ablations.results.seed_design import new_design

    rng = np.random.default_rng(12)
    draw = sweep(rng, settings=3, winner_by=0.01)
    runs = {k: (list(range(24)), v[:24], None) for k, v in draw.items()}
    design = new_design(0.005, ALPHA, 10)
    assert design["spending"] == SPENDING
    old = {k: v for k, v in design.items() if k != "spending"}
    assert replay_design(runs, old).spending == "obf"
    assert [lk.level for lk in replay_design(runs, old).looks] == list(nominal_levels(LOOKS, spending="obf"))[
        :len(replay_design(runs, old).looks)]
    with pytest.raises(ValueError, match="the spending function must be 'obf' or 'hsd:γ'"):
        nominal_levels(LOOKS, spending="pocock")


def test_the_drivers_progress_line_counts_the_settings_still_open_against_the_leader_apart_from_it():
    """After a look that decides nothing, the leader trains on with the open settings: the line says how many are
    open against it (three of four settings, not 'four open') and that the leader trains too; stopped at the cap
    with pairs open, it names them."""
    from ablations.analysis.wording import design_progress
    from ablations.analysis.wording.verdicts import labels_named

    assert labels_named(["num_heads=1", "num_heads=2", "num_heads=8"]) == "num_heads=1, 2 and 8"
    assert labels_named(["7 × 1", "4 × 2"]) == "7 × 1 and 4 × 2"
    assert labels_named(["patch_size=7, depth=1", "patch_size=7, depth=2"]) == \
        "patch_size=7, depth=1 and patch_size=7, depth=2"
    assert labels_named(["patch_size=7, depth=1", "patch_size=7, depth=2", "patch_size=14, depth=1"]) == \
        "patch_size=7, depth=1; patch_size=7, depth=2 and patch_size=14, depth=1"   # a grid's labels hold commas

    rng = np.random.default_rng(3)
    drawn = sweep(rng, settings=4, seeds=5, n=400)
    first = replay({k: (list(range(3)), c[:3], None) for k, c in drawn.items()}, looks=(3, 5))
    leader = first.final.leader
    assert not first.done and not first.final.decided and leader in first.need and len(first.need) == 4
    assert design_progress(first, "s") == (f"s: look 1 (3 seeds) leaves 3 settings undecided against the leader "
                                           f"{leader} (decided: none); they and the leader train to 5 seeds")
    last = replay({k: (list(range(5)), c, None) for k, c in drawn.items()}, looks=(3, 5))
    still = [k for k in last.have if k != last.final.leader and k not in last.final.decided]
    assert last.done and still
    assert design_progress(last, "s").startswith(
        f"s: stopped at look 2 of 2 (5 seeds, the cap: {labels_named(still)} still open); leader "
        f"{last.final.leader}; decided against it: ")
    planted = sweep(np.random.default_rng(4), settings=4, seeds=5, n=400, winner_by=0.05)
    grid = {f"patch_size={k}, depth=1": c for k, c in planted.items()}   # a grid's labels: decided ones by ";"
    settled = replay({k: (list(range(5)), c, None) for k, c in grid.items()}, looks=(3, 5))
    assert len(settled.final.decided) == 3
    said = design_progress(settled, "g").split("decided against it: ", 1)[1]
    assert said.count("; ") == len(settled.final.decided) - 1 and said.count(", depth=1 (") == len(settled.final.decided)
