"""The report's findings table: one row per sweep that a reader who stops there takes every answer from, in plain
words, differences first (`answers.Answer` holds the figures)."""

from __future__ import annotations

from ablations.analysis.answers import Answer
from ablations.analysis.wording.verdicts import answer_text, bound, margin_text, runs_named, setting_name, setting_names
from bench.units import count


def cheapest_text(a: Answer) -> str:
    if a.cheapest is None:
        return "—"
    train = f", training img/s {a.train_ratio}" if a.train_ratio else ", training speed not compared"
    gmacs = "the same GMACs" if a.gmacs_ratio == 1 else f"GMACs ÷{a.gmacs_ratio:.2f}"
    return f"{setting_name(a.cheapest, a.factor)}: {gmacs}{train}"


def seeds_text(a: Answer) -> str:
    low, high = a.seeds
    if high == 0:   # no run finished
        return "—"
    each = f"{high} each" if low == high else f"{low}–{high} a setting"
    if a.look is None:
        return f"{each} (fixed)"
    return f"{each}; stopped at look {a.look[0]} of {a.look[1]}: {a.stop}"


def open_text(a: Answer) -> str:
    """Each open pair with its difference and interval and why it is open, in words a student follows. The interval
    is the pair's own (at fixed seeds) or the repeated one at the design's stopping level: one clear of 0, or inside
    the margin, did not survive the adjustment over the sweep's pairs, and says so."""
    if not a.open:
        return "—"
    adjustment = "Holm's adjustment over the sweep's pairs" if a.look is None else "the design's step-down over its pairs"

    def why(d) -> str:
        if d.low > 0 or d.high < 0:
            return f"clear of 0, but not after {adjustment}"
        if -a.margin <= d.low and d.high <= a.margin:
            return f"inside {margin_text(a.margin)}, but not after {adjustment}"
        return f"neither clear of 0 nor inside {margin_text(a.margin)}"
    return "; ".join(f"{a.best} − {d.other}: {100 * d.diff:+.2f} [{bound(d.low, True)}, {bound(d.high, True)}], {why(d)}"
                     for d in a.open)


def caveated(a: Answer) -> str:
    """The answer as the findings table gives it: with what bounds it, as the sweep's section says it (runs still
    learning, settings at chance, settings a SEEDS=auto design left out)."""
    said = answer_text(a)
    statuses = dict.fromkeys(status for _, _, status in a.failed)
    by_status = {status: [(v, s) for v, s, st in a.failed if st == status] for status in statuses}
    runs = "; ".join(f"{len(these)} {status} ({runs_named(a.factor, these)})" for status, these in by_status.items())
    if a.no_verdict == "none finished":
        return (f"Its one run did not finish: {runs}." if len(a.failed) == 1 else
                f"None of its {len(a.failed)} runs finished: {runs}.")
    if a.no_verdict:
        return said + (f" Not counted: {count(len(a.failed), 'run')} that did not finish: {runs}." if a.failed else "")
    if a.left_out:
        said = (f"Of the settings in the design: {said} Left out (a run diverged): "
                f"{setting_names(list(a.left_out), a.factor)}.")
    if a.at_chance:
        one = len(a.at_chance) == 1
        said += (f" {setting_names(list(a.at_chance), a.factor)} {'is' if one else 'are'} within noise of chance: "
                 f"not shown to learn the task at this budget.")
    if a.failed:
        said += f" Not counted: {count(len(a.failed), 'run')} that did not finish: {runs}."
    return f"Not converged; at this budget: {said}" if a.unconverged else said


def findings_table(answers: list[Answer], pairs: bool = True) -> list[str]:
    """The report's first table: a row per sweep, its question, its answer, the cheapest setting as good as the best
    and what it saves, the seeds it took and why it stopped, what stays open; `pairs`: some pair was compared (and
    verdicts.csv written)."""
    if not answers:
        return []
    lines = ["## Findings", "",
             "| sweep | question | answer | cheapest setting as good as the best | seeds | still open |",
             "|---|---|---|---|---|---|"]
    for a in answers:
        cell = lambda text: text.replace("|", "\\|").replace("\n", " ")  # noqa: E731
        lines.append(f"| {a.sweep} | {cell(a.question)} | {cell(caveated(a))} | {cell(cheapest_text(a))} | "
                     f"{cell(seeds_text(a))} | {cell(open_text(a))} |")
    csv = ("Every pair's outcome, difference, interval, p, level, look and seeds: `verdicts.csv` beside this file (its "
           "columns: docs/columns.md). " if pairs else "")
    return lines + ["", f"{csv}How the verdicts are reached: Method, at the end.", ""]
