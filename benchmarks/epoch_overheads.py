"""Where runs side by side lose the GPU: what a run does besides its graphed training steps, part by part.

    python benchmarks/epoch_overheads.py [--runs 8] [--epochs 6] [--rounds 3] [--device auto]

RUNS runs of the default recipe (vit_mnist on mnist5k, batch 64, `DTYPE=auto`), each on a thread and a CUDA
stream of its own as `WORKERS=threads` trains them, each doing EPOCHS epochs of one of:
- `replay`: its captured training step replayed, nothing else (the GPU's rate for these graphs; CUDA only);
- `steps`: the whole static step on the epoch's augmented batches (learning rate, batch copies, replay, loss sum);
- `eager eval`: `steps` plus each epoch's end as a run has it: the loss read, `evaluate` of the 1,000 test
  images run eagerly (one Python call per kernel);
- `graphed eval`: the same with the evaluation captured once and replayed (`GraphedEvaluation`; CUDA only);
- `train()`: the trainer itself on a fresh model each round (`ablations.training.train.train`, as a sweep's run
  calls it, without checkpoints): its start (model, optimizer, captures) and all its epochs;
- `train() graphed`: the same with `evaluation="graphed"` (its evaluation captured at its first epoch; CUDA only).
The modes are timed in interleaved rounds (each round runs every mode once, the first one rotating), the
graphs captured before the first round; it prints each mode's training steps per second of all runs together
(median and range over the rounds), `graphed eval` and `train()` against `eager eval` and `train() graphed`
against `train()` (a ratio only where a t-test of the rounds, round by round, calls them different).
One sitting, the machine otherwise idle: say its load.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablations import (  # noqa: E402
    GraphedEvaluation,
    evaluate,
    load_dataset,
    train,
)
from bench import (  # noqa: E402
    Spread,
    TrainConfig,
    interleaved,
    make_step,
    ratio_or_noise,
    resolve_device,
    train_mode,
    training_parts,
)
from vit import PRESETS, VisionTransformer  # noqa: E402

BATCH = 64


def build(i: int, data, model_cfg, device: torch.device, cfg: TrainConfig, trains, tests) -> dict:
    """Run i's model, step (its graphs captured on a first epoch) and evaluations (the graphed one captured);
    `trains` and `tests`: the images and labels on the device."""
    torch.manual_seed(i)
    model = VisionTransformer(model_cfg).to(device)
    compiled, optimizer, scaler = training_parts(model, cfg, device)
    train_mode(model, cfg)
    dtype = cfg.resolved_dtype(device)
    step = make_step(model, compiled, optimizer, scaler, cfg, device, dtype, True)
    run = {"model": model, "step": step, "cfg": cfg, "gen": torch.Generator().manual_seed(100 + i), "train": trains,
           "eager": lambda: evaluate(compiled, data, device, dtype, cfg.eval_batch_size, tests),
           "graphed": GraphedEvaluation(compiled, data, device, dtype, cfg.eval_batch_size, tests)
           if device.type == "cuda" else None}
    epoch(run, data, "graphed eval" if device.type == "cuda" else "eager eval")
    return run


def epoch(run: dict, data, mode: str) -> int:
    """One epoch of `mode` for `run`; its steps."""
    x, y = run["train"]
    steps = math.ceil(len(y) / BATCH)
    if mode == "replay":
        for _ in range(steps):
            run["step"].graphs[BATCH].replay()
        return steps
    order = torch.randperm(len(y), generator=run["gen"]).to(x.device)
    loss_sum = torch.zeros((), device=x.device)
    for bx, by in data.epoch_batches(x, y, order, BATCH, run["gen"]):
        loss_sum += run["step"](bx, by, 1e-4)
    if mode != "steps":
        loss_sum.item()
        run["graphed" if mode == "graphed eval" else "eager"]()
        train_mode(run["model"], run["cfg"])
    return steps


def whole_run(i: int, data, model_cfg, device: torch.device, epochs: int, evaluation: str) -> int:
    """Run i trained from scratch by the trainer for `epochs` epochs, evaluating as `evaluation` says; its steps."""
    torch.manual_seed(i)
    train(VisionTransformer(model_cfg), data, TrainConfig(batch_size=BATCH, epochs=epochs), i, device, progress=False,
          evaluation=evaluation)
    return epochs * math.ceil(len(data.train_y) / BATCH)


def timed(runs: list[dict], data, model_cfg, mode: str, epochs: int, device: torch.device) -> float:
    """Training steps per second of all runs together, each on its thread and stream."""
    done = [0] * len(runs)

    def work(i: int) -> None:
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            whole = mode.startswith("train()")
            if whole:
                done[i] = whole_run(i, data, model_cfg, device, epochs, "graphed" if mode.endswith("graphed") else "eager")
            for _ in range(0 if whole else epochs):
                done[i] += epoch(runs[i], data, mode)
            if stream is not None:
                stream.synchronize()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(runs))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = resolve_device(args.device)
    cfg = TrainConfig(batch_size=BATCH)
    data = load_dataset("mnist5k")
    model_cfg = PRESETS["vit_mnist"].replace(img_size=data.img_size, in_chans=data.in_chans,
                                             num_classes=data.num_classes)
    trains, tests = (data.train_x.to(device), data.train_y.to(device)), (data.test_x.to(device), data.test_y.to(device))
    runs = [build(i, data, model_cfg, device, cfg, trains, tests) for i in range(args.runs)]
    graphed = any(getattr(r["step"], "graphed", False) for r in runs)
    modes = ["steps", "eager eval", "train()"] if device.type != "cuda" else (["replay"] if graphed else []) + [
        "steps", "eager eval", "graphed eval", "train()", "train() graphed"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for _, mode in interleaved(modes, args.rounds):
        rates[mode].append(timed(runs, data, model_cfg, mode, args.epochs, device))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{args.runs} runs side by side on {name} ({cfg.resolved_dtype(device)}), {args.epochs} epochs of "
          f"{len(data.train_y)} images each per mode, {args.rounds} interleaved rounds")
    spreads = {m: Spread.by_round(v) for m, v in rates.items()}
    for m, s in spreads.items():
        print(f"  {m:<15} {s.median:8.0f} steps/s  [{min(rates[m]):.0f}–{max(rates[m]):.0f}]")
    for mode, base in (("graphed eval", "eager eval"), ("train()", "eager eval"), ("train() graphed", "train()")):
        if mode in spreads:
            print(f"  {mode} / {base}: {ratio_or_noise(spreads[mode], spreads[base])}")


if __name__ == "__main__":
    main()
