"""The committed reference results: a results folder marked with `REFERENCE_MARK`, which no command
writes into unless told to (`--into-reference`), so that a user's runs never mix with them."""

from __future__ import annotations

import os
from pathlib import Path

REFERENCE_MARK = ".vitbench-reference"
CHECKOUT_REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"   # a checkout's committed results


WRITTEN = ("ablations", "figures", "bench", "calibrate", "tensorboard", "specs")   # what commands write under an OUT


def reference_root(path: str | Path) -> Path | None:
    """The reference folder `path` lies in (itself or a parent, symlinks resolved), or None."""
    resolved = Path(path).expanduser().resolve()
    return next((p for p in (resolved, *resolved.parents) if (p / REFERENCE_MARK).exists()), None)


def _links_inside(folder: Path):
    """Every symbolic link at any depth under `folder` (a file's or a folder's), not followed."""
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in (*dirnames, *filenames):
            place = Path(dirpath) / name
            if place.is_symlink():
                yield place


def refusal(out: str | Path, into_reference: bool, written: tuple[str, ...] = WRITTEN) -> str | None:
    """The one-line error for writing under a reference folder without `--into-reference`, else None: `out`
    itself, any folder above it, a folder the commands write into under it (`WRITTEN`) that leads into
    one, a link at any depth below those (a sweep's weights/ or preds/<sweep>/, a table) that does, or a
    link right under `out` (its REPORT.md) that does (symlinks resolved). A reference folder beside those
    (results/reference under OUT=results) is not written into. `written`: the folders the command writes
    under OUT (`known` adds its data/)."""
    if into_reference:
        return None
    folder = Path(out).expanduser()
    inside = [folder / name for name in written if (folder / name).is_dir()]
    linked = (link for place in inside if not place.is_symlink() for link in _links_inside(place))
    # a link right under OUT (its REPORT.md, say) that leads into one is written through as well
    top = (place for place in (folder.iterdir() if folder.is_dir() else ()) if place.is_symlink())
    hit = next(((place, root) for place in (folder, *inside, *linked, *top)
                if (root := reference_root(place)) is not None), None)
    if hit is None:
        return None
    place, root = hit
    shown = f"{place.relative_to(folder) if place.is_relative_to(folder) else place}{'/' if place.is_dir() else ''}"
    where = f"--out {out}" if place == folder else f"--out {out}: its {shown} leads into {root}, which"
    return (f"{where} holds the committed reference results; your runs write to OUT=results by default "
            f"(its report compares them with the reference). Pass --into-reference (INTO_REFERENCE=1) to "
            f"write into it on purpose")
