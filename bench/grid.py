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

from bench.env import environment, run_id
from bench.failures import classify_failure
from bench.io.csvio import append_row
from bench.measure import MeasureConfig, complexity, measure
from bench.rounds import interleaved
from bench.schema import BENCH_COLUMNS
from vit import VisionTransformer, ViTConfig


def img_size_for_tokens(tokens: int, patch_size: int) -> int:
    """Image side giving `tokens` = grid² + 1; a count that is not a square plus one is an error."""
    grid = math.isqrt(tokens - 1) if tokens > 1 else 0
    if tokens < 2 or grid * grid != tokens - 1:
        lo, hi = max(grid, 1) ** 2 + 1, (grid + 1) ** 2 + 1
        nearest = f"{lo} or {hi}" if lo < tokens else f"{lo}"
        raise ValueError(f"tokens={tokens} is not (patches per side)² + 1; nearest valid: {nearest}")
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


AUTO_BATCH_GFLOP = 32.0  # on a CPU, "auto" batches enough images for a forward of at least this many GFLOPs
AUTO_BATCH_MAX = 256     # and never more than this; on CUDA "auto" is this (timm's benchmark default)


def auto_batch(cfg: ViTConfig, device: torch.device) -> int:
    """The batch size `--batch-size auto` measures `cfg` at: AUTO_BATCH_MAX on CUDA; on a CPU the smallest
    power of two whose forward pass costs at least AUTO_BATCH_GFLOP, at most AUTO_BATCH_MAX (a batch of 8
    leaves a small model's matmuls too small to keep the cores busy; a large one at 256 takes minutes)."""
    if device.type == "cuda":
        return AUTO_BATCH_MAX
    gflops = complexity(VisionTransformer(cfg), (cfg.in_chans, cfg.img_size, cfg.img_size))["gflops"]
    batch = 1
    while batch < AUTO_BATCH_MAX and batch * gflops < AUTO_BATCH_GFLOP:
        batch *= 2
    return batch


def expand_grid(base: ViTConfig, backends: list[str], tokens: list[int], batch_sizes: list[int | None],
                dtypes: list[str], modes: list[str], compile: bool, timing,
                device: torch.device = torch.device("cpu")) -> list[GridPoint]:
    """Validate every point before anything is measured; a batch size of None is `auto_batch` for the point's
    model on `device`."""
    points, autos = [], {}
    for backend, t, bs, dtype, mode in itertools.product(backends, tokens, batch_sizes, dtypes, modes):
        cfg = base.replace(attn=backend, img_size=img_size_for_tokens(t, base.patch_size)) if t else base.replace(attn=backend)
        if bs is None:
            key = cfg.replace(attn=base.attn)  # the backend does not change the FLOPs
            bs = autos.setdefault(key, auto_batch(cfg, device))
        points.append(GridPoint(cfg, MeasureConfig(mode=mode, batch_size=bs, dtype=dtype, compile=compile,
                                                   timing=timing)))
    return points


def run_grid(points: list[GridPoint], device: torch.device, out_csv: Path,
             build: Callable[[ViTConfig], torch.nn.Module] = VisionTransformer, rounds: int = 1,
             rows: list[dict[str, object]] | None = None) -> list[dict[str, object]]:
    """Every point once per round, in interleaved rounds (`rounds.interleaved`), each measurement a row
    appended to `out_csv` as it is taken, and to `rows` (the list returned: a caller that passes one sees the
    rows taken before an interruption)."""
    rows = [] if rows is None else rows
    order = list(interleaved(points, rounds))
    for _, point in tqdm(order, desc=f"bench ({rounds} round{'s' * (rounds > 1)})", unit="point"):
        row = measure_point(point, device, build)
        append_row(out_csv, row, BENCH_COLUMNS)
        rows.append(row)
    return rows
