"""What a sweep's tables support: per setting an accuracy interval and cost spreads, across settings the
paired comparisons and a verdict, and the sentences the report prints. Computed from a sweep's rows and
the saved test predictions it reads from disk (`ablations.analysis.stats`, `bench.rounds`, the SEEDS=auto
design replayed by `ablations.analysis.sequential`); `report.py` lays them out."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablations.analysis.sequential import Decision, Design, gather, nominal_levels, replay_plan
from ablations.analysis.stats import (
    ALPHA,
    CHANCE_SDS,
    MARGIN,
    MIN_SEEDS,
    MIN_WIN_SEEDS,
    POWER,
    Comparison,
    Components,
    Interval,
    Verdict,
    accuracy_interval,
    at_chance,
    compare_settings,
    contrast,
    detectable_difference,
    seeds_needed,
    seeds_to_decide,
    verdict,
)
from ablations.choices import LOOKS, say
from ablations.results import plans as design_plans
from ablations.results.experiments import starved
from ablations.results.store import SweepPaths, load_preds, model_key, spreads, uncontended
from bench.contention import CONTENDED_PCT
from bench.io.csvio import skipped
from bench.rounds import MIN_ROUNDS, Spread, ratio_or_noise
from vit import ViTConfig

RUN_FIGURES = ("train_util_pct", "train_mfu")  # measured by each training run, beside the cost phase's
POWER_DELTA = 0.005    # the difference (0.5 points) whose seed budget the report states
MIN_SHARE_SEEDS = 8    # variance-component shares are given from this many seeds a setting


@dataclass
class Setting:
    value: Hashable
    seeds: list[int]
    acc: Interval
    params: int
    gmacs: float
    train_s: Spread                                            # over seeds
    infer: dict[str, Spread] = field(default_factory=dict)     # cost phase, over rounds
    train: dict[str, Spread] = field(default_factory=dict)
    reused_from: tuple[str, ...] = ()                          # sweeps its runs were copied from
    runs: dict[str, Spread] = field(default_factory=dict)      # train_util_pct, train_mfu of the runs, over seeds
    at_chance: bool = False                                    # accuracy within noise of guessing
    lucky: tuple[float, float] | None = None                   # (runs' s.d., coin flips' s.d.) where the runs agree
                                                               # more closely than coin flips alone allow
    starved: int = 0                                           # runs that got too little CPU while they trained


@dataclass
class SweepFindings:
    factor: str
    settings: list[Setting]
    test_size: int | None
    cost_source: str                       # "cost phase, N rounds" or why not
    comparisons: list[Comparison] | None   # None: no test (reason in `no_test`)
    verdict: Verdict | None
    no_test: str = ""
    chance: float | None = None            # 1 / classes
    seeds_for_delta: int | None = None     # seeds per setting to detect POWER_DELTA at POWER (None: not reachable)
    seeds_range: tuple[int | None, int | None] | None = None   # the same at the ends of the seed s.d.'s 95 % interval
    seed_sd_range: tuple[float, float] | None = None           # that interval
    seed_sd: float | None = None           # s.d. of one run's accuracy between seeds, pooled over settings
    floor: float | None = None             # smallest difference detectable with these test images at any seeds
    margin: float = MARGIN                 # the equivalence margin the comparisons test against
    setting_parts: Components | None = None   # variance of one setting's mean by source, mean over settings
    pair_parts: Components | None = None      # variance of a difference of two settings' means, mean over pairs
    design: Design | None = None              # SEEDS=auto: the looks the sweep took (its verdict is theirs)
    left_out: tuple = ()                      # SEEDS=auto: settings left out of the design (a run diverged)
    adaptive: bool = False                    # trained under SEEDS=auto (its design complete or not)


@dataclass
class Runs:
    """One setting's saved test answers, a row per run in table order: the run's seed, its predicted class
    for every test image and whether that was right."""
    seeds: list[int]
    preds: np.ndarray      # (runs, n) predicted classes
    correct: np.ndarray    # (runs, n) 0/1


def seed_ranges(seeds: list[int]) -> str:
    """'0, 1, 2' for three seeds, '0–11' for a run of four or more in a row: 0–47, 50."""
    parts, start = [], 0
    for i in range(1, len(seeds) + 1):
        if i == len(seeds) or seeds[i] != seeds[i - 1] + 1:
            run = seeds[start:i]
            parts.append(f"{run[0]}–{run[-1]}" if len(run) >= 4 else ", ".join(map(str, run)))
            start = i
    return ", ".join(parts)


def load_runs(ok: pd.DataFrame, factor: str, preds_dir: Path) -> tuple[dict[Hashable, Runs] | None, str]:
    """{value: its runs' answers on the test images}, or None and the reason there is none."""
    missing = [rid for rid in ok["run_id"].astype(str) if not (preds_dir / f"{rid}.npz").exists()]
    if missing:
        return None, (f"{len(missing)} of {len(ok)} runs have no saved test predictions (runs from before "
                      f"predictions were kept, or files removed; rerun them)")
    found: dict[Hashable, tuple[list, list, list]] = {}
    target0 = None
    for _, r in ok.iterrows():
        try:
            pred, target = load_preds(preds_dir / f"{r['run_id']}.npz")
        except ValueError as err:
            skipped(f"{err}; the sweep's comparisons are skipped (rerun that run to restore them)")
            return None, f"the predictions of run {r['run_id']} are damaged (listed under Skipped inputs)"
        if target0 is None:
            target0 = target
        elif len(target) != len(target0) or not np.array_equal(target, target0):
            return None, "the runs were evaluated on different test sets, so they cannot be paired image by image"
        seeds, preds, correct = found.setdefault(r[factor], ([], [], []))
        seeds.append(int(r["seed"]))
        preds.append(np.asarray(pred))
        correct.append((pred == target).astype(float))
    return {k: Runs(s, np.stack(p), np.stack(c)) for k, (s, p, c) in found.items()}, ""


def load_correct(ok: pd.DataFrame, factor: str, preds_dir: Path) -> tuple[dict[Hashable, np.ndarray] | None, str]:
    """{value: (seeds, n) 0/1 array of correct test images}, or None and the reason there is none."""
    runs, reason = load_runs(ok, factor, preds_dir)
    return ({k: r.correct for k, r in runs.items()} if runs is not None else None), reason


def analyse(rows: pd.DataFrame, factor: str, order: list, preds_dir: Path, cost_phase: pd.DataFrame | None,
            margin: float = MARGIN, design: tuple[Design, tuple] | None = None) -> SweepFindings:
    """`design`: a sweep trained with SEEDS=auto, as `adaptive_rows` replayed it (its rows are then the
    design's runs): the comparisons and the verdict are those of its last look."""
    ok = rows[rows["status"] == "ok"]
    test_size = _test_size(ok)
    infer, train = _cost_spreads(cost_phase, ok, factor, order)
    enough = len(order) >= 1 and all((ok[factor] == v).sum() >= MIN_SEEDS for v in order)
    runs, reason = load_runs(ok, factor, preds_dir) if enough else (None, "")
    correct = {k: r.correct for k, r in runs.items()} if runs is not None else None
    settings = []
    for value in order:
        g = ok[ok[factor] == value]
        reused = tuple(sorted(g["reused_from"].dropna().astype(str).unique())) if "reused_from" in g else ()
        settings.append(Setting(value, sorted(int(s) for s in g["seed"]),
                                accuracy_interval(g["test_acc"], test_size, correct.get(value) if correct else None),
                                int(g["params"].iloc[0]), float(g["gmacs"].iloc[0]),
                                Spread.of(g["train_time_s"].astype(float)),
                                infer.get(value, {}), train.get(value, {}), reused,
                                {c: Spread.of(pd.to_numeric(g[c], errors="coerce")) for c in RUN_FIGURES if c in g},
                                starved=sum(starved(r.to_dict()) for _, r in g.iterrows())))
    source = f"no cost phase (none kept here; {say('make cost OUT=…', 'vitbench cost --out …')} measures one)"
    if cost_phase is not None:
        loaded = len(cost_phase) - len(uncontended(cost_phase))
        names = cost_phase["device_name"].dropna().astype(str).unique() if "device_name" in cost_phase else []
        runs_on = set(ok["device_name"].dropna().astype(str)) if "device_name" in ok else set()
        on = f" on {names[0]}" if len(names) == 1 and {names[0]} != runs_on else ""   # said where not the runs'
        source = (f"cost phase{on}, {int(cost_phase['rounds'].iloc[0])} interleaved rounds"
                  + (f" ({loaded} of {len(cost_phase)} timed steps ran while other processes took ≥ "
                     f"{CONTENDED_PCT:.0f} % of the machine and are left out)" if loaded else ""))
    findings = SweepFindings(factor, settings, test_size, source, None, None, margin=margin)
    if correct is not None:
        findings.test_size = next(iter(correct.values())).shape[1]
        for s in settings:
            s.lucky = lucky_draw(correct[s.value]) if s.value in correct else None
        findings.setting_parts = _mean_parts([contrast([correct[v]], [1.0]).parts for v in order])
    _mark_chance(findings, ok)
    if len(settings) < 2:
        findings.no_test = "one setting only: nothing to compare"
        return findings
    lowest = min(len(s.seeds) for s in settings)
    if lowest < MIN_SEEDS:
        findings.no_test = (f"one seed per setting{'' if all(len(s.seeds) == 1 for s in settings) else ' (for some)'}. "
                            f"Its intervals cover the test images only: they leave out how much accuracy moves "
                            f"between training seeds, which a second seed would measure and a test would then "
                            f"take into account (SEEDS=0,1,2)")
        return findings
    best = max(settings, key=lambda s: s.acc.mean)
    if best.at_chance:
        findings.no_test = (f"even the best setting, {factor}={best.value} ({pct(best.acc.mean)} %), is within "
                            f"noise of chance ({100 * (findings.chance or 0):.1f} % for guessing): no setting has "
                            f"learned the task at this budget, so no comparison says anything about the factor; "
                            f"train longer (EPOCHS), or check that the labels can be learned from the images")
        return findings
    if runs is None:
        findings.no_test = reason
        return findings
    if design is not None and design[0].final is not None:
        findings.design, findings.left_out = design
        findings.comparisons = design[0].final.comparisons
        findings.pair_parts = _mean_parts([c.parts for c in findings.comparisons
                                           if c.parts is not None and not c.identical])
        findings.verdict = design_verdict(design[0], {s.value: s.acc.mean for s in settings})
        return findings
    findings.comparisons = compare_settings({v: correct[v] for v in order}, margin=margin,
                                            seeds={v: runs[v].seeds for v in order},
                                            preds={v: runs[v].preds for v in order})
    findings.pair_parts = _mean_parts([c.parts for c in findings.comparisons
                                       if c.parts is not None and not c.identical])
    findings.verdict = verdict({s.value: s.acc.mean for s in settings}, findings.comparisons)
    _power(findings, ok, factor)
    return findings


def analyse_sweep(rows: pd.DataFrame, factor: str, order: list, paths: SweepPaths, cost_phase: pd.DataFrame | None,
                  margin: float = MARGIN) -> tuple[SweepFindings, pd.DataFrame, str]:
    """`analyse` of a sweep's table as it was trained: under fixed seeds, or, where the sweep kept a
    SEEDS=auto design (`plans.read_plan`), on the runs of its looks with the looks' verdict and margin.
    Also the rows analysed and a note for a design the table cannot complete ("" if none)."""
    design, note = None, ""
    try:
        plan = design_plans.read_plan(paths)
    except ValueError as err:
        skipped(f"{err}; the sweep is analysed at fixed seeds")
        plan = None
    mine = set(rows["experiment_id"].dropna().astype(str)) if "experiment_id" in rows else set()
    if plan is not None and plan.get("experiment") and mine and plan["experiment"] not in mine:
        note = (f"The SEEDS=auto design beside this table ({paths.design.name}) is another experiment's (its "
                f"runs are not these), so these runs are analysed at the seeds they have, as if fixed in advance.")
        plan = None
    if plan is not None:
        rows, design, note = adaptive_rows(rows, factor, order, paths, plan)
        margin = float(plan["margin"])   # the margin its looks decided with
    found = analyse(rows, factor, order, paths.preds, cost_phase, margin, design)
    found.adaptive = plan is not None
    return found, rows, note


def adaptive_rows(rows: pd.DataFrame, factor: str, order: list, paths: SweepPaths, plan: dict[str, Any]
                  ) -> tuple[pd.DataFrame, tuple[Design, tuple] | None, str]:
    """A sweep trained with SEEDS=auto: its design replayed on the table's runs (`sequential.gather`), the
    rows of the runs the design used (each setting's first seeds of the plan, as many as its last look
    gave it; other runs of the table stay out), and a note. A design the table cannot complete (a look
    needs runs that are not there) gives the rows unchanged, no design, and a note that says so."""
    latest = rows.assign(run_id=rows["run_id"].astype(str))
    keyed = [(v, int(seed), str(status), rid) for v, seed, status, rid
             in zip(latest[factor], latest["seed"], latest["status"], latest["run_id"]) if v in order]
    runs, left_out = gather(keyed, order, paths)
    design = replay_plan(runs, plan)
    if design.need:
        missing = sum(len(v) for v in design.need.values())
        return rows, None, (f"Trained with SEEDS=auto, but look {len(design.looks) + 1} of its design needs {missing} "
                            f"run(s) the table lacks (rerun the sweep with SEEDS=auto to finish it); analysed "
                            f"below at the seeds there as if they were fixed in advance, which they were not.")
    used = {(k, s) for k in runs for s in plan["seeds"][:design.have[k]]}
    keep = [(v in left_out) or (v, int(seed)) in used for v, seed in zip(rows[factor], rows["seed"])]
    return rows[keep], (design, left_out), ""


def design_verdict(design: Design, means: dict[Hashable, float]) -> Verdict:
    """The verdict of a sequential design: the leader of its last look, each other setting as the design
    decided it against that leader (different or equivalent, at the look it crossed that look's level), or
    inconclusive when it never did."""
    last = design.final
    assert last is not None
    by_pair = {frozenset((c.a, c.b)): c for c in last.comparisons}
    found: dict[str, list] = {"better": [], "equivalent": [], "inconclusive": [], "identical": []}
    others = [k for k in means if k != last.leader and k in design.have] if last.comparisons else []
    for other in others:
        decision = last.decided.get(other)
        if decision is None or decision.outcome == "futile":
            found["inconclusive"].append(other)
        elif decision.outcome == "different":
            found["better"].append(other)
        else:
            found["identical" if by_pair[frozenset((last.leader, other))].identical else "equivalent"].append(other)
    tested = [c for c in last.comparisons if not c.identical]
    se = float(np.median([c.se for c in tested])) if tested else math.nan
    df = float(np.median([c.df for c in tested])) if tested else math.inf
    margin = last.comparisons[0].margin if last.comparisons else MARGIN
    beats, equivalent, inconclusive, identical = (tuple(v) for v in found.values())
    return Verdict(last.leader, bool(last.comparisons) and not (equivalent or inconclusive or identical), beats,
                   equivalent, inconclusive, detectable_difference(se, len(last.comparisons), df, last.level), margin,
                   identical)


def pair_outcome(f: SweepFindings, c: Comparison) -> tuple[str, str]:
    """A pair's verdict word and, for a sequential design, the look it was taken at ("" otherwise): a pair
    with the last leader as the design decided it (a futile stop: inconclusive, with the look and why); any
    other pair as the last look's step-down decided it."""
    if f.design is None or f.design.final is None:
        return c.outcome(), ""
    last = f.design.final
    if c.identical:
        return "identical", ""
    if last.leader in (c.a, c.b):
        other = c.b if c.a == last.leader else c.a
        d = last.decided.get(other)
        if d is None:
            return "inconclusive", ""
        if d.outcome == "futile":
            return "inconclusive", f" (stopped at look {d.look + 1}: {futile_reason(d, f)})"
        if d.outcome == "equivalent":
            return "equivalent", f" (look {d.look + 1})"
        return ("better" if c.a == last.leader else "worse"), f" (look {d.look + 1})"
    outcome = last.outcomes.get(frozenset((c.a, c.b)), ("inconclusive",))[0]
    if outcome == "different":
        return ("better" if c.diff > 0 else "worse"), ""
    return outcome, ""


def futile_reason(d: Decision, f: SweepFindings) -> str:
    """Why the design stopped a pair as futile, in words."""
    images = f"{f.test_size:,} " if f.test_size else ""
    if d.why == "test set":
        return (f"the test set's {images}images alone keep it within reach of {_margin_text(f.margin)}; "
                f"no number of seeds decides it")
    cap = f.design.plan[-1] if f.design is not None else "the cap"
    return f"it would need more than the {cap} seeds the design allows"


def design_sentence(f: SweepFindings) -> str:
    """How a SEEDS=auto sweep ran: its looks and their levels, where it stopped, the seeds each setting got,
    and what each decision crossed."""
    if f.design is None or f.design.final is None:
        return ""
    d, last = f.design, f.design.final
    levels = nominal_levels(d.plan, ALPHA)
    seeds = ", ".join(f"{f.factor}={k} {n}" for k, n in d.have.items())
    same = {frozenset((c.a, c.b)) for c in last.comparisons if c.identical}
    crossed = [f"{f.factor}={k} identical to {f.factor}={x.leader} at look {x.look + 1} (the same predictions)"
               if frozenset((k, x.leader)) in same else
               f"{f.factor}={k} {'worse than' if x.outcome == 'different' else 'equivalent to'} {f.factor}={x.leader} "
               f"at look {x.look + 1} (p{' (TOST)' if x.outcome == 'equivalent' else ''} = {x.p:.3g} < "
               f"{x.level:.3g})" for k, x in last.decided.items() if x.outcome != "futile"]
    futile = [f"{f.factor}={k} at look {x.look + 1} ({futile_reason(x, f)})"
              for k, x in last.decided.items() if x.outcome == "futile"]
    left = (f" Left out of the design: {', '.join(f'{f.factor}={k}' for k in f.left_out)} (a run diverged; see the "
            f"table)." if f.left_out else "")
    stop = ("every other setting was decided against the leader" if last.done and last.index < len(d.plan) - 1
            else "its last look")
    return (f"Adaptive seeds (SEEDS=auto): looks at {'/'.join(map(str, d.plan))} seeds per setting (the last is the "
            f"cap), each at its nominal level ({' / '.join(f'{x:.2g}' for x in levels)} for one pair: O'Brien–Fleming "
            f"spending of α = {ALPHA} over the looks; with r pairs still standing the smallest p is tested at the "
            f"level of α / r spent the same way, so the chance of any false decision at any look is at most α); a "
            f"setting decided against the leader, or that no number of seeds up to the cap could decide, trains no "
            f"more seeds. Stopped at look {last.index + 1} ({stop}); seeds: {seeds}. "
            + ("Decided: " + "; ".join(crossed) + "." if crossed else "Nothing was decided.")
            + (" Stopped undecided (futile): " + "; ".join(futile) + "." if futile else "") + left)


LUCKY_PERMUTATIONS = 1000   # draws of the flag's permutation test (seeded: the same answer on every call)


def lucky_draw(correct: np.ndarray, level: float = 0.05) -> tuple[float, float] | None:
    """(the runs' s.d. of accuracy, the s.d. coin flips alone give one run) where, from 3 seeds on, the runs
    agree more closely than coin flips would let them: the seed × image coin flips set a floor on how far runs
    of one setting differ, and a spread under it is a draw whose interval is likely too narrow. The test is
    exact given each image's count of right answers over the runs: under coin flips alone (each image right or
    wrong in each run independently) every way of placing an image's right answers among the runs is equally
    likely, so the runs' spread is compared with its spread over LUCKY_PERMUTATIONS such placements; the flag
    fires where at most `level` of them spread as little (counting ties against the flag)."""
    runs = len(correct)
    if runs < 3:
        return None
    n = correct.shape[1]
    coin = float(correct.var(0, ddof=1).mean()) / n
    right = correct.sum(0)
    border = (right > 0) & (right < runs)   # images every run got right, or none did, place no answer
    if coin <= 0 or not border.any():
        return None
    seen = float(correct.sum(1).var(ddof=1))
    rng = np.random.default_rng(0)
    keys = rng.random((LUCKY_PERMUTATIONS, runs, int(border.sum())))
    # an image's right answers go to the runs holding its `right` smallest keys
    at = np.broadcast_to(right[border].astype(int) - 1, (LUCKY_PERMUTATIONS, 1, keys.shape[2]))
    cut = np.take_along_axis(np.sort(keys, 1), at, 1)
    placed = (keys <= cut).sum(2) + correct[:, ~border].sum(1)    # each placement's runs' totals
    spread = placed.var(1, ddof=1)
    if (np.sum(spread <= seen + 1e-9) + 1) / (LUCKY_PERMUTATIONS + 1) <= level:
        return math.sqrt(seen) / n, math.sqrt(coin)
    return None


def _mean_parts(parts: list[Components]) -> Components | None:
    if not parts:
        return None
    return Components(*(float(np.mean([getattr(p, name) for p in parts])) for name in ("seed", "seed_image", "image")))


def _mark_chance(f: SweepFindings, ok: pd.DataFrame) -> None:
    """Flag settings whose mean accuracy is within noise of guessing (`stats.at_chance`)."""
    classes = pd.to_numeric(ok["num_classes"], errors="coerce").dropna() if "num_classes" in ok else pd.Series([])
    if classes.empty:
        return
    f.chance = 1.0 / float(classes.iloc[0])
    for s in f.settings:
        s.at_chance = at_chance(s.acc.mean, f.chance, f.test_size)


def _power(f: SweepFindings, ok: pd.DataFrame, factor: str) -> None:
    """Seeds per setting that would detect POWER_DELTA at POWER: the pooled variance of the runs'
    accuracies between seeds (coin flips included) and the variance the finite test set adds to a
    difference net of the coin flips (mean over pairs), which more seeds do not remove."""
    groups = [g["test_acc"].astype(float) for _, g in ok.groupby(factor) if len(g) >= 2]
    variances = [g.var(ddof=1) for g in groups]
    seed_var = float(np.mean(variances)) if variances else 0.0
    image_var = f.pair_parts.image if f.pair_parts is not None else 0.0
    m = len(f.comparisons or [])
    f.seed_sd = math.sqrt(seed_var)
    tested = [c for c in f.comparisons or [] if not c.identical and c.parts is not None]
    seeds = {s.value: len(s.seeds) for s in f.settings}
    # every pair compared seed by seed: a seed's difference varies as var(d_s), not as two independent runs
    paired_var = (float(np.mean([(c.parts.seed + c.parts.seed_image) * seeds[c.a] for c in tested]))
                  if tested and all(c.paired for c in tested) else None)
    f.seeds_for_delta = seeds_needed(seed_var, image_var, POWER_DELTA, m, paired_var=paired_var)
    # the seed variance is known to its chi-square interval (pooled over settings); the seeds needed with it
    df = sum(len(g) - 1 for g in groups)
    if df and seed_var > 0:
        scale = [df / sps.chi2.ppf(q, df) for q in (0.975, 0.025)]
        f.seed_sd_range = (math.sqrt(seed_var * scale[0]), math.sqrt(seed_var * scale[1]))
        f.seeds_range = tuple(seeds_needed(seed_var * k, image_var, POWER_DELTA, m,
                                           paired_var=None if paired_var is None else paired_var * k) for k in scale)
    f.floor = detectable_difference(math.sqrt(image_var), m)


def _test_size(ok: pd.DataFrame) -> int | None:
    if "test_size" not in ok or ok["test_size"].isna().all():
        return None
    return int(ok["test_size"].dropna().iloc[0])


def _cost_spreads(phase: pd.DataFrame | None, ok: pd.DataFrame, factor: str, order: list) -> tuple[dict, dict]:
    """({value: figures} of the inference step, {value: figures} of the training step): each setting's
    figures are the cost-phase rows of its model (and, for the training step, its batch size), so a factor
    the cost table does not record (a training field) finds them too."""
    if phase is None or phase.empty:
        return {}, {}
    keys = phase.apply(lambda r: model_key(ViTConfig.from_row(r)), axis=1)
    infer, train = {}, {}
    for value in order:
        runs = ok[ok[factor] == value]
        if runs.empty:
            continue
        mine = phase[keys == model_key(ViTConfig.from_row(runs.iloc[0]))]
        batch = pd.to_numeric(runs["batch_size"], errors="coerce").dropna() if "batch_size" in runs else pd.Series()
        steps = mine[mine["mode"] == "train"]
        if len(batch) and (steps["batch_size"] == batch.iloc[0]).any():
            steps = steps[steps["batch_size"] == batch.iloc[0]]
        infer[value] = spreads(mine[mine["mode"] == "infer"], ["mode"]).get(("infer",), {}) if len(mine) else {}
        train[value] = spreads(steps, ["mode"]).get(("train",), {}) if len(steps) else {}
    return infer, train


# --- sentences -------------------------------------------------------------------------------------

def pct(x: float) -> str:
    return f"{100 * x:.2f}"


def interval_text(i: Interval) -> str:
    return f"{pct(i.mean)} [{pct(i.low)}, {pct(i.high)}]" if not math.isnan(i.low) else pct(i.mean)


def verdict_sentence(f: SweepFindings) -> str:
    if f.verdict is None:
        return f"**No verdict**: {f.no_test}. Intervals only; no setting is named best."
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
        lines.append("◊ possibly a lucky draw: its runs agree more closely than the coin flips on borderline images "
                     "alone let runs of one setting agree 95 % of the time (" + "; ".join(
                         f"{s.value}: s.d. {100 * s.lucky[0]:.2f} against {100 * s.lucky[1]:.2f} points"
                         for s in lucky) + "), so its interval is likely too narrow; more seeds would show.")
    lines += ["", *speed, "", f"Speed: {f.cost_source}, median [Q1, Q3] (busy %: GPU utilisation from NVML on "
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


OUTCOME_WORDS = {"better": "a better", "worse": "b better", "equivalent": "equivalent", "inconclusive": "inconclusive",
                 "identical": "identical"}


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
        repeated = 1 - nominal_levels(f.design.plan, ALPHA)[last.index]
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
        if outcome == "inconclusive" and not at:
            at = _undecided(f, c)
            labelled = labelled or bool(at)
        low, high = pair_interval(f, c)
        p, p_equiv = (c.p_holm, c.p_equiv_holm) if last is None else (c.p, c.p_equiv)
        lines.append(f"| {c.a} | {c.b} | {100 * c.diff:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]{mark} | "
                     f"{p:.3g} / {p_equiv:.3g} | {win} | {OUTCOME_WORDS[outcome]}{at} |")
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
    return "\n".join(lines + [""] + [f"_{n}_" for n in notes])


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


def setting_rows(f: SweepFindings) -> list[dict[str, Any]]:
    """One dict per setting, for the figure: value, accuracy interval, cost spreads, and `vs_best`: the setting's
    difference from the verdict's best setting, (difference, low, high) as fractions from the paired comparison
    the verdict tests ((0, 0, 0) for the best itself; None where the sweep has no comparisons or no verdict), and
    `decided`: what the verdict says of the setting against the best ("best", "worse", "equivalent", "identical",
    "inconclusive"; None without a verdict)."""
    against = _against_best(f)
    v = f.verdict
    decided = {} if v is None else {v.best: "best", **{s: "worse" for s in v.beats},
                                    **{s: "equivalent" for s in v.equivalent}, **{s: "identical" for s in v.identical},
                                    **{s: "inconclusive" for s in v.inconclusive}}
    return [{"value": s.value, "acc": s.acc, "gmacs": s.gmacs, "infer": s.infer.get("throughput_img_s"),
             "train": s.train.get("throughput_img_s"), "mem": s.train.get("peak_mem_mb"), "train_s": s.train_s,
             "reused": bool(s.reused_from), "vs_best": against.get(s.value), "best": f.verdict.best if against else None,
             "margin": f.margin, "decided": decided.get(s.value)}
            for s in f.settings]


def _against_best(f: SweepFindings) -> dict[Hashable, tuple[float, float, float]]:
    """{setting: (its accuracy − the best's, low, high)} from the comparisons with the verdict's best setting;
    empty unless every other setting has one."""
    if f.verdict is None or not f.comparisons:
        return {}
    best, found = f.verdict.best, {f.verdict.best: (0.0, 0.0, 0.0)}
    for c in f.comparisons:
        low, high = pair_interval(f, c)
        if c.a == best:
            found[c.b] = (-c.diff, -high, -low)
        elif c.b == best:
            found[c.a] = (c.diff, low, high)
    return found if all(s.value in found for s in f.settings) else {}


def pair_interval(f: SweepFindings, c: Comparison) -> tuple[float, float]:
    """The interval the pair table prints for a pair: its own 95 % one, or under a sequential design the repeated
    confidence interval at the level of the look the design stopped at."""
    if f.design is None or f.design.final is None:
        return c.low, c.high
    return c.interval(1 - nominal_levels(f.design.plan, ALPHA)[f.design.final.index])
