"""The committed reference results: a results folder marked with `REFERENCE_MARK`, which no command
writes into unless told to (`--into-reference`), so that a user's runs never mix with them."""

from __future__ import annotations

from pathlib import Path

REFERENCE_MARK = ".vitbench-reference"
CHECKOUT_REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"   # a checkout's committed results


def refusal(out: str | Path, into_reference: bool) -> str | None:
    """The one-line error for writing into a reference folder without `--into-reference`, else None."""
    folder = Path(out).expanduser()
    if into_reference or not (folder / REFERENCE_MARK).exists():
        return None
    return (f"--out {out} holds the committed reference results; your runs write to OUT=results by default "
            f"(its report compares them with the reference). Pass --into-reference (INTO_REFERENCE=1) to "
            f"write into it on purpose")
