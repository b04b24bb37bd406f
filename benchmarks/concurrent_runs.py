"""Runs side by side in one process: the training of a sweep's runs one after another and JOBS at a time.

    python benchmarks/concurrent_runs.py [--sweep depth] [--seeds 0,1] [--epochs 5] [--jobs 1,4,8,16]
                                         [--workers threads] [--device auto] [--dataset mnist5k] [--profile N]

Trains the same runs (every point of `--sweep` × `--seeds`, no cost phase) once per JOBS value, each into a
fresh folder through the sweep runner and the local executor (`--workers`: threads or processes), in one
process, in the order given, and prints per JOBS: the wall time of the training alone, the training steps
per second of all runs together, the ratio to JOBS=1 (the first value), and whether every run's test
predictions and final training loss equal those of the first JOBS value bit for bit (a run's arithmetic
must not depend on what trains beside it). One sitting, the machine otherwise idle: say its load.

`--profile N`: afterwards one more pass at JOBS=N under torch.profiler, and what the GPU did in it: the
kernels' summed time against the time at least one ran (their union) and the wall time, so the mean number
of kernels running at once and the share of the wall time the GPU ran anything; and the 15 kernels that took
the most GPU time.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablations.running.cost import CostPlan  # noqa: E402
from ablations.running.executors import ExecutorOptions  # noqa: E402
from ablations.running.executors.local import LocalExecutor  # noqa: E402
from ablations.running.runner import run_sweeps  # noqa: E402
from ablations.running.tasks import RunOptions  # noqa: E402
from ablations.specs import find_spec, load_spec  # noqa: E402
from ablations.training.data import cached_dataset  # noqa: E402
from bench.env import resolve_device  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", default="depth")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--jobs", default="1,4,8,16")
    parser.add_argument("--workers", default="threads", choices=("threads", "processes"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dataset", default="mnist5k")
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    args = parser.parse_args()
    device = resolve_device(args.device)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    data = cached_dataset(args.dataset)
    spec = load_spec(find_spec(args.sweep))
    points = spec.points(data.img_size, data.in_chans, data.num_classes, {"epochs": args.epochs})
    steps = sum(len(seeds) * p.train.epochs * math.ceil(len(data.train_y) / p.train.batch_size) for p in points)
    print(f"{args.sweep}: {len(points)} points × {len(seeds)} seeds, {args.epochs} epochs, {steps:,} steps on "
          f"{device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"WORKERS={args.workers}", flush=True)
    rows, first = [], None
    with tempfile.TemporaryDirectory() as tmp:
        # one short run first, untimed: the process's one-time costs (CUDA context, lazy imports and kernels)
        warm = RunOptions(dataset=args.dataset, seeds=(0,), device=args.device, out=f"{tmp}/warm-up",
                          cost=CostPlan(rounds=0), progress=False, checkpoint_every=0)
        run_sweeps([(args.sweep, [dataclasses.replace(points[0], train=dataclasses.replace(points[0].train, epochs=1))],
                     warm)], LocalExecutor(ExecutorOptions(jobs=1, device=args.device)))
        for jobs in (int(j) for j in args.jobs.split(",")):
            out = Path(tmp) / f"jobs{jobs}"
            options = RunOptions(dataset=args.dataset, seeds=seeds, device=args.device, out=str(out),
                                 cost=CostPlan(rounds=0), progress=False, checkpoint_every=0)
            executor = LocalExecutor(ExecutorOptions(jobs=jobs, device=args.device, workers=args.workers))
            print(executor.start(), flush=True)
            t0 = time.perf_counter()
            try:
                run_sweeps([(args.sweep, points, options)], executor)
            finally:
                executor.close()
            wall = time.perf_counter() - t0
            table = pd.read_csv(out / "ablations" / f"{args.sweep}.csv").set_index("run_id").sort_index()
            preds = {rid: np.load(out / "ablations" / "preds" / args.sweep / f"{rid}.npz")["pred"]
                     for rid in table.index}
            same = ""
            if first is None:
                first = (table, preds)
            else:
                equal = all(np.array_equal(preds[r], first[1][r]) for r in preds) and \
                    table["train_loss"].equals(first[0]["train_loss"].loc[table.index])
                same = "yes" if equal else "NO"
            rows.append({"jobs": jobs, "wall_s": wall, "steps_per_s": steps / wall, "ok": int((table.status == "ok").sum()),
                         "same_as_first": same or "(reference)"})
            print(f"JOBS={jobs}: {wall:.1f} s, {steps / wall:,.0f} steps/s", flush=True)
        if args.profile:
            profile(args, points, seeds, Path(tmp) / "profiled", steps)
    frame = pd.DataFrame(rows)
    frame["ratio"] = frame["steps_per_s"] / frame["steps_per_s"].iloc[0]
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0 if all(r["same_as_first"] != "NO" for r in rows) else 1


def profile(args, points, seeds, out: Path, steps: int) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    options = RunOptions(dataset=args.dataset, seeds=seeds, device=args.device, out=str(out), cost=CostPlan(rounds=0),
                         progress=False, checkpoint_every=0)
    executor = LocalExecutor(ExecutorOptions(jobs=args.profile, device=args.device, workers=args.workers))
    executor.start()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    t0 = time.perf_counter()
    with profiler(activities=activities) as prof:
        run_sweeps([(args.sweep, points, options)], executor)
    wall = time.perf_counter() - t0
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and e.time_range.elapsed_us() > 0]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    union, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            union += b - max(a, end)
            end = b
    total = sum(b - a for a, b in spans)
    print(f"\nprofiled JOBS={args.profile}: {wall:.1f} s wall (profiler on), {len(kernels):,} GPU kernels and copies "
          f"({len(kernels) / steps:.0f} per training step), summed {total / 1e6:.2f} s, union {union / 1e6:.2f} s: "
          f"{union / 1e6 / wall:.0%} of the wall time with anything on the GPU, {total / max(union, 1):.2f} at once "
          f"on average while busy", flush=True)
    # the kernels that took the most GPU time, by name (the profiler's own tables take minutes on this many events)
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        by_name.setdefault(e.name, []).append(e.time_range.elapsed_us())
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:15]
    for name, times in top:
        print(f"  {sum(times) / 1e3:9.1f} ms  {len(times):8,} × {sum(times) / len(times):7.1f} µs  {name[:90]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
