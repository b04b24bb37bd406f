"""Eager inference throughput of the four backends against timm's own ViT, measured side by side.

    python -m bench.vs_timm [--preset vit_small_patch16_224] [--batch-size 8] [--rounds 7] [--out results]

Models are timed in interleaved rounds (`bench.rounds`: each round times every model once, the
starting model rotating), so drift of the machine (thermal, other load) hits all of them alike; the
figure per model is the median over its rounds. A round taken while other processes held the machine
(`bench.contention`) is left out, and a ratio to timm is printed only where each model kept at least
`MIN_ROUNDS` rounds and a t-test of the two, round by round, calls them different (`bench.rounds`);
otherwise the line says why not. The table is also
written to `<out>/bench/vs-timm.csv`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import timm
import torch

from bench.choices import Parser, integer
from bench.contention import LoadMeter
from bench.env import device_name
from bench.io.atomic import write_atomic
from bench.reference import refusal
from bench.rounds import Spread, interleaved, ratio_or_noise
from bench.timing import TimingConfig, time_steps
from bench.units import count
from vit import ATTENTION_BACKENDS, PRESETS, VisionTransformer, load_timm_weights

MIN_ROUNDS = 3


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m bench.vs_timm", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="vit_small_patch16_224",
                        choices=[p for p in PRESETS if p.startswith("vit_") and "patch16" in p],
                        help="the model, built both as timm's ViT and as vitbench's with timm's weights")
    parser.add_argument("--batch-size", type=integer(1, "--batch-size must be a positive integer"), default=8,
                        help="images per inference step (default 8)")
    parser.add_argument("--rounds", type=integer(1, "--rounds must be a positive integer"), default=7,
                        help=f"interleaved rounds (default 7; a ratio needs {MIN_ROUNDS} or more kept)")
    parser.add_argument("--backends", default=",".join(ATTENTION_BACKENDS),
                        help=f"comma-separated attention backends to time against timm (default {','.join(ATTENTION_BACKENDS)})")
    parser.add_argument("--out", default="results", help="writes <out>/bench/vs-timm.csv (default results)")
    parser.add_argument("--into-reference", action="store_true",
                        help="allow writing into a folder of committed reference results")
    args = parser.parse_args(argv)
    message = refusal(args.out, args.into_reference)
    if message:
        parser.error(message)
    unknown = [b for b in args.backends.split(",") if b not in ATTENTION_BACKENDS]
    if unknown:
        parser.error(f"unknown backend {unknown[0]!r}; choose from {sorted(ATTENTION_BACKENDS)}")
    return args


def _models(preset: str, backends: list[str]) -> dict[str, torch.nn.Module]:
    """timm's model and ours with each attention backend, all holding timm's weights."""
    torch.manual_seed(0)
    reference = timm.create_model(preset, pretrained=False).eval()
    models = {"timm": reference}
    for backend in backends:
        model = VisionTransformer(PRESETS[preset].replace(attn=backend)).eval()
        models[backend] = load_timm_weights(model, reference.state_dict())
    return models


def _rounds(models: dict[str, torch.nn.Module], images: torch.Tensor, rounds: int) -> tuple[dict, dict[str, int]]:
    """Images/s of each model in interleaved rounds, those taken under load left out, and how many were."""
    per_round: dict[str, list[float]] = {name: [] for name in models}   # one a round, NaN where left out
    loaded: dict[str, int] = {name: 0 for name in models}
    timing = TimingConfig(warmup=1, min_repeats=3, min_time_s=0.5)
    with torch.inference_mode():
        for model in models.values():  # one untimed pass each: allocator, oneDNN primitives
            model(images)
        for _, name in interleaved(list(models), rounds):
            with LoadMeter() as meter:
                ms = time_steps(lambda: models[name](images), "cpu", timing).median_ms
            contended = meter.load is not None and meter.load.contended
            loaded[name] += contended
            per_round[name].append(float("nan") if contended else len(images) / (ms / 1e3))
    return {name: Spread.by_round(rates) for name, rates in per_round.items()}, loaded


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = _arguments(argv)
    models = _models(args.preset, args.backends.split(","))
    cfg = PRESETS[args.preset]
    try:
        spreads, loaded = _rounds(models, torch.randn(args.batch_size, cfg.in_chans, cfg.img_size, cfg.img_size),
                                  args.rounds)
    except KeyboardInterrupt:
        print("\ninterrupted (SIGINT): nothing written (the table needs every round)", file=sys.stderr)
        raise SystemExit(130) from None
    print(f"{args.preset}, eager fp32 inference, batch {args.batch_size}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, timm {timm.__version__}, median of {count(args.rounds, 'interleaved round')} "
          f"(rounds taken under load left out: {sum(loaded.values())})")
    print(f"{'model':<8} {'img/s':>9} {'IQR':>17} {'rounds':>6}  vs timm")
    table = []
    for name, s in spreads.items():
        if s.n < MIN_ROUNDS or spreads["timm"].n < MIN_ROUNDS:
            versus = f"not compared: fewer than {MIN_ROUNDS} rounds without load"
        else:
            versus = "—" if name == "timm" else ratio_or_noise(s, spreads["timm"], lambda r: f"×{r:.3f}")
        print(f"{name:<8} {s.median:9.2f} [{s.q1:7.2f}, {s.q3:7.2f}] {s.n:6d}  {versus}")
        table.append({"model": name, "preset": args.preset, "batch_size": args.batch_size, "throughput_img_s": s.median,
                      "q1_img_s": s.q1, "q3_img_s": s.q3, "rounds": s.n, "rounds_under_load": loaded[name],
                      "vs_timm": versus, "device_name": device_name(torch.device("cpu")),
                      "threads": torch.get_num_threads(), "torch_version": torch.__version__,
                      "timm_version": timm.__version__})
    path = Path(args.out) / "bench" / "vs-timm.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, pd.DataFrame(table).to_csv(index=False).encode())
    print(f"table → {path}")
    return {name: s.median for name, s in spreads.items()}


if __name__ == "__main__":
    main()
