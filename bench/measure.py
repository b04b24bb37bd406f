"""Measure one model: size (parameters, MACs), time, memory, utilisation and MFU of an inference or training step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from bench.choices import MODES
from bench.contention import LoadMeter
from bench.energy import EnergyMeter, energy_counter
from bench.flops import count_macs, param_count
from bench.memory import peak_mem_mb
from bench.mfu import matmul_peak, mfu
from bench.timing import Timing, TimingConfig, time_steps
from bench.training.precision import DTYPES, autocast
from bench.training.recipe import TrainConfig
from bench.training.step import training_step
from bench.utilisation import UtilSampler, reader_for


@dataclass(frozen=True)
class MeasureConfig:
    """mode: "infer" (eval, inference_mode) or "train" (forward, backward, AdamW step).
    dtype: "fp32", or "bf16"/"fp16" autocast. compile: wrap in torch.compile (compiled in the warm-up).
    """

    mode: str = "infer"
    batch_size: int = 8
    dtype: str = "fp32"
    compile: bool = False
    timing: TimingConfig = field(default_factory=TimingConfig)
    measure_memory: bool = True
    measure_mfu: bool = True    # needs the forward GFLOPs: measure(..., gflops=complexity(...)["gflops"])

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} is unknown; choose one of {list(MODES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is unknown; choose one of {list(DTYPES)}")
        if not isinstance(self.batch_size, int) or self.batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {self.batch_size!r}")


def inference_step(model: nn.Module, images: torch.Tensor, mcfg: MeasureConfig,
                   device: torch.device) -> tuple[Callable[[], object], list[object]]:
    """The inference step to time (eval mode, inference_mode, autocast), and what it keeps alive."""
    compiled = torch.compile(model) if mcfg.compile else model
    model.eval()

    def infer() -> torch.Tensor:
        with torch.inference_mode(), autocast(device, mcfg.dtype):
            return compiled(images)
    return infer, [model, images]


def memory_first(device: torch.device, mcfg: MeasureConfig) -> bool:
    """Whether a step's memory is taken on its first call, before it is timed: a CUDA training step (not
    compiled), whose first call captures its CUDA graph, so the graph's private pool (the activations) is
    allocated then, and a replay later allocates nothing. Elsewhere memory is taken after timing, on a
    warmed-up step."""
    return device.type == "cuda" and mcfg.mode == "train" and not mcfg.compile


def default_step(mcfg: MeasureConfig, device: torch.device) -> StepFactory:
    """What `measure` times unless told otherwise: the inference step, or the training step the sweeps
    train with (`bench.training.step`) under the default recipe at this batch size, dtype and compile setting."""
    if mcfg.mode == "infer":
        return lambda model, images, labels: inference_step(model, images, mcfg, device)
    return training_step(TrainConfig(batch_size=mcfg.batch_size, dtype=mcfg.dtype, compile=mcfg.compile), device)


StepFactory = Callable[[nn.Module, torch.Tensor, torch.Tensor], tuple[Callable[[], object], list[object]]]


def measure(model: nn.Module, input_shape: tuple[int, int, int], num_classes: int, mcfg: MeasureConfig,
            device: torch.device, gflops: float | None = None,
            step_factory: StepFactory | None = None) -> dict[str, object]:
    """Speed columns for `model` on inputs of `input_shape` (C, H, W), batch mcfg.batch_size; with
    `mcfg.measure_mfu` and the forward `gflops` of one image (`complexity`), the MFU too. `step_factory(model,
    images, labels)` gives another step of mcfg.mode to time, and what it keeps alive (default:
    `default_step`).

    Raises what the step raises (an out-of-memory error included); the caller records it.
    """
    model = model.to(device)
    images = torch.randn(mcfg.batch_size, *input_shape, device=device)
    labels = torch.randint(0, num_classes, (mcfg.batch_size,), device=device)
    step, alive = (step_factory or default_step(mcfg, device))(model, images, labels)
    first = mcfg.measure_memory and memory_first(device, mcfg)
    grads = mcfg.mode == "train"   # an inference step's memory leaves out gradients a training step left behind
    peak = peak_mem_mb(step, device, alive, grads) if first else None
    timing: Timing
    energy = EnergyMeter(_on_device(device, "energy", energy_counter))
    with LoadMeter(device) as meter, UtilSampler(_on_device(device, "reader", reader_for)) as sampler:
        timing = time_steps(step, device, mcfg.timing, around=energy)
    util = sampler.summary()
    row: dict[str, object] = {
        "mode": mcfg.mode, "batch_size": mcfg.batch_size, "dtype": mcfg.dtype, "compile": int(mcfg.compile),
        "throughput_img_s": timing.throughput(mcfg.batch_size), "step_ms_median": timing.median_ms,
        "step_ms_iqr": timing.iqr_ms, "cpu_step_ms_median": timing.cpu_median_ms, "repeats": timing.steps,
        **{f"step_ms_p{q}": timing.latency_percentile_ms(q) for q in (50, 90, 99)},
        "energy_j_per_img": None if energy.per_unit is None else energy.per_unit / mcfg.batch_size,
        "energy_window_s": energy.window_s, "energy_source": energy.source,
        "util_pct": util.get("util_pct"), "util_source": util["util_source"],
        "gpu_mem_used_mb": util.get("gpu_mem_used_mb"), "power_w": util.get("power_w"),
        **meter.load.columns(),
    }
    if mcfg.measure_memory and not first:
        peak = peak_mem_mb(step, device, alive, grads)
    row["peak_mem_mb"] = peak
    if mcfg.measure_mfu and gflops is not None:
        peak = matmul_peak(device, mcfg.dtype)
        row.update(mfu=mfu(gflops, timing.throughput(mcfg.batch_size), mcfg.mode, peak.flops), **peak.columns())
    return row


_KEPT: dict[tuple, object] = {}


def _on_device(device: torch.device, what: str, make: Callable[[torch.device], object]):
    """`make(device)`, made once per process for a CUDA device (NVML's handles, its energy counter and its
    sample reader, which remembers the samples it has read): a cost phase measures many items in a row, and
    starting NVML for each is time outside the timed steps that the phase's budget pays for. Elsewhere made
    each time (the CPU's readers are exact at a region's two ends)."""
    if device.type != "cuda":
        return make(device)
    import sys

    key = (str(device), what, make, id(sys.modules.get("pynvml")))
    if key not in _KEPT:
        _KEPT[key] = make(device)
    return _KEPT[key]


def complexity(model: nn.Module, input_shape: tuple[int, int, int]) -> dict[str, float]:
    """params, gmacs (one image's forward), gflops = 2 × gmacs."""
    example = torch.zeros(1, *input_shape, device=next(model.parameters()).device)
    gmacs = count_macs(model, example) / 1e9
    return {"params": param_count(model), "gmacs": gmacs, "gflops": 2 * gmacs}


def add_mfu(row: dict[str, object], device: torch.device) -> None:
    """Fill row["mfu"] from gflops, throughput and the cached matmul peak of (device, dtype)."""
    peak = matmul_peak(device, str(row["dtype"]))
    row.update(mfu=mfu(float(row["gflops"]), float(row["throughput_img_s"]), str(row["mode"]), peak.flops),
               **peak.columns())
