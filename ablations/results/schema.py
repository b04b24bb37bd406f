"""The columns ablations write, one definition each: training rows (`<sweep>.csv`), per-epoch histories
(`<sweep>-history.csv`) and cost phases (`<sweep>-cost.csv`). A training row is a measurement row
(`bench.schema`) plus the training columns; `columns_markdown` renders every table into
`docs/columns.md` (`python -m ablations columns`)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pandas as pd

from bench.io.csvio import read_rows
from bench.schema import BENCH_TABLE, CONFIG, EXTRA, IDENTITY, SIZE, SPEED, Column, by_name, names, with_role
from bench.training.recipe import TrainConfig

RECIPE = [Column(f.name, f.metadata["unit"], f.metadata["doc"], f.metadata["kind"])
          for f in dataclasses.fields(TrainConfig) if f.name not in ("dtype", "compile")]  # those two: IDENTITY
TRAINING = [
    Column("sweep", "", "the sweep (its TOML file's name), or train for `make train`", "text"),
    Column("dataset", "", "the dataset's name (DATASET)", "text"),
    Column("data_id", "", "what names the data beyond the dataset's name: an image folder's contents (a hash of "
                          "its files' paths and bytes) and a resize (IMG_SIZE); blank for a named dataset as shipped",
           "text"),
    Column("norm_mean", "", "per-channel mean the run's images were normalised with (space-separated)", "text"),
    Column("norm_std", "", "per-channel standard deviation the run's images were normalised with", "text"),
    Column("class_names", "", "the class of each label index, as a JSON list (an image folder's class folders, "
                              "CIFAR's names); predict names its answers with it", "text"),
    Column("seed", "", "training seed: initial weights, batch order and augmentation", "int"),
    Column("train_time_s", "s", "wall time of the training epochs, evaluation excluded; for a packed run (packed 1), "
                                "its whole pack's", roles=("measured",)),
    Column("train_loss", "", "mean cross-entropy over the last epoch's training images"),
    Column("test_loss", "", "mean cross-entropy over the test set after the last epoch"),
    Column("test_acc", "fraction", "test accuracy after the last epoch"),
    Column("best_test_acc", "fraction", "highest test accuracy after any epoch (not for model selection)"),
    Column("train_throughput_img_s", "images/s", "training images per second over the whole run; for a packed run, "
                                                 "its own images over its pack's time (the pack's is the sum over its "
                                                 "members)", roles=("measured",)),
    Column("train_util_pct", "%", "the run's own busy share, only where it had the device to itself: GPU "
                                  "utilisation from NVML's timestamped samples wholly inside its training "
                                  "(evaluation included; blank where no whole sample period fell inside it), "
                                  "or on the CPU this process's CPU time over wall time while the training "
                                  "epochs ran, as a share of the cores its torch threads can use (util_cores; "
                                  "older rows: of all its cores); blank for a run that shared its process or "
                                  "GPU with other runs (the GPU's own figure over the phase is in "
                                  "ablations/phases/training.csv; older rows counted the other runs' kernels "
                                  "too); util_pct is the inference step's in the cost phase", roles=("measured",)),
    Column("train_mfu", "fraction", "training MFU over the whole run: 3 × gflops × train_throughput_img_s over the "
                            "device's measured matmul peak (a packed run: its own share, the pack's is the sum over "
                            "its members); mfu is the cost phase's inference step", roles=("measured",)),
    Column("init", "", "the starting checkpoint, file:sha256-prefix or timm:<name>; empty for random init", "text"),
    Column("test_size", "images", "test images behind test_acc (and in the run's predictions file)", "int"),
    Column("train_size", "images", "training images the run trained on (the training set less its validation "
                                   "split)", "int"),
    Column("val_size", "images", "images of the validation split held out of the training set (holdout); "
                                 "blank without one", "int"),
    Column("val_loss", "", "mean cross-entropy over the validation split after the last epoch"),
    Column("val_acc", "fraction", "validation accuracy after the last epoch: what tuning selects on (never "
                                  "test_acc)"),
    Column("cost_rounds", "", "interleaved rounds of the sweep's cost phase behind the row's speed columns", "int"),
    Column("reused_from", "", "the sweep whose identical run (same run_id) this row was copied from", "text"),
    Column("torch_threads", "", "torch's intra-op threads while this run trained (THREADS on the CPU, 1 unless "
                                "asked): a "
                                "different count changes the order of float reductions, so runs compare "
                                "bit for bit only at the same count", "int", roles=("measured",)),
    Column("util_cores", "", "on the CPU, the cores train_util_pct is a share of: the run's torch threads, at "
                             "most the cores it may run on (empty in older rows, whose share is of all its "
                             "cores)", "int", roles=("measured",)),
    Column("jobs", "", "runs in flight at once on the machine while this run trained (JOBS; empty with Ray): "
                       "above 1, train_time_s and train_util_pct were measured under sharing, the cost phase's "
                       "columns never are", "int", roles=("measured",)),
    Column("experiment_id", "", "12-hex hash of what the sweep's runs share: the model but for the factor, the "
                                "training recipe, the dataset and the starting weights. Rows of one table with "
                                "different ids are different experiments: the report keeps the newest and lists "
                                "the others under Skipped inputs", "id"),
    Column("resumed_after", "epochs", "the epoch of the checkpoint a killed run resumed from (0: it ran "
                                      "straight through); train_time_s includes the epochs before the kill", "int",
           roles=("measured",)),
]
SPEED_NOTE = ("in a training row: the inference step of its config from the sweep's cost phase, medians "
              "over rounds (step_ms_iqr: IQR of the per-round medians)")
# a training row's speed columns: its config's inference step from the cost phase, at its own batch size
INFER_SPEED = [Column("infer_batch_size", "images", "images per inference step in the sweep's cost phase (the "
                                                    "training batch size is batch_size)", "int")] + [
    c for c in SPEED if c.name not in ("mode", "batch_size")]
ABLATION_TABLE = IDENTITY + CONFIG + SIZE + RECIPE + INFER_SPEED + TRAINING + EXTRA
COST_PHASE = [
    Column("sweep", "", "the sweep whose point this is (a phase covers all sweeps of one command; a model "
                        "they share is measured once and its rows are in each sweep's table)", "text"),
    Column("phase_id", "", "hash of what defines the phase (sweeps, models, batch sizes, dtype, rounds, device); "
                           "a complete phase is reused by a rerun", "id", required=True),
    Column("round", "", "interleaved round, from 0; each round measures every point and mode once", "int"),
    Column("rounds", "", "rounds the phase took: as many as its time budget allowed, at most COST_ROUNDS", "int"),
    Column("phase_items", "", "this sweep's points × modes per round: its table holds the phase complete with "
                              "rounds × phase_items rows", "int"),
    Column("torch_threads", "", "torch's intra-op threads the phase timed with (on the CPU, THREADS: 1 unless "
                                "asked), part of its phase_id", "int", roles=("measured",)),
]
COST_TABLE = BENCH_TABLE + COST_PHASE
HISTORY_TABLE = [
    Column("run_id", "", "the run (its row in <sweep>.csv)", "id", required=True),
    Column("epoch", "", "epoch, from 1", "int", required=True),
    Column("lr", "", "learning rate at the epoch's last step"),
    Column("train_loss", "", "mean cross-entropy over the epoch's training images"),
    Column("test_loss", "", "mean cross-entropy over the test set after the epoch"),
    Column("test_acc", "fraction", "test accuracy after the epoch"),
    Column("val_loss", "", "mean cross-entropy over the validation split after the epoch"),
    Column("val_acc", "fraction", "validation accuracy after the epoch"),
    Column("elapsed_s", "s", "training wall time up to the end of the epoch, evaluation excluded"),
]

VERDICTS_TABLE = [
    Column("sweep", "", "the sweep", "text", required=True),
    Column("factor", "", "what the sweep varies (several factors: their names joined by ' × ')", "text"),
    Column("a", "", "one setting of the pair (the factor's value)", "text", required=True),
    Column("b", "", "the other setting", "text", required=True),
    Column("outcome", "", "the report's verdict on a against b: better (a above b), worse, equivalent (within ±margin), "
           "identical (the same predictions, seed by seed: no test) or inconclusive", "text",
           choices=("better", "worse", "equivalent", "identical", "inconclusive")),
    Column("diff_points", "points", "a's mean test accuracy minus b's (paired: the mean of the per-seed differences)"),
    Column("low_points", "points", "the lower end of the difference's interval (see `interval`; blank for an identical "
           "pair, which has none)"),
    Column("high_points", "points", "the upper end of the difference's interval (blank for an identical pair)"),
    Column("interval", "", "what the interval is: the pair's own 95 % one (fixed seeds), or under SEEDS=auto the "
           "repeated interval at the level of the look the design stopped at (95 % over the looks)", "text"),
    Column("p_differ", "", "the two-sided p of a difference: Holm-adjusted over the sweep's pairs at fixed seeds, the "
           "last look's unadjusted p under SEEDS=auto; blank for identical pairs"),
    Column("p_equivalent", "", "the p of two one-sided tests against ±margin, adjusted as `p_differ`"),
    Column("level", "", "SEEDS=auto, a pair with the leader decided by the design: the nominal level its p crossed "
           "(blank otherwise; at fixed seeds a Holm-adjusted p is compared with α = 0.05)"),
    Column("look", "", "SEEDS=auto: the look (from 1) at which the design decided the pair (blank otherwise)", "int"),
    Column("seeds_a", "", "seeds of a's runs analysed", "int"),
    Column("seeds_b", "", "seeds of b's runs analysed", "int"),
    Column("paired", "", "whether a and b were compared seed by seed (trained under the same seeds)", "bool"),
    Column("margin_points", "points", "the equivalence margin the pair was tested against"),
]

def _spread_columns(name: str, unit: str, meaning: str) -> list[Column]:
    """A figure as the report gives it: its median and quartiles."""
    return [Column(name, unit, meaning), Column(f"{name}_q1", unit, f"first quartile of `{name}`"),
            Column(f"{name}_q3", unit, f"third quartile of `{name}`")]


SETTINGS_TABLE = [
    Column("sweep", "", "the sweep", "text", required=True),
    Column("factor", "", "what the sweep varies", "text"),
    Column("setting", "", "the factor's value (several factors: their values joined by ' × ')", "text", required=True),
    Column("seeds", "", "runs analysed (one per seed)", "int"),
    Column("acc_pct", "%", "mean test accuracy over the runs"),
    Column("acc_low_pct", "%", "lower end of its 95 % interval (see `acc_interval`)"),
    Column("acc_high_pct", "%", "upper end of its 95 % interval"),
    Column("acc_interval", "", "what the interval covers (seeds and test images, seeds alone, or binomial)", "text"),
    Column("at_chance", "", "the mean is within noise of guessing (under 1/classes + 3 binomial s.d., and within 3 "
           "standard errors of 1/classes)", "bool"),
    Column("params", "", "trainable parameters", "int"),
    Column("gmacs", "GMAC", "multiply-adds of one forward pass of one image"),
    *_spread_columns("infer_img_s", "img/s", "inference throughput in the cost phase (median over its rounds)"),
    *_spread_columns("train_img_s", "img/s", "training-step throughput in the cost phase"),
    Column("infer_peak_mb", "MB", "peak device memory of the inference step"),
    Column("train_peak_mb", "MB", "peak device memory of the training step"),
    *_spread_columns("infer_mfu", "fraction", "model FLOP utilisation of the inference step"),
    *_spread_columns("infer_busy_pct", "%", "device busy share while the inference step was timed"),
    *[Column(f"{mode}_step_ms_p{q}", "ms", f"the {mode} step's p{q} latency in a round, median over the rounds")
      for mode in ("infer", "train") for q in (50, 90, 99)],
    Column("infer_j_per_img", "J", "energy per image of the inference step (blank where not readable)"),
    Column("train_j_per_img", "J", "energy per image of the training step"),
    *_spread_columns("run_s", "s", "a training run's wall time, over seeds (as the runs trained, not interleaved; a "
                                   "packed run's is its whole pack's)"),
    *_spread_columns("run_mfu", "fraction", "the training runs' own model FLOP utilisation, over seeds (a packed "
                                            "run's is its own share of its pack's)"),
    *_spread_columns("run_busy_pct", "%", "the training runs' own busy share, over seeds"),
    Column("reused_from", "", "sweeps whose identical runs (same run id) these are copied from", "text"),
]

SCHEMA = by_name(ABLATION_TABLE, COST_TABLE, HISTORY_TABLE)  # how a reader judges each cell of these tables
ABLATION_COLUMNS = names(ABLATION_TABLE)
COST_COLUMNS = names(COST_TABLE)
HISTORY_COLUMNS = names(HISTORY_TABLE)
VERDICTS_COLUMNS = names(VERDICTS_TABLE)
SETTINGS_COLUMNS = names(SETTINGS_TABLE)

# what differs between two runs of one config: when, where and how fast (not what was computed)
MEASURED = with_role(ABLATION_TABLE, "measured")

TABLES = [
    ("`$(OUT)/bench/<name>.csv`", "one row per measurement (`python -m bench run`, `make bench`)", BENCH_TABLE),
    ("`$(OUT)/ablations/<sweep>.csv`", "one row per training run", ABLATION_TABLE),
    ("`$(OUT)/ablations/<sweep>-cost.csv`", "one row per point, mode and round of the sweep's cost phase",
     COST_TABLE),
    ("`$(OUT)/ablations/<sweep>-history.csv`", "one row per epoch of each run", HISTORY_TABLE),
    ("`$(OUT)/verdicts.csv`", "one row per pair of settings of every sweep, as REPORT.md decides it (`make report`)",
     VERDICTS_TABLE),
    ("`$(OUT)/settings.csv`", "one row per setting of every sweep, every figure REPORT.md gives it (`make report`)",
     SETTINGS_TABLE),
]


def columns_markdown() -> str:
    """The column dictionary: every table's columns in file order, each defined once."""
    lines = ["# Result columns", "",
             "Generated by `python -m ablations columns` from `bench/schema.py`, `ablations/results/schema.py` and "
             "`vit.ViTConfig`'s field metadata; `tests/test_schema.py` fails when this file is out of date.",
             "", "Columns may come in any order in a file (a file keeps the header it was created with); "
             "blank cells are missing values.", ""]
    defined: dict[str, Column] = {}
    for path, what, table in TABLES:
        lines += [f"## {path}", "", f"{what[:1].upper() + what[1:]}: {', '.join(f'`{c.name}`' for c in table)}.", ""]
        for c in table:
            defined.setdefault(c.name, c)
    lines += ["## Definitions", "", "| column | unit | meaning |", "|---|---|---|"]
    for c in defined.values():
        meaning = c.meaning + (f"; {SPEED_NOTE}" if c in INFER_SPEED[1:] else "")
        lines.append(f"| `{c.name}` | {c.unit} | {meaning} |")
    history_only = [c for c in HISTORY_TABLE if defined[c.name] is not c]
    lines += ["", "In `<sweep>-history.csv` the same names mean the epoch's figures:", ""]
    lines += [f"- `{c.name}`: {c.meaning}" for c in history_only]
    return "\n".join(lines) + "\n"


