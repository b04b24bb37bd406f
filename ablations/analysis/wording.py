"""The words and tables of the report, written from the numbers the analysis computed: a sweep's findings
(`ablations.analysis.findings`: the verdict, design, chance, power and cost sentences, the settings' and pairs'
tables, the outcome vocabulary), its tuning and grid interaction (`designs`), its sittings and shared runs
(`sittings`), the budget headline (`budget`), the reference comparison and the Pareto fronts; `report.py` lays
them out."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ablations.analysis.budget import FAR_BELOW, FAR_FROM_FIT, STILL_LEARNING, Convergence, Shortfall
from ablations.analysis.designs import Interaction, Tuning, close_pick, label_text, setting_label
from ablations.analysis.findings import (
    MIN_SHARE_SEEDS,
    POWER_DELTA,
    REAL_DISPERSION,
    CostSource,
    SweepFindings,
    pair_interval,
)
from ablations.analysis.sequential import Decision, Design, nominal_levels
from ablations.analysis.sittings import SittingCheck
from ablations.analysis.stats import (
    ALPHA,
    CHANCE_SDS,
    MARGIN,
    MIN_WIN_SEEDS,
    POWER,
    Comparison,
    Interval,
    Outcome,
    seeds_to_decide,
)
from ablations.choices import LOOKS, say, with_makefile
from bench.contention import CONTENDED_PCT
from bench.rounds import MIN_ROUNDS, Spread, ratio_or_noise


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
        if d.outcome == Outcome.EQUIVALENT:
            return Outcome.EQUIVALENT, f" (look {d.look + 1})"
        return (Outcome.BETTER if c.a == last.leader else Outcome.WORSE), f" (look {d.look + 1})"
    outcome = last.outcomes.get(frozenset((c.a, c.b)), (Outcome.INCONCLUSIVE,))[0]
    if outcome == Outcome.DIFFERENT:
        return (Outcome.BETTER if c.diff > 0 else Outcome.WORSE), ""
    return outcome, ""


def futile_reason(d: Decision, f: SweepFindings) -> str:
    """Why the design stopped a pair as futile, in words."""
    images = f"{f.test_size:,} " if f.test_size else ""
    if d.why == "test set":
        return (f"the test set's {images}images alone keep it within reach of {_margin_text(f.margin)}; "
                f"no number of seeds decides it")
    cap = f.design.schedule[-1] if f.design is not None else "the cap"
    return f"it would need more than the {cap} seeds the design allows"


def design_sentence(f: SweepFindings) -> str:
    """How a SEEDS=auto sweep ran: its looks and their levels, where it stopped, the seeds each setting got,
    and what each decision crossed."""
    if f.design is None or f.design.final is None:
        return ""
    d, last = f.design, f.design.final
    levels = nominal_levels(d.schedule, ALPHA)
    seeds = ", ".join(f"{f.factor}={k} {n}" for k, n in d.have.items())
    same = {frozenset((c.a, c.b)) for c in last.comparisons if c.identical}
    crossed = [f"{f.factor}={k} identical to {f.factor}={x.leader} at look {x.look + 1} (the same predictions)"
               if frozenset((k, x.leader)) in same else
               f"{f.factor}={k} {'worse than' if x.outcome == Outcome.DIFFERENT else 'equivalent to'} {f.factor}={x.leader} "
               f"at look {x.look + 1} (p{' (TOST)' if x.outcome == Outcome.EQUIVALENT else ''} = {x.p:.3g} < "
               f"{x.level:.3g})" for k, x in last.decided.items() if x.outcome != Outcome.FUTILE]
    futile = [f"{f.factor}={k} at look {x.look + 1} ({futile_reason(x, f)})"
              for k, x in last.decided.items() if x.outcome == Outcome.FUTILE]
    left = (f" Left out of the design: {', '.join(f'{f.factor}={k}' for k in f.left_out)} (a run diverged; see the "
            f"table)." if f.left_out else "")
    stop = ("every other setting was decided against the leader" if last.done and last.index < len(d.schedule) - 1
            else "its last look")
    return (f"Adaptive seeds (SEEDS=auto): looks at {'/'.join(map(str, d.schedule))} seeds per setting (the last is the "
            f"cap), each at its nominal level ({' / '.join(f'{x:.2g}' for x in levels)} for one pair: O'Brien–Fleming "
            f"spending of α = {ALPHA} over the looks; with r pairs still standing the smallest p is tested at the "
            f"level of α / r spent the same way, so the chance of any false decision at any look is at most α); a "
            f"setting decided against the leader, or that no number of seeds up to the cap could decide, trains no "
            f"more seeds. Stopped at look {last.index + 1} ({stop}); seeds: {seeds}. "
            + ("Decided: " + "; ".join(crossed) + "." if crossed else "Nothing was decided.")
            + (" Stopped undecided (futile): " + "; ".join(futile) + "." if futile else "") + left)


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
    return f"{pct(i.mean)} [{pct(i.low)}, {pct(i.high)}]" if not math.isnan(i.low) else pct(i.mean)


def no_test(f: SweepFindings) -> str:
    """Why a sweep has no verdict."""
    why = f.no_test
    if why is None:
        return ""
    if why.kind == "one setting":
        return "one setting only: nothing to compare"
    if why.kind == "one seed":
        return (f"one seed per setting{' (for some)' if why.some else ''}. Its intervals cover the test images only: "
                f"they leave out how much accuracy moves between training seeds, which a second seed would measure "
                f"and a test would then take into account (SEEDS=0,1,2)")
    if why.kind == "at chance":
        return (f"even the best setting, {f.factor}={why.best} ({pct(why.best_acc)} %), is within noise of chance "
                f"({100 * (f.chance or 0):.1f} % for guessing): no setting has learned the task at this budget, so no "
                f"comparison says anything about the factor; train longer (EPOCHS), or check that the labels can be "
                f"learned from the images")
    return why.reason


def cost_source(c: CostSource) -> str:
    """Where a sweep's speed figures come from."""
    if c.rounds is None:
        return f"no cost phase (none kept here; {say('make cost OUT=…', 'vitbench cost --out …')} measures one)"
    return (f"cost phase{f' on {c.device}' if c.device else ''}, {c.rounds} interleaved rounds"
            + (f" ({c.loaded} of {c.steps} timed steps ran while other processes took ≥ {CONTENDED_PCT:.0f} % of the "
               f"machine and are left out)" if c.loaded else ""))


def verdict_sentence(f: SweepFindings) -> str:
    if f.verdict is None:
        return f"**No verdict**: {no_test(f)}. Intervals only; no setting is named best."
    seeds = design_sentence(f) if f.design is not None else " ".join(t for t in (power_sentence(f), auto_sentence(f)) if t)
    return " ".join(t for t in (_restricted(_verdict_text(f), f), chance_sentence(f), seeds) if t)


def _restricted(text: str, f: SweepFindings) -> str:
    """The verdict of a SEEDS=auto sweep that left settings out of its design (a run diverged) is a verdict
    over the others: its headline says so, and a left-out setting whose finished runs average above the
    leader is named, with no claim made about it either way."""
    if not f.left_out or f.verdict is None:
        return text
    text = text.replace("**Best: ", "**Best of the settings in the design: ", 1).replace(
        "better than every other setting", "better than every other setting in the design", 1)
    if not text.startswith("**Best of"):
        text = "Of the settings in the design: " + text
    best = next((s for s in f.settings if s.value == f.verdict.best), None)
    notes = []
    for k in f.left_out:
        s = next((x for x in f.settings if x.value == k), None)
        above = best is not None and s is not None and s.acc.mean > best.acc.mean
        runs = (f"; its {len(s.seeds)} finished run(s) average {pct(s.acc.mean)} %"
                + (f", above {f.factor}={f.verdict.best}'s {pct(best.acc.mean)} %: no claim is made about it"
                   if above else "") if s is not None and s.seeds else "")
        notes.append(f"{f.factor}={k} (a run diverged{runs})")
    return text + f" Left out of the design and of this verdict: {'; '.join(notes)}."


