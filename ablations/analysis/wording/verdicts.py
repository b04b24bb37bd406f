"""A sweep's verdict in words: the outcome vocabulary, the verdict, design, chance, power and cost sentences,
why a sweep has no test or has not converged, and the SEEDS=auto driver's per-look line."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from ablations.analysis.answers import Answer, answer
from ablations.analysis.budget import Convergence, Shortfall, Unsettled
from ablations.analysis.findings import (
    POWER_DELTA,
    CostSource,
    DesignNote,
    Setting,
    SweepFindings,
)
from ablations.analysis.sequential import Decision, Design, nominal_levels, seeds_to_decide
from ablations.analysis.stats import (
    ALPHA,
    MOST_SEEDS,
    POWER,
    Comparison,
    Interval,
    Outcome,
)
from ablations.choices import LOOKS, SPENDING, say
from bench.contention import CONTENDED_PCT
from bench.rounds import MIN_ROUNDS, Spread, ratio_or_noise
from bench.units import count, percent, ratio


def pair_outcome(f: SweepFindings, c: Comparison) -> tuple[str, str]:
    """A pair's verdict word and, for a sequential design, the look it was taken at ("" otherwise): a pair
    with the last leader as the design decided it (a futile stop: inconclusive, with the look and why); any
    other pair as the last look's step-down decided it."""
    if f.design is None or f.design.final is None:
        return c.outcome(), ""
    last = f.design.final
    if c.identical:
        return Outcome.IDENTICAL, ""
    if last.leader in (c.a, c.b):
        other = c.b if c.a == last.leader else c.a
        d = last.decided.get(other)
        if d is None:
            return Outcome.INCONCLUSIVE, ""
        if d.outcome == Outcome.FUTILE:
            return Outcome.INCONCLUSIVE, f" (stopped at look {d.look + 1}: {futile_reason(d, f)})"
        if d.outcome == Outcome.IDENTICAL:
            return Outcome.IDENTICAL, ""
        crossed = f" (look {d.look + 1}: p {d.p:.2g} < {d.level:.2g})"
        if d.outcome == Outcome.EQUIVALENT:
            return Outcome.EQUIVALENT, crossed
        return (Outcome.BETTER if c.a == last.leader else Outcome.WORSE), crossed
    outcome = last.outcomes.get(frozenset((c.a, c.b)), (Outcome.INCONCLUSIVE,))[0]
    if outcome == Outcome.DIFFERENT:
        return (Outcome.BETTER if c.diff > 0 else Outcome.WORSE), ""
    return outcome, ""


def futile_reason(d: Decision, f: SweepFindings) -> str:
    """Why the design stopped a pair as futile, in words."""
    images = f"{f.test_size:,} " if f.test_size else ""
    if d.why == "test set":
        return (f"the test set's {images}images alone keep it within reach of {margin_text(f.margin)}; "
                f"no number of seeds decides it")
    cap = f.design.schedule[-1] if f.design is not None else "the cap"
    return f"it would need more than the {cap} seeds the design allows"


