"""One experiment per table: which rows of a sweep's table may be pooled as seeds of the same settings.

Rows may be averaged over seeds only when they differ in nothing but the seed and the sweep's factor.
A table can hold more than that: a sweep rerun with other EPOCHS, another DATASET or an edited
`[train]` table into the same OUT appends its rows beside the old ones. Each row's experiment is its
run's identity (`results.identity.task_key`, what its run id hashes) read back from the row, without the
seed and the fields the sweep varies (`experiment_key`): a blank cell, or a column an older table lacks,
reads as the field's default, exactly as the run id was computed. The newest row names the experiment a
report shows; the other rows are left out and named with what differs.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ablations.results.identity import task_key
from ablations.results.schema import util_share_runs
from ablations.specs import Point
from bench.training.recipe import TrainConfig
from bench.units import count
from vit import ViTConfig


def _cell(value) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


@dataclass(frozen=True)
class DeviceKind:
    """A device by its kind alone, as a row names it (`type`: cpu, cuda, mps, as `torch.device.type`): all that a
    run's identity reads of its device, without loading torch to read a table."""
    type: str


def row_device(row) -> DeviceKind:
    """The kind of device a row's run trained on (its `dtype` of `auto`, in rows that lack it, resolves there)."""
    return DeviceKind(_cell(row.get("device")).split(":")[0] or "cpu")


#: how a run was computed rather than what it is: its precision and its packing (a packed member computes its
#: model's function with other kernels)
HOW = {"dtype", "packed", "pack_width"}


def point_key(row) -> str | None:
    """What a run is but for how it was computed (`HOW`): its identity with the seed and without its precision and
    packing, so that a GPU run in bf16 and a CPU run in fp32, or a packed member and a run alone, of the same model,
    recipe, data and seed meet (`compare`). None for a row whose configs cannot be read back."""
    parts = _parts(row, HOW)
    return None if parts is None else json.dumps({**parts, "seed": _cell(row.get("seed"))}, sort_keys=True,
                                                 default=str)


def budget_key(row) -> str | None:
    """What a run is but for its seed, how it was computed (`HOW`) and its number of epochs: rows of one model,
    recipe and data trained for longer or shorter meet here. None for a row whose configs cannot be read back."""
    parts = _parts(row, HOW | {"epochs"})
    return None if parts is None else json.dumps(parts, sort_keys=True, default=str)


def _varied(factor: str | Collection[str]) -> set[str]:
    return {factor} if isinstance(factor, str) else set(factor)


def _parts(row, varied: set[str]) -> dict[str, Any] | None:
    """The row's run identity without the seed and the varied fields, flattened ({field: value}); None for a
    row whose configs cannot be read back (a damaged row)."""
    try:
        model, train = ViTConfig.from_row(row), TrainConfig.from_row(row)
    except (TypeError, ValueError):
        return None
    key = task_key(Point("", "", None, model, train), _cell(row.get("dataset")), 0, _cell(row.get("init")),
                   _cell(row.get("data_id")), row_device(row))
    flat = {**{k: v for k, v in key["model"].items()}, **{k: v for k, v in key["train"].items()},
            "dataset": key["dataset"], "init": key.get("init", ""), "data_id": key.get("data", "")}
    return {k: v for k, v in flat.items() if k not in varied}


def experiment_key(row, factor: str | Collection[str]) -> str:
    """What the rows of one experiment share, as one comparable string: the row's run identity without the
    seed and the fields the sweep varies (blank cells read as defaults)."""
    parts = _parts(row, _varied(factor))
    return json.dumps(parts, sort_keys=True, default=str) if parts is not None else f"unreadable:{_cell(row.get('run_id'))}"


def same_experiment(a, b, factor: str | Collection[str]) -> bool:
    """Whether two rows may be pooled as seeds of one experiment."""
    return experiment_key(a, factor) == experiment_key(b, factor)


