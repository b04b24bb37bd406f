"""The runs' saved test predictions as the comparisons read them: per setting, each run's seed, its predicted
class for every test image and whether that was right; or why they cannot be compared image by image."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ablations.results.store import load_preds
from bench.io.csvio import skipped


@dataclass
class Runs:
    """One setting's saved test answers, a row per run in table order: the run's seed, its predicted class
    for every test image and whether that was right."""
    seeds: list[int]
    preds: np.ndarray      # (runs, n) predicted classes
    correct: np.ndarray    # (runs, n) 0/1


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
