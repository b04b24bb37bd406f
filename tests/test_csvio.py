"""bench.io.csvio: appends that never tear a line, even from two processes at once."""

import multiprocessing as mp

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