def design_sentence(f: SweepFindings) -> str:
    """Where a SEEDS=auto sweep stopped and why, with the seeds each setting got (the design itself: Method; each
    decision's look, p and level: the pair table)."""
    if f.design is None or f.design.final is None:
        return ""
    d, last = f.design, f.design.final
    counts = sorted(set(d.have.values()))
    seeds = f"{counts[0]} seeds each" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds a setting"
    open_ = [k for k in d.have if k != last.leader and k not in last.decided]
    why = ("the leader is within noise of chance" if last.at_chance else
           "every other setting decided against the leader" if not open_ and not any(
               x.outcome == Outcome.FUTILE for x in last.decided.values()) else
           "the rest stopped as futile" if not open_ else "the cap")
    futile = [f"{f.factor}={k} at look {x.look + 1} ({futile_reason(x, f)})"
              for k, x in last.decided.items() if x.outcome == Outcome.FUTILE]
    left = (f" Left out of the design: {', '.join(f'{f.factor}={k}' for k in f.left_out)} (a run diverged; see the "
            f"table)." if f.left_out else "")
    spending = "" if d.spending == SPENDING else f" ({d.spending} spending, as its design file says)"
    unread = (f" The table holds {f.unread} more finished run{'s' * (f.unread != 1)} of these settings, at seeds "
              f"the design did not reach; it does not read {'them' if f.unread != 1 else 'it'}, so neither does this "
              f"verdict." if f.unread else "")
    return (f"Adaptive seeds (SEEDS=auto): looks at {'/'.join(map(str, d.schedule))} seeds a setting{spending}; stopped at look "
            f"{last.index + 1} of {len(d.schedule)} ({seeds}): {why}."
            + (" Stopped undecided (futile): " + "; ".join(futile) + "." if futile else "") + left + unread
            + (f" Its equivalence margin is the design's, {margin_text(f.margin)}, which its looks decided with, not "
               f"the {margin_text(f.margin_asked)} this report was asked for (MARGIN applies to sweeps at fixed "
               f"seeds)." if f.margin_asked is not None else ""))


def setting_name(value, factor: str) -> str:
    """A setting as the answer names it: factor=value, or the value alone for several factors ('7 × 4')."""
    return str(value) if " × " in factor else f"{factor}={value}"


def setting_names(values: list, factor: str) -> str:
    """'a', 'a and b', 'a, b and c': the first as `setting_name` says it, the rest by their values."""
    return and_list([setting_name(values[0], factor), *map(str, values[1:])])


def parted(said: Sequence[str]) -> str:
    """How items of a list are parted: ", ", or "; " where items hold commas themselves (a grid's
    'patch_size=7, depth=1')."""
    return "; " if any(", " in x for x in said) else ", "