def auto_sentence(f: SweepFindings) -> str:
    """For a sweep at fixed seeds that leaves pairs with its leader open: the most runs SEEDS=auto would add
    (the runs there are its first look's, where their seeds are 0, 1, 2)."""
    v = f.verdict
    if f.adaptive or f.design is not None or v is None or not v.inconclusive:
        return ""
    open_ = [s for s in f.settings if s.value in (v.best, *v.inconclusive)]
    most = sum(max(LOOKS[-1] - len(s.seeds), 0) for s in open_)
    if not most:
        return ""
    return (f"SEEDS=auto would train at most {most} more run(s) here: {f.factor}={v.best} and the {len(open_) - 1} "
            f"setting(s) still open against it, up to {LOOKS[-1]} seeds each, fewer where a look decides "
            f"(its runs at seeds 0, 1, 2 are reused).")


def chance_sentence(f: SweepFindings) -> str:
    """Which settings stay at chance while others learn: a finding about them, compared like the rest."""
    low = [s for s in f.settings if s.at_chance]
    if not low or f.verdict is None:
        return ""
    names = ", ".join(f"{f.factor}={s.value} ({pct(s.acc.mean)} %)" for s in low)
    one = len(low) == 1
    return (f"{names} {'does' if one else 'do'} not learn this task at this budget: within noise of chance "
            f"({100 * (f.chance or 0):.1f} % for guessing, ‡), compared above like any other setting; "
            f"{'it' if one else 'they'} may learn with more epochs (EPOCHS).")


def power_sentence(f: SweepFindings) -> str:
    """How many seeds a difference of POWER_DELTA would need, from this sweep's own variances."""
    m = len(f.comparisons or [])
    if f.seed_sd is None:
        return ""
    floor = (f" (the test images alone limit any number of seeds to about {100 * f.floor:.2f} points)"
             if f.floor and f.floor >= 0.0001 else " (the test images' share is negligible here)")
    low, high = f.seeds_range or (None, None)
    spread = ""
    if f.seeds_range is not None and f.seed_sd_range is not None and low != high:
        top = f"{high}" if high is not None else "more than the test set allows"
        spread = (f", between {low} and {top} over the 95 % interval of the seed-to-seed s.d. "
                  f"({100 * f.seed_sd_range[0]:.2f}–{100 * f.seed_sd_range[1]:.2f} points)")
    need = (f"about {f.seeds_for_delta} seeds per setting{spread}{floor}" if f.seeds_for_delta is not None else
            f"more test images: with this test set no number of seeds detects less than about "
            f"{100 * (f.floor or 0):.2f} points")
    return (f"Detecting a {100 * POWER_DELTA:.1f}-point difference at {POWER:.0%} power (α = {ALPHA}, Holm over "
            f"{m} pair(s)) would take {need}; seed-to-seed s.d. {100 * f.seed_sd:.2f} points, measured here.")


def _margin_text(margin: float) -> str:
    return f"±{100 * margin:g} points"


def _verdict_text(f: SweepFindings) -> str:
    factor = f.factor
    assert f.verdict is not None
    v, m = f.verdict, len(f.comparisons or [])
    best = next(s for s in f.settings if s.value == v.best)
    by_pair = {frozenset((c.a, c.b)): c for c in f.comparisons or []}
    pair = lambda other: by_pair[frozenset((v.best, other))]  # noqa: E731
    signed = lambda other: (pair(other).diff if pair(other).a == v.best else -pair(other).diff)  # noqa: E731
    budget = (f"{_seeds_text(f)} × {f.test_size:,} test images" if f.test_size else _seeds_text(f))
    within = _margin_text(v.margin)
    decided = f.design.final.decided if f.design is not None and f.design.final is not None else {}
    p_of = lambda other: decided[other].p if other in decided else pair(other).p_holm  # noqa: E731
    how = (" by the sequential design (each at the level the step-down gave it at the look it was decided at)" if decided
           else " after Holm's adjustment")
    if v.winner:
        largest = max(v.beats, key=p_of)
        crossed = (f"largest p = {p_of(largest):.3g}, under its level {decided[largest].level:.3g}"
                   if largest in decided else f"largest adjusted p = {p_of(largest):.3g}")
        return (f"**Best: {factor}={v.best}** at {interval_text(best.acc)} % test accuracy: better than every "
                f"other setting{how} over {m} pair(s) ({crossed}; {budget}).")
    parts = []
    if v.beats:
        parts.append("better than " + ", ".join(f"{factor}={o} (by {100 * signed(o):.2f} points, p = "
                                                 f"{p_of(o):.3g})" for o in v.beats))
    if v.identical:
        parts.append("identical to " + ", ".join(f"{factor}={o}" for o in v.identical)
                     + " (the same predicted class on every test image, seed by seed)")
    if v.equivalent:
        parts.append(f"equivalent within {within} to " + ", ".join(
            f"{factor}={o} (TOST p = {p_of(o) if o in decided else pair(o).p_equiv_holm:.3g})" for o in v.equivalent))
    if v.inconclusive:
        sequential = f.design is not None   # the step-down tests raw p at its levels; otherwise Holm-adjusted p
        parts.append("inconclusive against " + ", ".join(
            f"{factor}={o} ({100 * signed(o):+.2f} points, p = {pair(o).p if sequential else pair(o).p_holm:.3g}, "
            f"TOST p = {pair(o).p_equiv if sequential else pair(o).p_equiv_holm:.3g})" for o in v.inconclusive))
    if v.inconclusive:
        head = f"**Inconclusive: no single best {factor} at this budget.**"
        tail = (f" Differences smaller than about {100 * v.detectable:.1f} points could not be detected "
                f"({POWER:.0%} power, α = {ALPHA} with Holm over {m} pair(s); {budget})."
                if f.design is None else f" ({budget}.)")
    else:
        names = ", ".join(f"{factor}={o}" for o in (v.best, *v.identical, *v.equivalent))
        head = (f"**Equivalent within {within}: {names}.**" if v.equivalent else f"**Identical: {names}.**")
        tail = f" ({budget}.)"
    return (f"{head} The highest mean, {factor}={v.best} ({pct(best.acc.mean)} %), is " + "; ".join(parts)
            + (" (p unadjusted, decided by Holm's step-down over the pairs at each look's levels; equivalence "
               if f.design is not None else " (Holm-adjusted over the pairs; equivalence ")
            + f"by two one-sided tests against {within}).{tail}")


def _seeds_text(f: SweepFindings) -> str:
    counts = sorted({len(s.seeds) for s in f.settings})
    return f"{'–'.join(map(str, counts))} seed(s) per setting"


def cost_sentence(f: SweepFindings) -> str:
    first, last = f.settings[0], f.settings[-1]
    label = lambda s: f"{f.factor}={s.value}"  # noqa: E731

    def figure(mode: str, col: str, least: int = MIN_ROUNDS) -> str:
        a, b = getattr(last, mode).get(col), getattr(first, mode).get(col)
        return ratio_or_noise(a, b, least=least) if a is not None and b is not None else "not measured"

    hungry = first.starved + last.starved
    wall = ("not compared (one side was trained in another sweep, at another time)"
            if first.reused_from or last.reused_from else
            f"not compared ({hungry} of these runs got too little CPU while they trained: other work held the "
            f"machine)" if hungry else ratio_or_noise(last.train_s, first.train_s))
    return (f"From {label(first)} to {label(last)}: GMACs ×{last.gmacs / first.gmacs:.2f}; inference img/s "
            f"{figure('infer', 'throughput_img_s')}; training-step img/s {figure('train', 'throughput_img_s')}; "
            f"training-step peak memory {figure('train', 'peak_mem_mb', least=1)}; wall time of a training run {wall}.")


