"""What a pack buys: training steps per second of each member of a pack against the same model trained alone.

    python benchmarks/packed_runs.py [--widths 1,3,8,24] [--steps 20] [--rounds 3] [--device auto]
                                     [--preset vit_mnist] [--stem conv|patch] [--patch 4] [--depth 4] [--graphs 1]
                                     [--ops] [--top N] [--bits STEPS] [--deterministic]

For each width k: a pack of k members of the default recipe (`training.packed.packed_step`, batch 64 each, the
members' own batches) and, as width 0, one model alone (`bench.training.step.make_step`, the step a run trains
with); with `--graphs 1` (default) on CUDA both are captured into CUDA graphs as the sweeps train them, with
`--graphs 0` both run eagerly. Each round times STEPS steps of every item, in interleaved rounds (the first item
rotating); it prints each item's member-steps per second (median and range over the rounds), the ratio of a member's
rate in the pack to the lone run's (a ratio only where a paired t-test of the rounds calls them different), and on
CUDA the kernels
one step launches, and per member (torch.profiler, on an eager twin of each item: a graph replays the same kernels
in one launch).

`--bits N`: it also trains seed 1 for N steps in a pack of seeds 0, 2, 1 and again in the same pack, in one of other
companions, in another slot, in a pack of 2 and in one of 24 (in its twelfth slot), on the device, and says how many
of its state tensors differ from the first in each (0: a member's bits do not depend on that there; the same pack
twice: whether the device repeats itself at all). `--ops`: it also counts the torch operations one step of each item
dispatches (views and 0-dim ops left out; the packs' fused kernels called once for all members, as on CUDA), a count
any device gives. `--top N`: the N kernels of one step that took the most GPU time, alone and in the widest pack (on
a CPU the N torch ops with the most CPU time).

One sitting, the machine otherwise idle: say its load. Where the model cannot train packed on the device
(`pack_refusal`, or its one-step `pack_trial` fails) the patch stem is timed, and the first line says so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vit.attention  # noqa: E402
import vit.stacked  # noqa: E402
from ablations import (  # noqa: E402
    PackedModel,
    pack_graphed,
    pack_optimizer,
    pack_refusal,
    pack_trial,
    packed_step,
)
from bench import (  # noqa: E402
    Spread,
    TrainConfig,
    deterministic_algorithms,
    interleaved,
    make_step,
    ratio_or_noise,
    resolve_device,
    train_mode,
    training_parts,
)
from vit import PRESETS, VisionTransformer  # noqa: E402

BATCH = 64


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _pack_step(packed: PackedModel, recipe: TrainConfig, device: torch.device, graphs: bool):
    return packed_step(packed, pack_optimizer(packed, recipe, capturable=pack_graphed(device, graphs)), recipe, device,
                       recipe.resolved_dtype(device))


def item(k: int, cfg, recipe: TrainConfig, device: torch.device, graphs: bool) -> tuple:
    """(one step, its batch): k = 0 the lone run's step (seed 0), k > 0 a pack of k (seeds 0 … k − 1), in the
    recipe's precision."""
    shape = (cfg.in_chans, cfg.img_size, cfg.img_size)
    models = []
    for seed in range(max(k, 1)):
        torch.manual_seed(seed)
        models.append(VisionTransformer(cfg).to(device))
    y = torch.randint(0, cfg.num_classes, (max(k, 1), BATCH), device=device)
    x = torch.randn(max(k, 1), BATCH, *shape, device=device)
    if k == 0:
        compiled, optimizer, scaler = training_parts(models[0], recipe, device)
        train_mode(models[0], recipe)
        step = make_step(models[0], compiled, optimizer, scaler, recipe, device, recipe.resolved_dtype(device),
                         graphs=graphs)
        return step, x[0], y[0]
    packed = PackedModel(models)
    train_mode(packed.template, recipe)
    return _pack_step(packed, recipe, device, graphs), x, y


def items(widths: list[int], cfg, recipe: TrainConfig, device: torch.device, graphs: bool) -> dict[int, tuple]:
    """Width → (one step, its batch): 0 the lone run's step, k a pack of k (`item`)."""
    return {k: item(k, cfg, recipe, device, graphs) for k in [0, *widths]}


def kernels_per_step(step, x, y) -> int | None:
    """CUDA kernels one step launches (torch.profiler), or None off CUDA."""
    if not torch.cuda.is_available() or x.device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(x, y, 1e-3)
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")


