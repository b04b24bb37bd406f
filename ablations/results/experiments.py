"""One experiment per table: which rows of a sweep's table may be pooled as seeds of the same settings.

Rows may be averaged over seeds only when they differ in nothing but the seed and the sweep's factor.
A table can hold more than that: a sweep rerun with other EPOCHS, another DATASET or an edited
`[train]` table into the same OUT appends its rows beside the old ones. Each row's experiment is what
it records of its setting (every `ViTConfig` and `TrainConfig` field but those the sweep varies, the
dataset, the starting weights) and its `experiment_id`, which covers the whole training recipe. Tables
written before a column existed leave it blank: a blank id matches any id of the same recorded setting,
and a blank recipe field (one older rows did not record) matches any value. The newest row names the
experiment a report shows; the other rows are left out and named with what differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import pandas as pd

from bench.training.recipe import TrainConfig
from vit import ViTConfig

# always recorded: a blank cell is a value like any other
STRICT = [f.name for f in dataclasses.fields(ViTConfig)] + ["dataset", "epochs", "lr", "dtype", "compile", "init"]
# the rest of the recipe, blank in rows written before it had columns: a blank matches any value
LENIENT = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in STRICT]
RECORDED = STRICT + LENIENT


def _cell(value) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _varied(factor: str | Collection[str]) -> set[str]:
    return {factor} if isinstance(factor, str) else set(factor)


def recorded_setting(row, factor: str | Collection[str]) -> tuple[str, ...]:
    """The setting a row records, but for the field(s) the sweep varies and the seed, as text (a number
    read back from a CSV and the same number in a fresh row compare equal)."""
    varied = _varied(factor)
    return tuple(_norm(_cell(row.get(c))) for c in RECORDED if c not in varied)


def settings_match(a: tuple[str, ...], b: tuple[str, ...], factor: str | Collection[str]) -> bool:
    """Two recorded settings (`recorded_setting`) are one: equal, but where one leaves a LENIENT field blank."""
    varied = _varied(factor)
    columns = [c for c in RECORDED if c not in varied]
    return all(x == y or (c in LENIENT and (not x or not y)) for c, x, y in zip(columns, a, b))


def _norm(text: str) -> str:
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(int(number)) if number.is_integer() else repr(number)


def ids_agree(a: str, b: str) -> bool:
    """Two rows' experiment ids agree when equal, or when one is blank (a table older than the column)."""
    return not a or not b or a == b


def same_experiment(a, b, factor: str | Collection[str]) -> bool:
    """Whether two rows may be pooled as seeds of one experiment: the same recorded setting, and
    experiment ids that agree."""
    return (settings_match(recorded_setting(a, factor), recorded_setting(b, factor), factor)
            and ids_agree(_cell(a.get("experiment_id")), _cell(b.get("experiment_id"))))


def differences(a, b, factor: str | Collection[str]) -> str:
    """What differs between two rows' settings, as 'epochs 1 vs 2, dataset digits vs synthetic'."""
    varied = _varied(factor)
    diffs = []
    for c in RECORDED:
        x, y = _norm(_cell(a.get(c))), _norm(_cell(b.get(c)))
        if c not in varied and x != y and not (c in LENIENT and (not x or not y)):
            diffs.append(f"{c} {_cell(a.get(c)) or '—'} vs {_cell(b.get(c)) or '—'}")
    if not diffs and _cell(a.get("experiment_id")) != _cell(b.get("experiment_id")):
        diffs = ["the training recipe (a [train] field the table does not record)"]
    return ", ".join(diffs)


STARVED_SHARE = 0.7  # a CPU run whose busy share is under this fraction of its threads' share got too little


def starved(row) -> bool:
    """Whether a CPU run was busy well under the share of the cores its threads could use (other work held
    the machine, so its wall time and MFU understate it). A row that records `util_cores` measured its
    busy share against the cores its threads could use (whatever placed it: JOBS, THREADS, Ray); an
    older row measured it against all the process's cores, of which each of JOBS runs had 1 / JOBS."""
    util, jobs, threads = row.get("train_util_pct"), row.get("jobs"), row.get("util_cores")
    jobs = jobs if isinstance(jobs, (int, float)) and jobs == jobs and jobs >= 1 else 1
    if row.get("status") != "ok" or row.get("device") != "cpu" or not isinstance(util, (int, float)) or util != util:
        return False
    share = 1 if isinstance(threads, (int, float)) and threads == threads and threads >= 1 else jobs
    return util < STARVED_SHARE * 100.0 / share


def latest_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """A table's rows that still stand: the last ok row of each run, and the last failure of each run that
    never finished (a failure followed by an ok row of the same run is history, not a failed run)."""
    if rows.empty or "run_id" not in rows or "status" not in rows:
        return rows
    ids = rows["run_id"].astype(str)
    ok = rows["status"] == "ok"
    finished = rows[ok][~ids[ok].duplicated(keep="last")]
    failed = rows[~ok & ~ids.isin(set(ids[ok]))]
    failed = failed[~failed["run_id"].astype(str).duplicated(keep="last")]
    return rows.loc[finished.index.union(failed.index)]


def newest_experiment(rows: pd.DataFrame, factor: str | Collection[str]) -> tuple[pd.DataFrame, list[str]]:
    """(the rows of the experiment of the newest ok row, one sentence per group of rows left out)."""
    if rows.empty:
        return rows, []
    ok = rows.reset_index(drop=True)
    order = ok["started_at"].astype(str) if "started_at" in ok else pd.Series([""] * len(ok))
    succeeded = ok["status"] == "ok" if "status" in ok else pd.Series([True] * len(ok))
    candidates = [i for i in range(len(ok)) if succeeded[i]] or list(range(len(ok)))
    newest = ok.loc[max(candidates, key=lambda i: (order[i], i))]  # started_at has whole seconds: a later line wins ties
    settings = [recorded_setting(r, factor) for _, r in ok.iterrows()]
    ids = ok["experiment_id"].map(_cell) if "experiment_id" in ok else pd.Series([""] * len(ok))
    target_setting = recorded_setting(newest, factor)
    same = [settings_match(s, target_setting, factor) for s in settings]
    target_id = _cell(newest.get("experiment_id"))
    if not target_id:  # the newest row predates experiment ids: take the newest id of its setting, if any
        with_id = [i for i in range(len(ok)) if same[i] and ids[i]]
        target_id = ids[max(with_id, key=lambda i: (order[i], i))] if with_id else ""
    keep = [same[i] and ids_agree(ids[i], target_id) for i in range(len(ok))]
    kept = ok[keep]
    dropped = ok[[not k for k in keep]]
    notes = []
    if len(dropped):
        groups: dict[tuple, list[int]] = {}
        for i in dropped.index:
            groups.setdefault((settings[i], ids[i]), []).append(i)
        for rows in groups.values():
            first = ok.loc[rows[0]]
            notes.append(f"{len(rows)} run(s) of another experiment ({differences(first, newest, factor)}) left "
                         f"out: a table is reported as one experiment, the newest; use another OUT to keep both")
    return kept, notes