def _spread_text(s: Spread | None, fmt: str) -> str:
    if s is None or not s.n:
        return "—"
    if s.n == 1 or s.iqr == 0:
        return format(s.median, fmt)
    return f"{format(s.median, fmt)} [{format(s.q1, fmt)}, {format(s.q3, fmt)}]"


def table_markdown(f: SweepFindings) -> str:
    """Three tables a Markdown viewer renders (at most six columns each): accuracy and size; the cost
    phase's speed, memory and MFU; the training runs' own wall time, MFU and busy share."""
    kinds = sorted({s.acc.kind for s in f.settings})
    name = f.factor
    accuracy = [f"| {name} | seeds | test acc % [95 % interval] | params | GMACs |", "|---|---|---|---|---|"]
    speed = [f"| {name} | infer img/s [IQR] | train img/s [IQR] | peak MB infer / train | MFU infer | busy % infer |",
             "|---|---|---|---|---|---|"]
    runs = [f"| {name} | train run s [IQR] | MFU train runs | busy % train runs |", "|---|---|---|---|"]
    for s in f.settings:
        mem = " / ".join(_spread_text(d.get("peak_mem_mb"), ".1f") for d in (s.infer, s.train))
        accuracy.append(f"| {s.value} | {len(s.seeds)} | {interval_text(s.acc)}{' ‡' if s.at_chance else ''}"
                        f"{' ◊' if s.lucky else ''} | {s.params:,} | {s.gmacs:.4f} |")
        speed.append(f"| {s.value} | {_spread_text(s.infer.get('throughput_img_s'), ',.0f')} | "
                     f"{_spread_text(s.train.get('throughput_img_s'), ',.0f')} | {mem} | "
                     f"{_spread_text(s.infer.get('mfu'), '.2g')} | {_spread_text(s.infer.get('util_pct'), '.0f')} |")
        runs.append(f"| {s.value} | {_spread_text(s.train_s, '.1f')}{' †' if s.reused_from else ''} | "
                    f"{_spread_text(s.runs.get('train_mfu'), '.2g')} | "
                    f"{_spread_text(s.runs.get('train_util_pct'), '.0f')} |")
    lines = [*accuracy, "", f"Accuracy intervals: {'; '.join(kinds)}."]
    if any(s.at_chance for s in f.settings):
        lines.append(f"‡ within noise of chance ({100 * (f.chance or 0):.1f} % for guessing): the model has not "
                     f"learned the task at this budget (binomial rule over the test images: under chance + "
                     f"{CHANCE_SDS:g} s.d.).")
    lucky = [s for s in f.settings if s.lucky]
    if lucky:
        lines.append("◊ possibly a lucky draw: its runs agree more closely than runs of one setting agree 95 % of "
                     "the time (coin flips on borderline images, at the spread real runs show; " + "; ".join(
                         f"{s.value}: s.d. {100 * s.lucky[0]:.2f} against {100 * s.lucky[1]:.2f} points"
                         for s in lucky) + "), so its interval is likely too narrow; more seeds would show.")
    lines += ["", *speed, "", f"Speed: {cost_source(f.cost)}, median [Q1, Q3] (busy %: GPU utilisation from NVML on "
                              f"CUDA, process CPU time ÷ wall time ÷ cores on the CPU).", "", *runs, "",
              "The training runs as they trained, over seeds, not interleaved."]
    reused = sorted({sweep for s in f.settings for sweep in s.reused_from})
    if reused:
        lines.append(f"† copied from the {', '.join(reused)} sweep's identical runs (same run_id, so the same "
                     f"result): trained at another time, so their wall time is not side by side with the others'.")
    return "\n".join(lines + _latency_table(f))


def _latency_table(f: SweepFindings) -> list[str]:
    """Step-latency percentiles and energy per image from the cost phase, where it recorded them."""
    if all(_or_dash_spread(d.get("step_ms_p99"), "g") == "—" for s in f.settings for d in (s.infer, s.train)):
        return []

    def cell(d: dict, fmt: str = ".2f") -> str:
        return " / ".join(_or_dash_spread(d.get(f"step_ms_p{q}"), fmt) for q in (50, 90, 99))
    lines = ["", f"| {f.factor} | infer step ms p50 / p90 / p99 | train step ms p50 / p90 / p99 | J per image infer / "
                 f"train |", "|---|---|---|---|"]
    for s in f.settings:
        energy = " / ".join(_or_dash_spread(d.get("energy_j_per_img"), ".3g") for d in (s.infer, s.train))
        lines.append(f"| {s.value} | {cell(s.infer)} | {cell(s.train)} | {energy} |")
    return lines + ["", "Latency: each percentile of one round's step times, median over the cost phase's rounds; "
                        "energy from the device's counter (— where it has none readable)."]


def _or_dash_spread(s: Spread | None, fmt: str) -> str:
    return "—" if s is None or s.median != s.median else format(s.median, fmt)


OUTCOME_WORDS = {Outcome.BETTER: "a better", Outcome.WORSE: "b better", Outcome.EQUIVALENT: "equivalent",
                 Outcome.INCONCLUSIVE: "inconclusive", Outcome.IDENTICAL: "identical"}   # a pair's, in its table


SEEDS_SHOWN = 200   # an undecided pair that needs more seeds than this is said to need "over 200"


def _undecided(f: SweepFindings, c: Comparison) -> str:
    """What would decide an inconclusive pair: ' (needs ~N seeds)', ' (needs over SEEDS_SHOWN seeds)' or ' (not
    decidable on this test set)' at its current difference and variances (`stats.seeds_to_decide`)."""
    seeds = {s.value: len(s.seeds) for s in f.settings}
    now = min(seeds.get(c.a, 0), seeds.get(c.b, 0))
    need = seeds_to_decide(c, now, len(f.comparisons or []), most=SEEDS_SHOWN)
    if need is None:
        return " (not decidable on this test set)" if c.parts is not None else ""
    return f" (needs over {SEEDS_SHOWN} seeds)" if need > SEEDS_SHOWN else f" (needs ~{need} seeds)"


def comparisons_markdown(f: SweepFindings) -> str:
    if not f.comparisons:
        return ""
    within = _margin_text(f.margin)
    last = f.design.final if f.design is not None else None
    if last is not None:
        head = f"a − b (points) [95 % repeated interval] | p (last look): differ / within {within}"
    else:
        head = f"a − b (points) [95 % interval] | Holm p: differ / within {within}"
    lines = [f"| {f.factor} a | {f.factor} b | {head} | P(a beats b) on a fresh seed [95 %] | verdict |",
             "|---|---|---|---|---|---|"]
    labelled = False   # an inconclusive pair said what would decide it
    for c in f.comparisons:
        win = "—" if c.win != c.win else f"{c.win:.2f} [{c.win_low:.2f}, {c.win_high:.2f}]"
        if c.identical:
            lines.append(f"| {c.a} | {c.b} | 0 (same predictions) | — | {win} | identical |")
            continue
        mark = " ⁼" if c.paired else ""
        outcome, at = pair_outcome(f, c)
        if outcome == Outcome.INCONCLUSIVE and not at:
            at = _undecided(f, c)
            labelled = labelled or bool(at)
        low, high = pair_interval(f, c)
        p, p_equiv = (c.p_holm, c.p_equiv_holm) if last is None else (c.p, c.p_equiv)
        lines.append(f"| {c.a} | {c.b} | {100 * c.diff:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]{mark} | "
                     f"{p:.3g} / {p_equiv:.3g} | {win} | {OUTCOME_WORDS[outcome]}{at} |")
    return "\n".join(lines + [""] + [f"_{n}_" for n in _pair_notes(f, labelled)])


