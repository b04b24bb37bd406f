"""`python -m ablations compare A B`: the same sweeps run twice, point by point.

Two result folders (OUT) that ran the same sweeps under different conditions, e.g. `GRAPHS=1` against
`GRAPHS=0`, two torch versions or two machines, are matched run by run: the model, training settings,
dataset and seed (`experiments.point_key`), not the device, the step kind, the precision or the packing, so a
GPU's bf16 runs meet a CPU's fp32 runs of the same points and packed members meet runs trained alone, and each
side's precision and device kind (`dtype_a`, `dtype_b`), CPU model or GPU name (`device_a`, `device_b`: the same
seed can train to other floats on another model's kernels) and packing (`packing_a`, `packing_b`: alone, packed, or packed
N wide) are named. For each point (the runs that differ only
by seed) it gives the mean test accuracy of each folder over the seeds both have, their difference with
an interval over the seeds (paired by seed) and the test images, each source of variation counted
once (`stats.paired_difference`, on the saved per-image predictions), and the mean `train_util_pct` and
`train_time_s` of each. The intervals hold at 95 % jointly over the distinct points compared (Bonferroni:
each at 1 − 0.05 / m for m points), so a point is called higher or lower only when its interval excludes
0 with the whole table's chance of a false call at most 5 %.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from ablations.analysis.predictions import load_runs
from ablations.analysis.stats import ALPHA, paired_difference
from ablations.results.experiments import HOW, device_names, point_key
from ablations.results.store import SweepPaths, Tables, sweep_names
from bench.training.recipe import TrainConfig
from vit import ViTConfig

# what defines a point: the model, the dataset, the whole training recipe and the starting weights (how it was
# computed aside: runs of one point in two precisions, or packed and alone, are compared, each named)
POINT_COLUMNS = ([f.name for f in dataclasses.fields(ViTConfig)] + ["dataset"]
                 + [f.name for f in dataclasses.fields(TrainConfig) if f.name not in HOW] + ["init"])


def _finished(read: Tables, sweep: str) -> pd.DataFrame:
    """A table's finished runs, one row each (`Tables.finished`); empty for a table without rows or the columns."""
    rows = read.rows(sweep)
    if rows.empty or not {"run_id", "status", "test_acc"} <= set(rows.columns):
        return pd.DataFrame(columns=["run_id", "status", "test_acc"])
    return read.finished(sweep)