def read_table(path: str | Path) -> pd.DataFrame:
    """A sweep's table (rows, cost phase or history), each line judged by `SCHEMA` (`bench.io.csvio.read_rows`);
    result rows of an older format read as today's (`upgrade_rows`). A command reads each table once and
    passes it on (`ablations.results.store.Tables`)."""
    table = read_rows(path, SCHEMA)
    return table if Path(path).stem.endswith(("-history", "-cost")) else upgrade_rows(table)


# Older formats: what a cell that an older row left blank, or measured another way, means. Every reader
# asks here; `upgrade_row` rewrites what can be rewritten, the rest cannot be recovered from the row alone.
OLDER_BATCH_SIZES = (64, 32, 128, 256, 16, 512)   # training batch sizes tried when recovering an older recipe
DEFAULT_WHEN_BLANK = ("crop_padding", "flip")   # blank in older rows where the dataset's default applied


def util_share_runs(row) -> float:
    """How many runs' shares of the machine the 100 % of a CPU row's `train_util_pct` stands for: 1 for a row
    that records `util_cores` (a share of the cores its own threads could use); for an older row, a share of
    all the process's cores, of which each of its `jobs` runs had 1 / jobs, so `jobs`."""
    cores, jobs = row.get("util_cores"), row.get("jobs")
    if isinstance(cores, (int, float)) and cores == cores and cores >= 1:
        return 1
    return jobs if isinstance(jobs, (int, float)) and jobs == jobs and jobs >= 1 else 1


