"""Whether a sweep's runs are exchangeable across the sittings they were trained in.

A verdict pools each setting's runs as draws of one experiment. Runs of one run id can come from different
sittings: another commit of vitbench, another host or CPU, another thread count or precision (a sweep resumed
later, or runs shared with other sweeps through their run ids). Where that changed what a run computes, or
where the runs of a sitting are otherwise unlike the others, the pooled mean carries it. A sitting here is
one combination of the row columns in SITTING_COLUMNS. A sweep's settings share their seeds, and a seed lifts
or lowers every setting's run of it alike, so the seed is the unit of the test, not the run. Where the sittings
split the sweep by seed (a sweep extended later with more seeds), each seed's mean distance from its settings'
means is compared between sittings (one-way ANOVA); where some seed's runs sit in two sittings, an F test of
setting + seed + sitting against setting + seed (least squares; statsmodels' `compare_f_test`, the sittings'
columns counted by the design's rank). Where every setting was trained in a sitting of its own, no test can
tell the settings' differences from the sittings', and that is said instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ablations.results.store import ok_rows

SITTING_COLUMNS = ("git_sha", "host", "device_name", "torch_threads", "dtype")
WORDS = {"git_sha": "commit", "host": "host", "device_name": "processor", "torch_threads": "thread count",
         "dtype": "precision"}
ALPHA_SITTINGS = 0.05


@dataclass(frozen=True)
class SittingCheck:
    """sittings: how many; varied: {column word: distinct values}; f, p: the F test of a sitting effect with the
    settings' differences taken out (None where no setting spans two sittings, or too few runs to test); runs: runs
    tested; confounded: every setting's runs are in one sitting of their own (no test can tell the two apart)."""
    sittings: int
    varied: dict[str, int]
    f: float | None
    p: float | None
    runs: int
    confounded: bool = False

    @property
    def differ(self) -> bool:
        return self.p is not None and self.p < ALPHA_SITTINGS

    def describe(self) -> str:
        parts = ", ".join(f"{n} {word}{'s' if n > 1 else ''}" for word, n in self.varied.items())
        return f"{self.sittings} sittings ({parts})"


def check_sittings(ok: pd.DataFrame, factor: str) -> SittingCheck | None:
    """The sitting check of a sweep's ok rows (`factor`: the column that names each row's setting); None where
    all its runs come from one sitting or the rows cannot say."""
    columns = [c for c in SITTING_COLUMNS if c in ok and ok[c].notna().any()]
    if not columns or factor not in ok or len(ok) < 3:
        return None
    cells = ok[columns].apply(lambda c: c.map(lambda v: "" if v is None or v != v else str(v)))   # blank: unknown
    sitting = cells.agg("|".join, axis=1)
    if sitting.nunique() < 2:
        return None
    known = {c: cells.loc[cells[c] != "", c].nunique() for c in columns}   # a blank: rows from before the column
    varied = {WORDS[c]: int(n) for c, n in known.items() if n > 1}
    data = pd.DataFrame({"acc": 100 * pd.to_numeric(ok["test_acc"], errors="coerce"),
                         "setting": ok[factor].astype(str), "sitting": sitting,
                         "seed": ok["seed"].astype(str) if "seed" in ok else ok.index.astype(str)}).dropna()
    spanning = (data.groupby("setting")["sitting"].nunique() > 1).any()
    if not spanning:
        return SittingCheck(int(sitting.nunique()), varied, None, None, len(data), confounded=True)
    test = _within_seeds(data) if (data.groupby("seed")["sitting"].nunique() > 1).any() else _between_seeds(data)
    if test is None:
        return SittingCheck(int(sitting.nunique()), varied, None, None, len(data))
    return SittingCheck(int(sitting.nunique()), varied, test[0], test[1], len(data))