def _keyed(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with their `point_key` (what a run is, its precision aside) as `key`; rows without one left out,
    and of rows sharing one the last."""
    if rows.empty:
        return rows.assign(key=pd.Series(dtype=object))
    keyed = rows.assign(key=[point_key(r) for r in rows.to_dict("records")])
    return keyed[keyed["key"].notna()].drop_duplicates("key", keep="last")


def _trained_in(rows: pd.DataFrame) -> str:
    """'bf16 on cuda', 'fp32 on cpu': the precision and device kind of the rows (several joined by ' + ')."""
    dtype = rows["dtype"].astype(str) if "dtype" in rows else pd.Series("?", index=rows.index)
    device = rows["device"].astype(str).str.split(":").str[0] if "device" in rows else pd.Series("?", index=rows.index)
    return " + ".join(sorted({f"{d} on {v}" for d, v in zip(dtype, device)}))


def differing_devices(table: pd.DataFrame) -> tuple[str, str] | None:
    """(A's, B's) CPU models or GPU names in `compare_outs`' table, where both sides recorded one and they differ."""
    models = [" + ".join(sorted({d for d in table[c] if d})) if c in table else "" for c in ("device_a", "device_b")]
    return (models[0], models[1]) if all(models) and models[0] != models[1] else None


def _packing(rows: pd.DataFrame) -> str:
    """'alone', 'packed', 'packed 3 wide': how the rows' runs were packed (several joined by ' + ')."""
    def one(packed, width) -> str:
        if pd.isna(packed) or not int(float(packed)):
            return "alone"
        return f"packed {int(float(width))} wide" if pd.notna(width) and int(float(width)) else "packed"
    packed = rows["packed"] if "packed" in rows else pd.Series(float("nan"), index=rows.index)
    width = rows["pack_width"] if "pack_width" in rows else pd.Series(float("nan"), index=rows.index)
    return " + ".join(sorted({one(p, w) for p, w in zip(packed, width)}))


def _sortable(column: pd.Series) -> pd.Series:
    """A column's values as they sort: numbers by value where the whole column is numeric, else as text."""
    numeric = pd.to_numeric(column, errors="coerce")
    return numeric if numeric.notna().sum() == column.notna().sum() else column.astype(str)


def _shown(value):
    """A point's value as a spec writes it: a whole number read back from a table as a float (mlp_ratio 1.0) as 1."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def compare_outs(a: Path, b: Path, tables: tuple[Tables, Tables] | None = None) -> pd.DataFrame:
    """One row per point that both folders ran; ValueError if they share no finished run. `tables`: the two
    folders' tables as the caller read them (else read here)."""
    read_a, read_b = tables or (Tables(a), Tables(b))
    found = []
    for sweep in sweep_names(a):
        if not SweepPaths.of(b, sweep).rows.exists():
            continue
        rows_a, rows_b = _keyed(_finished(read_a, sweep)), _keyed(_finished(read_b, sweep)).set_index("key")
        if rows_a.empty or rows_b.empty:
            continue
        rows_a = rows_a[rows_a["key"].isin(rows_b.index)]
        keys = [c for c in POINT_COLUMNS if c in rows_a.columns]
        # a blank cell (an older table that did not record the column) matches any value, as in `experiments`
        varying = [c for c in keys if rows_a[c].nunique(dropna=True) > 1]  # the others are one value per table
        if varying:   # the points in the order of their settings, whatever order the runs finished in
            rows_a = rows_a.sort_values(varying, kind="stable", key=_sortable)
        rows_a = rows_a.assign(point=[", ".join(f"{c}={_shown(v)}" for c, v in zip(varying, values)) or "all"
                                      for values in rows_a[varying].itertuples(index=False)])
        rows_b = rows_b.loc[rows_a["key"]].assign(point=rows_a["point"].to_numpy())  # same runs, same order
        runs_a, _ = load_runs(rows_a, "point", SweepPaths.of(a, sweep).preds)
        runs_b, _ = load_runs(rows_b.reset_index(), "point", SweepPaths.of(b, sweep).preds)
        for point, runs in rows_a.groupby("point", sort=False):
            other = rows_b.loc[runs["key"]]
            row = {"sweep": sweep, "point": point, "seeds": len(runs), "acc_a": runs["test_acc"].mean(),
                   "acc_b": other["test_acc"].mean(), "dtype_a": _trained_in(runs), "dtype_b": _trained_in(other),
                   "packing_a": _packing(runs), "packing_b": _packing(other),
                   "device_a": " + ".join(device_names(runs)), "device_b": " + ".join(device_names(other))}
            row["diff_pts"] = 100 * (row["acc_a"] - row["acc_b"])
            comparison, same = None, False
            if runs_a and runs_b and runs_a[point].correct.shape == runs_b[point].correct.shape:
                same = bool(np.array_equal(runs_a[point].preds, runs_b[point].preds))
                comparison = None if same else paired_difference(runs_a[point].correct, runs_b[point].correct)
            for column, short in (("train_util_pct", "util"), ("train_time_s", "time")):
                if column in runs and column in other:
                    row[f"{short}_a"], row[f"{short}_b"] = runs[column].mean(), other[column].mean()
            found.append((row, comparison, same, frozenset(runs["run_id"].astype(str))))
    if not found:
        raise ValueError(f"{a} and {b} have no finished run in common (same sweep table, same model, recipe, data "
                         f"and seed)")
    # one family of intervals over the distinct points that get one (a point shared by sweeps is the same runs;
    # a point with the same predictions on both sides, or without predictions, gets none)
    family = len({runs for _, c, _, runs in found if c is not None})
    for row, comparison, same, _ in found:
        low = high = float("nan")   # the same predictions: no interval (blank), not one of width 0
        if comparison is not None:
            low, high = (100 * x for x in comparison.interval(1 - ALPHA / family))
        row.update(low_pts=low, high_pts=high, family=family, verdict=(
            "identical predictions" if same else "no predictions to bound it" if low != low else
            "same within noise" if low <= 0 <= high else "A higher" if low > 0 else "B higher"))
    return pd.DataFrame([row for row, _, _, _ in found])
