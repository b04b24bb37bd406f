"""The results folder: where a sweep's files live under `<out>/ablations/`, how they are written and how
they are read back. Everything that writes results (the runner, the cost phase) and everything that
reads them (the report, findings, compare, predict) goes through this module; it loads no trainer and
no executor.

    <sweep>.csv            one row per run (the commit mark of a run: written last)
    <sweep>-history.csv    one row per epoch of each run
    <sweep>-cost.csv       one row per model, mode and round of each cost phase
    weights/<sweep>/<run_id>.pt           the trained state dict
    preds/<sweep>/<run_id>.npz            `pred` and `target`, one entry per test image
    checkpoints/<sweep>/<run_id>.safetensors   an unfinished run's last epoch
    <sweep>.lock           flock'ed by the process running the sweep; names its PID
    <sweep>.toml           the spec that wrote the table (the report reads it; older OUTs: the shipped one)

Writes: a run's history rows in one append, then its predictions and weights, then its result row, each
atomic (`bench.io.atomic`), so a kill at any instant leaves every earlier row whole. One process per OUT
and sweep (`sweep_lock`); temporary files of dead writers are removed before a sweep starts.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import io
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ablations.choices import SIDE_TABLES  # SIDE_TABLES: suffixes of a sweep's other tables
from ablations.results.schema import ABLATION_COLUMNS, COST_TABLE, HISTORY_COLUMNS, read_table, uncontended
from ablations.results.seed_design import read_design
from bench.env import run_id as stable_id
from bench.io.atomic import write_atomic
from bench.io.csvio import append_row, append_rows, drop_rows
from bench.rounds import Spread
from bench.schema import with_role
from vit import ViTConfig

PHASES = Path("ablations") / "phases" / "training.csv"   # under OUT: one row per GPU training phase


class SweepError(Exception):
    """A sweep that cannot start or go on; the message names the input and the fix (the CLI exits 2)."""


@dataclass(frozen=True)
class SweepPaths:
    """Where one sweep's outputs live under `<out>/ablations/`."""
    rows: Path
    history: Path
    cost: Path
    weights: Path
    preds: Path
    checkpoints: Path
    lock: Path
    spec: Path   # a copy of the spec the sweep ran, for the report
    design: Path  # the SEEDS=auto design it trained under (`results.seed_design`), where it did

    @classmethod
    def of(cls, out: str | Path, sweep: str) -> SweepPaths:
        base = Path(out) / "ablations"
        return cls(base / f"{sweep}.csv", base / f"{sweep}-history.csv", base / f"{sweep}-cost.csv",
                   base / "weights" / sweep, base / "preds" / sweep, base / "checkpoints" / sweep,
                   base / f"{sweep}.lock", base / f"{sweep}.toml", base / f"{sweep}-design.json")

    @property
    def out(self) -> Path:
        return self.rows.parents[1]

    @property
    def sweep(self) -> str:
        return self.rows.stem

    def checkpoint(self, run_id: str) -> Path:
        return self.checkpoints / f"{run_id}.safetensors"

    def weights_file(self, run_id: str) -> Path:
        return self.weights / f"{run_id}.pt"

    def preds_file(self, run_id: str) -> Path:
        return self.preds / f"{run_id}.npz"


