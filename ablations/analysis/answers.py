"""What a sweep found, as the figures of its one-line answer (`Answer`): the differences the verdict names, the
settings equivalent to the best, the cheapest of those and what it saves, the seeds it took and why it
stopped, and what stays open. `wording.summary` says them."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from ablations.analysis.findings import SweepFindings, pair_interval
from ablations.analysis.stats import Comparison


@dataclass(frozen=True)
class Difference:
    """`other` is worse than `best` by `diff` (fraction) with its interval, decided at `look` (None: fixed seeds)."""
    other: Hashable
    diff: float
    low: float
    high: float
    look: int | None = None


@dataclass
class Answer:
    """One sweep's answer in figures. `seeds`: (fewest, most) a setting; `stop`: why it stopped ("" at fixed
    seeds); `cheapest`: the setting of fewest GMACs among those not shown worse than the best, with its GMACs
    ratio to the best and training-step throughput ratio (None: not measured side by side)."""
    sweep: str
    factor: str
    question: str
    best: Hashable | None
    winner: bool = False                   # better than every other setting
    tied: tuple = ()
    worse: list[Difference] = field(default_factory=list)
    equivalent: tuple = ()
    identical: tuple = ()
    twins: list[tuple] = field(default_factory=list)     # other pairs with the same predictions, seed by seed
    open: list[Difference] = field(default_factory=list)   # best − other, undecided
    best_error: float | None = None
    margin: float = 0.005
    cheapest: Hashable | None = None
    gmacs_ratio: float | None = None
    train_ratio: str | None = None
    seeds: tuple[int, int] = (0, 0)
    look: tuple[int, int] | None = None    # (the look it stopped at, of how many), 1-based
    stop: str = ""
    no_verdict: str = ""
    no_verdict_why: str = ""               # "unpaired": why the runs' test predictions cannot be compared
    at_chance: tuple = ()                  # settings within noise of chance, compared like the rest
    left_out: tuple = ()                   # SEEDS=auto: settings the design left out (a run diverged)
    unconverged: bool = False              # some setting's runs had not converged: the answer is this budget's
    failed: tuple = ()                     # (setting, seed, status) of each run that did not finish, not counted


def _signed(c: Comparison, f: SweepFindings, best: Hashable) -> tuple[float, float, float]:
    """The pair's difference best − other, with its shown interval."""
    low, high = pair_interval(f, c)
    return (c.diff, low, high) if c.a == best else (-c.diff, -high, -low)


def answer(f: SweepFindings, sweep: str, question: str) -> Answer:
    """The figures of a sweep's one-line answer."""
    counts = [len(s.seeds) for s in f.settings]
    found = Answer(sweep, f.factor, question, None, seeds=(min(counts, default=0), max(counts, default=0)),
                   margin=f.margin)
    v = f.verdict
    if v is None:
        found.no_verdict = f.no_test.kind if f.no_test is not None else "no test"
        found.no_verdict_why = f.no_test.reason if f.no_test is not None else ""
        _stopped(found, f)
        return found
    by_pair = {frozenset((c.a, c.b)): c for c in f.comparisons or []}
    decided = f.design.final.decided if f.design is not None and f.design.final is not None else {}
    best = next(s for s in f.settings if s.value == v.best)
    found.best, found.tied, found.equivalent, found.identical = v.best, v.tied, v.equivalent, v.identical
    found.at_chance, found.left_out = tuple(s.value for s in f.settings if s.at_chance), tuple(f.left_out or ())
    found.winner = v.winner
    # a pair both identical to the best is identical by that alone (the same predictions): not said again
    found.twins = [(c.a, c.b) for c in f.comparisons or [] if c.identical and v.best not in (c.a, c.b)
                   and not {c.a, c.b} <= set(v.identical)]
    found.best_error = 1 - best.acc.mean
    for other in v.beats:
        diff, low, high = _signed(by_pair[frozenset((v.best, other))], f, v.best)
        found.worse.append(Difference(other, diff, low, high, decided[other].look + 1 if other in decided else None))
    found.worse.sort(key=lambda d: -d.diff)
    found.open = [Difference(o, *_signed(by_pair[frozenset((v.best, o))], f, v.best)) for o in v.inconclusive]
    _cheapest(found, f)
    _stopped(found, f)
    return found


def _stopped(found: Answer, f: SweepFindings) -> None:
    """Under SEEDS=auto, the look the design stopped at and why, with or without a verdict."""
    if f.design is None or f.design.final is None:
        return
    last, v = f.design.final, f.verdict
    found.look = (last.index + 1, len(f.design.schedule))
    found.stop = ("every pair with the leader decided" if v is not None and last.done and not v.inconclusive else
                  "the leader is at chance" if last.at_chance else
                  "the cap" if last.index == len(f.design.schedule) - 1 else
                  "the rest stopped as futile" if v is not None else "no test")


def _cheapest(found: Answer, f: SweepFindings) -> None:
    """The setting of fewest GMACs not shown worse than the best (the best, its equivalents and identical twins),
    and what it saves against the best; where none has fewer GMACs than the best, the one of the same GMACs whose
    training step is the fastest, where the cost phase states it faster than the best's (`bench.rounds`' test)."""
    from bench.rounds import ratio_or_noise

    pool = [s for s in f.settings if s.value in (found.best, *found.equivalent, *found.identical)]
    if len(pool) < 2:
        return
    best = next(s for s in f.settings if s.value == found.best)
    if not best.gmacs:
        return
    ratio = lambda s: ratio_or_noise(s.train["throughput_img_s"], best.train["throughput_img_s"])  # noqa: E731
    said = lambda r: f"≈{r} (CPU time under load)" if f.cost.cpu_time and r.startswith("×") else r  # noqa: E731
    cheap = min(pool, key=lambda s: (s.gmacs, str(s.value)))
    if cheap.gmacs < best.gmacs:
        found.cheapest, found.gmacs_ratio = cheap.value, best.gmacs / cheap.gmacs
        measured = "throughput_img_s" in cheap.train and "throughput_img_s" in best.train
        found.train_ratio = said(ratio(cheap)) if measured else None
        return
    if "throughput_img_s" not in best.train:
        return
    faster = [s for s in pool if s is not best and s.gmacs == best.gmacs and "throughput_img_s" in s.train
              and ratio(s).startswith("×") and s.train["throughput_img_s"].median > best.train["throughput_img_s"].median]
    if faster:
        quickest = max(faster, key=lambda s: (s.train["throughput_img_s"].median, str(s.value)))
        found.cheapest, found.gmacs_ratio, found.train_ratio = quickest.value, 1.0, said(ratio(quickest))
