"""pytest-benchmark suite: forward and training step of each attention backend (`make bench`).

Two configs: `small` (the MNIST sweep config) and `vit_s16` (ViT-S/16 at 224 px). Batch sizes are
kept small on CPU. CUDA work is synchronised inside the measured function, so the time is the device's.
Each benchmark's `extra_info` carries what `python -m bench convert-json` needs for a measurement row, and what
other processes took of the machine while it ran (`other_cpu_pct`, `contended`).
"""

from __future__ import annotations

import pytest
import torch

from bench import LoadMeter, MeasureConfig, complexity, default_step, device_name, resolve_device
from vit import ATTENTION_BACKENDS, PRESETS, VisionTransformer

DEVICE = resolve_device("auto")
DTYPE = "bf16" if DEVICE.type == "cuda" else "fp32"
CONFIGS = {"small": (PRESETS["vit_mnist"], 64 if DEVICE.type == "cpu" else 256),
           "vit_s16": (PRESETS["vit_small_patch16_224"], 4 if DEVICE.type == "cpu" else 64)}


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("backend", sorted(ATTENTION_BACKENDS))
def test_step(benchmark, backend, config, mode):
    base, batch_size = CONFIGS[config]
    cfg = base.replace(attn=backend)
    torch.manual_seed(0)
    model = VisionTransformer(cfg)
    shape = (cfg.in_chans, cfg.img_size, cfg.img_size)
    row = complexity(model, shape)
    model = model.to(DEVICE)
    images = torch.randn(batch_size, *shape, device=DEVICE)
    labels = torch.randint(0, cfg.num_classes, (batch_size,), device=DEVICE)
    step, _ = default_step(MeasureConfig(mode=mode, batch_size=batch_size, dtype=DTYPE), DEVICE)(model, images, labels)

    def synced_step():
        step()
        if DEVICE.type == "cuda":
            torch.cuda.synchronize(DEVICE)

    benchmark.extra_info.update({**cfg.to_dict(), **row, "tokens": cfg.tokens, "mode": mode,
                                 "batch_size": batch_size, "dtype": DTYPE, "compile": 0,
                                 "device": DEVICE.type, "device_name": device_name(DEVICE), "backend": backend})
    with LoadMeter(DEVICE) as meter:   # what other processes took meanwhile: the report says it beside the figure
        benchmark.pedantic(synced_step, warmup_rounds=1, rounds=5 if config == "small" else 3, iterations=1)
    if meter.load is not None:
        benchmark.extra_info.update(meter.load.columns())
