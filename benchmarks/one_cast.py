"""What casting the weights once a step buys: the training step with the weights that autocast casts at every use
cast in one kernel (`bench.training.precision.OneCast`, the default on CUDA) against autocast casting them at each
use, alone and in packs, in steps per second, kernels (or torch ops) a step, and bits.

    python benchmarks/one_cast.py [--widths 0,3] [--steps 20] [--rounds 3] [--device auto] [--dtype bf16]
                                  [--preset vit_mnist] [--stem conv|patch] [--attn NAME] [--depth 4] [--graphs 1]
                                  [--bits STEPS]

For each width (0: one model alone, the step a run trains with; k: a pack of k, `training.packed.packed_step`), batch
64 a member, the step with the weights cast once and the step with them cast at each use, from the same weights. Each
round times STEPS steps of every item, in interleaved rounds (the first item rotating); it prints each item's
member-steps per second (median and range over the rounds), the one cast against the casts at each use (a ratio only
where a t-test of the rounds, round by round, calls them different), and the kernels one step launches on
CUDA (torch.profiler, on an eager twin: a graph replays the same kernels in one launch), elsewhere the torch ops
it dispatches (`packed_runs.ops_per_step`).
`--bits N`: both train N more steps on the same batches from the same weights, and it says how many state tensors
(weights, buffers, AdamW state) differ between them (0: the one cast gives the same bits; on CUDA with `--stem patch`:
the conv stem's bits do not repeat there even between two identical trainings).

The default dtype is bf16 on every device (fp32 casts nothing, and is what a CPU trains in; bf16 matmuls on a CPU are
slow, so keep STEPS small there). One sitting, the machine otherwise idle: say its load.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablations import pack_refusal, pack_trial  # noqa: E402
from bench import Spread, TrainConfig, interleaved, ratio_or_noise, resolve_device  # noqa: E402
from vit import PRESETS  # noqa: E402

_spec = importlib.util.spec_from_file_location("packed_runs", Path(__file__).with_name("packed_runs.py"))
packed_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(packed_runs)

BATCH = 64
CASTS = ("each", "once")


def item(width: int, casts: str, cfg, recipe: TrainConfig, device: torch.device, graphs: bool):
    """`packed_runs.item` (0: a model alone; k: a pack of k) with the weights cast `casts` ("each": by autocast at
    every use; "once": `OneCast`)."""
    step, x, y = packed_runs.item(width, cfg, recipe, device, graphs)
    step.ONE_CAST = casts == "once"
    return step, x, y


def state(step) -> list[torch.Tensor]:
    """The weights, buffers and AdamW state a step trains."""
    return [*step._state_tensors(), *(v for st in step.optimizer.state.values() for v in st.values()
                                      if torch.is_tensor(v) and v.dim())]


def bits(width: int, cfg, recipe: TrainConfig, device: torch.device, graphs: bool, steps: int) -> tuple[int, int]:
    """(state tensors that differ, all of them) between the one cast and the casts at each use after `steps` steps
    on the same batches from the same weights."""
    trained = []
    for casts in CASTS:
        step, x, y = item(width, casts, cfg, recipe, device, graphs)
        gen = torch.Generator().manual_seed(11)
        for _ in range(steps):
            noise = torch.randn(x.shape, generator=gen).to(device)
            step(x + noise, y, 1e-3)
        trained.append(state(step))
    each, once = trained
    return sum(not torch.equal(a, b) for a, b in zip(each, once)), len(each)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="0,3", help="0: a model alone; k: a pack of k")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--preset", default="vit_mnist")
    parser.add_argument("--stem", choices=["conv", "patch"], default=None, help="the preset's own by default")
    parser.add_argument("--attn", default=None, help="the preset's own by default")
    parser.add_argument("--patch", type=int, default=4)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--graphs", type=int, choices=[0, 1], default=1)
    parser.add_argument("--bits", type=int, default=0, metavar="STEPS")
    packed_runs.add_matmul_order(parser)
    return parser


def timed(steps: dict, n: int, rounds: int, device: torch.device) -> dict[tuple[int, str], list[float]]:
    """Member-steps per second of each item, `n` steps a round, in interleaved rounds, after a warm-up call."""
    for step, x, y in steps.values():   # warm-up: captures, first calls
        step(x, y, 1e-3)
    packed_runs._sync(device)
    rates: dict[tuple[int, str], list[float]] = {key: [] for key in steps}
    for _, key in interleaved(list(steps), rounds):
        step, x, y = steps[key]
        packed_runs._sync(device)
        t0 = time.perf_counter()
        for _ in range(n):
            step(x, y, 1e-3)
        packed_runs._sync(device)
        rates[key].append(n * max(key[0], 1) / (time.perf_counter() - t0))
    return rates


def _table(rates: dict[tuple[int, str], list[float]], cfg, recipe: TrainConfig, device: torch.device) -> None:
    """Each item's member-steps/s, the one cast against the casts at each use, and its kernels (ops) a step."""
    cuda = device.type == "cuda"
    print(f"{'width':>6} {'weights cast':>13} {'member-steps/s':>15} {'range':>19}  {'once against each':<34} "
          f"{'kernels' if cuda else 'torch ops'} a step (per member)")
    for (w, c), values in rates.items():
        twin, x, y = item(w, c, cfg, recipe, device, graphs=False)   # a graph replays these in one launch
        twin(x, y, 1e-3)
        n = packed_runs.kernels_per_step(twin, x, y) if cuda else packed_runs.ops_per_step(twin, x, y)
        spread = Spread.by_round(values)
        against = ratio_or_noise(spread, Spread.by_round(rates[(w, "each")])) if c == "once" else "—"
        print(f"{'alone' if w == 0 else w:>6} {'at each use' if c == 'each' else 'once a step':>13} "
              f"{spread.median:>15.1f} {min(values):>9.1f}–{max(values):<9.1f}  {against:<34} "
              f"{n} ({n / max(w, 1):.0f})")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    packed_runs.set_matmul_order(args)
    device = resolve_device(args.device)
    try:
        widths = [int(w) for w in args.widths.split(",")]
    except ValueError:
        parser.error(f"--widths: comma-separated integers, got {args.widths!r}")
    if any(w < 0 for w in widths):
        parser.error(f"--widths: 0 (alone) or a pack's width, got {args.widths!r}")
    cfg = PRESETS[args.preset].replace(img_size=28, in_chans=1, num_classes=10, patch_size=args.patch,
                                       depth=args.depth, **({"stem": args.stem} if args.stem else {}),
                                       **({"attn": args.attn} if args.attn else {}))
    recipe = TrainConfig(batch_size=BATCH, packed=True, dtype=args.dtype)
    if any(widths):
        refused = pack_refusal(recipe, 0.0, device) or pack_trial(cfg, recipe, device)
        if refused:
            parser.error(f"this model cannot train packed here: {refused}")
    graphs = bool(args.graphs)
    steps = {(w, c): item(w, c, cfg, recipe, device, graphs) for w in widths for c in CASTS}
    rates = timed(steps, args.steps, args.rounds, device)
    print(f"{device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), {args.preset} "
          f"{cfg.stem} stem, {cfg.attn} attention, patch {args.patch} depth {args.depth}, {args.dtype}, batch {BATCH} "
          f"a member, {args.steps} steps × {args.rounds} interleaved rounds, {'graphed where CUDA' if graphs else 'eager'}")
    _table(rates, cfg, recipe, device)
    if args.bits:
        for w in widths:
            differ, total = bits(w, cfg, recipe, device, graphs, args.bits)
            print(f"bits after {args.bits} steps, {'alone' if w == 0 else f'a pack of {w}'}: {differ} of {total} "
                  f"state tensors differ between the weights cast once and at each use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
