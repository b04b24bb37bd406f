"""The training step timed alone: the eager step against the static-buffer step, side by side.

    python -m ablations stepbench [--preset vit_mnist] [--batch-size 64] [--device auto] [--dtype auto] [--rounds 7]
    make bench-step DEVICE=cuda

The static-buffer step (`bench.training.step.StaticStep`) is what sweeps train with on CUDA, each batch size captured
once into a CUDA graph and replayed; on the CPU it runs uncaptured (sweeps there use the eager step),
so the CPU figures only show what the static buffers cost. Each step trains its own copy of the same
model (the preset at the dataset's shape, `TrainConfig` defaults: AdamW, clipping, label smoothing) on
one fixed batch already on the device. The steps are timed in interleaved rounds (`bench.rounds`: every
round times each once, the first one rotating), each time with `bench.timing.time_steps` (warm-up,
which includes the capture, then at least 10 steps and 0.5 s); a timing taken while other processes held the
machine (`bench.contention`) is left out and counted; a step's figure is the median of its other rounds' medians
with their interquartile range, and the ratio is named only where each has 3 rounds or more and a t-test of the two,
round by round, calls them different (`bench.rounds`).
"""

from __future__ import annotations

import torch

from ablations.specs import base_preset
from ablations.training.data import load_dataset
from bench.contention import CONTENDED_PCT, LoadMeter
from bench.env import resolve_device
from bench.rounds import Spread, interleaved, ratio_or_noise
from bench.timing import TimingConfig, time_steps
from bench.training.recipe import TrainConfig
from bench.training.step import EagerStep, StaticStep, train_mode, training_parts
from bench.units import count
from vit import PRESETS, VisionTransformer, ViTConfig

KINDS = ("eager", "static")


def build_steps(model_cfg: ViTConfig, cfg: TrainConfig, device: torch.device) -> dict[str, EagerStep]:
    """One training step of each kind, each with its own model (same initial weights) and optimizer."""
    steps: dict[str, EagerStep] = {}
    for kind in KINDS:
        torch.manual_seed(0)
        model = VisionTransformer(model_cfg).to(device)
        runner, optimizer, scaler = training_parts(model, cfg, device)
        train_mode(model, cfg)
        args = (model, runner, optimizer, scaler, cfg, device, cfg.resolved_dtype(device))
        steps[kind] = StaticStep(*args) if kind == "static" else EagerStep(*args)
    return steps


def run(args) -> dict[str, Spread]:
    """`python -m ablations stepbench` once its arguments are parsed (`ablations.cli.parser`): each step kind's
    spread over rounds, printed. ValueError in one line for bad input, before any step is built."""
    try:
        device = resolve_device(args.device)
        cfg = TrainConfig(batch_size=args.batch_size, dtype=args.dtype)
        timing = TimingConfig(warmup=4, min_repeats=10, min_time_s=args.min_time)
        data = load_dataset(args.dataset, args.data_root)
        preset = base_preset(data.img_size) if args.preset == "auto" else args.preset
        model_cfg = PRESETS[preset].replace(img_size=data.img_size, in_chans=data.in_chans,
                                            num_classes=data.num_classes)
    except FileNotFoundError as err:
        raise ValueError(str(err)) from None
    steps = build_steps(model_cfg, cfg, device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch_size, data.in_chans, data.img_size, data.img_size, generator=g).to(device)
    y = torch.randint(0, data.num_classes, (args.batch_size,), generator=g).to(device)
    medians: dict[str, list[float]] = {kind: [] for kind in KINDS}   # one a round, NaN where left out
    loaded = 0   # rounds taken while other processes held the machine: left out, as bench run leaves them out
    for _, kind in interleaved(KINDS, args.rounds):
        step = steps[kind]
        with LoadMeter(device) as meter:
            ms = time_steps(lambda: step(x, y, 1e-4), device, timing).median_ms
        contended = meter.load is not None and meter.load.contended
        loaded += contended
        medians[kind].append(float("nan") if contended else ms)
    spreads = {kind: Spread.by_round(values) for kind, values in medians.items()}
    static = "graphed" if steps["static"].graphed else "static buffers, not captured"
    dtype = cfg.resolved_dtype(device)
    print(f"{preset} training step, batch {args.batch_size}, {device.type} {dtype}, "
          f"{count(args.rounds, 'interleaved round')}" + (f"; {loaded} of {len(KINDS) * args.rounds} timings taken while "
                                                 f"other processes took ≥ {CONTENDED_PCT:g} % of the machine, "
                                                 f"left out: measure again on an idle machine" if loaded else ""))
    for kind, s in spreads.items():
        label = f"{kind} ({static})" if kind == "static" else kind
        print(f"  {label:<36} " + (f"{s.median:8.3f} ms/step  [IQR {s.q1:.3f}–{s.q3:.3f}], {count(s.n, 'round')}" if s.n
                                   else "— (every round under load)"))
    print(f"  static / eager: {ratio_or_noise(spreads['static'], spreads['eager'])}")
    return spreads