def differences(a, b, factor: str | Collection[str]) -> str:
    """What differs between two rows' experiments, as 'epochs 1 vs 2, dataset digits vs synthetic' (a field
    one leaves at its default shows the default)."""
    varied = _varied(factor)
    x, y = _parts(a, varied), _parts(b, varied)
    if x is None or y is None:
        return "a row whose settings cannot be read back"
    # a field a run's identity leaves out reads as what its absence means: its default, for `holdout_split` the
    # random draw (`TrainConfig.identity` names a split only where it is not the random one), for `packed` a run
    # alone (a packed run's identity names how it was packed)
    defaults = {**ViTConfig().to_dict(), **TrainConfig().to_dict(), "holdout_split": "random", "packed": "no"}
    shown = lambda parts, k: parts.get(k, defaults.get(k, "—"))  # noqa: E731
    diffs = [f"{k} {shown(x, k) if shown(x, k) != '' else '—'} vs {shown(y, k) if shown(y, k) != '' else '—'}"
             for k in dict.fromkeys([*x, *y]) if shown(x, k) != shown(y, k)]
    return ", ".join(diffs) or "the training recipe"


STARVED_SHARE = 0.7  # a CPU run whose busy share is under this fraction of its threads' share got too little


def starved(row) -> bool:
    """Whether a CPU run was busy well under the share of the cores its threads could use (other work held
    the machine, so its wall time and MFU understate it). A row that records `util_cores` measured its
    busy share against the cores its threads could use (whatever placed it: JOBS, THREADS, Ray); an older
    row's share reads as `schema.util_share_runs` says."""
    util = row.get("train_util_pct")
    if row.get("status") != "ok" or row.get("device") != "cpu" or not isinstance(util, (int, float)) or util != util:
        return False
    return util < STARVED_SHARE * 100.0 / util_share_runs(row)


def device_names(rows: pd.DataFrame) -> tuple[str, ...]:
    """The CPU models or GPU names the rows trained on, sorted (none where no row recorded one)."""
    names = rows["device_name"].dropna().astype(str).str.strip() if "device_name" in rows else pd.Series(dtype=str)
    return tuple(sorted(set(names) - {""}))


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


def newest_experiment(rows: pd.DataFrame, factor: str | Collection[str],
                      prefer: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """(the rows of the experiment of the newest ok row, one sentence per group of rows left out). `prefer`: an
    `experiment_id` to report instead where the table has runs of it (a SEEDS=auto design's: its file is removed by
    any later command at fixed seeds, so a design present names the experiment of the sweep's last command)."""
    if rows.empty:
        return rows, []
    ok = rows.reset_index(drop=True)
    order = ok["started_at"].astype(str) if "started_at" in ok else pd.Series([""] * len(ok))
    succeeded = ok["status"] == "ok" if "status" in ok else pd.Series([True] * len(ok))
    candidates = [i for i in range(len(ok)) if succeeded[i]] or list(range(len(ok)))
    if prefer and "experiment_id" in ok:
        chosen = [i for i in candidates if str(ok.loc[i, "experiment_id"]) == prefer]
        candidates = chosen or candidates
    newest = ok.loc[max(candidates, key=lambda i: (order[i], i))]  # started_at has whole seconds: a later line wins ties
    keys = [experiment_key(r, factor) for _, r in ok.iterrows()]
    target = experiment_key(newest, factor)
    keep = [k == target for k in keys]
    kept = ok[keep]
    notes = []
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        if k != target:
            groups.setdefault(k, []).append(i)
    for members in groups.values():
        first = ok.loc[members[0]]
        which = ("the one of the sweep's SEEDS=auto design" if prefer and str(newest.get("experiment_id")) == prefer
                 else "the newest")
        notes.append(f"{count(len(members), 'run')} of another experiment ({differences(first, newest, factor)}) left "
                     f"out: a table is reported as one experiment, {which}; use another OUT to keep both")
    return kept, notes
