"""A sweep's tables in markdown: its settings (accuracy, cost, run figures), latency, pairs and the parts of an
interval's width; the figure's caption and the pairs' heading."""

from __future__ import annotations

import math
import re
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
    bound,
    cost_source,
    interval_text,
    margin_text,
    pair_outcome,
    undecided_reason,
)
from ablations.results.schema import SETTINGS_COLUMNS, VERDICTS_COLUMNS
from bench.rounds import Spread
from bench.units import macs


def interval_kinds(kinds: list[str]) -> list[str]:
    """The settings' kinds of interval, once each; those that differ in their number of seeds alone as one, with
    the range ('t over 3–5 seeds and 360 test images', not that twice with 3 and with 5), fewest seeds first."""
    grouped: dict[str, set[int]] = {}
    for kind in kinds:
        found = re.fullmatch(r"t over (\d+) seeds(.*)", kind)
        grouped.setdefault(found.group(2) if found else kind, set()).add(int(found.group(1)) if found else -1)
    said = []
    for rest, seeds in sorted(grouped.items(), key=lambda kv: (min(kv[1]), kv[0])):
        if seeds == {-1}:
            said.append(rest)
        else:
            low, high = min(seeds), max(seeds)
            said.append(f"t over {low if low == high else f'{low}–{high}'} seeds{rest}")
    return said


def table_markdown(f: SweepFindings) -> str:
    """The settings' table (six columns, which every Markdown viewer renders): seeds, accuracy with its interval,
    GMACs, and the cost phase's inference and training-step throughput; a line beneath on where the figures
    come from. Every other figure of each setting (quartiles, memory, latency, MFU, utilisation, the runs' own
    wall times) is in settings.csv (`setting_rows_csv`)."""
    name = f.factor
    lines = [f"| {name} | seeds | test acc % [95 % interval] | GMACs | infer img/s | train img/s |",
             "|---|---|---|---|---|---|"]
    for s in f.settings:
        lines.append(f"| {s.value} | {len(s.seeds)} | {interval_text(s.acc)}{' ‡' if s.at_chance else ''} | "
                     f"{macs(s.gmacs)} | {_median(s.infer.get('throughput_img_s'))} | "
                     f"{_median(s.train.get('throughput_img_s'))}{' †' if s.reused_from else ''} |")
    kinds = interval_kinds([s.acc.kind for s in f.settings])
    notes = [f"Intervals: {'; '.join(kinds)}. Speed: {cost_source(f.cost)}, medians; the quartiles, memory, latency, "
             f"MFU, utilisation and the runs' own wall times of every setting are in settings.csv."]
    if any(s.at_chance for s in f.settings):
        notes.append(f"‡ within noise of chance ({100 * (f.chance or 0):.1f} % for guessing): not shown to learn at "
                     f"this budget (under chance + {CHANCE_SDS:g} binomial s.d. over the test images, and within "
                     f"{CHANCE_SDS:g} standard errors of it over the seeds and test images).")
    reused = sorted({sweep for s in f.settings for sweep in s.reused_from})
    if reused:
        notes.append(f"† runs copied from the {', '.join(reused)} sweep (same run id, so the same result; trained at "
                     f"another time).")
    return "\n".join(lines + ["", " ".join(notes)])


def _median(s: Spread | None) -> str:
    return "—" if s is None or s.median != s.median else f"{s.median:,.0f}"


