"""Measuring any nn.Module: FLOPs, parameters, time, memory, utilisation, MFU, environment.

The names below are the package's surface for scripts: `from bench import interleaved`. Each loads on first
use, so `import bench` imports no torch."""

from __future__ import annotations

from .lazy import lazy_names

_WHERE = {
    "device_name": "env", "resolve_device": "env", "set_cudnn_attention": "env", "deterministic_algorithms": "env",
    "LoadMeter": "contention", "MeasureConfig": "measure", "complexity": "measure", "default_step": "measure",
    "Spread": "rounds", "interleaved": "rounds", "ratio_or_noise": "rounds",
    "TimingConfig": "timing", "time_steps": "timing",
    "TrainConfig": "training.recipe", "autocast": "training.precision",
    "StaticStep": "training.step", "make_step": "training.step", "train_mode": "training.step",
    "training_parts": "training.step", "training_step": "training.step",
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
