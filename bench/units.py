"""How a figure is printed for a reader, wherever it is printed (report, tables, dry runs, bench summaries)."""

from __future__ import annotations

import math


def count(n: float, word: str, plural: str = "") -> str:
    """A count and its noun, in the number the count asks for: "1 seed", "3 seeds", "1,200 entries", "0.5 CPUs"."""
    shown = f"{n:,}" if isinstance(n, int) else f"{n:g}"
    return f"{shown} {word if n == 1 else plural or word + 's'}"


def percent(fraction: float, digits: int = 0) -> str:
    """A fraction as a percentage the way every figure here is printed: a space before the sign ("22 %")."""
    return f"{100 * fraction:.{digits}f} %"


def macs(x: float) -> str:
    """A GMACs or GFLOPs figure to three significant digits and never in exponent form (0.0000398, 0.00121,
    4.60), whole from 100 on (1,234): a small model's figure is never printed as 0.0000."""
    if x != x:
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}"


def ratio(r: float) -> str:
    """A ratio of two figures: ×1.31 to two decimals, and two significant digits below ×0.1 (×0.0039, never ×0.00)."""
    return f"×{r:.2f}" if r >= 0.1 else f"×{r:.2g}"


def rate(img_s: float) -> str:
    """A throughput as a reader reads it: whole images a second with thousands separated from 1,000 on
    (50,620, not 5.062e+04), four significant digits below."""
    return f"{img_s:,.0f}" if img_s >= 1000 else f"{img_s:.4g}"


def binary_size(nbytes: float) -> str:
    """A number of bytes in the binary unit that keeps it between 1 and 1,024, to one decimal: 1.5 MiB, 29.5 GiB."""
    value, unit = float(nbytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
