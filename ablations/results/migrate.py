"""`python -m ablations migrate --out OUT`: rewrite an OUT's sweep tables in the current format, in place,
without retraining and without changing any run id.

Rows written before the recipe had columns of its own carry the cost phase's inference batch under
`batch_size` (with `mode` = infer) and no training recipe. Each such row's recipe is recovered exactly:
the recipe whose run id (model, recipe, dataset, seed, starting weights, data) equals the row's run_id,
tried at the row's recorded epochs and lr with each usual training batch size and every other field at
its default. Found: `infer_batch_size` takes the inference batch, `batch_size` and the other recipe
columns take the recovered recipe, `mode` is emptied (and dropped when no row uses it). Not found: the
training batch size is left blank (unknown), never guessed. Rows that held out a validation split
before `holdout_split` existed get `random`, the split they drew. Cells are rewritten as text, so every
other cell keeps its exact characters; each file is replaced whole (a kill leaves the old one).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
from pathlib import Path

import pandas as pd

from ablations.results.experiments import row_device
from ablations.results.identity import task_key
from ablations.results.schema import OLDER_BATCH_SIZES, upgrade_row
from ablations.results.store import SweepPaths, sweep_lock, sweep_names
from ablations.specs import Point
from bench.env import run_id
from bench.io.atomic import write_atomic
from bench.io.csvio import heal_torn_tail
from bench.training.recipe import TrainConfig
from vit import ViTConfig

RECIPE_FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]


def recovered_recipe(row: dict) -> TrainConfig | None:
    """The recipe whose run id is the row's (a row as pandas reads it), among its epochs and lr at each of
    `schema.OLDER_BATCH_SIZES` with every other field at its default, else None."""
    known = {k: v for k, v in row.items() if not (v is None or v != v) and k not in ("batch_size", "mode")}
    try:
        model = ViTConfig.from_row(known)
        base = TrainConfig.from_row({k: v for k, v in known.items() if k in RECIPE_FIELDS or k == "device"})
        seed = int(row["seed"])
    except (KeyError, TypeError, ValueError):
        return None
    text = lambda k: "" if known.get(k) is None else str(known[k])  # noqa: E731
    for batch in OLDER_BATCH_SIZES:
        recipe = dataclasses.replace(base, batch_size=batch)
        point = Point(text("sweep"), "", None, model, recipe)
        if run_id(task_key(point, text("dataset"), seed, text("init"), text("data_id"), row_device(known))) \
                == str(row["run_id"]):
            return recipe
    return None


def _migrate_row(row: dict[str, str], as_read: dict) -> bool:
    """One row in the current format (`schema.upgrade_row`, and the recipe it lost recovered: see the module
    docstring); whether it changed."""
    changed = upgrade_row(row, "")
    if "infer_batch_size" in changed:
        recipe = recovered_recipe(as_read)
        if recipe is not None:
            cells = recipe.to_dict()
            for name in RECIPE_FIELDS:
                if name in ("dtype", "compile") or cells[name] is None:
                    continue   # dtype and compile record what ran; None: the dataset's augmentation
                if row.get(name, "") == "":
                    row[name] = str(int(cells[name]) if isinstance(cells[name], bool) else cells[name])
    return bool(changed)


def rewrite_table(path: Path, change) -> int:
    """Rewrite a sweep table in place through `change(text_row, typed_row) -> bool` (it edits the text row, a
    {column: cell} dict, and says whether it changed it; `typed_row` is the row as pandas reads it); new
    columns go last. A torn last line (an interrupted append) is set aside first, as an append would
    (`csvio.heal_torn_tail`). The number of rows changed (0: the file is left as it was)."""
    heal_torn_tail(path)
    check_rewritable(path)
    text = path.read_text()
    lines = list(csv.reader(io.StringIO(text)))
    if not lines:
        return 0
    header = lines[0]
    rows = [dict(zip(header, record)) for record in lines[1:]]
    typed = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""], dtype={"run_id": str}).to_dict("records")
    changed = sum(bool(change(row, as_read)) for row, as_read in zip(rows, typed))
    if changed:
        header = list(dict.fromkeys(header + [k for row in rows for k in row]))
        if "mode" in header and all(row.get("mode", "") == "" for row in rows):
            header.remove("mode")
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([row.get(name, "") for name in header] for row in rows)
        write_atomic(path, buf.getvalue().encode())
    return changed


def check_rewritable(path: Path) -> None:
    """ValueError naming the file and its first such line where a line inside the table (not a torn last
    line, which a rewrite sets aside) is not a row of its header: a rewrite would lose it."""
    if not path.exists():
        return
    lines = list(csv.reader(io.StringIO(path.read_text())))
    if not lines:
        return
    torn = not path.read_bytes().endswith(b"\n")
    for number, record in enumerate(lines[1:len(lines) - torn], start=2):
        if len(record) != len(lines[0]):
            raise ValueError(f"{path}: line {number} is not a row of its header ({len(record)} cells, the header "
                             f"has {len(lines[0])}); `make report` lists such lines: repair or remove it, then rerun")


def migrate_table(path: Path) -> int:
    """Rewrite one sweep table in the current format; the number of rows changed (0: left as it was)."""
    return rewrite_table(path, _migrate_row)


def migrate(out: Path) -> dict[str, int]:
    """{sweep: rows changed} over every sweep table under `out/ablations`, each sweep's lock held throughout
    (a sweep appending meanwhile would lose its rows to the rewrite): SweepError naming the command that
    holds one, before anything is rewritten."""
    names = sweep_names(out)
    with contextlib.ExitStack() as locks:
        for sweep in names:
            locks.enter_context(sweep_lock(SweepPaths.of(out, sweep), sweep))
        for sweep in names:   # every table checked before any is rewritten
            check_rewritable(SweepPaths.of(out, sweep).rows)
        return {sweep: migrate_table(SweepPaths.of(out, sweep).rows) for sweep in names}
