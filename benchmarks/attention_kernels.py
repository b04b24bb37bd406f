"""The kernel torch's attention picks for the main job's models, and what a thread pays the first time it meets a shape.

    python benchmarks/attention_kernels.py [--kernels auto,no-cudnn] [--rounds 3] [--device auto]
                                           [--dataset mnist5k] [--sweeps depth,heads,patch] [--repeats 20]

`F.scaled_dot_product_attention` (the `sdpa` attention of every sweep) runs one of several kernels: on Hopper and
Blackwell GPUs with a recent cuDNN, torch tries cuDNN's first. cuDNN builds an execution plan for each shape
(batch, heads, tokens, head width, strides) the first time a thread calls it, and torch keeps the plans per
thread: vitbench trains its runs in threads of one process, so every worker thread builds the plans of each shape
it meets (the training batch, an epoch's last smaller batch, the evaluation batch), and the cost phase's thread
builds its own. Flash and memory-efficient attention are compiled into torch and build nothing. (cuDNN's plans for
the conv stem's convolutions are kept per thread too, whatever the attention: both settings' first calls carry them.)

For every distinct model of the sweeps (`--sweeps`, by default those `make ablations` runs) at the dataset's image
size, this times each step the first time a thread runs it and then its steady time (median of `--repeats`): a
training step (forward, loss and backward under the runs' autocast) at the training batch and at an epoch's last
batch, and an evaluation forward at the evaluation batch and at the cost phase's inference batch. First in one
thread, then in a second, new thread (torch's forward plans are that thread's; the backward runs on autograd's
device thread, whose plans the first thread's backward built already). Each kernel setting (`auto`: torch's own
order; `no-cudnn`: cuDNN's attention switched off, `torch.backends.cuda.enable_cudnn_sdp(False)`, so flash,
memory-efficient or math) runs in a fresh process per round, rounds interleaved, each after a warm-up that starts
CUDA and cuBLAS but runs no attention.

Prints, per setting: the kernel torch picks for each model's training batch, the seconds the first calls took
beyond the steady time in the first thread and in the second (summed over models and steps: what a thread pays
once), and a training step's steady time summed over the models; median and range over the rounds, and against the
first setting where a t-test of the rounds, round by round, calls them different (`bench.rounds`).
One sitting, the machine otherwise idle:
say its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from startup import child_env  # noqa: E402  (this folder's: the project and the caller's PYTHONPATH)

from bench import Spread, interleaved, ratio_or_noise  # noqa: E402

KERNELS = ("auto", "no-cudnn")
STEPS = ("train", "train last", "evaluate", "infer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated: {', '.join(KERNELS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dataset", default="mnist5k")
    parser.add_argument("--sweeps", default="", help="comma-separated sweep names (default: those make ablations runs)")
    parser.add_argument("--repeats", type=int, default=20, help="calls behind each steady time")
    parser.add_argument("--child", choices=KERNELS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = [k.strip() for k in args.kernels.split(",") if k.strip()]
    wrong = [k for k in settings if k not in KERNELS]
    if wrong or not settings:
        parser.error(f"--kernels: {wrong[0] if wrong else args.kernels!r} is not one of {', '.join(KERNELS)}")
    if args.rounds < 1 or args.repeats < 1:
        parser.error("--rounds and --repeats must be ≥ 1")
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return 0
    found: dict[str, list[dict]] = {k: [] for k in settings}
    for r, setting in interleaved(settings, args.rounds):
        found[setting].append(in_fresh_process(setting, args))
        got = found[setting][-1]
        print(f"round {r + 1}, {setting}: first calls +{got['first_s']:.2f} s (thread 1), +{got['second_s']:.2f} s "
              f"(thread 2); steady training steps {got['train_ms']:.2f} ms", flush=True)
    summarise(found, args)
    return 0


def in_fresh_process(setting: str, args: argparse.Namespace) -> dict:
    """`measure(setting)` in a new interpreter: no plan, kernel or allocator block of an earlier setting is there."""
    argv = [sys.executable, __file__, "--child", setting, "--device", args.device, "--dataset", args.dataset,
            "--repeats", str(args.repeats), "--sweeps", args.sweeps]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=child_env())
    if done.returncode != 0:
        raise SystemExit(f"{setting}: the measuring process failed ({done.returncode}):\n{done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def models(args: argparse.Namespace) -> list[tuple[str, object, object]]:
    """(label, ViTConfig, TrainConfig) of each distinct model of the sweeps at the dataset's size."""
    from ablations import cached_dataset, default_sweeps, find_spec, load_spec, model_key

    data = cached_dataset(args.dataset)
    names = [s.strip() for s in args.sweeps.split(",") if s.strip()] or default_sweeps()
    found: dict[str, tuple[str, object, object]] = {}
    for name in names:
        for p in load_spec(find_spec(name)).points(data.img_size, data.in_chans, data.num_classes):
            found.setdefault(model_key(p.model), (f"{name} {p.label}", p.model, p.train))
    return list(found.values())