def _pair_notes(f: SweepFindings, labelled: bool) -> list[str]:
    """The notes beneath a sweep's pair table (`labelled`: an inconclusive pair said what would decide it)."""
    last = f.design.final if f.design is not None else None
    notes = []
    if any(c.paired and not c.identical for c in f.comparisons):
        notes.append("⁼ paired by seed: both settings trained under the same seeds, so the difference is the mean "
                     "of the per-seed differences on the same images, and what a seed does to both cancels.")
    if any(c.identical for c in f.comparisons):
        notes.append("identical: seed by seed, the two settings' runs predicted the same class for every test "
                     "image; an observation, not a test.")
    if labelled:
        notes.append("An inconclusive pair says what would decide it at its current difference and variances: about "
                     "how many seeds a setting (the seed terms shrink with more seeds, the test images' term does "
                     "not; the strictest Holm level, α/m), or that no number of seeds can on this test set: its "
                     f"{f'{f.test_size:,} ' if f.test_size else ''}images alone keep the pair's interval both across "
                     "0 and past the margin. A guide for the next run, not a promise: the difference itself will "
                     "move.")
    if any(c.win == c.win for c in f.comparisons):
        notes.append("P(a beats b): the share of pairs of runs (one of a, one of b) where a's scored higher, ties "
                     "counting half (Mann–Whitney), with its 95 % score interval (Newcombe 2006, a t quantile on "
                     "the runs' degrees of freedom); an interval that holds 0.5 says a fresh seed could go either way.")
    if any(c.win != c.win for c in f.comparisons if not c.identical):
        notes.append(f"P(a beats b) is given from {MIN_WIN_SEEDS} seeds a setting (—): from fewer it takes a "
                     f"handful of values and reads as certainty.")
    if last is not None:
        repeated = 1 - nominal_levels(f.design.schedule, ALPHA)[last.index]
        notes.append(f"Adaptive seeds: p-values are those of the last look, unadjusted (each setting at the seeds it "
                     f"ended with); a pair with the leader carries the design's verdict and the look it was taken at "
                     f"(that look's p crossed the level the step-down gave it, see above), any other pair the last "
                     f"look's step-down. Its intervals are repeated confidence intervals (Jennison & Turnbull): at "
                     f"the level of the look the design stopped at ({1 - repeated:.2g}), so they hold at 95 % whatever "
                     f"look the design stopped at; a pair stopped as futile says why.")
        notes.append("Intervals are each pair's own (not adjusted for the sweep's other pairs); the verdict is "
                     "Holm's step-down over them, so an interval that excludes 0 beside \"inconclusive\" is a "
                     "difference that does not survive the adjustment for the other pairs.")
    else:
        notes.append("Intervals are each pair's own (unadjusted, 95 %); the verdict uses the Holm-adjusted p, so "
                     "an interval that excludes 0 beside \"inconclusive\" is a difference that does not survive "
                     "the adjustment for the sweep's other pairs.")
    return notes


def components_markdown(f: SweepFindings) -> str:
    """Where the noise of the sweep's means comes from: each source's share of the variance of one
    setting's mean and of a difference of two, so a reader sees which budget buys precision. The shares
    are given from MIN_SHARE_SEEDS seeds a setting; below, only the total."""
    rows = [("one setting's mean (mean over settings)", f.setting_parts),
            ("a difference of two settings (mean over pairs)", f.pair_parts)]
    rows = [(label, p) for label, p in rows if p is not None and p.total > 0]
    if not rows:
        return ""
    fewest = min((len(s.seeds) for s in f.settings), default=0)
    lines = ["| variance of | s.e. (points) | seed | seed × test image | test image |", "|---|---|---|---|---|"]
    for label, p in rows:
        shares = (" | ".join(f"{100 * x:.0f} %" for x in p.shares()) if fewest >= MIN_SHARE_SEEDS
                  else " | ".join("—" for _ in p.shares()))
        lines.append(f"| {label} | {100 * math.sqrt(p.total):.2f} | {shares} |")
    notes = ["Where the noise comes from, at this sweep's seeds and test images: a seed shifts a run on every "
             "image (more seeds shrink it); which borderline images a run gets right is a coin flip per seed and "
             "image (more seeds or more test images shrink it); which images the test set holds (more test "
             "images shrink it)."]
    if fewest < MIN_SHARE_SEEDS:
        notes.append(f"The shares (—) are given from {MIN_SHARE_SEEDS} seeds a setting: with {fewest}, the seed "
                     f"share is estimated from {fewest - 1} degree(s) of freedom a setting and often comes out 0 "
                     f"when it is not.")
    return "\n".join(lines + [""] + [f"_{n}_" for n in notes])


def pairs_heading(f: SweepFindings, margin_set: bool) -> str:
    """The line above a sweep's pair table (`margin_set`: the sweep's spec set the equivalence margin)."""
    return (f"Pairwise comparisons (seeds crossed with test images, each source counted once; equivalence "
            f"margin {100 * f.margin:g} points{' set by the sweep' if margin_set else ''}; intervals are each pair's own, "
            + ("repeated over the looks, p-values the last look's, decided by Holm's step-down at each look"
               if f.design else "p-values Holm-adjusted over the pairs") + "; see Method):")


def figure_caption(f: SweepFindings, label: str, devices: str, shown: list[dict[str, Any]]) -> str:
    """The caption of a sweep's figure (`shown`: the settings as the figure draws them, `setting_rows`)."""
    factor = f.factor
    reused = any(s.reused_from for s in f.settings)
    copied = " Hollow: runs copied from another sweep (trained at another time)." if reused else ""
    paired = len(shown) > 1 and all(d["vs_best"] is not None for d in shown)   # as the figure draws it
    accuracy = (f"Accuracy: each setting's difference from the best ({factor}={f.verdict.best}) with the 95 % "
                f"{'repeated ' if f.design else ''}interval of that pair's own comparison (the table above), the "
                f"grey band ±{100 * f.margin:g} points; the marker "
                f"says what the verdict decided, Holm over the pairs{' at each look' if f.design else ''}, so an "
                f"interval clear of 0 can still be inconclusive." if paired and f.verdict else
                f"Accuracy: mean with its 95 % interval ({f.settings[0].acc.kind}).")
    caption = (f"_{label}: the test accuracy of each run (one per seed), their mean and its 95 % interval "
               f"({f.settings[0].acc.kind}): how far runs of one setting spread._" if len(f.settings) == 1 else
               f"_{label} sweep on {devices}. {accuracy} Speed and memory: "
               + (f"median with the interquartile range over the {cost_source(f.cost)}." if f.cost.rounds is not None
                  else f"not measured here: {cost_source(f.cost)}.")
               + f" Training wall time: median with the interquartile range over seeds.{copied}_")
    return caption


def shared_line(factor: str, shared: list[tuple[Any, list[str]]]) -> str:
    """The line naming the other sweeps whose verdicts rest on a verdict's runs (`sittings.shared_settings`);
    '' if none."""
    named = [f"{factor}={value}'s runs are also the {', '.join(others)} "
             f"{'sweeps' if len(others) > 1 else 'sweep'}'{'' if len(others) > 1 else 's'}" for value, others in shared]
    if not named:
        return ""
    return (f"Shared runs: {'; '.join(named)} (same run ids): one set of runs carries a verdict in each, so a "
            f"lucky or unlucky draw of them moves all of those verdicts together.")


