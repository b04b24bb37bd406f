"""A grid of measurements (backends × tokens × batch sizes × dtypes × modes), one CSV row each.

A point that fails (out of memory included) is recorded with its status and message, and the grid
goes on; every row is appended as soon as it is measured.
"""

from __future__ import annotations

import gc
import itertools
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from vit import VisionTransformer, ViTConfig

from .csvio import append_row
from .env import environment, run_id
from .failures import classify_failure
from .measure import MeasureConfig, complexity, measure
from .schema import BENCH_COLUMNS


def img_size_for_tokens(tokens: int, patch_size: int) -> int:
    """Image side giving `tokens` = grid² + 1; a count that is not a square plus one is an error."""
    grid = math.isqrt(tokens - 1) if tokens > 1 else 0
    if tokens < 2 or grid * grid != tokens - 1:
        lo, hi = max(grid, 1) ** 2 + 1, (grid + 1) ** 2 + 1
        raise ValueError(f"tokens={tokens} is not (patches per side)² + 1; nearest valid: {lo} or {hi}")
    return grid * patch_size


@dataclass(frozen=True)
class GridPoint:
    cfg: ViTConfig
    mcfg: MeasureConfig


def measure_point(point: GridPoint, device: torch.device,
                  build: Callable[[ViTConfig], torch.nn.Module] = VisionTransformer) -> dict[str, object]:
    """One measurement row (docs/columns.md); failures become a row with status oom/error, not an exception."""
    cfg, mcfg = point.cfg, point.mcfg
    row: dict[str, object] = {**environment(device), **cfg.to_dict(), "tokens": cfg.tokens,
                              "mode": mcfg.mode, "batch_size": mcfg.batch_size, "dtype": mcfg.dtype,
                              "compile": int(mcfg.compile)}
    row["run_id"] = run_id({**cfg.to_dict(), "mode": mcfg.mode, "batch_size": mcfg.batch_size,
                            "dtype": mcfg.dtype, "compile": mcfg.compile, "device_name": row["device_name"]})
    shape = (cfg.in_chans, cfg.img_size, cfg.img_size)
    try:
        model = build(cfg)
        row.update(complexity(model, shape))
        row.update(measure(model, shape, cfg.num_classes, mcfg, device, gflops=float(row["gflops"])))
        row.update(status="ok", error="")
    except Exception as err:  # recorded, never lost: the grid goes on
        row.update(status=classify_failure(err), error=f"{type(err).__name__}: {err}"[:500])
        if row["status"] == "error":
            traceback.print_exc()
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def expand_grid(base: ViTConfig, backends: list[str], tokens: list[int], batch_sizes: list[int],
                dtypes: list[str], modes: list[str], compile: bool, timing) -> list[GridPoint]:
    """Validate every point before anything is measured."""
    points = []
    for backend, t, bs, dtype, mode in itertools.product(backends, tokens, batch_sizes, dtypes, modes):
        cfg = base.replace(attn=backend, img_size=img_size_for_tokens(t, base.patch_size)) if t else base.replace(attn=backend)
        points.append(GridPoint(cfg, MeasureConfig(mode=mode, batch_size=bs, dtype=dtype, compile=compile,
                                                   timing=timing)))
    return points


def run_grid(points: list[GridPoint], device: torch.device, out_csv: Path,
             build: Callable[[ViTConfig], torch.nn.Module] = VisionTransformer) -> list[dict[str, object]]:
    rows = []
    for point in tqdm(points, desc="bench", unit="point"):
        row = measure_point(point, device, build)
        append_row(out_csv, row, BENCH_COLUMNS)
        rows.append(row)
    return rows
