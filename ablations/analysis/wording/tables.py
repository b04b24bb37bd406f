"""A sweep's tables in markdown: its settings (accuracy, cost, run figures), latency, pairs and the parts of an
interval's width; the figure's caption and the pairs' heading."""

from __future__ import annotations

import math
from typing import Any

from ablations.analysis.findings import (
    MIN_SHARE_SEEDS,
    SweepFindings,
    pair_interval,
)
from ablations.analysis.stats import (
    CHANCE_SDS,
    MIN_WIN_SEEDS,
    Outcome,
)
from ablations.analysis.wording.verdicts import (
    OUTCOME_WORDS,
    cost_source,
    interval_text,
    margin_text,
    pair_outcome,
    undecided_reason,
)
from ablations.results.schema import VERDICTS_COLUMNS
from bench.rounds import Spread


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
                        f" | {s.params:,} | {s.gmacs:.4f} |")
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
    lines += ["", *speed, "", f"Speed: {cost_source(f.cost)}, median [Q1, Q3] (busy %: on CUDA, GPU utilisation from "
                              f"NVML's samples wholly inside the timed steps, — where they were timed for less than two "
                              f"sample periods; on the CPU, process CPU time ÷ wall time ÷ cores).", "", *runs, "",
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
                        "energy from the device's counter between two of its ticks at least 1 s apart inside the timed "
                        "steps (— where it has no readable counter or its steps ran for less than such a window)."]


def _or_dash_spread(s: Spread | None, fmt: str) -> str:
    return "—" if s is None or s.median != s.median else format(s.median, fmt)


def comparisons_markdown(f: SweepFindings) -> str:
    if not f.comparisons:
        return ""
    within = margin_text(f.margin)
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
            at = undecided_reason(f, c)
            labelled = labelled or bool(at)
        low, high = pair_interval(f, c)
        p, p_equiv = (c.p_holm, c.p_equiv_holm) if last is None else (c.p, c.p_equiv)
        lines.append(f"| {c.a} | {c.b} | {100 * c.diff:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]{mark} | "
                     f"{p:.3g} / {p_equiv:.3g} | {win} | {OUTCOME_WORDS[outcome]}{at} |")
    return "\n".join(lines + [""] + [f"_{n}_" for n in _pair_notes(f, labelled)])


def _pair_notes(f: SweepFindings, labelled: bool) -> list[str]:
    """The one line beneath a sweep's pair table: its marks, and where the columns are explained (Method)."""
    marks = []
    if any(c.paired and not c.identical for c in f.comparisons):
        marks.append("⁼ paired by seed")
    if any(c.win != c.win for c in f.comparisons if not c.identical):
        marks.append(f"— P(a beats b) is given from {MIN_WIN_SEEDS} seeds a setting")
    kind = ("repeated intervals at the level of the look the design stopped at; p of the last look, unadjusted; a "
            "decided pair with the look and the level its p crossed" if f.design is not None and f.design.final
            is not None else "each pair's own 95 % interval; Holm-adjusted p")
    return [f"{'; '.join(marks) + '. ' if marks else ''}Columns: {kind} (Method, 'Pair tables', says each)."]


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


PAIR_COLUMNS = tuple(VERDICTS_COLUMNS)


def pair_rows(f: SweepFindings, sweep: str) -> list[dict[str, Any]]:
    """Every pair of a sweep as the report decides it, one row each (VERDICTS_TABLE's columns, docs/columns.md)."""
    if not f.comparisons:
        return []
    seeds = {s.value: len(s.seeds) for s in f.settings}
    last = f.design.final if f.design is not None else None
    kind = "95 % repeated" if last is not None else "95 %"
    if last is not None:
        kind = f"{1 - f.design.levels()[last.index]:.3f} repeated (95 % over the looks)"
    rows = []
    for c in f.comparisons:
        outcome, _ = pair_outcome(f, c)
        low, high = pair_interval(f, c)
        decision, look, level = None, None, None
        if last is not None and last.leader in (c.a, c.b):
            decision = last.decided.get(c.b if c.a == last.leader else c.a)
            if decision is not None and decision.outcome != Outcome.FUTILE:
                look, level = decision.look + 1, decision.level
        p, p_equiv = (c.p, c.p_equiv) if last is not None else (c.p_holm, c.p_equiv_holm)
        rows.append({"sweep": sweep, "factor": f.factor, "a": c.a, "b": c.b, "outcome": str(outcome),
                     "diff_points": 100 * c.diff, "low_points": 100 * low, "high_points": 100 * high,
                     "interval": "none (same predictions)" if c.identical else kind,
                     "p_differ": None if c.identical else p, "p_equivalent": None if c.identical else p_equiv,
                     "level": level, "look": look, "seeds_a": seeds.get(c.a), "seeds_b": seeds.get(c.b),
                     "paired": bool(c.paired), "margin_points": 100 * c.margin})
    return rows