def measure(setting: str, args: argparse.Namespace) -> dict:
    """One setting's figures in this process: warm-up, then every model's first calls in a new thread, again in a
    second new thread, then the steady times and the kernels torch picks."""
    import torch

    from bench import autocast, resolve_device, set_cudnn_attention

    device = resolve_device(args.device)
    set_cudnn_attention("off" if setting == "no-cudnn" else "auto")   # the switch CUDNN_ATTENTION sets
    from ablations import CostPlan, cached_dataset

    data = cached_dataset(args.dataset)
    a = torch.randn(256, 256, device=device)
    (a @ a).sum().item()   # CUDA's context, cuBLAS's handle: no attention
    built = []
    for label, cfg, train in models(args):
        from vit import VisionTransformer

        torch.manual_seed(0)
        model = VisionTransformer(cfg).to(device)
        dtype = train.resolved_dtype(device)
        last = len(data.train_y) % train.batch_size
        sizes = {"train": train.batch_size, "train last": last or None, "evaluate": train.eval_batch_size,
                 "infer": CostPlan().infer_batch_size}
        steps = {name: _step(model, name, b, cfg, device, dtype, autocast) for name, b in sizes.items() if b}
        built.append((label, model, steps))
    first = _in_thread(lambda: _first_calls(built, device))
    second = _in_thread(lambda: _first_calls(built, device))
    steady = _in_thread(lambda: _steady(built, device, args.repeats))
    picked = _in_thread(lambda: _picked(built))
    excess = {n: sum(max(0.0, t - steady[k]) for k, t in first.items() if k[1] == n) for n in STEPS}
    return {"setting": setting, "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
            "cudnn_sdp": torch.backends.cuda.cudnn_sdp_enabled(), "picked": picked,
            "first_s": sum(max(0.0, t - steady[k]) for k, t in first.items()),
            "second_s": sum(max(0.0, t - steady[k]) for k, t in second.items()),
            "first_by_step": excess, "models": len(built),
            "train_ms": 1e3 * sum(s for (label, name), s in steady.items() if name == "train")}


def _step(model, name: str, batch: int, cfg, device, dtype: str, autocast):
    """The call that times one step: a training step (forward, loss, backward) or an evaluation forward."""
    import torch
    import torch.nn.functional as F

    x = torch.randn(batch, cfg.in_chans, cfg.img_size, cfg.img_size, device=device)
    y = torch.randint(0, cfg.num_classes, (batch,), device=device)

    def train() -> None:
        model.train()
        with autocast(device, dtype):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        model.zero_grad(set_to_none=True)

    def evaluate() -> None:
        model.eval()
        with torch.no_grad(), autocast(device, dtype):
            model(x)
    return train if name.startswith("train") else evaluate


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _first_calls(built, device) -> dict[tuple[str, str], float]:
    """{(model, step): seconds of the step's first call in this thread}."""
    times = {}
    for label, _, steps in built:
        for name, step in steps.items():
            _sync(device)
            start = time.perf_counter()
            step()
            _sync(device)
            times[label, name] = time.perf_counter() - start
    return times


def _steady(built, device, repeats: int) -> dict[tuple[str, str], float]:
    """{(model, step): the median seconds of one call over `repeats` calls, each timed alone (`bench.timing`)}."""
    from bench import TimingConfig, time_steps

    alone = TimingConfig(warmup=1, min_repeats=repeats, min_time_s=0.0, block=1, latency_steps=0)
    return {(label, name): time_steps(step, device, alone).median_ms / 1e3
            for label, _, steps in built for name, step in steps.items()}


def _picked(built) -> dict[str, str]:
    """{model: the kernel torch picks for its attention at the training batch} (`torch._fused_sdp_choice` on the
    very query, key and value the model passes; blank where the model does not call it)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    plain, seen = F.scaled_dot_product_attention, {}

    def spy(q, k, v, *rest, **kw):
        seen.setdefault("kernel", SDPBackend(torch._fused_sdp_choice(q, k, v, *rest, **kw)).name)
        return plain(q, k, v, *rest, **kw)
    picked = {}
    F.scaled_dot_product_attention = spy
    try:
        for label, _, steps in built:
            seen.clear()
            steps["train"]()
            picked[label] = seen.get("kernel", "")
    finally:
        F.scaled_dot_product_attention = plain
    return picked


def _in_thread(work):
    """`work()` in a new thread (torch keeps cuDNN's attention plans per thread), its result or its error."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = work()
        except BaseException as err:  # raised again in the caller's thread
            box["error"] = err
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]   # type: ignore[misc]
    return box["result"]


def summarise(found: dict[str, list[dict]], args: argparse.Namespace) -> None:
    settings = list(found)
    first = found[settings[0]][0]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{first['models']} models of {args.sweeps or 'make ablations'} on {first['device_name']}, "
          f"{args.rounds} interleaved round(s), a fresh process each, load average {load:.2f} at the end")
    for setting in settings:
        kinds = sorted({k or "none" for k in found[setting][0]["picked"].values()})
        print(f"{setting}: cuDNN attention {'on' if found[setting][0]['cudnn_sdp'] else 'off'}; torch picks "
              f"{', '.join(kinds)}")
    print(f"{'kernels':>9} {'first calls, thread 1 (s)':>26} {'vs ' + settings[0]:>20} {'thread 2 (s)':>20} "
          f"{'training steps (ms)':>22} {'vs ' + settings[0]:>20}")
    for setting in settings:
        cells = []
        for key in ("first_s", "second_s", "train_ms"):
            values = [g[key] for g in found[setting]]
            versus = "(reference)" if setting == settings[0] else ratio_or_noise(
                Spread.by_round(values), Spread.by_round([g[key] for g in found[settings[0]]]))
            cells.append((f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]", versus))
        print(f"{setting:>9} {cells[0][0]:>26} {cells[0][1]:>20} {cells[1][0]:>20} {cells[2][0]:>22} {cells[2][1]:>20}")
    for setting in settings:
        by_step = {n: statistics.median(g["first_by_step"][n] for g in found[setting]) for n in STEPS}
        print(f"  {setting}, thread 1 by step: " + ", ".join(f"{n} +{s:.2f} s" for n, s in by_step.items()))


if __name__ == "__main__":
    sys.exit(main())
