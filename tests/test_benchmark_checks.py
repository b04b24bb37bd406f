"""The check the side-by-side benchmarks (`benchmarks/concurrent_runs.py`, `benchmarks/run_order.py`) make of every
pass: each run's test predictions, training loss and test loss bit for bit the first pass's, and what differs where
they are not — the line that decides `same_as_first`."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def concurrent_runs():
    return benchmark_module("concurrent_runs")


def _pass(losses: dict[str, tuple[float, float]], preds: dict[str, list[int]], status: dict[str, str] | None = None):
    """A pass's table by run id (as `outcome` reads it) and its runs' test predictions."""
    status = status or {}
    table = pd.DataFrame([{"run_id": r, "status": status.get(r, "ok"), "error": "" if status.get(r, "ok") == "ok"
                           else "OutOfMemoryError: CUDA out of memory", "train_loss": tr, "test_loss": te,
                           "sweep": "patch", "patch_size": 4, "num_heads": 4, "depth": 4, "seed": i}
                          for i, (r, (tr, te)) in enumerate(losses.items())]).set_index("run_id")
    return table, {r: np.array(p, dtype=np.int32) for r, p in preds.items()}


LOSSES = {"a": (0.0380, 0.1210), "b": (float("nan"), 0.2), "c": (0.0411, 0.0999)}
PREDS = {"a": [1, 2, 3], "b": [4, 5, 6], "c": [7, 8, 9]}


def test_a_pass_equal_to_the_first_bit_for_bit_is_alike_even_with_a_nan_loss(concurrent_runs, capsys):
    first = _pass(LOSSES, PREDS)
    again = _pass(dict(LOSSES), {r: list(p) for r, p in PREDS.items()})
    assert concurrent_runs.differing(again, first) == {}
    assert concurrent_runs.alike(again, first) and capsys.readouterr().out == ""


def test_each_kind_of_difference_is_named_with_the_run(concurrent_runs, capsys):
    first = _pass(LOSSES, PREDS)
    last_bit = np.nextafter(LOSSES["a"][0], 1.0)            # the smallest change a float64 can make
    losses = {**LOSSES, "a": (last_bit, LOSSES["a"][1])}
    preds = {"a": PREDS["a"], "c": [7, 0, 0]}                 # a failed run leaves no predictions
    got = _pass(losses, preds, status={"b": "oom"})
    found = concurrent_runs.differing(got, first)
    assert set(found) == {"a", "b", "c"}
    assert found["a"].startswith("train_loss ") and "test_loss" not in found["a"]
    assert found["b"] == "status 'oom': OutOfMemoryError: CUDA out of memory"
    assert found["c"] == "2 test predictions"
    assert not concurrent_runs.alike(got, first)
    line = capsys.readouterr().out
    assert line.startswith("  3 of 3 runs not bit for bit the first pass's: patch p=4 h=4 d=4 seed 0 (a): train_loss")


def test_a_run_missing_from_a_pass_is_a_difference(concurrent_runs):
    first = _pass(LOSSES, PREDS)
    fewer = _pass({r: LOSSES[r] for r in ("a", "b")}, {r: PREDS[r] for r in ("a", "b")})
    assert concurrent_runs.differing(fewer, first) == {"c": "missing from this pass"}
    assert concurrent_runs.differing(first, fewer) == {"c": "missing from the first"}


def test_a_combination_with_a_run_that_did_not_finish_gets_no_time_rate_or_ratio(concurrent_runs, capsys):
    """A diverged run stops early: its pass trained fewer steps than counted, so a rate from them would flatter it."""
    combos = [(8, "eager", 1, "kept", 0), (8, "eager", 1, "kept", 24), (8, "eager", 1, "kept", 8)]
    walls = {combos[0]: [12.0, 12.2, 11.8], combos[1]: [4.6, 4.3, 3.8], combos[2]: [5.8, 5.7, 6.3]}
    same = {combos[0]: True, combos[1]: False, combos[2]: True}
    failed = {combos[0]: 0, combos[1]: 54, combos[2]: 0}
    busy = {c: [float("nan")] for c in combos}
    assert concurrent_runs.summarise(combos, walls, same, 12_096, busy, failed) == 1
    lines = capsys.readouterr().out.splitlines()
    header, ok, broken, packed = lines
    assert "not_ok" in header
    assert broken.split()[5:9] == ["—", "—", "—", "—"] and broken.split()[9] == "54"
    assert "×" in packed and packed.split()[5:7] == ["5.8", f"{12_096 / 5.8:,.1f}"]
