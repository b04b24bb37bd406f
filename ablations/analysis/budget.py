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

STILL_LEARNING = 0.01   # a last epoch that raised test accuracy by more than this (mean over runs): not converged


FAR_FROM_FIT = 0.5   # a last training loss above this share of the loss of guessing (ln classes): not converged


FAR_BELOW = 0.01   # a setting whose runs reach this much less than the same model trained longer: not converged


@dataclass(frozen=True)
class Shortfall:
    """A setting whose runs reach less than the same model trained for more epochs."""
    factor: str
    value: object
    acc: float          # mean test accuracy of this budget's runs
    epochs: float
    runs: int
    longer_acc: float   # mean test accuracy of the longest budget with two runs or more
    longer_epochs: float
    longer_runs: int


@dataclass(frozen=True)
class Convergence:
    """Why a sweep's runs had not converged (None fields: that reason does not hold): `gain`, the mean rise of
    test accuracy over the last of `epochs` epochs, where above STILL_LEARNING; `loss`, the mean last training
    loss, where above FAR_FROM_FIT of ln `classes`; `below`, the settings below a longer budget."""
    epochs: int
    gain: float | None = None
    loss: float | None = None
    classes: int | None = None
    below: tuple[Shortfall, ...] = ()


def below_longer_budget(ok: pd.DataFrame, pool: pd.DataFrame, factor: str) -> tuple[Shortfall, ...]:
    """Where the same models (same model, recipe and data but for the seed, precision and epochs) were also
    trained for more epochs, under this OUT, the settings whose runs here reach less by more than FAR_BELOW
    (a one-sided Welch test of that shortfall at 5 %, two runs or more on each side); () where none does or none
    was trained longer."""
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
            far = gap > FAR_BELOW
        else:
            far = st.ttest_ind(there - FAR_BELOW, here, equal_var=False, alternative="greater").pvalue < 0.05
        if far:
            said.append(Shortfall(factor, value, float(here.mean()), float(epochs), len(here), float(there.mean()), most,
                                  len(there)))
    return tuple(said)


def still_learning(history: pd.DataFrame, run_ids: pd.Series, classes: int | None = None,
                   below: tuple[Shortfall, ...] = ()) -> Convergence | None:
    """Why the runs had not converged, or None where they had: still learning at their last epoch (test accuracy
    up by more than STILL_LEARNING over it, mean over runs), or, given the task's `classes`, ended far from fitting
    their training set (mean last training loss above FAR_FROM_FIT of ln classes, the loss of guessing: a cosine
    schedule flattens the last epoch's gain, so the first rule alone misses a budget far too short). `below`:
    `below_longer_budget`'s settings, a third reason (and enough alone)."""
    mine = history[history["run_id"].astype(str).isin(set(run_ids))] if {"run_id", "epoch", "test_acc"} <= set(history) else None
    if (mine is None or mine.empty) and not below:
        return None
    mine = mine if mine is not None else pd.DataFrame(columns=["run_id", "epoch", "test_acc"])
    gains, losses = [], []
    for _, run in mine.sort_values("epoch").groupby("run_id"):
        acc = pd.to_numeric(run["test_acc"], errors="coerce").dropna().to_numpy()
        if len(acc) >= 2:
            gains.append(acc[-1] - acc[-2])
        loss = pd.to_numeric(run["train_loss"], errors="coerce").dropna().to_numpy() if "train_loss" in run else []
        if len(loss):
            losses.append(loss[-1])
    epochs = int(pd.to_numeric(mine["epoch"], errors="coerce").max()) if len(mine) else 0
    far = bool(classes and classes > 1 and losses and float(np.mean(losses)) > FAR_FROM_FIT * math.log(classes))
    rising = bool(gains) and float(np.mean(gains)) > STILL_LEARNING
    if not (rising or far or below):
        return None
    return Convergence(epochs, float(np.mean(gains)) if rising else None, float(np.mean(losses)) if far else None,
                       classes if far else None, tuple(below))