def uncontended(rows: pd.DataFrame) -> pd.DataFrame:
    """The cost-phase rounds not taken under load (`bench.contention`); rows from before the flag count as
    uncontended."""
    if "contended" not in rows:
        return rows
    return rows[pd.to_numeric(rows["contended"], errors="coerce").fillna(0) != 1]


def recorded_normalisation(row) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The normalisation a run recorded (`norm_mean`, `norm_std`), or None for a row from before it did (the
    reader falls back to the dataset's)."""
    try:
        mean, std = (tuple(float(v) for v in str(row[c]).split()) for c in ("norm_mean", "norm_std"))
    except (KeyError, ValueError):
        return None
    usable = mean and len(mean) == len(std) and all(math.isfinite(v) for v in (*mean, *std))
    return (mean, std) if usable else None


def upgrade_row(row: dict[str, Any], blank: Any = None) -> set[str]:
    """Change one result row of an older format (a dict of its cells; `blank`: what an empty cell is, "" for
    text) into today's, in place; the columns it changed. Rows written before the recipe had columns of its
    own carry the cost phase's inference batch under `batch_size` (with `mode` = infer): it moves to
    `infer_batch_size`, and their training batch size, which they did not record, is left blank. Rows that
    held out a validation split before `holdout_split` existed drew it at random. With the rules below it
    this is the one statement of the older formats: readers read them as today's (`upgrade_rows`), `make
    migrate` rewrites them."""
    changed: set[str] = set()
    if str(row.get("mode")) == "infer":
        row["infer_batch_size"], row["batch_size"], row["mode"] = row.get("batch_size", blank), blank, blank
        changed |= {"infer_batch_size", "batch_size", "mode"}
    try:
        held = float(row.get("holdout"))
    except (TypeError, ValueError):
        held = 0.0
    split = row.get("holdout_split")
    if held > 0 and (pd.isna(split) or str(split) == ""):
        row["holdout_split"] = "random"
        changed.add("holdout_split")
    return changed


def upgrade_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Result rows of an older format read as today's (`upgrade_row`); today's rows as they are."""
    if table.empty or not {"mode", "holdout"} & set(table.columns):
        return table
    rows = table.to_dict("records")
    changed = set().union(*(upgrade_row(row, pd.NA) for row in rows))
    if not changed:
        return table
    return table.assign(**{c: pd.Series([row.get(c, pd.NA) for row in rows], index=table.index, dtype=object)
                           for c in sorted(changed)})
