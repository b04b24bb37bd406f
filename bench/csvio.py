"""Append-only CSV tables that survive kills and concurrent writers.

Each row is formatted in memory and written with a single `os.write` on an `O_APPEND` descriptor
while holding an exclusive `flock`, then fsync'd: a kill leaves every earlier row whole, and two
processes appending to one file never interleave. A torn last line (power loss mid-write) is dropped
by `read_rows` with a warning rather than failing the table.
"""

from __future__ import annotations

import csv
import fcntl
import io
import os
import warnings
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd


def _format(values: Iterable[object]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buf.getvalue().encode()


def append_row(path: str | Path, row: Mapping[str, object], columns: Sequence[str]) -> None:
    """Append `row` under the file's header (written from `columns` if the file is new)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        header = _read_header(path)
        if header is None:
            header = list(columns)
            extra = [k for k in row if k not in header]
            header += extra
            os.write(fd, _format(header))
        unknown = [k for k in row if k not in header]
        if unknown:
            raise ValueError(f"{path}: row has column(s) {unknown} that the file's header lacks; "
                             f"the table was written by another version: move it aside and rerun")
        os.write(fd, _format(row.get(c) for c in header))
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock


def _read_header(path: Path) -> list[str] | None:
    with open(path, newline="") as f:
        first = f.readline()
    if not first.endswith("\n"):
        return None if not first else next(csv.reader([first]))
    return next(csv.reader([first]))


def read_rows(path: str | Path) -> pd.DataFrame:
    """The table as a DataFrame; an unterminated last line (a torn write) is dropped with a warning."""
    path = Path(path)
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        warnings.warn(f"{path}: dropping an unterminated last line (interrupted write)")
        data = data[: data.rfind(b"\n") + 1]
    if not data:
        return pd.DataFrame()
    return pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=[""])
