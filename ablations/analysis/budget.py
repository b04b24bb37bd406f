"""Whether a sweep's runs had converged: runs still learning at their last epoch, runs far from fitting their
training set, and runs well below the same model trained for more epochs in the same OUT. The numbers only
(`Convergence`); `wording.not_converged` and `wording.unconverged_headline` say them. A verdict on such runs is
this budget's, and its headline says so."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablations.results.experiments import budget_key
from ablations.results.store import ok_rows

STILL_LEARNING = 0.01   # a last epoch that raised a setting's test accuracy by more than this (mean over runs)


FAR_FROM_FIT = 0.25   # a last training loss above this share of the way from the recipe's floor to guessing's loss


@dataclass(frozen=True)
class Shortfall:
    """A setting whose runs reach less than the same model trained for more epochs, by more than `margin`."""
    factor: str
    value: object
    acc: float          # mean test accuracy of this budget's runs
    epochs: float
    runs: int
    longer_acc: float   # mean test accuracy of the longest budget with two runs or more
    longer_epochs: float
    longer_runs: int
    margin: float = 0.005


@dataclass(frozen=True)
class Unsettled:
    """One setting whose runs had not converged (None fields: that reason does not hold): `gain`, the mean rise of
    test accuracy over the last epoch, above STILL_LEARNING; `loss`, the mean last training loss, more than
    FAR_FROM_FIT of the way from `floor` (the least loss the recipe can reach: label smoothing's) to the loss of
    guessing among `classes`."""
    value: object
    gain: float | None = None
    loss: float | None = None
    floor: float = 0.0
    classes: int | None = None


@dataclass(frozen=True)
class Convergence:
    """Whether a sweep's runs had converged, judged setting by setting: `settings`, those still learning or far
    from fitting; `below`, those below a longer budget; `checked`, whether any per-epoch history was there to
    judge by (False: nothing was checked, and the report says so)."""
    epochs: int
    settings: tuple[Unsettled, ...] = ()
    below: tuple[Shortfall, ...] = ()
    checked: bool = True

    @property
    def converged(self) -> bool:
        return not (self.settings or self.below)


def smoothing_floor(smoothing: float, classes: int) -> float:
    """The least cross-entropy a model can reach against labels smoothed by `smoothing` over `classes`: the
    entropy of the smoothed target (0 without smoothing)."""
    if not smoothing or classes < 2:
        return 0.0
    right, other = 1 - smoothing + smoothing / classes, smoothing / classes
    return float(-(right * math.log(right) + (classes - 1) * other * math.log(other)))


def below_longer_budget(ok: pd.DataFrame, pool: pd.DataFrame, factor: str, margin: float = 0.005
                        ) -> tuple[Shortfall, ...]:
    """Where the same models (same model, recipe and data but for the seed, precision and epochs) were also
    trained for more epochs, under this OUT, the settings whose runs here reach less by more than `margin`, the
    sweep's equivalence margin (a one-sided Welch test of that shortfall at 5 %, two runs or more on each side);
    () where none does or none was trained longer."""
    if pool.empty or not {"epochs", "status", "test_acc", "run_id"} <= set(pool) or "epochs" not in ok or factor not in ok:
        return ()
    from scipy import stats as st

    def keyed(rows: pd.DataFrame) -> pd.DataFrame:
        return rows.assign(key=[budget_key(r) for _, r in rows.iterrows()],
                           n_epochs=pd.to_numeric(rows["epochs"], errors="coerce"),
                           acc=pd.to_numeric(rows["test_acc"], errors="coerce")).dropna(subset=["key", "n_epochs", "acc"])

    shortest = pd.to_numeric(ok["epochs"], errors="coerce").min()
    others = ok_rows(pool)
    others = others[~others["run_id"].astype(str).isin(set(ok["run_id"].astype(str)))
                    & (pd.to_numeric(others["epochs"], errors="coerce") > shortest)]   # only longer runs need their keys
    if others.empty:
        return ()
    mine, others = keyed(ok), keyed(others)
    said = []
    for (value, key, epochs), runs in mine.groupby([factor, "key", "n_epochs"], sort=False):
        longer = others[(others["key"] == key) & (others["n_epochs"] > epochs)].drop_duplicates("run_id")
        sizes = longer.groupby("n_epochs")["acc"].size()
        sizes = sizes[sizes >= 2]
        if len(runs) < 2 or sizes.empty:
            continue
        most = float(sizes.index.max())
        there = longer.loc[longer["n_epochs"] == most, "acc"].to_numpy(float)
        here = runs["acc"].to_numpy(float)
        gap = there.mean() - here.mean()
        if there.var() + here.var() == 0:
            far = gap > margin
        else:
            far = st.ttest_ind(there - margin, here, equal_var=False, alternative="greater").pvalue < 0.05
        if far:
            said.append(Shortfall(factor, value, float(here.mean()), float(epochs), len(here), float(there.mean()), most,
                                  len(there), margin))
    return tuple(said)


def still_learning(history: pd.DataFrame, ok: pd.DataFrame, factor: str, classes: int | None = None,
                   below: tuple[Shortfall, ...] = (), order: list | None = None) -> Convergence:
    """Whether each setting's runs (`ok`'s rows, named by `factor`) had converged, from their per-epoch history:
    still learning at their last epoch (test accuracy up by more than STILL_LEARNING over it, mean over the
    setting's runs), or, given the task's `classes`, ended far from fitting their training set (mean last
    training loss more than FAR_FROM_FIT of the way from the recipe's floor, label smoothing's least loss, to
    ln classes, the loss of guessing: a cosine schedule flattens the last epoch's gain, so the first rule alone
    misses a budget far too short). `below`: `below_longer_budget`'s settings, a third reason (and enough
    alone). A setting is judged on its own runs: one that never fitted is not hidden by others that did. The
    settings come in `order` (the sweep's), else as the rows first name them."""
    needed = {"run_id", "epoch", "test_acc"}
    if history.empty or not needed <= set(history) or factor not in ok:
        return Convergence(0, (), tuple(below), checked=False)
    history = history.assign(run_id=history["run_id"].astype(str))
    epochs = int(pd.to_numeric(history.loc[history["run_id"].isin(set(ok["run_id"].astype(str))), "epoch"],
                               errors="coerce").max() or 0) if len(history) else 0
    unsettled = []
    groups = list(ok.groupby(factor, sort=False))
    if order is not None:
        groups.sort(key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    for value, runs in groups:
        mine = history[history["run_id"].isin(set(runs["run_id"].astype(str)))]
        gains, losses = [], []
        for _, run in mine.sort_values("epoch").groupby("run_id"):
            acc = pd.to_numeric(run["test_acc"], errors="coerce").dropna().to_numpy()
            if len(acc) >= 2:
                gains.append(acc[-1] - acc[-2])
            loss = pd.to_numeric(run["train_loss"], errors="coerce").dropna().to_numpy() if "train_loss" in run else []
            if len(loss):
                losses.append(loss[-1])
        smoothing = float(pd.to_numeric(runs.get("label_smoothing", pd.Series(dtype=float)), errors="coerce").fillna(0)
                          .max()) if "label_smoothing" in runs else 0.0
        floor = smoothing_floor(smoothing, classes or 0)
        far = bool(classes and classes > 1 and losses
                   and float(np.mean(losses)) - floor > FAR_FROM_FIT * (math.log(classes) - floor))
        rising = bool(gains) and float(np.mean(gains)) > STILL_LEARNING
        if rising or far:
            unsettled.append(Unsettled(value, float(np.mean(gains)) if rising else None,
                                       float(np.mean(losses)) if far else None, floor, classes if far else None))
    return Convergence(epochs, tuple(unsettled), tuple(below), checked=True)