def sharing_note(ok: pd.DataFrame, phase: bool) -> list[str]:
    """Training wall times measured while other runs shared the device (JOBS > 1) say so; `phase`: the sweep
    has a cost phase (whose figures were measured with nothing else running)."""
    jobs = pd.to_numeric(ok["jobs"], errors="coerce") if "jobs" in ok else pd.Series(dtype=float)
    shared = jobs[jobs > 1]
    if shared.empty:
        return []
    return [f"Training wall times (`train_time_s`, `train_util_pct`) of {len(shared)} of these {len(ok)} runs were "
            f"measured with up to {int(shared.max())} runs sharing the device (JOBS)"
            + ("; the cost-phase figures were measured alone." if phase else "; no cost phase measured this sweep's "
                                                                              "speed alone."), ""]


def reference_lines(table: pd.DataFrame, reference, margin: float) -> list[str]:
    """The reference comparison's heading, what it compares and its table (`compare.compare_outs`' rows: one
    per point both folders trained), with what the comparison could see; `margin`: the equivalence margin in
    points."""
    lines = ["## against the reference", "",
             f"The same points (same model, recipe, data and seed) in `{reference}`, trained "
             f"on another machine or at another commit; the difference is here − reference, with an "
             f"interval over the common seeds (paired by seed) and the test images, each source counted once "
             f"(one common seed: the test images' alone).", ""]
    if not len(table):
        return lines
    family = int(table["family"].iloc[0])
    lines[-2] += (f" The intervals are simultaneous: 95 % jointly over the {family} distinct point(s) compared "
                  f"(Bonferroni, each at {100 * (1 - 0.05 / family):.2f} %), so a point is called higher or "
                  f"lower only outside what chance over the whole table allows." if family > 1 else "")
    here_in, there_in = (" + ".join(sorted(set(table[c]))) for c in ("dtype_a", "dtype_b"))
    lines[-2] += (f" Trained in {here_in} here and in {there_in} in the reference" +
                  (": a difference is the device's and the precision's together." if here_in != there_in else "."))
    lines += ["| sweep | point | seeds | here % | reference % | here − reference (points) [simultaneous 95 % interval] | |",
              "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        verdict = {"A higher": "higher here", "B higher": "lower here"}.get(r.verdict, r.verdict)
        if r.verdict == "same within noise" and -margin <= r.low_pts and r.high_pts <= margin:   # all inside
            verdict = f"equivalent (within ±{margin:g})"
        lines.append(f"| {r.sweep} | {r.point} | {r.seeds} | {100 * r.acc_a:.2f} | {100 * r.acc_b:.2f} | "
                     f"{r.diff_pts:+.2f} [{r.low_pts:+.2f}, {r.high_pts:+.2f}] | {verdict} |")
    half = ((table["high_pts"] - table["low_pts"]) / 2).median()
    return lines + ["", f"What this comparison could see: its intervals' median half-width is {half:.2f} points, so "
                        f"\"same within noise\" says no difference of about that size was found, not that the two "
                        f"agree; a point is called equivalent only where its whole interval lies within ±{margin:g} "
                        f"points (more common seeds narrow the intervals).", ""]


def not_compared_line(sweep: str, differs: str) -> str:
    """A sweep both folders hold with no run in common; `differs`: what its runs differ in."""
    return f"- {sweep}: no run in common with the reference, whose runs differ in {differs} (here vs reference): not compared."


def pareto_left_out(single: list[str]) -> list[str]:
    return [f"Left out: {', '.join(single)} (one setting each: nothing to trade off).", ""]


def pareto_groups(groups: dict[tuple[str, str], list[str]]) -> list[str]:
    """{(dataset, budget): its sweeps}, more than one group: why each gets its own front."""
    return [f"The sweeps cover {len(groups)} datasets or training budgets ("
            + "; ".join(f"{d}, {b}: {', '.join(sweeps)}" for (d, b), sweeps in groups.items())
            + "): each gets its own front and figure, since accuracies on other test sets or after other "
              "training are not on one scale.", ""]


def pareto_front_lines(group: str, front: pd.DataFrame, factors: dict[str, str], figure: str) -> list[str]:
    """One group's Pareto front of setting means (`report.setting_means` rows) and its figure."""
    return [f"**{group}**: Pareto front of the setting means (no setting is both cheaper and more "
            "accurate on average over its seeds; a front point's lead can be inside the noise, see each sweep's "
            "comparisons): " + ", ".join(
                f"{r.sweep} {factors[r.sweep]}={r.value} ({r.gflops:.5f} GFLOPs, {r.acc_mean * 100:.2f} %, "
                f"{r.seeds} seed{'s' if r.seeds != 1 else ''})" for r in front.itertuples()) + ".", "",
            f"![pareto {group}]({figure})", ""]


def runs_line(seeds: list[int], datasets: list[str], test_size: int | None, devices: str) -> str:
    """A sweep section's first line: its seeds (sorted), data, test-set size and devices."""
    test = f"{test_size:,} test images" if test_size else "test-set size not recorded"
    return f"Seeds {seed_ranges(seeds)}; {', '.join(datasets)}, {test}; device {devices}."


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def or_dash(value, fmt: str) -> str:
    return "—" if value is None or value != value else format(value, fmt)


def phases_lines(shown: list[dict[str, Any]], total: int) -> list[str]:
    """The newest training phases on a GPU (`store.PHASES` rows, as dicts) of `total` recorded."""
    lines = ["Training phases on a GPU (the whole device while a command's runs trained side by side; the newest "
             f"{len(shown)} of {total}):", "",
             "| when | sweeps | runs at once | images | s | busy % | W | J per image (window s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in shown:
        energy = (f"{float(r['energy_j_per_img']):.2g} ({float(r['energy_window_s']):.1f})"
                  if str(r.get("energy_j_per_img") or "") not in ("", "nan") else "—")
        lines.append(f"| {r['when']} | {r['sweeps']} | {r['jobs']} | {int(float(r['images'])):,} | "
                     f"{float(r['wall_s']):.1f} | {or_dash(_float(r.get('util_pct')), '.0f')} | "
                     f"{or_dash(_float(r.get('power_w')), '.0f')} | {energy} |")
    return lines + ["", "Busy %: NVML's samples wholly inside the phase; power and energy: the GPU's energy counter "
                        "between two of its ticks at least 1 s apart (— where the phase held no such window).", ""]


def tuning_lines(t: Tuning, factor: str, figure_name: str) -> list[str]:
    """The report's account of a tuning: the split, each setting's pick, and any pick at a grid's edge."""
    grid = "; ".join(f"{name} ∈ {{{', '.join(label_text(v) for v in g)}}}" for name, g in zip(t.fields, t.grids))
    size = f"{t.val_size:,} images, " if t.val_size else ""
    drawn = "stratified by class" if t.split == "stratified" else "drawn at random, not stratified by class"
    lines = [f"Tuned: every setting was trained at each {grid} on the training set less a validation split "
             f"({size}{100 * t.holdout:.0f} % of it, {drawn}, the same split for every run), and is compared below "
             f"at the value its mean validation accuracy over seeds picks (never the test set). The test "
             f"accuracies below are those of the runs that made each pick: a seed that did well on validation "
             f"may do well on test too, so they can lean slightly high."
             + (f" Under SEEDS=auto the picks were made at the first look, on seeds {seed_ranges(list(t.picked_on))}; "
                f"only the picks trained more seeds after it." if t.picked_on else ""), "",
             f"| {factor} | picked | validation accuracy % at each value (seeds) |", "|---|---|---|"]
    for c in t.choices:
        picked = ", ".join(f"{n}={label_text(v)}" for n, v in zip(t.fields, c.chosen))
        curve = "; ".join(f"{setting_label(k)}: {pct(acc)} ({c.seeds[k]})" for k, acc in c.curve.items())
        lines.append(f"| {label_text(c.setting)} | {picked} | {curve} |")
    lines.append("")
    for c in t.choices:
        for name in c.at_edge:
            lines.append(f"- **Widen the grid**: {label_text(c.setting)} picked {name}="
                         f"{label_text(c.chosen[t.fields.index(name)])}, an end of its grid; a value beyond it may be "
                         f"better, so this setting may be compared below its best.")
    image = 1 / t.val_size if t.val_size else None
    for c in t.choices:
        why = close_pick(c, image)
        if why:
            runner = ", ".join(f"{n}={label_text(v)}" for n, v in zip(t.fields, c.runner_up))
            lines.append(f"- **A close pick**: {label_text(c.setting)} leads {runner} by {100 * c.lead:.2f} points of mean "
                         f"validation accuracy, {why}: another split or another seed could pick the other.")
    if any(c.at_edge for c in t.choices) or any(close_pick(c, image) for c in t.choices):
        lines.append("")
    return lines + [f"![tuning](figures/{figure_name})", ""]


def interaction_lines(it: Interaction) -> list[str]:
    a, b = it.factors
    if it.contrasts is None:
        return [f"**Interaction of {a} and {b}: no test** ({it.reason}).", ""]
    shown = [c for c in it.contrasts if c.p_holm < ALPHA]
    within = f"±{100 * it.margin:g} points"
    a1, b1 = it.levels[0][0], it.levels[1][0]
    table = [f"| {a} | {b} | difference of differences (points) [95 % interval] | Holm p: differ / within {within} "
             f"| verdict |", "|---|---|---|---|---|"]
    for c in it.contrasts:
        (ai, bj) = c.a
        outcome = "interaction" if c.outcome() in (Outcome.BETTER, Outcome.WORSE) else c.outcome()
        table.append(f"| {label_text(ai)} | {label_text(bj)} | {100 * c.diff:+.2f} [{100 * c.low:+.2f}, {100 * c.high:+.2f}] | "
                     f"{c.p_holm:.3f} / {c.p_equiv_holm:.3f} | {outcome} |")
    what = (f"each row: ({a}={{a}} − {a}={label_text(a1)}) at {b}={{b}} minus the same at {b}={label_text(b1)}; 0 where the "
            f"effect of {a} does not depend on {b}")
    if shown:
        cells = ", ".join(f"{a}={label_text(c.a[0])} at {b}={label_text(c.a[1])} ({100 * c.diff:+.2f} points)" for c in shown)
        head = (f"**Interaction of {a} and {b} detected** (Holm-adjusted p < {ALPHA}): the effect of {a} depends on "
                f"{b}: {cells}.")
    elif all(c.p_equiv_holm < ALPHA for c in it.contrasts):
        head = (f"**No interaction of {a} and {b} beyond {within}**: every difference of differences is shown "
                f"within {within} (two one-sided tests, Holm-adjusted); read each factor's effect as the same at "
                f"every level of the other, up to that margin.")
    else:
        head = (f"**Interaction of {a} and {b}: inconclusive.** No difference of differences is detected (smallest "
                f"detectable with these seeds and test images ≈ {100 * it.detectable:.1f} points at 80 % power), "
                f"but not every one is shown within {within} either: this does not show that each factor's effect "
                f"is the same at every level of the other.")
    return [head, "", *table, "", f"_{what.format(a='a', b='b')}._", ""]


UNCONVERGED_HEADS = (("**Best of the settings in the design: ", "**Not converged — best at this budget of the settings "
                                                               "in the design: "),
                     ("**Best: ", "**Not converged — best at this budget: "),
                     ("**Inconclusive: ", "**Not converged — inconclusive at this budget: "),
                     ("**Equivalent within ", "**Not converged — equivalent at this budget within "),
                     ("**Identical: ", "**Not converged — identical at this budget: "),
                     ("**No verdict**", "**No verdict (not converged)**"))


def design_progress(design: Design, name: str, left_out: Sequence[Hashable] = ()) -> str:
    """One line for the SEEDS=auto driver: where a sweep's design stands after its latest look."""
    if left_out:
        name = f"{name} (left out, diverged: {', '.join(map(str, left_out))})"
    if not design.looks:
        return f"{name}: look 1 of {len(design.schedule)} needs {design.schedule[0]} seeds of every setting"
    last = design.final
    assert last is not None
    decided = ", ".join(f"{k} ({d.outcome} at look {d.look + 1})" for k, d in last.decided.items()) or "none"
    if last.at_chance:
        return (f"{name}: stopped at look {last.index + 1}: even the leader, {last.leader}, is within noise of "
                f"chance (nothing learned the task at this budget; more seeds would not change that)")
    if design.done:
        return (f"{name}: stopped at look {last.index + 1} of {len(design.schedule)} ({last.seeds} seeds); leader "
                f"{last.leader}; decided against it: {decided}")
    return (f"{name}: look {last.index + 1} ({last.seeds} seeds) leaves {len(design.need)} setting(s) open "
            f"(leader {last.leader}; decided: {decided}); they train to {design.schedule[last.index + 1]} seeds")


def held_fixed(fixed: list[tuple[str, Any, bool]]) -> str:
    """The line naming what a sweep held fixed: (field, value, is the dataset's default); value None and True:
    blank cells left to the dataset."""
    said = [f"{name}=the dataset's default" if value is None and dataset_default else
            f"{name}={value}" + (" (the dataset's default)" if dataset_default else "") for name, value, dataset_default in fixed]
    return "Held fixed: " + ", ".join(said) + "."


def shortfall(below: Shortfall) -> str:
    """A setting below the same model trained longer, as a reason fragment."""
    return (f"{below.factor}={below.value} reaches {100 * below.acc:.1f} % after {below.epochs:g} "
            f"epoch{'s' * (below.epochs != 1)} ({below.runs} runs) where the same model reaches "
            f"{100 * below.longer_acc:.1f} % after {below.longer_epochs:g} epochs ({below.longer_runs} runs)")


def not_converged(c: Convergence) -> str:
    """The warning that a sweep's runs had not converged, with every reason that holds."""
    why = []
    if c.gain is not None:
        why.append(f"test accuracy rose {100 * c.gain:.1f} points over the last of {c.epochs} epoch(s) (mean over runs)")
    if c.loss is not None and c.classes:
        guess = math.log(c.classes)
        why.append(f"the training loss ended at {c.loss:.2f} (mean over runs), {c.loss / guess:.0%} of the {guess:.2f} "
                   f"of guessing among {c.classes} classes, far from fitting the training set")
    if c.below:
        why.append("; ".join(map(shortfall, c.below)))
    return (f"**Not converged**: {'; '.join(why)}, so these runs were still learning: the accuracies below are "
            f"those of a short budget, not the settings' converged accuracies, and their order can change with "
            f"more epochs (EPOCHS).")


def unconverged_headline(verdict: str) -> str:
    """A verdict's bold headline saying that its runs had not converged: its answer is this budget's."""
    for head, said in UNCONVERGED_HEADS:
        if verdict.startswith(head):
            return said + verdict[len(head):]
    return "**Not converged.** " + verdict


def sittings_line(check: SittingCheck | None, factor: str) -> str:
    """The report's sentence on a sweep's sittings ('' where its runs come from one)."""
    if check is None:
        return ""
    if check.p is None:
        return (f"Runs from {check.describe()}, each setting's in a sitting of its own: a difference between "
                f"{factor} settings here cannot be told apart from one between sittings.")
    if check.differ:
        return (f"**Runs differ by sitting.** These {check.runs} runs come from {check.describe()}; with the "
                f"settings' own differences taken out their accuracy still differs between sittings (F = "
                f"{check.f:.2f}, p = {check.p:.2g}), so runs of one setting trained at different times or places are "
                f"not interchangeable here, and a verdict that pools them can reflect when or where they trained.")
    return (f"Runs from {check.describe()}: no difference between sittings detected with the settings' own "
            f"differences taken out (F = {check.f:.2f}, p = {check.p:.2g}).")


def method(margin: float = MARGIN) -> str:
    """The report's Method section: the tests, the designs and checks beside them, and how cost is measured."""
    return _method_tests(margin) + _method_checks() + _method_cost()


def _method_tests(margin: float) -> str:
    return f"""## Method

- **Seeds and test images.** Each setting is trained once per seed; the seed fixes the initial weights,
  the batch order and the augmentation. Every run is scored on the same test images, so a setting's
  answers form a seeds × images table. Its mean accuracy varies for three reasons: a seed shifts a run
  on every image (**seed**); which borderline images a run gets right is a coin flip per seed and image
  (**seed × image**); which images the test set holds (**test image**). The spread of the runs'
  accuracies between seeds already contains the first two; each sweep's table of variance components
  gives every source's share.
- **Accuracy intervals.** With two or more seeds and saved predictions: the 95 % t-interval of the mean
  with the variance S²/s + v (S² the variance between the s runs' accuracies; v what the finite test
  set adds, estimated from the per-image accuracies net of their coin flips, below), Welch–Satterthwaite
  degrees of freedom, clipped to [0, 100] %: it covers seeds and test images. Without predictions: the
  t-interval over seeds, the test set held fixed, labelled so. With one seed: the exact binomial
  (Clopper–Pearson) 95 % interval over the test images, labelled as such.
- **Comparisons.** Every pair of settings a, b (and each interaction contrast of a two-factor grid) is a
  contrast c = Σ w_j acc_j of settings' means, with variance S_a²/s_a + S_b²/s_b + v: each setting's
  variance between seeds, plus the test-image term v = max(0, var_i(D_i) − (coin flips of D_i)) / n of the
  per-image contrast D_i = Σ w_j ȳ_ji, its coin flips estimated by Σ w_j² · (mean over images of the
  per-image variance between seeds) / s_j. A two-level bootstrap that resamples both seeds and images
  counts the coin flips twice and is deaf (Owen 2007); this moment estimator counts each source once.
  t = c / s.e. with Welch–Satterthwaite degrees of freedom; two-sided p; the p-values of a sweep's
  pairs are adjusted together by Holm's step-down method. Two settings trained under the same seeds (same
  initial weights, batch order and augmentation) are compared seed by seed: the contrast is the mean of
  the per-seed differences d_si = y_a,si − y_b,si, with the same variance applied to d (its spread between
  seeds, plus its test-image term), so what a seed does to both cancels (marked ⁼). Where the runs of a
  pair predicted the same class for every image, seed by seed, the pair is **identical**: an observation,
  not a test. Where every seed of a setting scored exactly the same, the spread between seeds is not
  taken as 0 but as the variance of one run's accuracy over n independent answers at the observed rate
  with one imagined answer each way (Laplace), so no interval is ±0. `make calibrate` checks the test on the
  saved predictions of the committed runs (false-positive rate at α, power at planted differences).
- **Verdicts, three ways.** For each pair: **better** where the difference excludes 0 after Holm's
  adjustment; **equivalent** where two one-sided tests (TOST) reject a difference beyond ±δ, δ =
  {100 * margin:g} points unless the sweep sets its own (`margin` in the spec; `--margin` on the
  command line), Holm-adjusted over the pairs too; **inconclusive** where neither holds: not a finding of
  equality. Each pair also gives the probability that a fresh seed of a scores above one of b (the
  Mann–Whitney estimate over the runs' accuracies; Agarwal et al. 2021), from {MIN_WIN_SEEDS} seeds a
  setting (from fewer it takes a handful of values and reads as certainty). A sweep names a best setting
  only if the setting with the highest mean is better than every other; where it is inconclusive
  against some, the smallest difference the sweep could have detected is (t₁₋α/2m + t_power) × the
  median standard error of its pairs, at {POWER:.0%} power and the strictest Holm level α/m for m pairs.
  It then states how many seeds per setting would detect a {100 * POWER_DELTA:.1f}-point difference at
  {POWER:.0%} power: the difference of two means over s seeds has variance 2σ²/s + v (σ the seed-to-seed
  s.d. of one run's accuracy, pooled over settings; v the test-image term, mean over pairs), which more
  seeds do not remove; where v alone is too large it says so.
- **At chance.** A setting whose mean accuracy is below 1/classes + {CHANCE_SDS:g} binomial standard
  errors over the test images is marked ‡: it has not learned the task at this budget. It is compared
  like any other setting (a model that learns is *better* than one that does not where the test says
  so), and the text names it, adding that it may learn with more epochs.
- **No verdict** is given, and no p-value shown, for a sweep with one seed per setting (its binomial
  intervals cover the test images only: one seed says nothing of the variation between training
  seeds), for a sweep whose best setting is itself at chance (nothing was learned, so nothing is known
  about the factor), or without saved predictions.
"""


def _method_checks() -> str:
    return f"""- **The sequential design (SEEDS=auto).** A sweep trained under it looks at its runs after
  {"/".join(str(k) for k in LOOKS)} seeds per setting (or the looks its design file names; the last look is
  the cap). α is spent over the looks by O'Brien–Fleming's function (Lan & DeMets); the nominal levels come
  from the joint normal law of the look statistics by an exact recursion (Armitage, McPherson & Rowe), the
  same in every process. At each look the sweep's pairs are tested by Holm's step-down with group-sequential
  levels (Maurer & Bretz): with r pairs still standing, the smallest p is tested at the level of a design
  that spends α / r over the looks; a rejection frees its share for the rest, at that look and later ones.
  Differences and equivalence within the margin (two one-sided tests) are tested apart. Across looks and
  pairs the chance of any false "better" is at most α. A setting decided against the leader trains no more
  seeds; so does one stopped as futile: for every difference inside its 80 % interval, its pair would stay
  undecided at the cap even at the last look's most lenient level (the seed terms shrink with seeds, the test
  images' term does not) — a stop that only ever removes decisions, so it keeps the error rates. The report
  says why each futile pair stopped: the test set's images alone keep it within reach of the margin, or it
  would need more seeds than the cap. The intervals beside a sequential verdict are repeated confidence
  intervals (Jennison & Turnbull) at the level of the look the design stopped at, which hold at 95 % whatever
  look it stopped at. A setting with a failed run is left out of the design, and its headline says so.
- **The reference comparison** pairs each point (model, recipe, data and seed) trained both here and in the
  reference and gives the difference with an interval over the common seeds and the test images,
  simultaneous over the points compared (Bonferroni); it states the intervals' median half-width (what
  difference it could have seen) and calls a point equivalent only where its whole interval lies within the
  margin.
- **Lucky draws (◊).** Runs of one setting differ by coin flips: images that a run gets right or wrong by
  chance. A setting whose runs agree more closely than runs of one setting do is marked ◊ (its interval is likely
  too narrow): a test given each image's count of right answers, comparing the runs' spread with its spread over
  1,000 random placements of those answers among the runs (at most 5 % of them as tight), each scaled by
  {REAL_DISPERSION:g}: trained runs spread less than independent coin flips (0.70 of their variance on the
  reference's 48 same-setting seeds), and the flag takes one standard error below that.
- **Budget.** A sweep's runs are labelled **not converged**, in the verdict's headline, the figure and a line
  saying why, where the last epoch raised test accuracy by more than {100 * STILL_LEARNING:g} point (mean over
  runs), where the last training loss is above {FAR_FROM_FIT:.0%} of the loss of guessing (ln classes; a cosine
  schedule flattens the last epoch), or where the same model, recipe and data trained for more epochs in the
  same OUT reaches more than {100 * FAR_BELOW:g} point more (one-sided Welch test at 5 %, two runs or more on each
  side): the verdict is then this budget's.
- **Sittings.** A sweep's runs can come from several sittings (another commit, host, processor, thread
  count or precision: a sweep resumed later, or runs shared with other sweeps by run id). With the
  settings' own differences taken out (least squares, accuracy ~ setting + sitting), an F test asks whether
  the sittings still differ; at p < 0.05 the section says so in bold, since its verdicts pool runs that are
  then not interchangeable. Where each setting was trained in a sitting of its own, the two cannot be told
  apart, and the section says that instead.
"""


def _method_cost() -> str:
    return f"""- **Cost.** Before training, every point of a command's sweeps is measured side by side in
  interleaved rounds (each round measures every point once, the starting point rotating) with nothing
  else running: an inference step and the training step the runs train with (forward, backward, clipping,
  fused AdamW over their parameter groups; one CUDA graph per step on CUDA unless GRAPHS=0). Figures are the median
  over rounds with [Q1, Q3]; a ratio between two settings is printed only where each rests on at least
  {MIN_ROUNDS} uncontended rounds and their IQRs do not overlap, otherwise "same within noise" (or "not
  measured"). A round taken while other processes used ≥ {CONTENDED_PCT:.0f} % of
  the CPUs (or computed on the GPU) is left out, and the table's note says how many were. """ f"""\
Peak memory is the tensor-level peak of one step (CUDA
  allocator, or MemTracker on the CPU), taken in the first round: it is the same every time.
  MFU = achieved FLOP/s ÷ the device's measured matmul peak (a training step counts 3 × the forward);
  every row stores that peak and when it was measured.
  "MFU infer" and "busy % infer" come from the cost phase's inference timing; "MFU train runs" and
  "busy % train runs" (`train_mfu`, `train_util_pct`) from each training run's own epochs, data
  handling included.
- **References.** S. Holm (1979), A simple sequentially rejective multiple test procedure, Scand. J.
  Statist. 6:65–70. F. E. Satterthwaite (1946), An approximate distribution of estimates of variance
  components, Biometrics Bulletin 2:110–114. D. J. Schuirmann (1987), A comparison of the two one-sided
  tests procedure and the power approach for assessing the equivalence of average bioavailability,
  J. Pharmacokinet. Biopharm. 15:657–680. A. B. Owen (2007), The pigeonhole bootstrap, Ann. Appl.
  Statist. 1:386–411. X. Bouthillier et al. (2021), Accounting for variance in machine learning
  benchmarks, MLSys. R. Agarwal et al. (2021), Deep reinforcement learning at the edge of the
  statistical precipice, NeurIPS (rliable). K. K. G. Lan & D. L. DeMets (1983), Discrete sequential
  boundaries for clinical trials, Biometrika 70:659–663. P. Armitage, C. K. McPherson & B. C. Rowe (1969),
  Repeated significance tests on accumulating data, J. R. Statist. Soc. A 132:235–244. W. Maurer & F. Bretz
  (2013), Multiple testing in group sequential trials using graphical approaches, Statist. Biopharm. Res.
  5:311–320. C. Jennison & B. W. Turnbull (2000), Group Sequential Methods with Applications to Clinical
  Trials, Chapman & Hall.
"""


def _either(make: str, cli: str) -> str:
    return f"{make} or {cli}" if with_makefile() else cli


def lacking_lines(absent: list[str], has_pos: bool, has_bench: bool) -> list[str]:
    """What a partial OUT lacks and the command that produces each ([] when it lacks nothing)."""
    lacks = [f"the sweeps {', '.join(absent)} ({_either('`make ablate-<name>`', '`vitbench sweep <name>`')} trains "
             f"one)" if absent else "",
             "" if has_pos else f"the attention maps and position similarity (a sweep over pos: "
                                f"{_either('`make ablate-pos`', '`vitbench sweep pos`')})",
             "" if has_bench else f"the attention backends' benchmarks "
                                  f"({_either('`make bench` and `make bench-tokens`', '`vitbench bench run`')})"]
    return [f"Not in this folder: {'; '.join(x for x in lacks if x)}.", ""] if any(lacks) else []


def bench_lines(suite: Path, steps: pd.DataFrame | None, tokens_csv: Path, bench: pd.DataFrame | None,
                figure: str | None) -> list[str]:
    """The attention backends' section: `make bench`'s ok rows (`steps`, None where `suite` is missing) and
    `make bench-tokens`' ok rows (`bench`, None where `tokens_csv` is missing) with their figure's file name."""
    lines = ["## attention backends (bench)", ""]
    if steps is not None:
        lines += [f"`make bench` ({', '.join(sorted(steps['device_name'].astype(str).unique()))}, "
                  f"{', '.join(sorted(steps['dtype'].astype(str).unique()))}; median step over pytest-benchmark's rounds):",
                  "", "| tokens | batch | mode | attn | img/s | step ms (IQR) | MFU |", "|---|---|---|---|---|---|---|"]
        for _, r in steps.sort_values(["tokens", "mode", "attn"]).iterrows():
            lines.append(f"| {r.tokens} | {r.batch_size} | {r['mode']} | {r.attn} | {r.throughput_img_s:,.1f} | "
                         f"{r.step_ms_median:.2f} ({r.step_ms_iqr:.2f}) | {or_dash(r.get('mfu'), '.2g')} |")
        lines.append("")
    else:
        lines += [f"_Missing: `{suite}`; `make bench` (`vitbench bench run`) produces it._", ""]
    if bench is not None:
        tokens = sorted(bench["tokens"].unique())
        devices = ", ".join(sorted(bench["device_name"].astype(str).unique()))
        lines += [f"Against sequence length (`make bench-tokens`; {devices}, "
                  f"{', '.join(sorted(bench['dtype'].astype(str).unique()))}):", "",
                  "| attn | " + " | ".join(f"img/s @ {t} tok" for t in tokens) + " | "
                  + " | ".join(f"peak MB @ {t} tok" for t in tokens) + " |", "|" + "---|" * (1 + 2 * len(tokens))]
        for attn, g in bench.groupby("attn"):
            by_t = g.groupby("tokens")
            rate, mem = by_t["throughput_img_s"].median(), by_t["peak_mem_mb"].median()
            lines.append(f"| {attn} | " + " | ".join(f"{rate.get(t, float('nan')):.2f}" for t in tokens) + " | "
                         + " | ".join(f"{mem.get(t, float('nan')):.1f}" for t in tokens) + " |")
        lines += ["", f"![backends](figures/{figure})", ""]
    else:
        lines += [f"_Missing: `{tokens_csv}`; `make bench-tokens` (`vitbench bench run --tokens 65,197,785 --batch-size 8 "
                  f"--name backends`) produces it._", ""]
    return lines


def throughput_source(cost: CostSource | None, hosts: str) -> str:
    """Where a grid's training throughput comes from: the cost phase (`cost_source`) or, without one, the runs
    themselves on `hosts`."""
    return f"the training step in the {cost_source(cost)}" if cost else f"the runs' whole-run training throughput on {hosts}"


def grid_caption(source: str) -> str:
    return f"_Accuracy: mean over seeds with its 95 % interval beneath. Training throughput: {source}._"