def _within_seeds(data: pd.DataFrame) -> tuple[float, float] | None:
    """Sittings that differ within a seed (settings of one seed trained at different times): the F test of the
    sitting with each setting's and each seed's effect taken out (a seed lifts or lowers every setting's run of
    it alike), from the runs of seeds held in two sittings or more."""
    import warnings

    import statsmodels.formula.api as smf

    one = data["setting"].nunique() == 1
    blocks = "C(seed)" if one else "C(setting) + C(seed)"
    with warnings.catch_warnings():   # a sitting that holds one setting alone leaves the design rank-deficient: the
        warnings.simplefilter("ignore")   # nested test below counts the sittings' columns by the matrix's rank
        full = smf.ols(f"acc ~ {blocks} + C(sitting)", data).fit()
        reduced = smf.ols(f"acc ~ {blocks}", data).fit()
        if full.df_resid < 1 or full.df_model <= reduced.df_model:
            return None
        f, p, _ = full.compare_f_test(reduced)
    return float(f), float(p)


PERMUTATIONS = 2000   # draws of the between-seeds test's null (seeded: the same answer on every call)


def _between_seeds(data: pd.DataFrame) -> tuple[float, float] | None:
    """Sittings that split a sweep by seed (a sweep extended later with more seeds): the seed is the unit, since
    the settings' runs of one seed share its draw. Each seed's mean distance of its runs from their settings'
    means, compared between sittings by the one-way ANOVA F, its p from PERMUTATIONS random reassignments of the
    sittings to the seeds (exact where the seeds are exchangeable, whatever their spread's shape); None with
    fewer than two seeds in some sitting."""
    from scipy import stats as sps

    residual = data["acc"] - data.groupby("setting")["acc"].transform("mean")
    per_seed = pd.DataFrame({"r": residual, "seed": data["seed"], "sitting": data["sitting"]}).groupby("seed").agg(
        r=("r", "mean"), sitting=("sitting", "first"))
    groups = [g["r"].to_numpy() for _, g in per_seed.groupby("sitting")]
    if len(groups) < 2 or min(len(g) for g in groups) < 2:
        return None
    f = float(sps.f_oneway(*groups).statistic)
    if f != f:
        return None
    values, labels = per_seed["r"].to_numpy(float), per_seed["sitting"].to_numpy()
    rng = np.random.default_rng(0)
    # F grows with the between-sittings sum of squares Σ_k S_k² / n_k (the total is fixed under permutation)
    shuffled = np.stack([rng.permutation(labels) for _ in range(PERMUTATIONS)])
    between = lambda lab: sum((np.where(lab == k, values, 0.0).sum(-1) ** 2) / np.sum(labels == k)  # noqa: E731
                              for k in np.unique(labels))
    seen, null = between(labels), between(shuffled)
    exceed = int(np.sum(null >= seen * (1 - 1e-12)))
    return f, (exceed + 1) / (PERMUTATIONS + 1)


def sweeps_of_runs(tables: dict[str, pd.DataFrame]) -> dict[str, set[str]]:
    """{run_id: the sweeps whose shown ok rows hold it}."""
    found: dict[str, set[str]] = {}
    for name, table in tables.items():
        for run in ok_rows(table)["run_id"].astype(str):
            found.setdefault(run, set()).add(name)
    return found


def shared_settings(sweep: str, factor: str, verdict, ok: pd.DataFrame,
                    sweeps_of: dict[str, set[str]]) -> list[tuple[Any, list[str]]]:
    """[(setting, the other sweeps whose shown rows hold its runs)] for each setting a verdict decided (the best,
    those it beats, those equivalent to it) whose runs other sweeps share through their run ids."""
    if verdict is None or not sweeps_of or not (verdict.beats or verdict.equivalent):
        return []
    found = []
    for value in [verdict.best, *verdict.beats, *verdict.equivalent]:
        runs = ok.loc[ok[factor] == value, "run_id"].astype(str)
        others = sorted(set().union(*(sweeps_of.get(r, set()) for r in runs)) - {sweep})
        if others:
            found.append((value, others))
    return found
