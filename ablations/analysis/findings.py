"""What a sweep's tables support: per setting an accuracy interval and cost spreads, across settings the
paired comparisons and a verdict, as numbers. Computed from a sweep's rows and its runs' saved test
predictions (`predictions`; `ablations.analysis.stats`, `bench.rounds`, the SEEDS=auto design replayed by
`ablations.analysis.sequential`); `wording` writes their sentences and tables, `report.py` lays them out."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablations.analysis.predictions import load_runs
from ablations.analysis.sequential import Design, gather, replay_gathered
from ablations.analysis.stats import (
    MARGIN,
    MIN_SEEDS,
    Comparison,
    Components,
    Interval,
    Outcome,
    Verdict,
    accuracy_interval,
    at_chance,
    compare_settings,
    contrast,
    detectable_difference,
    seeds_needed,
    verdict,
)
from ablations.results.experiments import device_names, starved
from ablations.results.schema import uncontended
from ablations.results.store import SweepPaths, Tables, cpu_timed, model_key, ok_rows, spreads
from bench.io.csvio import skipped
from bench.rounds import Spread
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
    starved: int = 0                                           # runs that got too little CPU while they trained
    devices: tuple[str, ...] = ()                              # the CPU models or GPU names its runs trained on


@dataclass(frozen=True)
class CostSource:
    """Where a sweep's speed figures come from: its newest cost phase's `rounds` (None: no cost phase kept), the
    phase's device where not the runs' (else ""), how many of its `steps` timed steps ran `loaded` (while other
    processes took the machine), and whether some items are read by their CPU time (`cpu_time`: on the CPU,
    with too few quiet rounds) rather than left out."""
    rounds: int | None
    device: str = ""
    loaded: int = 0
    steps: int = 0
    cpu_time: bool = False   # some items' figures are their CPU time over every round (too few quiet ones)


@dataclass(frozen=True)
class NoTest:
    """Why a sweep has no test: "one setting" (`lost`: the settings none of whose runs finished, if any); "one seed"
    (`some`: only some settings have one); "at chance" (`best`, `best_acc`: the best setting, within noise of
    guessing); "unpaired" (`reason`: why its runs' test predictions cannot be compared)."""
    kind: str
    some: bool = False
    best: Any = None
    best_acc: float = math.nan
    reason: str = ""
    lost: tuple = ()


@dataclass(frozen=True)
class DesignNote:
    """Why a sweep's SEEDS=auto design was not used: "other experiment" (the design file `file` is another
    experiment's), or "unfinished" (look `look` of it needs `missing` runs the table lacks)."""
    kind: str
    file: str = ""
    look: int = 0
    missing: int = 0


@dataclass
class SweepFindings:
    factor: str
    settings: list[Setting]
    test_size: int | None
    cost: CostSource                       # where the speed figures come from
    comparisons: list[Comparison] | None   # None: no test (why in `no_test`)
    verdict: Verdict | None
    no_test: NoTest | None = None
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
    unread: int = 0                           # SEEDS=auto: finished runs of the table the design did not read
    margin_asked: float | None = None         # SEEDS=auto: the report's margin where it differs from the design's


def analyse(rows: pd.DataFrame, factor: str, order: list, preds_dir: Path, cost_phase: pd.DataFrame | None,
            margin: float = MARGIN, design: tuple[Design, tuple] | None = None) -> SweepFindings:
    """`design`: a sweep trained with SEEDS=auto, as `adaptive_rows` replayed it (its rows are then the
    design's runs): the comparisons and the verdict are those of its last look."""
    ok = ok_rows(rows)
    test_size = _test_size(ok)
    infer, train = _cost_spreads(cost_phase, ok, factor, order)
    enough = len(order) >= 1 and all((ok[factor] == v).sum() >= MIN_SEEDS for v in order)
    runs, reason = load_runs(ok, factor, preds_dir) if enough else (None, "")
    correct = {k: r.correct for k, r in runs.items()} if runs is not None else None
    settings = [_setting(ok[ok[factor] == value], value, test_size, correct, infer, train) for value in order]
    findings = SweepFindings(factor, settings, test_size, _cost_source(cost_phase, ok), None, None, margin=margin)
    if correct is not None:
        findings.test_size = next(iter(correct.values())).shape[1]
        findings.setting_parts = _mean_parts([contrast([correct[v]], [1.0]).parts for v in order])
    _mark_chance(findings, ok, factor, correct)
    if design is not None and design[0].final is not None:   # where it stopped is said with or without a test
        findings.design, findings.left_out = design
    if len(settings) < 2:
        lost = tuple(dict.fromkeys(v for v in rows[factor] if v not in order)) if factor in rows else ()
        findings.no_test = NoTest("one setting", lost=lost)
        return findings
    lowest = min(len(s.seeds) for s in settings)
    if lowest < MIN_SEEDS:
        findings.no_test = NoTest("one seed", some=not all(len(s.seeds) == 1 for s in settings))
        return findings
    best = max(settings, key=lambda s: s.acc.mean)
    if all(s.at_chance for s in settings):   # the best among them: its runs may be too few to show what another's do
        findings.no_test = NoTest("at chance", best=best.value, best_acc=best.acc.mean)
        return findings
    if runs is None:
        findings.no_test = NoTest("unpaired", reason=reason)
        return findings
    if findings.design is not None:
        findings.comparisons = findings.design.final.comparisons
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


def _setting(g: pd.DataFrame, value: Hashable, test_size: int | None, correct: dict[Hashable, np.ndarray] | None,
             infer: dict, train: dict) -> Setting:
    """One setting's figures from its ok rows `g`."""
    reused = tuple(sorted(g["reused_from"].dropna().astype(str).unique())) if "reused_from" in g else ()
    return Setting(value, sorted(int(s) for s in g["seed"]),
                   accuracy_interval(g["test_acc"], test_size, correct.get(value) if correct else None),
                   int(g["params"].iloc[0]), float(g["gmacs"].iloc[0]), Spread.of(g["train_time_s"].astype(float)),
                   infer.get(value, {}), train.get(value, {}), reused,
                   {c: Spread.of(pd.to_numeric(g[c], errors="coerce")) for c in RUN_FIGURES if c in g},
                   starved=sum(starved(r.to_dict()) for _, r in g.iterrows()),
                   devices=device_names(g))


def _cost_source(cost_phase: pd.DataFrame | None, ok: pd.DataFrame) -> CostSource:
    """Where the speed figures come from."""
    if cost_phase is None:
        return CostSource(None)
    loaded = len(cost_phase) - len(uncontended(cost_phase))
    names = cost_phase["device_name"].dropna().astype(str).unique() if "device_name" in cost_phase else []
    runs_on = set(ok["device_name"].dropna().astype(str)) if "device_name" in ok else set()
    on = str(names[0]) if len(names) == 1 and {names[0]} != runs_on else ""   # said where not the runs'
    every = ok_rows(cost_phase) if "status" in cost_phase else cost_phase
    by_cpu = loaded > 0 and any(cpu_timed(group) for _, group in every.groupby(
        every.apply(lambda r: model_key(ViTConfig.from_row(r)), axis=1).astype(str) + every["mode"].astype(str)))
    return CostSource(int(cost_phase["rounds"].iloc[0]), on, loaded, len(cost_phase), by_cpu)


def analyse_sweep(rows: pd.DataFrame, factor: str, order: list, paths: SweepPaths, cost_phase: pd.DataFrame | None,
                  margin: float = MARGIN, read: Tables | None = None
                  ) -> tuple[SweepFindings, pd.DataFrame, DesignNote | None]:
    """`analyse` of a sweep's table as it was trained: under fixed seeds, or, where the sweep kept a
    SEEDS=auto design (`seed_design.read_design`), on the runs of its looks with the looks' verdict and margin.
    Also the rows analysed and why a design beside the table was not used (None if it was, or there is none).
    `read`: the OUT's record as the caller read it (else the design is read here)."""
    read_rows, design, note, design_margin = as_designed(rows, factor, order, paths, read)
    found = analyse(read_rows, factor, order, paths.preds, cost_phase,
                    margin if design_margin is None else design_margin, design)
    found.adaptive = design_margin is not None
    if design_margin is not None and not math.isclose(design_margin, margin):
        found.margin_asked = margin
    if design is not None:
        found.unread = len(ok_rows(rows)) - len(ok_rows(read_rows))
    return found, read_rows, note


def as_designed(rows: pd.DataFrame, factor: str, order: list, paths: SweepPaths, read: Tables | None = None
                ) -> tuple[pd.DataFrame, tuple[Design, tuple] | None, DesignNote | None, float | None]:
    """A sweep's rows as its analysis reads them: where it kept a SEEDS=auto design of its experiment, the runs of
    that design's looks (`adaptive_rows`: other runs of the table stay out), the design, why a design beside the
    table was not used, and the margin its looks decided with (None: no design, the rows as given)."""
    try:
        design_file = (read or Tables(paths.out)).design(paths.rows.stem)
    except ValueError as err:
        skipped(f"{err}; the sweep is analysed at fixed seeds")
        return rows, None, None, None
    mine = set(rows["experiment_id"].dropna().astype(str)) if "experiment_id" in rows else set()
    if design_file is not None and design_file.get("experiment") and mine and design_file["experiment"] not in mine:
        return rows, None, DesignNote("other experiment", file=paths.design.name), None
    if design_file is None:
        return rows, None, None, None
    rows, design, note = adaptive_rows(rows, factor, order, paths, design_file)
    return rows, design, note, float(design_file["margin"])


def adaptive_rows(rows: pd.DataFrame, factor: str, order: list, paths: SweepPaths, design_file: dict[str, Any]
                  ) -> tuple[pd.DataFrame, tuple[Design, tuple] | None, DesignNote | None]:
    """A sweep trained with SEEDS=auto: its design replayed on the table's runs (`sequential.gather`), the
    rows of the runs the design used (each setting's first seeds of the design file, as many as its last look
    gave it; other runs of the table stay out), and None. A design the table cannot complete (a look needs runs
    that are not there) gives the rows unchanged, no design, and a note that says so."""
    latest = rows.assign(run_id=rows["run_id"].astype(str))
    keyed = [(v, int(seed), str(status), rid) for v, seed, status, rid
             in zip(latest[factor], latest["seed"], latest["status"], latest["run_id"]) if v in order]
    design, left_out = replay_gathered(*gather(keyed, order, paths), design_file)
    if design.need:
        missing = sum(len(v) for v in design.need.values())
        return rows, None, DesignNote("unfinished", look=len(design.looks) + 1, missing=missing)
    used = {(k, s) for k in design.have for s in design_file["seeds"][:design.have[k]]}
    keep = [(v in left_out) or (v, int(seed)) in used for v, seed in zip(rows[factor], rows["seed"])]
    return rows[keep], (design, left_out), None


def design_verdict(design: Design, means: dict[Hashable, float]) -> Verdict:
    """The verdict of a sequential design: the leader of its last look, each other setting as the design
    decided it against that leader (different or equivalent, at the look it crossed that look's level), or
    inconclusive when it never did."""
    last = design.final
    assert last is not None
    found: dict[Outcome, list] = {Outcome.BETTER: [], Outcome.EQUIVALENT: [], Outcome.INCONCLUSIVE: [],
                                  Outcome.IDENTICAL: []}
    others = [k for k in means if k != last.leader and k in design.have] if last.comparisons else []
    for other in others:
        decision = last.decided.get(other)
        if decision is None or decision.outcome == Outcome.FUTILE:
            found[Outcome.INCONCLUSIVE].append(other)
        elif decision.outcome == Outcome.DIFFERENT:
            found[Outcome.BETTER].append(other)
        else:
            found[decision.outcome].append(other)
    tested = [c for c in last.comparisons if not c.identical]
    se = float(np.median([c.se for c in tested])) if tested else math.nan
    df = float(np.median([c.df for c in tested])) if tested else math.inf
    margin = last.comparisons[0].margin if last.comparisons else MARGIN
    beats, equivalent, inconclusive, identical = (tuple(v) for v in found.values())
    return Verdict(last.leader, bool(last.comparisons) and not (equivalent or inconclusive or identical), beats,
                   equivalent, inconclusive, detectable_difference(se, len(last.comparisons), df, last.level), margin,
                   identical, last.tied)


def _mean_parts(parts: list[Components]) -> Components | None:
    if not parts:
        return None
    return Components(*(float(np.mean([getattr(p, name) for p in parts])) for name in ("seed", "seed_image", "image")))


def _mark_chance(f: SweepFindings, ok: pd.DataFrame, factor: str, correct: dict[Hashable, np.ndarray] | None) -> None:
    """Flag settings whose runs are within noise of guessing (`stats.at_chance`)."""
    classes = pd.to_numeric(ok["num_classes"], errors="coerce").dropna() if "num_classes" in ok else pd.Series([])
    if classes.empty:
        return
    f.chance = 1.0 / float(classes.iloc[0])
    for s in f.settings:
        accs = ok.loc[ok[factor] == s.value, "test_acc"].astype(float).to_numpy()
        s.at_chance = at_chance(s.acc.mean, f.chance, f.test_size, accs, correct.get(s.value) if correct else None)


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


def setting_rows(f: SweepFindings) -> list[dict[str, Any]]:
    """One dict per setting, for the figure: value, accuracy interval, cost spreads, and `vs_best`: the setting's
    difference from the verdict's best setting, (difference, low, high) as fractions from the paired comparison
    the verdict tests ((0, 0, 0) for the best itself; None where the sweep has no comparisons or no verdict), and
    `decided`: what the verdict says of the setting against the best ("best", "worse", "equivalent", "identical",
    "inconclusive"; None without a verdict); `chance`: the accuracy of guessing where the setting's is within
    noise of it (`at_chance`), else None."""
    against = _against_best(f)
    v = f.verdict
    decided = {} if v is None else {v.best: "best", **{s: Outcome.WORSE for s in v.beats},
                                    **{s: Outcome.EQUIVALENT for s in v.equivalent},
                                    **{s: Outcome.IDENTICAL for s in v.identical},
                                    **{s: Outcome.INCONCLUSIVE for s in v.inconclusive}}
    return [{"value": s.value, "acc": s.acc, "gmacs": s.gmacs, "infer": s.infer.get("throughput_img_s"),
             "train": s.train.get("throughput_img_s"), "mem": s.train.get("peak_mem_mb"), "train_s": s.train_s,
             "reused": bool(s.reused_from), "vs_best": against.get(s.value), "best": f.verdict.best if against else None,
             "margin": f.margin, "decided": decided.get(s.value), "starved": s.starved, "devices": s.devices,
             "chance": f.chance if s.at_chance else None}
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
    return c.interval(1 - f.design.levels()[f.design.final.index])