def _table(rates: dict[int, list[float]], kernels: dict[int, int | None]) -> None:
    """Each width's member-steps per second, against the run alone, and its kernels a step and a member."""
    alone = Spread.by_round(rates[0])
    print(f"{'width':>6} {'member-steps/s':>15} {'range':>19}  {'member against a run alone':<28} kernels/step "
          f"(per member)")
    for k, values in rates.items():
        spread = Spread.by_round(values)
        against = "—" if k == 0 else ratio_or_noise(spread, alone)
        count = kernels.get(k)
        print(f"{'alone' if k == 0 else k:>6} {spread.median:>15.1f} {min(values):>9.1f}–{max(values):<9.1f}  "
              f"{against:<28} {'' if count is None else f'{count} ({count / max(k, 1):.0f})'}")


def ops_per_step(step, x, y) -> int:
    """Torch operations one step dispatches below autograd on tensors of at least one dimension, views left out, a
    pack's fused kernels called once for all its members as on CUDA (`vit.attention.ONE_CALL`): off CUDA the nearest
    count to its kernels (not the same: a CUDA op may launch several kernels, a fused one does several ops' work; and
    the optimizer's 0-dim step counts, which an eager AdamW keeps on the host, are left out)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view and any(torch.is_tensor(t) and t.dim() for t in tree_leaves((args, kwargs))):
                self.ops += 1
            return func(*args, **(kwargs or {}))
    one_call, vit.attention.ONE_CALL = vit.attention.ONE_CALL, True
    try:
        with Count() as count:
            step(x, y, 1e-3)
    finally:
        vit.attention.ONE_CALL = one_call
    return count.ops


def _ops_table(twins: dict[int, tuple]) -> None:
    """Each item's torch operations a step and a member (`ops_per_step`)."""
    counts = {}
    for k, (step, x, y) in twins.items():
        step(x, y, 1e-3)   # the optimizer's state exists from here, as in training
        counts[k] = ops_per_step(step, x, y)
    print("torch ops a step (per member), views and 0-dim ops left out, packs' fused kernels called as on CUDA: "
          + ", ".join(f"{'alone' if k == 0 else k} {n} ({n / max(k, 1):.0f})" for k, n in counts.items()))


def top_ops(step, x, y, n: int) -> list[tuple[str, int, float]]:
    """The `n` kernels of one step that took the most time (name, launches, µs): GPU time on CUDA, else the torch
    ops' own CPU time (torch.profiler, one step after a warm one)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = x.device.type == "cuda"
    step(x, y, 1e-3)
    _sync(x.device)
    with profile(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as prof:
        step(x, y, 1e-3)
        _sync(x.device)

    def spent(e) -> float:   # torch ≥ 2.4 names a kernel's own time `self_device_time_total`
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0) if cuda \
            else e.self_cpu_time_total
    events = [e for e in prof.key_averages() if (e.device_type.name == "CUDA") == cuda and spent(e) > 0]
    return [(e.key, e.count, spent(e)) for e in sorted(events, key=spent, reverse=True)[:n]]


def _top_table(twins: dict[int, tuple], n: int) -> None:
    """The `n` costliest kernels (ops off CUDA) of one step alone and of the widest pack's."""
    for k in (0, max(twins)):
        step, x, y = twins[k]
        top = top_ops(step, x, y, n)
        total = sum(us for _, _, us in top)
        print(f"top {n} {'kernels' if x.device.type == 'cuda' else 'ops'} of one step "
              f"{'alone' if k == 0 else f'of a pack of {k}'} ({total:,.0f} µs among them):")
        for name, count, us in top:
            print(f"  top {us:>9,.0f} µs {count:>5} × {us / count:>8,.1f} µs  {name[:140]}")


#: the packs `member_bits` trains seed 1 in, each against the first: (what differs from it, the pack's seeds)
BITS_PACKS = [("the same pack again", [0, 2, 1]), ("other companions", [3, 4, 1]), ("another slot", [1, 0, 2]),
              ("another width", [1, 0]), ("a pack of 24", [*range(5, 16), 1, *range(16, 28)])]


