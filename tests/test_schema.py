"""The column dictionary: every column of every table defined once, with a meaning, and docs/columns.md
rendered from the code (regenerate with `python -m ablations columns > docs/columns.md`)."""

import dataclasses
from pathlib import Path

import pytest

from ablations.results.schema import ABLATION_COLUMNS, COST_COLUMNS, HISTORY_COLUMNS, TABLES, columns_markdown
from bench.schema import BENCH_COLUMNS
from vit import ViTConfig

ROOT = Path(__file__).resolve().parents[1]


def test_docs_columns_md_is_what_the_code_renders():
    assert (ROOT / "docs" / "columns.md").read_text() == columns_markdown(), \
        "docs/columns.md is out of date: python -m ablations columns > docs/columns.md"


def test_every_column_is_defined_with_a_meaning_and_named_once_per_table():
    for path, _, table in TABLES:
        assert len({c.name for c in table}) == len(table), path
        assert all(c.meaning.strip() for c in table), [c.name for c in table if not c.meaning.strip()]
    text = columns_markdown()
    for name in {*BENCH_COLUMNS, *ABLATION_COLUMNS, *COST_COLUMNS, *HISTORY_COLUMNS}:
        assert f"| `{name}` |" in text or f"- `{name}`:" in text, name


def test_model_columns_are_viTconfig_fields_documented_where_they_are_declared():
    fields = [f.name for f in dataclasses.fields(ViTConfig)]
    assert BENCH_COLUMNS[BENCH_COLUMNS.index("img_size"):][:len(fields)] == fields
    assert all(f.metadata.get("doc") for f in dataclasses.fields(ViTConfig))


def test_migrate_rewrites_an_older_table_with_its_exact_recipe_and_keeps_every_run_id(tmp_path, capsys):
    import csv

    from helpers import OLD_RECIPE, write_old_format

    from ablations.__main__ import main
    from ablations.analysis.report import REFERENCE

    out = tmp_path / "old"
    rows = write_old_format(REFERENCE / "ablations" / "depth.csv", out / "ablations" / "depth.csv")
    recipe = OLD_RECIPE
    assert main(["migrate", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert len(rows) >= 12 and f" {len(rows)} rows rewritten" in printed
    assert f"{len(rows)} rows rewritten; all 1 table under" in printed and "now in the current format" in printed
    migrated = list(csv.DictReader((out / "ablations" / "depth.csv").open()))
    assert [r["run_id"] for r in migrated] == [r["run_id"] for r in rows]
    for old, new in zip(rows, migrated):
        assert {k: new[k] for k in recipe} == {k: old[k] for k in recipe}   # recovered through the run id
        assert "mode" not in new
    assert main(["migrate", "--out", str(out)]) == 0   # idempotent
    assert "nothing rewritten: all 1 table under" in capsys.readouterr().out
    assert main(["migrate", "--out", str(tmp_path / "none")]) == 2
    assert "no ablations/ folder" in capsys.readouterr().err


def test_column_roles_are_declared_with_the_columns_and_checked():
    """What readers do with a column (leave it out of equality checks, take its cost-phase median) is said
    where the column is declared; the lists readers use are read from there."""
    import pytest

    from ablations.results.schema import ABLATION_TABLE, COST_TABLE, MEASURED
    from ablations.results.store import SPEED_FIGURES
    from bench.schema import Column

    assert {"throughput_img_s", "train_time_s", "started_at"} <= set(MEASURED) and "test_acc" not in MEASURED
    assert set(SPEED_FIGURES) <= {c.name for c in COST_TABLE} and "throughput_img_s" in SPEED_FIGURES
    assert all("measured" in c.roles for c in COST_TABLE if "speed" in c.roles)  # a speed figure always varies
    assert not [c.name for c in ABLATION_TABLE if c.name in ("run_id", "seed", "test_acc") and c.roles]
    with pytest.raises(ValueError, match="roles \\['fast'\\] are not among"):
        Column("x", "", "a column", roles=("fast",))


@pytest.mark.slow
def test_migrate_waits_for_no_running_sweep_and_loses_no_row_it_appends(tmp_path, capsys):
    """A real sweep in another process appends rows while `migrate` is asked to rewrite its table: migrate
    refuses in one line (the sweep's lock), and every run the sweep reports is in its table afterwards."""
    import subprocess
    import sys
    import time

    from conftest import write_spec

    from ablations.__main__ import main
    from ablations.results.schema import read_table

    spec = write_spec(tmp_path / "mig.toml", "depth", "[1]", train="epochs = 3")
    out, table = tmp_path / "out", tmp_path / "out" / "ablations" / "mig.csv"
    sweep = subprocess.Popen([sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--seeds",
                              "0,1,2,3,4,5,6,7", "--cost-rounds", "0", "--jobs", "1", "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not (table.exists() and len(read_table(table)) >= 1) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sweep.poll() is None, "the sweep ended before migrate could be tried beside it"
        assert main(["migrate", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "sweep mig under OUT=" in err and "is in use by another command" in err and err.count("\n") == 1
    finally:
        assert sweep.wait(timeout=300) == 0
    assert sorted(read_table(table)["seed"]) == list(range(8))
    assert main(["migrate", "--out", str(out)]) == 0          # once it is done, migrate runs