def and_list(said: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'; items that hold commas are parted by semicolons: 'a, b; c, d and e, f'."""
    return said[0] if len(said) == 1 else parted(said).join(said[:-1]) + " and " + said[-1]


def _points(x: float) -> str:
    return f"{100 * x:.2f}"


def bound(x: float, sign: bool = False) -> str:
    """An interval's end (a fraction) in points with 2 decimals; an end those round to 0 while it is not (a decided
    pair's end just clear of 0) gets the decimals of its first significant digit, so it does not read as touching 0."""
    value = 100 * x
    decimals = 2
    if value != 0 and math.isfinite(value) and abs(value) < 0.005:
        decimals = min(6, -math.floor(math.log10(abs(value))))
    return f"{value:+.{decimals}f}" if sign else f"{value:.{decimals}f}"


def margin_against_error(margin: float, error: float | None) -> str:
    """The equivalence margin in points and as a share of the best setting's error rate: on an easy task ±0.5
    points is a large part of what errs."""
    if not error or error <= 0:
        return margin_text(margin)
    return f"{margin_text(margin)} ({percent(margin / error)} of its {100 * error:.1f} % error)"


def answer_text(a: Answer) -> str:
    """The sweep's answer in short sentences a paper could quote: the best (or who tied), each setting worse than
    it and by how much, those equivalent or identical to it, what stays open."""
    if a.no_verdict:
        return {"one setting": "One setting: nothing to compare.", "one seed": "One seed a setting: no test.",
                "at chance": "No setting learned the task at this budget.", "none finished": "No run finished."}.get(
            a.no_verdict, f"No test: {a.no_verdict_why}." if a.no_verdict_why else "No test.")
    f, best = a.factor, a.best
    acc = f"{100 * (1 - (a.best_error or 0)):.2f} %"
    # with a tie, the settings are compared with the first of the tied (Method): named, where "it" would not say which
    it, than = (setting_name(best, f), f" than {setting_name(best, f)}") if a.tied else ("it", "")
    if a.tied:
        said = [f"{setting_names([best, *a.tied], f)} tie for the highest mean, {acc}."]
    else:
        said = [f"{setting_name(best, f)} {'is best' if a.winner else 'has the highest mean'}, {acc}."]
    said += [f"{setting_name(d.other, f)} is worse{than} by {_points(d.diff)} points [{bound(d.low)}, "
             f"{bound(d.high)}]." for d in a.worse]
    if a.identical:
        said.append(f"{setting_names(list(a.identical), f)} {'is' if len(a.identical) == 1 else 'are'} identical to {it} "
                    f"(the same predictions).")
    if a.equivalent:
        said.append(f"{setting_names(list(a.equivalent), f)} {'is' if len(a.equivalent) == 1 else 'are'} equivalent to {it} "
                    f"within {margin_against_error(a.margin, a.best_error)}.")
    if a.open:
        said.append(f"{setting_names([d.other for d in a.open], f)} {'is' if len(a.open) == 1 else 'are'} undecided "
                    f"against {it}.")
    said += [f"{setting_names(group, f)} are identical to each other." for group in _identical_groups(a.twins)]
    return " ".join(said)


def _identical_groups(pairs: Sequence[tuple]) -> list[list]:
    """Pairs with the same predictions joined into groups (the same predictions are the same everywhere:
    a = b and b = c make a = c), each in the order its members first appear."""
    groups: list[list] = []
    for x, y in pairs:
        joined = [g for g in groups if x in g or y in g]
        merged = list(dict.fromkeys([v for g in joined for v in g] + [x, y]))
        groups = [g for g in groups if g not in joined] + [merged]
    return groups


def runs_named(factor: str, runs: Sequence[tuple]) -> str:
    """Runs as (setting, seed) pairs, in their order: the settings with the same seeds named together, 'depth=1 and 2
    at seeds 0, 1; depth=4 at seed 0'."""
    seeds = {v: tuple(sorted({int(s) for w, s in runs if w == v})) for v, _ in runs}
    groups = {ss: [v for v in seeds if seeds[v] == ss] for ss in seeds.values()}
    return "; ".join(f"{setting_names(values, factor)} at seed{'s' * (len(ss) > 1)} {seed_ranges(list(ss))}"
                     for ss, values in groups.items())


def labels_named(labels: Sequence[Hashable]) -> str:
    """Point labels as a list: 'num_heads=1, 2 and 8' where all are one factor's, else 'a, b and c'."""
    said = [str(k) for k in labels]
    factors = {k.split("=", 1)[0] for k in said}
    if len(factors) == 1 and all(k.count("=") == 1 and " " not in k.split("=", 1)[0] for k in said):
        return setting_names([k.split("=", 1)[1] for k in said], factors.pop())
    return and_list(said)


def pct(x: float) -> str:
    return f"{100 * x:.2f}"


def seed_ranges(seeds: list[int]) -> str:
    """'0, 1, 2' for three seeds, '0–11' for a run of four or more in a row: 0–47, 50."""
    parts, start = [], 0
    for i in range(1, len(seeds) + 1):
        if i == len(seeds) or seeds[i] != seeds[i - 1] + 1:
            run = seeds[start:i]
            parts.append(f"{run[0]}–{run[-1]}" if len(run) >= 4 else ", ".join(map(str, run)))
            start = i
    return ", ".join(parts)


def interval_text(i: Interval) -> str:
    return f"{pct(i.mean)} [{bound(i.low)}, {bound(i.high)}]" if not math.isnan(i.low) else pct(i.mean)


def no_test(f: SweepFindings) -> str:
    """Why a sweep has no verdict."""
    why = f.no_test
    if why is None:
        return ""
    if why.kind == "one setting":
        if why.lost:
            return (f"{setting_names(list(why.lost), f.factor)} finished no run (failed runs, below), so one setting "
                    f"is left: nothing to compare")
        return "one setting only: nothing to compare"
    if why.kind == "one seed":
        return (f"one seed per setting{' (for some)' if why.some else ''}. Its intervals cover the test images only: "
                f"they leave out how much accuracy moves between training seeds, which a second seed would measure "
                f"and a test would then take into account (SEEDS=0,1,2)")
    if why.kind == "at chance":
        return (f"even the best setting, {f.factor}={why.best} ({pct(why.best_acc)} %), is within noise of chance "
                f"({100 * (f.chance or 0):.1f} % for guessing): no setting is shown to learn the task at this budget, so no "
                f"comparison says anything about the factor; train longer (EPOCHS), or check that the labels can be "
                f"learned from the images")
    return why.reason


def cost_source(c: CostSource) -> str:
    """Where a sweep's speed figures come from."""
    if c.rounds is None:
        return f"no cost phase (none kept here; {say('make cost OUT=…', 'vitbench cost --out …')} measures one)"
    if c.cpu_time:
        return (f"cost phase{f' on {c.device}' if c.device else ''}, {c.rounds} interleaved rounds, CPU-time figures "
                f"measured under load ({c.loaded} of {c.steps} timed steps ran while other processes took ≥ "
                f"{CONTENDED_PCT:.0f} % of the machine: each step's CPU time, which that does not lengthen)")
    return (f"cost phase{f' on {c.device}' if c.device else ''}, {c.rounds} interleaved rounds"
            + (f" ({c.loaded} of {c.steps} timed steps ran while other processes took ≥ {CONTENDED_PCT:.0f} % of the "
               f"machine and are left out)" if c.loaded else ""))


def design_note(note: DesignNote) -> str:
    """Why a sweep's SEEDS=auto design was not used, and how its runs are analysed instead."""
    if note.kind == "other experiment":
        return (f"The SEEDS=auto design beside this table ({note.file}) is another experiment's (its runs are not "
                f"these), so these runs are analysed at the seeds they have, as if fixed in advance.")
    return (f"Trained with SEEDS=auto, but look {note.look} of its design needs {count(note.missing, 'run')} the table lacks "
            f"(rerun the sweep with SEEDS=auto to finish it); analysed below at the seeds there as if they were fixed "
            f"in advance, which they were not.")


def verdict_sentence(f: SweepFindings) -> str:
    """A sweep's verdict: its answer in bold (`answer_text`, the findings table's words), then what else bounds it:
    at fixed seeds the smallest difference it could detect and the seeds a 0.5-point difference would take, under
    SEEDS=auto where its design stopped; settings at chance; settings left out of the design."""
    if f.verdict is None:
        design = design_sentence(f)
        return f"**No verdict**: {no_test(f)}. Intervals only; no setting is named best." + (f" {design}" if design else "")
    said = f"**{answer_text(answer(f, '', ''))}**"
    if f.left_out:
        said = "Of the settings in the design: " + said + _left_out(f)
    v = f.verdict
    nothing = not (v.beats or v.equivalent or v.identical)   # then what more seeds would do is the news: said first
    order = (power_sentence, auto_sentence, _detectable) if nothing else (_detectable, power_sentence, auto_sentence)
    seeds = design_sentence(f) if f.design is not None else " ".join(t for t in (sentence(f) for sentence in order) if t)
    return " ".join(t for t in (said, chance_sentence(f), seeds) if t)


def _detectable(f: SweepFindings) -> str:
    """At fixed seeds with a pair left open: the smallest difference the sweep could have detected."""
    v, m = f.verdict, len(f.comparisons or [])
    if v is None or not v.inconclusive:
        return ""
    budget = f"{_seeds_text(f)} × {f.test_size:,} test images" if f.test_size else _seeds_text(f)
    # the median pair's noise: a pair with less (a difference that every seed repeats) may detect less
    if v.detectable >= 1:
        return (f"With {_seeds_text(f)} a pair with this sweep's median noise could detect no difference, however "
                f"large: the spread of so few seeds is known too poorly ({budget}).")
    return (f"A pair with this sweep's median noise detects only differences above about "
            f"{100 * v.detectable:.1f} points ({percent(POWER)} power, α = {ALPHA} with Holm over {count(m, 'pair')}; {budget}); "
            f"a pair whose difference every seed repeats detects less.")


def _left_out(f: SweepFindings) -> str:
    """The settings a SEEDS=auto design left out (a run diverged), each with its finished runs' mean, a mean above the
    leader's named with no claim made about it either way."""
    best = next((s for s in f.settings if s.value == f.verdict.best), None)
    notes = []
    for k in f.left_out:
        s = next((x for x in f.settings if x.value == k), None)
        above = best is not None and s is not None and s.acc.mean > best.acc.mean
        runs = (f"; the mean of its {count(len(s.seeds), 'finished run')}: {pct(s.acc.mean)} %"
                + (f", above {f.factor}={f.verdict.best}'s {pct(best.acc.mean)} %: no claim is made about it"
                   if above else "") if s is not None and s.seeds else "")
        notes.append(f"{f.factor}={k} (a run diverged{runs})")
    return f" Left out of the design and of this verdict: {'; '.join(notes)}."


def auto_sentence(f: SweepFindings) -> str:
    """For a sweep at fixed seeds that leaves pairs with its leader open: the most runs SEEDS=auto would add.
    SEEDS=auto trains seeds 0 up to its cap, so of the runs here it reuses those at seeds below the cap."""
    v = f.verdict
    if f.adaptive or f.design is not None or v is None or not v.inconclusive:
        return ""
    cap = LOOKS[-1]
    open_ = [s for s in f.settings if s.value in (v.best, *v.inconclusive)]
    most = sum(cap - len({seed for seed in s.seeds if 0 <= seed < cap}) for s in open_)
    if not most:
        return ""
    reused = sorted({seed for s in open_ for seed in s.seeds if 0 <= seed < cap})
    reuse = (f"it trains seeds {seed_ranges(list(range(cap)))} and reuses the runs here at seeds {seed_ranges(reused)}"
             if reused else f"it trains seeds {seed_ranges(list(range(cap)))}; no run here is at one of them")
    still = count(len(open_) - 1, 'setting')
    return (f"SEEDS=auto would train at most {count(most, 'more run')} here: {f.factor}={v.best} and the {still} "
            f"still open against it, up to {cap} seeds each, fewer where a look decides ({reuse}).")


def chance_sentence(f: SweepFindings) -> str:
    """Which settings stay at chance while others learn: a finding about them, compared like the rest."""
    low = [s for s in f.settings if s.at_chance]
    if not low or f.verdict is None:
        return ""
    names = ", ".join(f"{f.factor}={s.value} ({pct(s.acc.mean)} %)" for s in low)
    one = len(low) == 1
    return (f"{names} {'is' if one else 'are'} within noise of chance ({100 * (f.chance or 0):.1f} % for guessing, "
            f"‡): not shown to learn this task at this budget, and compared above like any other setting; "
            f"{'it' if one else 'they'} may learn with more epochs (EPOCHS).")


def power_sentence(f: SweepFindings) -> str:
    """How many seeds a difference of POWER_DELTA would need, from this sweep's own variances."""
    m = len(f.comparisons or [])
    if f.seed_sd is None:
        return ""
    floor = (f" (the test images alone limit any number of seeds to about {100 * f.floor:.2f} points)"
             if f.floor and f.floor >= 0.0001 else " (the test images' share is negligible here)")
    low, high = f.seeds_range or (None, None)
    # no count of seeds: the test set's share alone is too large (the floor), else more than stats.MOST_SEEDS
    limited = (f.floor or 0) >= POWER_DELTA
    spread = ""
    if f.seeds_range is not None and f.seed_sd_range is not None and low != high:
        top = f"{high}" if high is not None else "more than the test set allows" if limited else f"over {MOST_SEEDS:,}"
        spread = (f", between {low} and {top} over the 95 % interval of the seed-to-seed s.d. "
                  f"({100 * f.seed_sd_range[0]:.2f}–{100 * f.seed_sd_range[1]:.2f} points)")
    if f.seeds_for_delta is not None:
        need = f"about {f.seeds_for_delta} seeds per setting{spread}{floor}"
    elif limited:
        need = f"more test images: with this test set no number of seeds detects less than about {100 * f.floor:.2f} points"
    else:
        need = f"over {MOST_SEEDS:,} seeds per setting{floor}"
    return (f"Detecting a {100 * POWER_DELTA:.1f}-point difference at {percent(POWER)} power (α = {ALPHA}, Holm over "
            f"{count(m, 'pair')}) would take {need}; seed-to-seed s.d. {100 * f.seed_sd:.2f} points, measured here.")


def margin_text(margin: float) -> str:
    return f"±{round(100 * margin, 2):g} points"


def _seeds_text(f: SweepFindings) -> str:
    counts = sorted({len(s.seeds) for s in f.settings})
    return f"{'–'.join(map(str, counts))} seed{'s' if counts[-1] > 1 else ''} per setting"


def _one_measurement(a: Setting, b: Setting) -> bool:
    """Whether two settings' cost-phase figures are the same rows: every figure the same spread (blank in both
    alike)."""
    def same(x: dict[str, Spread], y: dict[str, Spread]) -> bool:
        return x.keys() == y.keys() and all(x[k] == y[k] or (x[k].n == 0 and y[k].n == 0) for k in x)
    return same(a.infer, b.infer) and same(a.train, b.train)


def cost_sentence(f: SweepFindings) -> str:
    first, last = f.settings[0], f.settings[-1]
    label = lambda s: f"{f.factor}={s.value}"  # noqa: E731

    def figure(mode: str, col: str, least: int = MIN_ROUNDS) -> str:
        a, b = getattr(last, mode).get(col), getattr(first, mode).get(col)
        said = ratio_or_noise(a, b, least=least) if a is not None and b is not None else "not measured"
        # CPU-time ratios under load: near a quiet machine's, not equal (Method, 'Cost'), so said as approximate
        return f"≈{said} (CPU time under load)" if f.cost.cpu_time and col != "peak_mem_mb" and said.startswith("×") \
            else said

    hungry = first.starved + last.starved
    devices = sorted(set(first.devices) | set(last.devices))
    wall = ("not compared (one side was trained in another sweep, at another time)"
            if first.reused_from or last.reused_from else
            f"not compared (their runs trained on {len(devices)} devices: {', '.join(devices)})" if len(devices) > 1 else
            f"not compared ({hungry} of these runs got too little CPU while they trained: other work held the "
            f"machine)" if hungry else ratio_or_noise(last.train_s, first.train_s))
    if first.infer and first.train and _one_measurement(first, last):
        # the factor changes neither the model nor its training step (a training field): one cost item serves both
        both = ("every setting" if all(_one_measurement(first, s) for s in f.settings)
                else f"{label(first)} and {label(last)}")
        return (f"{f.factor} changes neither the model nor its training step: GMACs, speed and memory are one "
                f"measurement for {both}; wall time of a training run from {label(first)} to {label(last)} {wall}.")
    return (f"From {label(first)} to {label(last)}: GMACs {ratio(last.gmacs / first.gmacs)}; inference img/s "
            f"{figure('infer', 'throughput_img_s')}; training-step img/s {figure('train', 'throughput_img_s')}; "
            f"training-step peak memory {figure('train', 'peak_mem_mb', least=1)}; wall time of a training run {wall}.")


OUTCOME_WORDS = {Outcome.BETTER: "a better", Outcome.WORSE: "b better", Outcome.EQUIVALENT: "equivalent",
                 Outcome.INCONCLUSIVE: "inconclusive", Outcome.IDENTICAL: "identical"}   # a pair's, in its table
OUTCOME_MARKERS = {Outcome.WORSE: {"marker": "v", "ms": 8, "color": "C3"},   # a setting's against the best, in
                   Outcome.EQUIVALENT: {"marker": "s", "ms": 7, "color": "C2"},   # the accuracy panel; its legend
                   Outcome.IDENTICAL: {"marker": "D", "ms": 6, "color": "C2"},    # says the outcome's value
                   Outcome.INCONCLUSIVE: {"marker": "o", "ms": 6, "color": "C0"}}


SEEDS_SHOWN = 200   # an undecided pair that needs more seeds than this is said to need "over 200"


def decide_level(f: SweepFindings) -> tuple[float, int]:
    """The level the design's rule for what would decide a pair uses, and the cap: the last look's two-sided
    level for one pair (its most lenient, as its futility stop uses) of the sweep's design, or of SEEDS=auto's
    default looks for a sweep at fixed seeds."""
    if f.design is not None:
        return f.design.levels()[-1], f.design.schedule[-1]
    return nominal_levels(LOOKS, ALPHA)[-1], LOOKS[-1]


def undecided_reason(f: SweepFindings, c: Comparison) -> str:
    """What would decide an inconclusive pair by the design's own rule (`sequential.seeds_to_decide` at
    `decide_level`, over the 80 % interval of its difference): ' (N–M seeds a setting would decide it)', ' (over
    SEEDS_SHOWN seeds …)' or ' (no number of seeds decides it on this test set)'. The pair is open at the seeds it
    has, so a count is more than those: the rule's range starts above them, and where all of it lies at or below
    them (the pair's own test, Holm-adjusted or at an earlier look, is stricter than the rule's level) it says only
    that more seeds would decide it."""
    seeds = {s.value: len(s.seeds) for s in f.settings}
    now = min(seeds.get(c.a, 0), seeds.get(c.b, 0))
    level, _ = decide_level(f)
    need = seeds_to_decide(c, now, level)
    if need is None:
        return ""
    if need.test_set:
        return " (no number of seeds decides it on this test set)"
    if need.every <= now:
        return " (more seeds a setting would decide it)"
    fewest = max(need.fewest, now + 1.0)
    if fewest > SEEDS_SHOWN:
        return f" (over {SEEDS_SHOWN} seeds a setting would decide it)"
    if math.isinf(need.every):
        return (f" ({fewest:.0f} seeds a setting at the least; some differences its data allow no number of "
                f"seeds decides on this test set)")
    if need.every > SEEDS_SHOWN:
        return f" ({fewest:.0f} to over {SEEDS_SHOWN} seeds a setting would decide it)"
    span = f"{fewest:.0f}" if need.every == fewest else f"{fewest:.0f}–{need.every:.0f}"
    return f" ({span} seeds a setting would decide it)"


def design_progress(design: Design, name: str, left_out: Sequence[Hashable] = (), cap: bool = False) -> str:
    """One line for the SEEDS=auto driver: where a sweep's design stands after its latest look (`cap`: under
    AUTO_TRAIN=cap, where the settings it asks for train to the cap at once)."""
    if left_out:
        name = f"{name} (left out, diverged: {labels_named(left_out)})"
    if not design.looks:
        if cap:
            return (f"{name}: every setting trains to the cap ({design.schedule[-1]} seeds) at once; then the looks "
                    f"at {'/'.join(map(str, design.schedule))} seeds are read in order")
        return f"{name}: look 1 of {len(design.schedule)} needs {design.schedule[0]} seeds of every setting"
    last = design.final
    assert last is not None
    decided = parted([str(k) for k in last.decided]).join(
        f"{k} ({d.outcome} at look {d.look + 1})" for k, d in last.decided.items()) or "none"
    if last.at_chance:
        return (f"{name}: stopped at look {last.index + 1}: even the leader, {last.leader}, is within noise of "
                f"chance (no setting is shown to learn the task at this budget; train longer: EPOCHS)")
    open_ = [k for k in design.have if k != last.leader and k not in last.decided]
    if design.done:
        cap = f", the cap: {labels_named(open_)} still open" if open_ else ""
        return (f"{name}: stopped at look {last.index + 1} of {len(design.schedule)} ({last.seeds} seeds{cap}); "
                f"leader {last.leader}; decided against it: {decided}")
    training = [k for k in design.need if k != last.leader]
    with_leader = " and the leader" if last.leader in design.need else ""
    return (f"{name}: look {last.index + 1} ({last.seeds} seeds) leaves {count(len(training), 'setting')} undecided "
            f"against the leader {last.leader} (decided: {decided}); they{with_leader} train to "
            + (f"the cap ({design.schedule[-1]} seeds) at once" if cap else f"{design.schedule[last.index + 1]} seeds"))


def shortfall(below: Shortfall) -> str:
    """A setting below the same model trained longer, as a reason fragment."""
    return (f"{below.factor}={below.value} reaches {100 * below.acc:.1f} % after {below.epochs:g} "
            f"epoch{'s' * (below.epochs != 1)} ({below.runs} runs) where the same model reaches "
            f"{100 * below.longer_acc:.1f} % after {below.longer_epochs:g} epochs ({below.longer_runs} runs), more "
            f"than the {margin_text(below.margin)} margin below it")


def _unsettled(us: list[Unsettled], factor: str, epochs: int) -> list[str]:
    """The settings not converged, one clause a reason, each naming every setting it holds for in order; reasons
    that hold for the same settings share one clause."""
    said: list[tuple[list, str]] = []   # (the settings, what holds for them)
    rising = [u for u in us if u.gain is not None]
    if rising:
        its, s = ("its", "") if len(rising) == 1 else ("their", "s")
        said.append(([u.value for u in rising], f"{its} test accuracy rose "
                     f"{and_list([f'{100 * u.gain:.1f}' for u in rising])} points over the last of {epochs} epochs "
                     f"(mean{s} over runs)"))
    far = [u for u in us if u.loss is not None and u.classes]
    for classes, floor in dict.fromkeys((u.classes, u.floor) for u in far):
        group = [u for u in far if (u.classes, u.floor) == (classes, floor)]
        loss, s = ("its training loss", "") if len(group) == 1 else ("their training losses", "s")
        against = f", against the {floor:.2f} label smoothing allows" if floor else ""
        said.append(([u.value for u in group], f"{loss} ended at {and_list([f'{u.loss:.2f}' for u in group])} "
                     f"(mean{s} over runs){against}, far from fitting the training set (guessing among {classes} "
                     f"classes: {math.log(classes):.2f})"))
    merged: list[tuple[list, str]] = []
    for values, clause in said:
        if merged and merged[-1][0] == values:
            merged[-1] = (values, f"{merged[-1][1]}, and {clause}")
        else:
            merged.append((values, clause))
    return [f"{setting_names(values, factor)}: {clause}" for values, clause in merged]


def not_converged(c: Convergence, factor: str, settings: int = 2) -> str:
    """The warning that some settings' runs had not converged, each named with every reason that holds; '' where
    all had; where no per-epoch history was there to judge by, one line that says so. `settings`: how many the
    sweep has (with one there is no order to change)."""
    if c.converged:
        return "" if c.checked else "Convergence not checked: these runs have no per-epoch history."
    why = _unsettled(list(c.settings), factor, c.epochs) + [shortfall(b) for b in c.below]
    if settings == 1:
        return (f"**Not converged**: {'; '.join(why)}. Its accuracy is a short budget's, not the setting's converged "
                f"one, and can change with more epochs (EPOCHS).")
    return (f"**Not converged**: {'; '.join(why)}. Their accuracies are a short budget's, not the settings' "
            f"converged ones, and the order can change with more epochs (EPOCHS).")


def unconverged_headline(verdict: str) -> str:
    """A verdict whose bold answer says that its runs had not converged: the answer is this budget's."""
    if verdict.startswith("**No verdict**"):   # its own reason stands (one seed, chance); the budget's line follows
        return verdict
    return verdict.replace("**", "**Not converged; at this budget: ", 1)