def member_bits(cfg, recipe: TrainConfig, device: torch.device, steps: int,
                graphs: bool) -> list[tuple[str, int, int]]:
    """(what differs, state tensors of seed 1 that differ, all of them) after `steps` steps in each pack of
    `BITS_PACKS` against seed 1 in a pack of seeds 0, 2, 1 (its last slot), each member on its own random batches:
    the same pack twice says whether the device repeats itself at all, the others what a pack's makeup changes."""
    def trained(seeds: list[int]) -> dict[str, torch.Tensor]:
        models = []
        for seed in seeds:
            torch.manual_seed(seed)
            models.append(VisionTransformer(cfg).to(device))
        packed = PackedModel(models)
        train_mode(packed.template, recipe)
        step = _pack_step(packed, recipe, device, graphs)
        batches = {s: torch.Generator().manual_seed(100 + s) for s in seeds}
        shape = (cfg.in_chans, cfg.img_size, cfg.img_size)
        for _ in range(steps):
            x = torch.stack([torch.randn(BATCH, *shape, generator=batches[s]) for s in seeds]).to(device)
            y = torch.stack([torch.randint(0, cfg.num_classes, (BATCH,), generator=batches[s]) for s in seeds]).to(device)
            step(x, y, 1e-3)
        slot = seeds.index(1)
        state = {f"model.{k}": v[slot] for k, v in {**packed.params, **packed.buffers}.items()}
        for name, p in packed.params.items():
            state.update({f"adamw.{name}.{k}": v[slot] for k, v in step.optimizer.state.get(p, {}).items() if v.dim()})
        return state
    first = trained(BITS_PACKS[0][1])
    compared = []
    for label, seeds in BITS_PACKS:
        other = trained(seeds)
        compared.append((label, sum(not torch.equal(first[k], other[k]) for k in first), len(first)))
    return compared


def add_matmul_order(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matmul-order", choices=["auto", "on", "off"], default="auto",
                        help="packs' matmul weights laid out as their batched matmul reads them: auto, on CUDA only "
                             "(vit.stacked.MATMUL_ORDER); on: as on CUDA everywhere")


def set_matmul_order(args: argparse.Namespace) -> None:
    vit.stacked.MATMUL_ORDER = {"auto": None, "on": True, "off": False}[args.matmul_order]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="1,3,8,24")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--preset", default="vit_mnist")
    parser.add_argument("--patch", type=int, default=4)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--bits", type=int, default=0, metavar="STEPS")
    parser.add_argument("--graphs", type=int, choices=[0, 1], default=1)
    parser.add_argument("--ops", action="store_true")
    add_matmul_order(parser)
    parser.add_argument("--top", type=int, default=0, metavar="N",
                        help="the N costliest kernels of one step alone and of the widest pack")
    parser.add_argument("--stem", choices=["conv", "patch"], default=None, help="the preset's own by default")
    parser.add_argument("--deterministic", action="store_true",
                        help="torch's deterministic algorithms (warn only) and cuBLAS's fixed workspace")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    set_matmul_order(args)
    if args.deterministic:   # before CUDA starts: cuBLAS reads its workspace setting once
        deterministic_algorithms()
    device = resolve_device(args.device)
    widths = [int(w) for w in args.widths.split(",")]
    cfg = PRESETS[args.preset].replace(img_size=28, in_chans=1, num_classes=10, patch_size=args.patch,
                                       depth=args.depth, **({"stem": args.stem} if args.stem else {}))
    recipe = TrainConfig(batch_size=BATCH, packed=True)
    refused = pack_refusal(recipe, 0.0, device) or pack_trial(cfg, recipe, device)
    if refused:   # the model cannot pack here as it is: time the patch stem, and say so
        print(f"note: {refused}; timing the patch stem instead")
        cfg = cfg.replace(stem="patch")
    steps = items(widths, cfg, recipe, device, bool(args.graphs))
    for step, x, y in steps.values():   # warm-up: captures, first calls
        step(x, y, 1e-3)
    _sync(device)
    rates: dict[int, list[float]] = {k: [] for k in steps}
    for _, k in interleaved(list(steps), args.rounds):
        step, x, y = steps[k]
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(x, y, 1e-3)
        _sync(device)
        rates[k].append(args.steps * max(k, 1) / (time.perf_counter() - t0))
    print(f"{device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), {args.preset} "
          f"{cfg.stem} stem, patch {args.patch} depth {args.depth}, batch {BATCH}, {args.steps} steps × {args.rounds} "
          f"interleaved rounds, {'graphed where CUDA' if args.graphs else 'eager'}"
          f"{', deterministic algorithms' if args.deterministic else ''}")
    # kernels are counted on eager twins: a graph's replay is one launch of the same kernels
    twins = items(widths, cfg, recipe, device, graphs=False) if device.type == "cuda" or args.ops or args.top else {}
    _table(rates, {k: kernels_per_step(*twins[k]) for k in twins} if device.type == "cuda" else {})
    if args.ops:
        _ops_table(twins)
    if args.top:
        _top_table(twins, args.top)
    if args.bits:
        print(f"member bits after {args.bits} steps, seed 1 in a pack of seeds 0, 2, 1 (its last slot) against seed 1 "
              f"in {', '.join(f'{seeds} ({label})' for label, seeds in BITS_PACKS)}, state tensors that differ: "
              + ", ".join(f"{label} {differ} of {total}"
                          for label, differ, total in member_bits(cfg, recipe, device, args.bits, bool(args.graphs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
