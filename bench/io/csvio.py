"""Append-only CSV tables that survive kills, full disks, concurrent writers and bad lines.

Writes: the rows of one call are formatted in memory and written on an `O_APPEND` descriptor while
holding an exclusive `flock`, then fsync'd. Before appending, a torn last line (a write cut by a kill,
a power loss or a full disk) is cut off and kept in `<file>.quarantine`, so a new row never fuses with
a fragment. A short write is retried until complete; a write that fails (ENOSPC, EFBIG) is rolled back
to the file's previous length and raised as `OSError` naming the file: a full disk never leaves half a
row. Two processes appending to one file never interleave.

Every record is one line (a line break inside a cell is written as " | "), so a damaged line cannot
swallow the lines after it. Reads: `read_rows` never fails on content. A line with the wrong number of
fields, undecodable bytes, or a cell its column's schema refuses (a word where a number belongs, an
identifier that is not 12 hex digits, a status that is not one of the statuses, a blank run_id) is
skipped with one message naming the file and the line numbers: inside `collecting_skips()` (the report,
which lists them under "Skipped inputs") it goes to the collector; elsewhere it is a `SkippedInput`
warning. Each line is judged on its own, so any number of garbage lines cannot make real rows look
malformed.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import fcntl
import io
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import pandas as pd

from bench.io.atomic import WRITE_FIX, WriteError, write_atomic
from bench.units import count

MISSING_AS_NAN = ("int", "bool", "id", "time")   # kinds whose "nan" cell is a missing value written as a float NaN


class CellCheck(Protocol):
    kind: str  # "text", "id" and "time" cells are read as strings

    def accepts(self, cell: str) -> bool: ...


class SkippedInput(UserWarning):
    """An input (a line, a row, a file) that a reader skipped; the message names it and why."""


_FORMAT = warnings.formatwarning


def _one_line(message, category, filename, lineno, line=None) -> str:
    """A SkippedInput is said in one line ("note: …"), not with the file, line number and source line of the
    reader that skipped it; any other warning as Python says it."""
    if isinstance(category, type) and issubclass(category, SkippedInput):
        return f"note: {message}\n"
    return _FORMAT(message, category, filename, lineno, line)


warnings.formatwarning = _one_line


# the messages of the innermost `collecting_skips` of this thread (or task); None outside one
_COLLECTED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("skipped_inputs", default=None)


@contextlib.contextmanager
def collecting_skips() -> Iterator[list[str]]:
    """`with collecting_skips() as notes:` the messages of every input skipped inside, in order, each once;
    none of them becomes a warning."""
    notes: list[str] = []
    token = _COLLECTED.set(notes)
    try:
        yield notes
    finally:
        _COLLECTED.reset(token)


def skipped(message: str) -> None:
    """Say that an input was skipped: to the enclosing `collecting_skips`, or as a `SkippedInput` warning."""
    notes = _COLLECTED.get()
    if notes is None:
        warnings.warn(message, SkippedInput, stacklevel=3)
    elif message not in notes:
        notes.append(message)


def _format(rows: Iterable[Iterable[object]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for values in rows:  # one record per line: a line break inside a cell (an error message's) becomes " | "
        writer.writerow(["" if v is None else " | ".join(str(v).splitlines()) if isinstance(v, str) else v
                         for v in values])
    return buf.getvalue().encode()


def _write_all(fd: int, data: bytes, path: Path) -> None:
    """Write every byte or raise naming `path`, with the file cut back to its length before the call."""
    start = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(f"write returned {written}")
            view = view[written:]
        os.fsync(fd)
    except OSError as err:
        try:
            os.ftruncate(fd, start)
        except OSError:
            pass
        reason = err.strerror or str(err)
        raise WriteError(err.errno, f"{path}: could not write {len(data):,} bytes ({reason}); nothing of them "
                                    f"was kept; {WRITE_FIX}") from None


def _heal_tail(fd: int, path: Path) -> None:
    """Cut an unterminated last line off the file (under the caller's lock) into `<path>.quarantine`."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return
    data = os.pread(fd, size, 0)
    cut = data.rfind(b"\n") + 1
    quarantine = path.with_name(path.name + ".quarantine")
    with open(quarantine, "ab") as q:
        q.write(data[cut:] + b"\n")
    os.ftruncate(fd, cut)
    skipped(f"{path}: cut a torn last line ({size - cut} bytes, from an interrupted write) and kept it in "
            f"{quarantine.name}")


def heal_torn_tail(path: str | Path) -> None:
    """Cut a torn last line (an interrupted append, which every reader drops) off `path` into
    `<path>.quarantine`, under the file's lock, as the next append would: a rewrite of the table then keeps
    every whole row. Nothing happens to a file that ends in a line break, or that is not there."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _heal_tail(fd, path)
    finally:
        os.close(fd)


def append_rows(path: str | Path, rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> None:
    """Append `rows` in one write under the file's header (written from `columns` if the file is new):
    all of them land, or none. A row with columns the header lacks (a table written by an older
    version) first extends the header: the file is rewritten atomically with the new columns at the
    end, blank in the old rows."""
    if not rows:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise OSError(err.errno, f"{path}: cannot open for writing ({err.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not _still_the_file(fd, path):  # replaced (header extended, rows dropped) while we waited
                continue
            _heal_tail(fd, path)
            header = _read_header(fd)
            lines: list[Iterable[object]] = []
            if header is None:
                header = list(dict.fromkeys([*columns, *(k for row in rows for k in row)]))
                lines.append(header)
            unknown = [c for c in dict.fromkeys([*columns, *(k for row in rows for k in row)])
                       if c not in header and any(c in row for row in rows)]  # in the schema's order
            if unknown:
                _extend_header(fd, path, unknown)
                continue  # append to the new file
            lines += [[row.get(c) for c in header] for row in rows]
            _write_all(fd, _format(lines), path)
            return
        finally:
            os.close(fd)  # releases the lock


def _still_the_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _extend_header(fd: int, path: Path, new: list[str]) -> None:
    """Rewrite the file (under the caller's lock) with `new` columns after the old ones, blank in old rows."""
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    lines = data.splitlines()
    pad = b"," * len(new)
    head = lines[0] + b"," + _format([new]).rstrip(b"\n")
    write_atomic(path, b"".join(line + b"\n" for line in [head, *(line + pad for line in lines[1:] if line)]))


def append_row(path: str | Path, row: Mapping[str, object], columns: Sequence[str]) -> None:
    """Append one row (see `append_rows`)."""
    append_rows(path, [row], columns)


def _read_header(fd: int) -> list[str] | None:
    first = os.pread(fd, 65536, 0).split(b"\n", 1)[0]
    if not first.strip():
        return None
    return next(csv.reader([first.decode("utf-8", errors="replace")]))


def drop_rows(path: str | Path, column: str, values: set[str]) -> int:
    """Remove the rows whose `column` is in `values` (a rerun's leftovers), atomically, under the lock.
    Returns how many were removed. Only for files that one process writes at a time (a sweep's, under
    its sweep lock)."""
    path = Path(path)
    if not path.exists():
        return 0
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        lines = data.splitlines(keepends=True)
        header = next(csv.reader([lines[0].decode("utf-8", errors="replace")])) if lines else []
        if column not in header:
            return 0
        i = header.index(column)

        def leftover(line: bytes) -> bool:
            try:
                record = next(csv.reader([line.decode("utf-8", errors="replace")], strict=True))
            except (StopIteration, csv.Error):
                return False  # a damaged line stays for the readers to skip and name
            return len(record) == len(header) and record[i] in values

        kept = lines[:1] + [line for line in lines[1:] if not leftover(line)]
        removed = len(lines) - len(kept)
        if removed:
            write_atomic(path, b"".join(kept))
        return removed
    finally:
        os.close(fd)


def read_rows(path: str | Path, schema: Mapping[str, CellCheck] | None = None) -> pd.DataFrame:
    """The table as a DataFrame; malformed lines are skipped with a `SkippedInput` warning. `schema`
    ({column name: its definition}, e.g. `bench.schema.BENCH_SCHEMA`) judges every cell of the columns
    it names; without it only a line's shape and bytes are judged."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        skipped(f"{path}: unreadable ({err.strerror}); skipped")
        return pd.DataFrame()
    text = data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    if text and not text.endswith("\n"):
        skipped(f"{path}: dropping an unterminated last line (interrupted write)")
        text = text[: text.rfind("\n") + 1]
    lines = text.splitlines()
    try:
        header = next(csv.reader(lines[:1], strict=True))
    except (StopIteration, csv.Error):
        header = []
    if not header or len(set(header)) != len(header) or "\ufffd" in "".join(header):
        if lines:
            skipped(f"{path}: line 1 is not a header of distinct column names; file skipped")
        return pd.DataFrame()
    checks = [(j, schema[name]) for j, name in enumerate(header) if name in schema] if schema else []
    good: list[tuple[int, list[str]]] = []
    bad: list[int] = []
    for number, line in enumerate(lines[1:], start=2):  # the writer keeps every record on one line
        try:
            record = next(csv.reader([line], strict=True))
        except (StopIteration, csv.Error):
            record = []
        if (len(record) != len(header) or "\ufffd" in line
                or not all(column.accepts(record[j]) for j, column in checks)):
            bad.append(number)
        else:
            good.append((number, record))
    if bad:
        shown = ", ".join(map(str, sorted(bad)[:10])) + (" …" if len(bad) > 10 else "")
        skipped(f"{path}: skipped {count(len(bad), 'malformed line')}: {shown}")
    if not good:
        return pd.DataFrame(columns=header)
    text_columns = {name: str for name, column in (schema or {}).items()
                    if name in header and column.kind in ("text", "id", "time")}  # "000123" stays a string
    # "" is missing everywhere; "nan" too where a column's kind cannot hold it (a float NaN as the writer spells it)
    missing = {name: ["", "nan"] if (schema or {}).get(name) is not None and schema[name].kind in MISSING_AS_NAN
               else [""] for name in header}
    return pd.read_csv(io.BytesIO(_format([header] + [rec for _, rec in good])), keep_default_na=False,
                       na_values=missing, dtype=text_columns)
