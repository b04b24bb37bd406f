"""bench.io.csvio: appends that never tear a line, even from two processes at once."""

import multiprocessing as mp

import pytest

from bench.io.csvio import append_row, read_rows


def _append_many(path, tag, n):
    for i in range(n):
        append_row(path, {"writer": tag, "i": i, "payload": f"{tag}-{i}-" + "x" * 3000}, ["writer", "i", "payload"])


def test_two_processes_appending_never_tear_a_line(tmp_path):
    path = tmp_path / "shared.csv"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(path, tag, 150)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    table = read_rows(path)
    assert len(table) == 300 and list(table.columns) == ["writer", "i", "payload"]
    assert (table["payload"] == table["writer"] + "-" + table["i"].astype(str) + "-" + "x" * 3000).all()
    for tag in ("a", "b"):
        assert sorted(table.loc[table.writer == tag, "i"]) == list(range(150))


def test_skipped_lines_go_to_the_enclosing_collector_once_each_and_are_warnings_elsewhere(tmp_path):
    """The report collects what readers skipped without touching the process's warning filters: inside
    `collecting_skips` a skipped line is a note (each message once, however often the file is read), with
    no warning; outside, the same read warns."""
    import warnings

    from bench.io.csvio import SkippedInput, collecting_skips, read_rows

    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\nonly-one-field\n3,4\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # any warning inside the collector fails the test
        with collecting_skips() as notes:
            assert len(read_rows(path)) == 2 and len(read_rows(path)) == 2
    assert notes == [f"{path}: skipped 1 malformed line: 3"]
    with pytest.warns(SkippedInput, match="skipped 1 malformed line"):
        read_rows(path)


def test_a_missing_int_written_as_nan_keeps_the_row(tmp_path):
    """A row whose optional int column holds a float NaN (written "nan") is a finished run: it is read, the
    cell missing, not skipped as malformed."""
    from ablations.results.schema import read_table
    from ablations.results.store import SweepPaths, record
    from ablations.running.tasks import RunResult

    paths = SweepPaths.of(tmp_path, "s")
    row = {"run_id": "abcdef012345", "status": "ok", "seed": 0, "torch_threads": float("nan"), "test_acc": 0.5}
    record(RunResult(row), paths)
    assert ",nan," in paths.rows.read_text() or paths.rows.read_text().rstrip().endswith("nan")
    table = read_table(paths.rows)
    assert len(table) == 1 and table["torch_threads"].isna().all() and table["test_acc"].iloc[0] == 0.5


def test_a_skipped_input_outside_a_report_is_one_line_without_source(tmp_path):
    import subprocess
    import sys

    code = ("from bench.io.csvio import skipped\n"
            "skipped('x.csv: skipped 1 malformed line: 3')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr == "note: x.csv: skipped 1 malformed line: 3\n", done.stderr
