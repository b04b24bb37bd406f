"""Eager inference throughput of the four backends against timm's own ViT, measured side by side.

    python -m bench.vs_timm [--preset vit_small_patch16_224] [--batch-size 8] [--rounds 7]

Models are timed in interleaved rounds (`bench.rounds`: each round times every model once, the
starting model rotating), so drift of the machine (thermal, other load) hits all of them alike; the
figure per model is the median over rounds.
"""

from __future__ import annotations

import argparse
import statistics

import timm
import torch

from vit import ATTENTION_BACKENDS, PRESETS, VisionTransformer, load_timm_weights

from .rounds import interleaved
from .timing import TimingConfig, time_steps


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="vit_small_patch16_224", choices=[p for p in PRESETS if p.startswith("vit_") and "patch16" in p])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--backends", default=",".join(ATTENTION_BACKENDS))
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in ATTENTION_BACKENDS]
    if unknown:
        parser.error(f"unknown backend {unknown[0]!r}; choose from {sorted(ATTENTION_BACKENDS)}")

    torch.manual_seed(0)
    reference = timm.create_model(args.preset, pretrained=False).eval()
    models = {"timm": reference}
    for backend in backends:
        model = VisionTransformer(PRESETS[args.preset].replace(attn=backend)).eval()
        models[backend] = load_timm_weights(model, reference.state_dict())
    cfg = PRESETS[args.preset]
    images = torch.randn(args.batch_size, cfg.in_chans, cfg.img_size, cfg.img_size)

    per_round: dict[str, list[float]] = {name: [] for name in models}
    timing = TimingConfig(warmup=1, min_repeats=3, min_time_s=0.5)
    with torch.inference_mode():
        for name, model in models.items():  # one untimed pass each: allocator, oneDNN primitives
            model(images)
        for _, name in interleaved(list(models), args.rounds):
            per_round[name].append(time_steps(lambda: models[name](images), "cpu", timing).median_ms)
    img_s = {name: args.batch_size / (statistics.median(ms) / 1e3) for name, ms in per_round.items()}

    print(f"{args.preset}, eager fp32 inference, batch {args.batch_size}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, timm {timm.__version__}, median of {args.rounds} interleaved rounds")
    print(f"{'model':<8} {'img/s':>9} {'ms/batch':>9} {'vs timm':>8}")
    for name, rate in img_s.items():
        print(f"{name:<8} {rate:9.2f} {args.batch_size / rate * 1e3:9.1f} {rate / img_s['timm']:8.3f}")
    return img_s


if __name__ == "__main__":
    main()
