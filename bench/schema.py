"""The columns of the measurement tables: one definition each (name, unit, meaning), in the order files
are written. The model's columns are `ViTConfig`'s fields, documented in their metadata. The columns of
training runs, histories and cost phases belong to `ablations.results.schema`; `docs/columns.md` is rendered from
both (`python -m ablations columns`) and a test keeps it in step.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bench.io.csvio import MISSING_AS_NAN
from vit import ViTConfig
from vit.config import FIELD_CHOICES

KINDS = ("number", "int", "bool", "text", "id", "time")


# what a column's role tells a reader
ROLES = {
    "measured": "differs between two runs of one config (when, where, how fast; not what was computed): "
                "left out where runs are compared for equality",
    "speed": "a cost-phase figure of a config: its median over the rounds taken on a quiet machine is what "
             "a training row carries",
}


def with_role(columns: list[Column], role: str) -> list[str]:
    """The names of the columns that have `role`, in order, each once."""
    return list(dict.fromkeys(c.name for c in columns if role in c.roles))


@dataclass(frozen=True)
class Column:
    """One column: its name, unit and meaning, and how a reader judges a cell of it (`kind`: number,
    int, bool, text, id (12 hex digits), time (ISO 8601); `choices`: the only values it may hold;
    `required`: a blank cell makes the line malformed; `roles`: what readers do with it, from ROLES)."""
    name: str
    unit: str      # "" where the value has none (a count, a name, a ratio)
    meaning: str
    kind: str = "number"
    choices: tuple[str, ...] = ()
    required: bool = False
    roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name}: kind {self.kind!r} is not one of {KINDS}")
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise ValueError(f"column {self.name}: roles {sorted(unknown)} are not among {sorted(ROLES)}")

    def accepts(self, cell: str) -> bool:
        """Whether a cell read from a CSV file can be a value of this column; "" and "nan" in a column
        of a kind in MISSING_AS_NAN (a missing value as the writer spells a float NaN) are missing."""
        if cell == "" or (cell == "nan" and self.kind in MISSING_AS_NAN):
            return not self.required
        if self.choices:
            return cell in self.choices
        return _ACCEPTS[self.kind](cell)


def _number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def _int(cell: str) -> bool:
    try:
        return float(cell).is_integer()
    except ValueError:
        return False


def _time(cell: str) -> bool:
    try:
        datetime.datetime.fromisoformat(cell)
        return True
    except ValueError:
        return False


_ACCEPTS: dict[str, Callable[[str], bool]] = {
    "number": _number, "int": _int, "bool": lambda c: c in ("True", "False", "0", "1"), "text": lambda c: True,
    "id": lambda c: re.fullmatch(r"[0-9a-f]{12}", c) is not None, "time": _time}


def names(columns: list[Column]) -> list[str]:
    return [c.name for c in columns]


def by_name(*tables: Iterable[Column]) -> dict[str, Column]:
    """{name: column} over tables whose shared names mean the same thing (a reader's schema)."""
    found: dict[str, Column] = {}
    for table in tables:
        for column in table:
            found.setdefault(column.name, column)
    return found


def _config_column(f: dataclasses.Field) -> Column:
    kind = {int: "int", float: "number", bool: "bool", str: "text"}[typing.get_type_hints(ViTConfig)[f.name]]
    return Column(f.name, f.metadata.get("unit", ""), f.metadata.get("doc", ""), kind,
                  tuple(sorted(FIELD_CHOICES.get(f.name, ()))))


STATUSES = ("ok", "oom", "diverged", "error")
IDENTITY = [
    Column("run_id", "", "12-hex hash of everything that defines the row: a rerun with the same definition has the same id",
           "id", required=True),
    Column("started_at", "ISO 8601", "when the measurement or run started (UTC)", "time", roles=("measured",)),
    Column("git_sha", "", "commit of vitbench that produced the row", "text"),
    Column("host", "", "machine name", "text", roles=("measured",)),
    Column("device", "", "cpu or cuda", "text"),
    Column("device_name", "", "CPU model or GPU name: another model's kernels can sum in another order, so a "
                              "training run of the same seed is reproduced bit for bit only on the same model "
                              "(`compare` and the report's comparison with a reference name both where they differ)",
           "text"),
    Column("torch_version", "", "PyTorch version", "text"),
    Column("dtype", "", "fp32, or bf16/fp16 autocast", "text", ("fp32", "bf16", "fp16")),
    Column("compile", "0/1", "whether the model ran under torch.compile", "int", ("0", "1")),
    Column("status", "", "ok, oom, diverged or error", "text", STATUSES, required=True),
    Column("error", "", "the failure's message; empty when ok", "text"),
]
CONFIG = ([_config_column(f) for f in dataclasses.fields(ViTConfig)]
          + [Column("tokens", "", "sequence length T: patches + 1 (the CLS token)", "int")])
SIZE = [
    Column("params", "", "trainable and frozen parameters", "int"),
    Column("gmacs", "10⁹ MAC", "multiply-adds of one image's forward pass in every matrix product, attention "
                               "products included, the same for every backend (fvcore with exact handles)"),
    Column("gflops", "10⁹ FLOP", "2 × gmacs"),
]
SPEED = [
    Column("mode", "", "infer (eval, inference_mode) or train (forward, backward, AdamW step)", "text",
           ("infer", "train")),
    Column("batch_size", "images", "images per step", "int"),
    Column("throughput_img_s", "images/s", "batch_size / step_ms_median", roles=("measured", "speed")),
    Column("step_ms_median", "ms", "median time per step: on the CPU of steps timed alone; on CUDA of blocks of "
                                   "steps launched back to back between two CUDA events (the block's time over "
                                   "its steps), as training runs them, so host launch time overlaps the device",
           roles=("measured", "speed")),
    Column("step_ms_iqr", "ms", "interquartile range of those per-step times", roles=("measured",)),
    Column("cpu_step_ms_median", "ms", "on the CPU, median CPU time per step (this process's, all its threads), "
                                       "the same steps as step_ms_median: what a step costs the CPU whatever else "
                                       "holds the machine, so speed can be compared under load; blank on CUDA",
           roles=("measured", "speed")),
    Column("step_ms_p50", "ms", "latency: 50th percentile of one step timed alone (on CUDA synchronised after it, "
                                "host launch time included), numpy's linear interpolation", roles=("measured", "speed")),
    Column("step_ms_p90", "ms", "latency: 90th percentile of one step timed alone (9 in 10 steps stay under)",
           roles=("measured", "speed")),
    Column("step_ms_p99", "ms", "latency: 99th percentile of one step timed alone (with fewer than 100 steps it "
                                "interpolates towards the slowest)", roles=("measured", "speed")),
    Column("peak_mem_mb", "MiB", "peak tensor memory of one step: CUDA allocator peak, or MemTracker's on the "
                                 "CPU (parameters, optimizer state and activations, not process RSS; on CUDA "
                                 "less whatever else was allocated on the device before the step); a CUDA "
                                 "training step's is taken on its first call, which captures its CUDA graph, "
                                 "so the graph's pool (the activations) is counted, and the capture's own "
                                 "scaffolding is not (the warm-up's saved copy of the weights, the capture "
                                 "stream's cuBLAS workspace)", roles=("measured", "speed")),
    Column("util_pct", "%", "on CUDA, NVML's GPU utilisation (the share of time a kernel ran, on the whole GPU: "
                            "every process on it counts) from the driver's timestamped samples that lie wholly "
                            "inside the timed steps (each covers 1/6 to 1 s, by GPU); blank where none does (steps "
                            "timed for less than two sample periods); on the CPU this process's CPU time over wall "
                            "time as a share of the cores its torch threads can use", roles=("measured", "speed")),
    Column("util_source", "", "nvml or cpu: where util_pct came from", "text"),
    Column("other_cpu_pct", "%", "other processes' share of all CPUs while the steps were timed (busy time from "
                                 "/proc/stat, hypervisor steal included, less this process's)", roles=("measured",)),
    Column("contended", "0/1", "1 where the timed steps ran under load: other_cpu_pct ≥ 10 % or, on CUDA, another "
                               "process computing on the GPU (not this command's own, not an MPS server); readers "
                               "leave such rounds out of medians and ratios", "int", ("0", "1"), roles=("measured",)),
    Column("gpu_procs_seen", "", "on CUDA, the compute processes NVML listed on the GPU while the steps were timed, "
                                 "by kind: ours (this command and its workers), mps-server, other; or that their "
                                 "host PIDs could not be attributed (a container)", "text", roles=("measured",)),
    Column("mfu", "fraction", "model FLOP utilisation: achieved FLOP/s over the device's measured matmul peak for "
                      "that dtype (a training step counts 3 × the forward FLOPs)", roles=("measured", "speed")),
    Column("mfu_peak_gflops", "10⁹ FLOP/s", "the matmul peak the row's MFU figures were divided by: the best "
                                            "square matmul of this device and dtype measured in the same "
                                            "command (again while other processes held the machine)", roles=("measured",)),
    Column("mfu_peak_at", "ISO 8601", "when that peak was measured", "text", roles=("measured",)),
]
EXTRA = [
    Column("gpu_mem_used_mb", "MiB", "device memory in use per NVML at the ends of the timed steps (all processes)",
           roles=("measured", "speed")),
    Column("power_w", "W", "board power over the timed steps: the GPU's energy counter's difference over their "
                           "wall time, or where it has none the mean of NVML's timestamped power samples wholly "
                           "inside them (blank where none is); the whole board's", roles=("measured", "speed")),
    Column("energy_j_per_img", "J/image", "energy of the timed steps from the device's cumulative counter "
                                          "(NVML's GPU energy; RAPL package energy on a CPU where readable) "
                                          "between two of its ticks at least 1 s apart, divided by the images "
                                          "of the steps between them; the whole board's or socket's, other "
                                          "processes included; blank without a counter or a window that long",
           roles=("measured", "speed")),
    Column("energy_window_s", "s", "the window between counter ticks that energy_j_per_img was taken over",
           roles=("measured",)),
    Column("energy_source", "", "nvml or rapl: the counter behind energy_j_per_img; blank without one", "text",
           roles=("measured",)),
    Column("repeats", "steps", "timed steps behind the throughput figures (latency steps not counted)", "int",
           roles=("measured",)),
]

BENCH_TABLE = IDENTITY + CONFIG + SIZE + SPEED + EXTRA
BENCH_COLUMNS = names(BENCH_TABLE)
BENCH_SCHEMA = by_name(BENCH_TABLE)
