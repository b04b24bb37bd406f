"""The columns of the measurement tables: one definition each (name, unit, meaning), in the order files
are written. The model's columns are `ViTConfig`'s fields, documented in their metadata. The columns of
training runs, histories and cost phases belong to `ablations.schema`; `docs/columns.md` is rendered from
both (`python -m ablations columns`) and a test keeps it in step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from vit import ViTConfig


@dataclass(frozen=True)
class Column:
    name: str
    unit: str      # "" where the value has none (a count, a name, a ratio)
    meaning: str


def names(columns: list[Column]) -> list[str]:
    return [c.name for c in columns]


IDENTITY = [
    Column("run_id", "", "12-hex hash of everything that defines the row: a rerun with the same definition has the same id"),
    Column("started_at", "ISO 8601", "when the measurement or run started (UTC)"),
    Column("git_sha", "", "commit of vitbench that produced the row"),
    Column("host", "", "machine name"),
    Column("device", "", "cpu or cuda"),
    Column("device_name", "", "CPU model or GPU name"),
    Column("torch_version", "", "PyTorch version"),
    Column("dtype", "", "fp32, or bf16/fp16 autocast"),
    Column("compile", "0/1", "whether the model ran under torch.compile"),
    Column("status", "", "ok, oom, diverged or error"),
    Column("error", "", "the failure's message; empty when ok"),
]
CONFIG = ([Column(f.name, f.metadata.get("unit", ""), f.metadata.get("doc", "")) for f in dataclasses.fields(ViTConfig)]
          + [Column("tokens", "", "sequence length T: patches + 1 (the CLS token)")])
COST = [
    Column("params", "", "trainable and frozen parameters"),
    Column("gmacs", "10⁹ MAC", "multiply-adds of one image's forward pass in every matrix product, attention "
                               "products included, the same for every backend (fvcore with exact handles)"),
    Column("gflops", "10⁹ FLOP", "2 × gmacs"),
]
SPEED = [
    Column("mode", "", "infer (eval, inference_mode) or train (forward, backward, AdamW step)"),
    Column("batch_size", "images", "images per step"),
    Column("throughput_img_s", "images/s", "batch_size / median step time"),
    Column("step_ms_median", "ms", "median wall time of one step (CUDA events on a GPU)"),
    Column("step_ms_iqr", "ms", "interquartile range of the step times"),
    Column("peak_mem_mb", "MiB", "peak tensor memory of one step: CUDA allocator peak, or MemTracker's on the "
                                 "CPU (parameters, optimizer state and activations, not process RSS)"),
    Column("util_pct", "%", "GPU utilisation from NVML during the timed steps, or on the CPU this process's "
                            "CPU time over wall time as a share of its cores"),
    Column("util_source", "", "nvml or cpu: where util_pct came from"),
    Column("mfu", "", "model FLOP utilisation: achieved FLOP/s over the device's measured matmul peak for "
                      "that dtype (a training step counts 3 × the forward FLOPs)"),
]
EXTRA = [
    Column("gpu_mem_used_mb", "MiB", "device memory in use per NVML during the timed steps (all processes)"),
    Column("power_w", "W", "board power per NVML during the timed steps"),
    Column("repeats", "steps", "timed steps behind the figures"),
]

BENCH_TABLE = IDENTITY + CONFIG + COST + SPEED + EXTRA
BENCH_COLUMNS = names(BENCH_TABLE)
STATUSES = ("ok", "oom", "diverged", "error")
