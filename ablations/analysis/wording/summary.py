"""The report's findings table: one row per sweep that a reader who stops there takes every answer from, in plain
words, differences first (`answers.Answer` holds the figures)."""

from __future__ import annotations

from ablations.analysis.answers import Answer
from ablations.analysis.wording.verdicts import margin_text


def _names(values: list, factor: str) -> str:
    """'a', 'a and b', 'a, b and c', each as factor=value."""
    said = [f"{factor}={v}" for v in values]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]


def _points(x: float) -> str:
    return f"{100 * x:.2f}"


def margin_against_error(margin: float, error: float | None) -> str:
    """The equivalence margin in points and as a share of the best setting's error rate: on an easy task ±0.5
    points is a large part of what errs."""
    if not error or error <= 0:
        return margin_text(margin)
    return f"{margin_text(margin)}, {margin / error:.0%} of the best setting's {100 * error:.1f} % error"


def answer_text(a: Answer) -> str:
    """The sweep's answer in one sentence a paper could quote: the settings worse than the best and by how much,
    those equivalent or identical to it, what stays open."""
    if a.no_verdict:
        return {"one setting": "one setting: nothing to compare", "one seed": "one seed a setting: no test",
                "at chance": "no setting learned the task at this budget"}.get(a.no_verdict, "no test")
    f, best = a.factor, a.best
    parts = [f"{f}={d.other} is worse than {f}={best} by {_points(d.diff)} points [{_points(d.low)}, "
             f"{_points(d.high)}]" for d in a.worse]
    if a.identical:
        parts.append(f"{_names(list(a.identical), f)} {'is' if len(a.identical) == 1 else 'are'} identical to "
                     f"{f}={best} (the same predictions)")
    if a.equivalent:
        parts.append(f"{_names(list(a.equivalent), f)} {'is' if len(a.equivalent) == 1 else 'are'} equivalent to "
                     f"{f}={best} within {margin_against_error(a.margin, a.best_error)}")
    if not a.worse and not a.equivalent and not a.identical and not a.open:
        parts.append(f"{f}={best} is best")
    if a.open:
        parts.append(f"{_names([d.other for d in a.open], f)} against {f}={best}: undecided")
    head = f"{f}={best} has the highest mean ({100 * (1 - (a.best_error or 0)):.2f} %)"
    if a.tied:
        head = f"{_names([best, *a.tied], f)} tie for the highest mean ({100 * (1 - (a.best_error or 0)):.2f} %)"
    return head + "; " + "; ".join(parts) + "."


def cheapest_text(a: Answer) -> str:
    if a.cheapest is None:
        return "—"
    train = f", training img/s {a.train_ratio}" if a.train_ratio else ", training speed not compared"
    return f"{a.factor}={a.cheapest}: GMACs ÷{a.gmacs_ratio:.2f}{train}"


def seeds_text(a: Answer) -> str:
    low, high = a.seeds
    each = f"{high} each" if low == high else f"{low}–{high} a setting"
    if a.look is None:
        return f"{each} (fixed)"
    return f"{each}; stopped at look {a.look[0]} of {a.look[1]}: {a.stop}"


def open_text(a: Answer) -> str:
    """Each open pair with its difference and interval and why it is open, in words a student follows."""
    if not a.open:
        return "—"
    said = [f"{a.factor}={a.best} − {d.other}: {100 * d.diff:+.2f} [{100 * d.low:+.2f}, {100 * d.high:+.2f}], neither "
            f"clear of 0 nor inside {margin_text(a.margin)}" for d in a.open]
    return "; ".join(said)


def findings_table(answers: list[Answer]) -> list[str]:
    """The report's first table: a row per sweep, its question, its answer, the cheapest setting as good as the best
    and what it saves, the seeds it took and why it stopped, what stays open."""
    if not answers:
        return []
    lines = ["## Findings", "",
             "| sweep | question | answer | cheapest setting as good as the best | seeds | still open |",
             "|---|---|---|---|---|---|"]
    for a in answers:
        cell = lambda text: text.replace("|", "\\|").replace("\n", " ")  # noqa: E731
        lines.append(f"| {a.sweep} | {cell(a.question)} | {cell(answer_text(a))} | {cell(cheapest_text(a))} | "
                     f"{cell(seeds_text(a))} | {cell(open_text(a))} |")
    return lines + ["", "Every pair's outcome, difference, interval, p, level, look and seeds: `verdicts.csv` beside "
                        "this file (its columns: docs/columns.md). How the verdicts are reached: Method, at the end.",
                    ""]