def setting_rows_csv(f: SweepFindings, sweep: str) -> list[dict[str, Any]]:
    """One row per setting with every figure the report has of it (SETTINGS_TABLE's columns, docs/columns.md)."""
    def spread(prefix: str, s: Spread | None) -> dict[str, Any]:
        ok = s is not None and s.median == s.median
        return {prefix: s.median if ok else None, f"{prefix}_q1": s.q1 if ok else None,
                f"{prefix}_q3": s.q3 if ok else None}

    def median(s: Spread | None) -> float | None:
        return s.median if s is not None and s.median == s.median else None

    rows = []
    for s in f.settings:
        row = {"sweep": sweep, "factor": f.factor, "setting": s.value, "seeds": len(s.seeds),
               "acc_pct": 100 * s.acc.mean, "acc_low_pct": 100 * s.acc.low, "acc_high_pct": 100 * s.acc.high,
               "acc_interval": s.acc.kind, "at_chance": bool(s.at_chance), "params": s.params, "gmacs": s.gmacs,
               **spread("infer_img_s", s.infer.get("throughput_img_s")),
               **spread("train_img_s", s.train.get("throughput_img_s")),
               "infer_peak_mb": median(s.infer.get("peak_mem_mb")), "train_peak_mb": median(s.train.get("peak_mem_mb")),
               **spread("infer_mfu", s.infer.get("mfu")), **spread("infer_busy_pct", s.infer.get("util_pct")),
               **{f"{mode}_step_ms_p{q}": median(getattr(s, mode).get(f"step_ms_p{q}"))
                  for mode in ("infer", "train") for q in (50, 90, 99)},
               "infer_j_per_img": median(s.infer.get("energy_j_per_img")),
               "train_j_per_img": median(s.train.get("energy_j_per_img")),
               **spread("run_s", s.train_s), **spread("run_mfu", s.runs.get("train_mfu")),
               **spread("run_busy_pct", s.runs.get("train_util_pct")), "reused_from": " ".join(s.reused_from)}
        rows.append({k: row.get(k) for k in SETTINGS_COLUMNS})
    return rows


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
        lines.append(f"| {c.a} | {c.b} | {100 * c.diff:+.2f} [{bound(low, True)}, {bound(high, True)}]{mark} | "
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
            "pair with the leader that the design decided, with the look and the level its p crossed; a pair of two "
            "others as the last look's step-down reads it" if f.design is not None and f.design.final
            is not None else "each pair's own 95 % interval; Holm-adjusted p")
    return [f"{'; '.join(marks) + '. ' if marks else ''}Columns: {kind} (Method, 'Pair tables', says each)."]


def components_markdown(f: SweepFindings) -> str:
    """Where the noise of the sweep's means comes from, in one line: the standard error of one setting's mean and of
    a difference of two, each with its sources' shares (seed, coin flips: seed × test image, test images) from
    MIN_SHARE_SEEDS seeds a setting (from fewer the seed share is mostly noise: the totals alone)."""
    rows = [("a setting's mean", f.setting_parts), ("a difference of two", f.pair_parts)]
    rows = [(label, p) for label, p in rows if p is not None and p.total > 0]
    if not rows:
        return ""
    fewest = min((len(s.seeds) for s in f.settings), default=0)
    names = ("seed", "coin flips", "test images")
    said = []
    for label, p in rows:
        shares = ", ".join(f"{name} {100 * x:.0f} %" for name, x in zip(names, p.shares()))
        said.append(f"{label} ±{100 * math.sqrt(p.total):.2f} points s.e."
                    + (f" ({shares})" if fewest >= MIN_SHARE_SEEDS else ""))
    later = (f" (its sources' shares, seed, coin flips and test images, are given from {MIN_SHARE_SEEDS} seeds a "
             f"setting: with {fewest}, the seed share is mostly noise)" if fewest < MIN_SHARE_SEEDS else "")
    return "Noise: " + "; ".join(said) + later + "."


def pairs_heading(f: SweepFindings, margin_set: bool) -> str:
    """The line above a sweep's pair table (`margin_set`: the sweep's spec set the equivalence margin)."""
    return (f"Pairwise comparisons (seeds crossed with test images, each source counted once; equivalence "
            f"margin {round(100 * f.margin, 2):g} points{' set by the sweep' if margin_set else ''}; intervals are each "
            f"pair's own, "
            + ("repeated over the looks, p-values the last look's, decided by Holm's step-down at each look"
               if f.design else "p-values Holm-adjusted over the pairs") + "; see Method):")


def figure_caption(f: SweepFindings, label: str, devices: str, shown: list[dict[str, Any]]) -> str:
    """The one-line caption of a sweep's figure (`shown`: the settings as the figure draws them, `setting_rows`);
    what its panels draw is in Method, 'Figures'."""
    if len(f.settings) == 1:
        return f"_{label} on {devices}: each run's test accuracy (one per seed), their mean and its interval._"
    paired = len(shown) > 1 and all(d["vs_best"] is not None for d in shown)
    accuracy = (f"each setting's difference from {f.factor}={f.verdict.best}, marked by its verdict"
                if paired and f.verdict else "each setting's accuracy")
    return f"_{label} on {devices}: {accuracy}; cost beside it (Method, 'Figures')._"


PAIR_COLUMNS = tuple(VERDICTS_COLUMNS)
SETTING_COLUMNS = tuple(SETTINGS_COLUMNS)


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
                     "diff_points": 100 * c.diff, "low_points": None if c.identical else 100 * low,
                     "high_points": None if c.identical else 100 * high,
                     "interval": "none (same predictions)" if c.identical else kind,
                     "p_differ": None if c.identical else p, "p_equivalent": None if c.identical else p_equiv,
                     "level": level, "look": look, "seeds_a": seeds.get(c.a), "seeds_b": seeds.get(c.b),
                     "paired": bool(c.paired), "margin_points": 100 * c.margin})
    return rows
