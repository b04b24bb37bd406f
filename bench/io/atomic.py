"""Files written whole or not at all: the bytes go to `<name>.<pid>.tmp` beside the target, which is then
renamed over it. A kill leaves the old file or the new one, plus at worst a temporary file whose writer
is gone (the sweep preflight removes those, reading the PID from the name)."""

from __future__ import annotations

import os
from pathlib import Path

WRITE_FIX = "free space or choose another OUT, then rerun to resume"   # how a write that failed ends its message


class WriteError(OSError):
    """A file that could not be written (a full disk, a folder that is not one): not bad input, so whatever
    catches bad input lets it through."""


def tmp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


def write_atomic(path: str | Path, data: bytes) -> None:
    """Replace `path` with `data`; on failure the temporary file is removed and the `WriteError` (errno kept)
    names `path` and the fix."""
    path = Path(path)
    tmp = tmp_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise WriteError(err.errno, f"{path}: could not write {len(data):,} bytes ({err.strerror or err}); "
                                 f"{WRITE_FIX}") from None