class Tables:
    """The record of every sweep under one OUT as one command found it: each sweep's result rows, epoch rows,
    cost table and design, read (`schema.read_table`, `seed_design.read_design`) the first time they are asked for and
    handed on from there, so a command reads each file once. What the command writes after that is not in
    them: a command that reads between looks of its own asks a new `Tables`. Nothing outside this package
    reads a sweep's tables by path."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self._read: dict[Path, pd.DataFrame] = {}
        self._designs: dict[str, dict[str, Any] | None | ValueError] = {}
        self._standing: dict[str, pd.DataFrame] = {}

    def _table(self, path: Path) -> pd.DataFrame:
        if path not in self._read:
            self._read[path] = read_table(path) if path.exists() else pd.DataFrame()
        return self._read[path]

    def names(self) -> list[str]:
        """The sweeps with a result table here (`sweep_names`)."""
        return sweep_names(self.out)

    def paths(self, sweep: str) -> SweepPaths:
        return SweepPaths.of(self.out, sweep)

    def rows(self, sweep: str) -> pd.DataFrame:
        """Every row of the sweep's result table, upgraded to this version's columns (empty where it has none)."""
        return self._table(SweepPaths.of(self.out, sweep).rows)

    def ok(self, sweep: str) -> pd.DataFrame:
        """Every ok row of its table (`ok_rows`), as written."""
        return ok_rows(self.rows(sweep))

    def standing(self, sweep: str) -> pd.DataFrame:
        """The row that stands for each of its runs (`experiments.latest_rows`): the last ok row of a run that
        finished, the last failure of one that never did."""
        if sweep not in self._standing:
            from ablations.results.experiments import latest_rows

            self._standing[sweep] = latest_rows(self.rows(sweep))
        return self._standing[sweep]

    def finished(self, sweep: str) -> pd.DataFrame:
        """The standing row of each run that finished: one ok row per run id."""
        return ok_rows(self.standing(sweep))

    def shown(self, sweep: str, varied: tuple[str, ...] | list[str]) -> tuple[pd.DataFrame, list[str]]:
        """The standing rows a report shows of the sweep, whose spec varies `varied`, and one sentence per group of
        rows left out (`experiments.newest_experiment`): its newest experiment's, or the SEEDS=auto design's where a
        design is present (a damaged design prefers none; the sweep's analysis names it)."""
        from ablations.results.experiments import newest_experiment

        try:
            design_file = self.design(sweep)
        except ValueError:
            design_file = None
        return newest_experiment(self.standing(sweep), varied, prefer=(design_file or {}).get("experiment"))

    def phases(self) -> pd.DataFrame:
        """The OUT's GPU training phases (`PHASES`: one row each; empty where there are none)."""
        path = self.out / PHASES
        if path not in self._read:
            from bench.io.csvio import read_rows

            self._read[path] = pd.DataFrame(read_rows(path)) if path.exists() else pd.DataFrame()
        return self._read[path]

    def history(self, sweep: str) -> pd.DataFrame:
        """Its epoch rows (empty where it has none)."""
        return self._table(SweepPaths.of(self.out, sweep).history)

    def cost_phase(self, sweep: str) -> pd.DataFrame | None:
        """Its newest complete cost phase (`newest_complete_phase`), or None."""
        cost = self._table(SweepPaths.of(self.out, sweep).cost)
        return newest_complete_phase(cost if len(cost.columns) else None)

    def design(self, sweep: str) -> dict[str, Any] | None:
        """Its SEEDS=auto design (`seed_design.read_design`: None where it has none, ValueError for a damaged one, the
        same error at every ask)."""
        if sweep not in self._designs:
            try:
                self._designs[sweep] = read_design(SweepPaths.of(self.out, sweep))
            except ValueError as err:
                self._designs[sweep] = err
        found = self._designs[sweep]
        if isinstance(found, ValueError):
            raise found
        return found


def out_refusal(out: str | Path) -> str:
    """"" where `out` is a folder; else why it cannot be an OUT a sweep wrote (no such folder, or a file), in one
    line naming the flag."""
    out = Path(out)
    if out.is_dir():
        return ""
    return (f"--out {out}: {'not a folder' if out.exists() else 'no such folder'}; pass the OUT folder a sweep wrote "
            f"(it holds ablations/)")


def sweep_names(out: str | Path) -> list[str]:
    """The sweeps with a result table under `<out>/ablations/`, by name."""
    return [csv.stem for csv in sorted((Path(out) / "ablations").glob("*.csv")) if not csv.stem.endswith(SIDE_TABLES)]


def ok_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The finished runs of a result table (none for a table without the status column)."""
    if table.empty or "status" not in table:
        return table.iloc[0:0]
    return table[table["status"] == "ok"]


def failed_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a result table whose run did not finish (none for a table without the status column)."""
    if table.empty or "status" not in table:
        return table.iloc[0:0]
    return table[table["status"] != "ok"]


def is_ok(row: Any) -> bool:
    """Whether one row (a dict or a Series) records a finished run."""
    return row.get("status") == "ok"


# --- predictions -----------------------------------------------------------------------------------

def save_preds(pred: np.ndarray, target: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, pred=np.asarray(pred).astype(np.int32), target=np.asarray(target).astype(np.int32))
    return buffer.getvalue()


def load_preds(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(pred, target) of one run, as `record` wrote them; ValueError naming the file if it is damaged."""
    try:
        with np.load(path) as data:
            pred, target = data["pred"], data["target"]
    except Exception as err:
        raise ValueError(f"{path}: not a readable predictions file ({type(err).__name__})") from None
    if pred.shape != target.shape:
        raise ValueError(f"{path}: {len(pred)} predictions for {len(target)} labels")
    return pred, target


# --- finished and reusable runs --------------------------------------------------------------------

def finished_ids(paths: SweepPaths) -> set[str]:
    """The runs of the sweep with an ok row whose test predictions are still there (a run whose predictions file
    is gone is trained again, so the report can compare it)."""
    finished = Tables(paths.out).finished(paths.sweep)
    ids = set(finished["run_id"].astype(str)) if "run_id" in finished else set()
    return {rid for rid in ids if paths.preds_file(rid).exists()}


def _plain(row: pd.Series) -> dict[str, Any]:
    return {k: (None if v != v else v) for k, v in row.items()}


@dataclass(frozen=True)
class Taken:
    """A run finished in another sweep under the same OUT, with everything a sweep records of it: the sweep it
    trained for, its ok row, its epoch rows (the last of each epoch), and its weights and predictions files (read
    when it is recorded, one run at a time)."""
    sweep: str
    row: dict[str, Any]
    history: list[dict[str, Any]]
    weights: Path
    preds: Path


@dataclass(frozen=True)
class Found:
    """What OUT holds of one sweep of a command before any work (`find`): its ok rows as written, the standing row of
    each planned run finished with its predictions on disk, the planned runs not finished there that another sweep
    under OUT finished (files on disk), and its epoch rows where asked for (else empty)."""
    paths: SweepPaths
    ok: pd.DataFrame
    finished: dict[str, dict[str, Any]]
    elsewhere: dict[str, Taken]
    history: pd.DataFrame


def find(out: str | Path, planned: dict[str, list[str]], history: bool = False) -> dict[str, Found]:
    """{sweep: what OUT holds of it} for a command that plans the run ids `planned` ({sweep: run ids}), every table
    read once. A run another sweep finished is taken from the first sweep (by name) that holds an ok row of it with
    its weights and predictions. `history`: the sweeps' own epoch rows too."""
    tables = Tables(out)
    others = sweep_names(out)
    found = {}
    for sweep, run_ids in planned.items():
        paths = SweepPaths.of(out, sweep)
        standing = tables.finished(sweep)
        wanted = set(run_ids)
        finished = {str(r["run_id"]): r.to_dict() for _, r in standing.iterrows()
                    if str(r["run_id"]) in wanted and paths.preds_file(str(r["run_id"])).exists()}
        left = wanted - set(finished)
        found[sweep] = Found(paths, ok_rows(tables.rows(sweep)), finished,
                             _taken(tables, [o for o in others if o != sweep], left) if left else {},
                             tables.history(sweep) if history else pd.DataFrame())
    return found


def _taken(tables: Tables, others: list[str], run_ids: set[str]) -> dict[str, Taken]:
    """The runs of `run_ids` that the sweeps `others` finished, each from the first of them that holds its files."""
    taken: dict[str, Taken] = {}
    for other in others:
        theirs = SweepPaths.of(tables.out, other)
        for _, r in ok_rows(tables.rows(other)).iterrows():
            rid = str(r["run_id"])
            if rid in run_ids and rid not in taken and theirs.preds_file(rid).exists() \
                    and theirs.weights_file(rid).exists():
                taken[rid] = Taken(other, _plain(r), _history_of(tables.history(other), rid),
                                   theirs.weights_file(rid), theirs.preds_file(rid))
    return taken


def _history_of(table: pd.DataFrame, run_id: str) -> list[dict[str, Any]]:
    """The epoch rows of one run in a sweep's epoch table (the last of each epoch)."""
    if "run_id" not in table:
        return []
    mine = table[table["run_id"].astype(str) == run_id].drop_duplicates("epoch", keep="last")
    return [_plain(h) for _, h in mine.iterrows()]


def keep_spec(paths: SweepPaths, source: Path, changes: dict[str, Any] | None = None) -> None:
    """The spec that writes a table goes beside it before its first run, shipped or not: the report and `make
    cost` read the sweep as it ran, whatever ablations/sweeps/ says later, and a command killed mid-sweep (or a
    report read while it runs) still finds it. A spec beside no table is never read. `changes`: the fields the
    command set over the spec (`--set`, EPOCHS, DTYPE, …), said in a comment at the copy's end (each run's row
    holds every value it trained with)."""
    if source.resolve() == paths.spec.resolve():
        return
    said = ", ".join(f"{k}={v}" for k, v in (changes or {}).items())
    note = (f"\n# vitbench: the command that last trained this sweep set {said} over the spec above\n"
            if said else "")
    paths.spec.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(paths.spec, source.read_bytes() + note.encode())
    except OSError as err:
        print(f"note: {err}: the report needs {source} beside the table to give it a section", file=sys.stderr)


# --- writing a run ---------------------------------------------------------------------------------

class Recordable(Protocol):
    """What `record` writes: a result row, its epoch rows, and the weights and predictions files (bytes)."""
    row: dict[str, Any]
    history: list[dict[str, Any]]
    weights: bytes | None
    preds: bytes | None


def record(outcome: Recordable, paths: SweepPaths) -> None:
    """History, then predictions and weights, then the row: the row is the commit mark of a run. The
    history of an earlier attempt of the same run (killed before its row) is removed first."""
    run_id = str(outcome.row["run_id"])
    drop_rows(paths.history, "run_id", {run_id})
    append_rows(paths.history, outcome.history, HISTORY_COLUMNS)
    if outcome.preds is not None:
        write_atomic(paths.preds_file(run_id), outcome.preds)
    if outcome.weights is not None:
        write_atomic(paths.weights_file(run_id), outcome.weights)
    append_row(paths.rows, outcome.row, ABLATION_COLUMNS)
    if outcome.row.get("status") == "ok":  # a failed run keeps its checkpoint: a rerun resumes it
        paths.checkpoint(run_id).unlink(missing_ok=True)


@contextlib.contextmanager
def sweep_lock(paths: SweepPaths, sweep: str):
    """Hold the sweep's lock file for the duration; SweepError naming the holder if another process has it."""
    try:
        paths.lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise SweepError(f"OUT={paths.out}: cannot create {paths.lock} ({err.strerror}); "
                         f"choose another OUT (--out) or fix its permissions") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process"
            raise SweepError(f"sweep {sweep} under OUT={paths.out} is in use by another command ({holder}): two "
                             f"commands cannot write one sweep's table at once; wait for it to finish or stop it, "
                             f"or give this one another OUT") from None
        since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        command = " ".join(["python -m ablations", *sys.argv[1:]])[:200]
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"PID {os.getpid()} on {socket.gethostname()} since {since}: {command}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_tmp(paths: SweepPaths) -> int:
    """Remove `<name>.<pid>.tmp` files (`bench.io.atomic`) whose writer is gone (killed mid-write, or out of space)."""
    removed = 0
    for folder in (paths.rows.parent, paths.weights, paths.preds, paths.checkpoints):
        for tmp in folder.glob("*.tmp") if folder.is_dir() else ():
            pid = tmp.name.rsplit(".", 2)[-2] if tmp.name.count(".") >= 2 else ""
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                tmp.unlink(missing_ok=True)
                removed += 1
    return removed


def preflight(paths: SweepPaths, runs: int, need: int) -> int:
    """Before any work: OUT is creatable and writable and has `need` bytes free for `runs` runs; returns how
    many stale temporary files it removed. Raises SweepError naming OUT and the fix."""
    out, base = paths.out, paths.rows.parent
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SweepError(f"OUT={out}: cannot create {base} ({err.strerror}); choose another OUT (--out)") from None
    probe = base / f".preflight.{os.getpid()}.tmp"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise SweepError(f"OUT={out}: cannot write in {base} ({err.strerror}); choose another OUT (--out) or "
                         f"free space") from None
    finally:
        probe.unlink(missing_ok=True)
    free = shutil.disk_usage(base).free
    if free < need:
        these = "the run to do needs" if runs == 1 else f"the {runs} runs to do need"
        raise SweepError(f"OUT={out}: {free / 2**20:,.1f} MiB free, but {these} about "
                         f"{need / 2**20:,.1f} MiB (weights, a checkpoint per run in flight, predictions and rows); "
                         f"free space or choose another OUT (--out)")
    return clean_stale_tmp(paths)


# --- cost phases, read back ------------------------------------------------------------------------

SPEED_FIGURES = tuple(with_role(COST_TABLE, "speed"))   # the figures a training row takes from the cost phase


def model_key(cfg: ViTConfig) -> str:
    """The key a model's cost-phase figures are kept under."""
    return stable_id(cfg.identity())


def complete_phase(csv_path: Path, pid: str, items: int) -> pd.DataFrame | None:
    """The rows of cost phase `pid` in one sweep's cost table, if all its rounds (as its rows record them)
    of its `items` items are there."""
    if not csv_path.exists():
        return None
    rows = read_table(csv_path)
    if rows.empty or "phase_id" not in rows:
        return None
    phase = rows[rows["phase_id"].astype(str) == pid]
    return phase if len(phase) and len(phase) >= int(phase["rounds"].iloc[0]) * items else None


def newest_complete_phase(cost: pd.DataFrame | None) -> pd.DataFrame | None:
    """The newest cost phase whose every planned row is there (a phase cut short by a kill is not)."""
    if cost is None or cost.empty or "phase_id" not in cost:
        return None
    complete = [g for _, g in cost.groupby("phase_id", sort=False)
                if len(g) >= int(g["rounds"].iloc[0]) * int(g["phase_items"].iloc[0])]
    return max(complete, key=lambda g: str(g["started_at"].max())) if complete else None


def _rounds_of(rows: pd.DataFrame) -> list[tuple] | None:
    """Each cost row's round as (phase, round): items timed in the same rounds are compared round by round."""
    return list(zip(rows["phase_id"].astype(str), rows["round"].astype(int))) \
        if {"phase_id", "round"} <= set(rows) else None


def _spread_of(rows: pd.DataFrame) -> dict[str, Spread]:
    rounds = _rounds_of(rows)
    return {f: Spread.of(rows[f].astype(float), rounds) for f in SPEED_FIGURES if f in rows}


#: what a row read by CPU time leaves blank: wall-clock figures that CPU time does not stand in for (the latency
#: percentiles of a step's wall time, the busy share of the wall time)
WALL_ONLY = ("step_ms_p50", "step_ms_p90", "step_ms_p99", "util_pct")


def by_cpu_time(rows: pd.DataFrame) -> pd.DataFrame:
    """A phase's CPU rows read by their CPU time: each step's CPU milliseconds as its time, and the throughput
    and MFU they give (batch_size / CPU time; the MFU in the same proportion, as it is the throughput's FLOP/s
    over the peak), for rounds taken under load, which CPU time does not lengthen; the figures only wall time
    gives (`WALL_ONLY`) blank."""
    cpu = pd.to_numeric(rows["cpu_step_ms_median"], errors="coerce")
    wall = pd.to_numeric(rows["step_ms_median"], errors="coerce")
    read = rows.assign(step_ms_median=cpu, throughput_img_s=pd.to_numeric(rows["batch_size"], errors="coerce")
                       / (cpu / 1e3), **{c: float("nan") for c in WALL_ONLY if c in rows})
    if "mfu" in rows:
        read["mfu"] = pd.to_numeric(rows["mfu"], errors="coerce") * wall / cpu
    return read


def cpu_timed(rows: pd.DataFrame) -> bool:
    """Whether a group of one phase's ok rows is read by CPU time: fewer than MIN_ROUNDS of its rounds ran on a
    quiet machine, and every round recorded its CPU time (a CPU phase)."""
    from bench.rounds import MIN_ROUNDS

    return (len(uncontended(rows)) < MIN_ROUNDS and "cpu_step_ms_median" in rows and len(rows) >= MIN_ROUNDS
            and pd.to_numeric(rows["cpu_step_ms_median"], errors="coerce").notna().all())


def spreads(phase: pd.DataFrame, by: list[str]) -> dict[tuple, dict[str, Spread]]:
    """{group: {figure: Spread over the uncontended rounds}} for the ok rows of one phase, grouped by `by` (a CPU
    group short of quiet rounds: over every round by CPU time, `by_cpu_time`); peak memory over every round
    (other processes do not change a step's allocator peak)."""
    every = phase[phase["status"] == "ok"]
    found = {key if isinstance(key, tuple) else (key,): _spread_of(by_cpu_time(group) if cpu_timed(group)
                                                                    else uncontended(group))
             for key, group in every.groupby(by, sort=False)}
    found = {key: figures for key, figures in found.items() if any(s.n for s in figures.values())}
    for key, group in every.groupby(by, sort=False):   # a step's peak memory is the allocator's: load does not move it
        if "peak_mem_mb" in group:
            found.setdefault(key if isinstance(key, tuple) else (key,), {})["peak_mem_mb"] = Spread.of(
                group["peak_mem_mb"].astype(float), _rounds_of(group))
    return found


def _by_model(phase: pd.DataFrame, mode: str) -> Iterator[tuple[str, pd.DataFrame]]:
    """(model_key, its rows) of one phase's ok, uncontended rounds in `mode`, models in the order they come."""
    ok = uncontended(phase[(phase["status"] == "ok") & (phase["mode"] == mode)]) if len(phase) else phase
    keys = ok.apply(lambda r: model_key(ViTConfig.from_row(r)), axis=1) if len(ok) else pd.Series(dtype=str)
    for key in dict.fromkeys(keys):
        yield key, ok[keys == key]


def train_step_ms(phase: pd.DataFrame) -> dict[str, float]:
    """{model_key: the median over its uncontended rounds of the training step's median time (ms)}."""
    return {key: _spread_of(group)["step_ms_median"].median for key, group in _by_model(phase, "train")}


def row_figures(phase: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """{model_key: the inference speed columns of a training row}: medians over rounds, the IQR of the
    per-round step times as step_ms_iqr."""
    figures = {}
    for key, group in _by_model(phase, "infer"):
        spread = _spread_of(group)
        step = spread["step_ms_median"]
        figures[key] = {**{f: (None if s.median != s.median else s.median) for f, s in spread.items()},
                        "infer_batch_size": int(group["batch_size"].iloc[0]), "step_ms_iqr": step.iqr,
                        "util_source": group["util_source"].iloc[0], "repeats": int(group["repeats"].sum()),
                        "energy_source": group["energy_source"].iloc[0] if "energy_source" in group else "",
                        "cost_rounds": step.n}
    return figures
