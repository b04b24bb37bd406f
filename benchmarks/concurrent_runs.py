"""Runs side by side in one process: the training of a sweep's runs one after another and JOBS at a time.

    python benchmarks/concurrent_runs.py [--sweep depth] [--seeds 0,1] [--epochs 5] [--jobs 1,4,8,16]
                                         [--evaluation eager[,graphed]] [--capture-warmup 1[,3]]
                                         [--thread-reuse kept[,fresh]] [--pack 0[,3]] [--rounds 1]
                                         [--workers threads] [--device auto] [--dataset mnist5k] [--profile N]
                                         [--deterministic] [--dtype auto] [--batch-size N]
                                         [--graphed-packs alone|side] [--capture-streams own|shared]

Trains the same runs (every point of `--sweep` × `--seeds`, no cost phase) once per JOBS value, evaluation
(`RunOptions.evaluation`: each epoch's evaluation eager, or captured into a CUDA graph) and capture warm-up (the
eager steps a run's training step takes on a side stream before each CUDA-graph capture, undone before the captured
step: `StaticStep.WARMUP`, 1 by default; threads only, which build their steps in this process) in each of `--rounds`
interleaved rounds, each pass into a fresh folder through the sweep runner and the local executor (`--workers`:
threads or processes), in one process, and prints per combination: the wall time of the training alone
and the training steps per second of all runs together (median and range over the rounds), the ratio to the
first combination (only where a t-test of the rounds, round by round, calls them different), the GPU's busy % over the training
phases (NVML, the whole device; blank without a GPU), and whether every run's test
predictions, final training loss and test loss equal those of the first pass bit for bit (a run's arithmetic
must not depend on what trains beside it, nor its figures on how it is evaluated or warmed up before a capture),
naming after each pass the runs that are not and what differs.
One sitting, the machine otherwise idle: say its load.

`--deterministic`: every pass under torch's deterministic algorithms (`torch.use_deterministic_algorithms`, warn
only) and cuBLAS's fixed workspace (`CUBLAS_WORKSPACE_CONFIG`), set before CUDA starts: whether runs a GPU does
not reproduce bit for bit do so then, and at what cost.

`--pack 0,3`: the runs one at a time and with the seeds of each point trained as packs of at most 3 (`PACK`; on
CUDA every pack 3 wide, as the sweeps pin it); the same training steps either way, so the steps per second compare.
A packed run is its own run (other bits, another run id): each pass is checked against the first pass of its own
`--pack`.

`--graphed-packs side`: CUDA-graphed packs JOBS at once instead of one at a time (how the sweeps train them:
`ThreadPool.GRAPHED_PACKS_ALONE`), to see whether side by side they still give some members non-finite losses;
`--capture-streams shared`: every CUDA graph of the process captured on one stream (`StaticStep.OWN_CAPTURE_STREAMS`
off) instead of one per training stream, as before; `--dtype fp32|bf16` sets every run's precision, `--batch-size N`
its batch. A pass with a run that did not finish trained fewer steps than counted: its time and rate are left
blank, and `not_ok` counts those runs.

`--thread-reuse kept,fresh`: the runs on threads kept from run to run (`ThreadPool.KEEP_THREADS`, the default) or on
a new thread for every run (threads only): torch keeps cuDNN's plans per thread, so a new thread plans each shape
again. Use more runs than JOBS (`--seeds 0,1,2,3` with `--jobs 8`), or every thread trains one run either way.

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

from ablations import (  # noqa: E402
    CostPlan,
    ExecutorOptions,
    LocalExecutor,
    RunOptions,
    SweepPaths,
    Tables,
    ThreadPool,
    cached_dataset,
    check_evaluation,
    find_spec,
    load_preds,
    load_spec,
    pinned_width,
    run_sweeps,
)
from bench import (  # noqa: E402
    Spread,
    StaticStep,
    deterministic_algorithms,
    interleaved,
    ratio_or_noise,
    resolve_device,
)

Combo = tuple[int, str, int, str, int]   # (JOBS, evaluation, capture warm-up steps, thread reuse, PACK)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", default="depth")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--jobs", default="1,4,8,16")
    parser.add_argument("--evaluation", default="eager", help="comma-separated: eager, graphed")
    parser.add_argument("--capture-warmup", default=str(StaticStep.WARMUP),
                        help="comma-separated eager steps before each capture of a training step, each ≥ 1")
    parser.add_argument("--thread-reuse", default="kept", help="comma-separated: kept, fresh (a new thread per run)")
    parser.add_argument("--pack", default="0", help="comma-separated: 0 (one run at a time), N (packs of at most N)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", default="threads", choices=("threads", "processes"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dataset", default="mnist5k")
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--deterministic", action="store_true",
                        help="torch's deterministic algorithms (warn only) and cuBLAS's fixed workspace, for every pass")
    parser.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16"),
                        help="every run's training precision (auto: bf16 on CUDA, fp32 on a CPU)")
    parser.add_argument("--batch-size", type=int, default=0, help="every run's batch size (0: its spec's)")
    parser.add_argument("--capture-streams", default="own", choices=("own", "shared"),
                        help="each training stream's captures on a stream of its own (own), or all on one (shared)")
    parser.add_argument("--graphed-packs", default="alone", choices=("alone", "side"),
                        help="CUDA-graphed packs one at a time, as the sweeps train them (alone), or JOBS at once (side)")
    return parser


def main() -> int:
    parser = _parser()
    args = parser.parse_args()
    if args.deterministic:   # before CUDA starts: cuBLAS reads its workspace setting once
        deterministic_algorithms()
    device = resolve_device(args.device)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    try:   # each mistake in one line before anything trains
        combos = _combos(args)
    except ValueError as err:
        parser.error(str(err))
    data = cached_dataset(args.dataset)
    points = load_spec(find_spec(args.sweep)).points(data.img_size, data.in_chans, data.num_classes,
                                                     {"epochs": args.epochs, "dtype": args.dtype,
                                                      **({"batch_size": args.batch_size} if args.batch_size else {})})
    ThreadPool.GRAPHED_PACKS_ALONE = args.graphed_packs == "alone"
    StaticStep.OWN_CAPTURE_STREAMS = args.capture_streams == "own"
    steps = sum(len(seeds) * p.train.epochs * math.ceil(len(data.train_y) / p.train.batch_size) for p in points)
    print(f"{args.sweep}: {len(points)} points × {len(seeds)} seeds, {args.epochs} epochs, {steps:,} steps on "
          f"{device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"WORKERS={args.workers}, {args.rounds} interleaved round(s), dtype {args.dtype}"
          f"{', CUDA-graphed packs side by side' if args.graphed_packs == 'side' else ''}"
          f"{', one capture stream for the process' if args.capture_streams == 'shared' else ''}"
          f"{', deterministic algorithms' if args.deterministic else ''}", flush=True)
    walls: dict[Combo, list[float]] = {c: [] for c in combos}
    same: dict[Combo, bool] = {}
    busy: dict[Combo, list[float]] = {c: [] for c in combos}
    failed: dict[Combo, int] = {c: 0 for c in combos}   # the most runs of a pass that did not finish ok
    with tempfile.TemporaryDirectory() as tmp:
        # one short run first, untimed: the process's one-time costs (CUDA context, lazy imports and kernels)
        warm = RunOptions(dataset=args.dataset, seeds=(0,), device=args.device, out=f"{tmp}/warm-up",
                          cost=CostPlan(rounds=0), progress=False, checkpoint_every=0)
        run_sweeps([(args.sweep, [dataclasses.replace(points[0], train=dataclasses.replace(points[0].train, epochs=1))],
                     warm)], LocalExecutor(ExecutorOptions(jobs=1, device=args.device)))
        firsts: dict[int, tuple] = {}   # per PACK: a packed run is another run than the same seed alone
        for r, combo in interleaved(combos, args.rounds):
            jobs, how, warmup, reuse, pack = combo
            out = Path(tmp) / f"r{r}-jobs{jobs}-{how}-warmup{warmup}-{reuse}-pack{pack}"
            walls[combo].append(one_pass(args, points, seeds, combo, out))
            busy[combo].append(gpu_busy(out))
            got = outcome(out, [args.sweep])
            not_ok = int((got[0].status != "ok").sum())
            failed[combo] = max(failed[combo], not_ok)
            rate = f"{not_ok} runs did not finish: no rate" if not_ok else f"{steps / walls[combo][-1]:,.0f} steps/s"
            print(f"round {r + 1}, JOBS={jobs}, evaluation={how}, capture warm-up={warmup}, threads {reuse}, "
                  f"PACK={pack}: {walls[combo][-1]:.1f} s, {rate}", flush=True)
            first = firsts.setdefault(pack, got)
            same[combo] = alike(got, first) and same.get(combo, True)
        if args.profile:
            profile(args, points, seeds, Path(tmp) / "profiled", steps)
    return summarise(combos, walls, same, steps, busy, failed)


def _combos(args) -> list[Combo]:
    """Every (JOBS, evaluation, capture warm-up) the options ask for, in their order; ValueError naming the
    first value that cannot be run."""
    evaluations = args.evaluation.split(",")
    for how in evaluations:
        check_evaluation(how)
    warmups = []
    for text in args.capture_warmup.split(","):
        if not text.strip().isdigit() or int(text) < 1:
            raise ValueError(f"--capture-warmup: {text!r} is not a whole number ≥ 1 (a capture needs an eager step "
                             f"before it to set up what it cannot)")
        warmups.append(int(text))
    if args.workers != "threads" and warmups != [StaticStep.WARMUP]:
        raise ValueError(f"--capture-warmup needs --workers threads: worker processes build their steps with "
                         f"the default ({StaticStep.WARMUP})")
    reuses = args.thread_reuse.split(",")
    if wrong := [k for k in reuses if k not in ("kept", "fresh")]:
        raise ValueError(f"--thread-reuse: {wrong[0]!r} is not kept or fresh")
    if args.workers != "threads" and reuses != ["kept"]:
        raise ValueError("--thread-reuse needs --workers threads: worker processes are not the pool's threads")
    packs = args.pack.split(",")
    if wrong := [k for k in packs if not k.strip().isdigit()]:
        raise ValueError(f"--pack: {wrong[0]!r} is not a whole number ≥ 0")
    return [(int(j), how, w, k, int(n)) for j in args.jobs.split(",") for how in evaluations for w in warmups
            for k in reuses for n in packs]


def one_pass(args, points, seeds: tuple[int, ...], combo: Combo, out: Path) -> float:
    """Wall seconds of the training of every run as `combo` says (JOBS at a time, evaluating as it says, each
    capture after its warm-up steps, packed as PACK says, as the sweeps pack), into `out`."""
    jobs, how, warmup, reuse, pack = combo
    if pack:
        pinned = pinned_width(pack, resolve_device(args.device))
        points = [dataclasses.replace(p, train=dataclasses.replace(p.train, packed=True, pack_width=pinned))
                  for p in points]
    options = RunOptions(dataset=args.dataset, seeds=seeds, device=args.device, out=str(out), cost=CostPlan(rounds=0),
                         progress=False, checkpoint_every=0, evaluation=how, pack=pack)
    executor = LocalExecutor(ExecutorOptions(jobs=jobs, device=args.device, workers=args.workers))
    print(executor.start(), flush=True)
    default, StaticStep.WARMUP = StaticStep.WARMUP, warmup   # read by every capture this process makes
    ThreadPool.KEEP_THREADS = reuse == "kept"
    t0 = time.perf_counter()
    try:
        run_sweeps([(args.sweep, points, options)], executor)
    finally:
        executor.close()
        StaticStep.WARMUP, ThreadPool.KEEP_THREADS = default, True
    return time.perf_counter() - t0


def outcome(out: Path, names: list[str]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """A pass's runs of the sweeps `names` (by run id, each once: a run shared by sweeps is trained once) and the
    test predictions of each that left them (a failed run has none)."""
    rows = pd.concat([pd.read_csv(SweepPaths.of(out, n).rows).assign(sweep_dir=n) for n in names])
    rows = rows.drop_duplicates("run_id").set_index("run_id").sort_index()
    files = {rid: SweepPaths.of(out, r["sweep_dir"]).preds / f"{rid}.npz" for rid, r in rows.iterrows()}
    return rows, {rid: load_preds(path)[0] for rid, path in files.items() if path.exists()}


def differing(got: tuple[pd.DataFrame, dict], first: tuple[pd.DataFrame, dict]) -> dict[str, str]:
    """The runs whose test predictions, training loss or test loss are not bit for bit the first pass's, each
    with what differs (a run that did not finish, or is missing from either pass, included)."""
    (table, preds), (table0, preds0) = got, first
    found = {}
    for r in sorted(set(preds) | set(preds0) | set(table.index)):
        if r in table.index and table.status.get(r) != "ok":
            found[r] = f"status {table.status.get(r)!r}: {str(table.error.get(r, ''))[:120]}"
        elif r not in preds or r not in preds0:
            found[r] = "missing from " + ("this pass" if r not in preds else "the first")
        elif not np.array_equal(preds[r], preds0[r]):
            found[r] = f"{int((preds[r] != preds0[r]).sum())} test predictions"
        elif unequal := [f"{c} {table.at[r, c]!r} against {table0.at[r, c]!r}" for c in ("train_loss", "test_loss")
                         if not pd.Series([table.at[r, c]]).equals(pd.Series([table0.at[r, c]]))]:
            found[r] = ", ".join(unequal)
    return found


def alike(got: tuple[pd.DataFrame, dict], first: tuple[pd.DataFrame, dict]) -> bool:
    """Whether every run of a pass is bit for bit the first pass's (`differing`); otherwise one line naming
    the runs that are not (the first 12) and what differs."""
    unlike = differing(got, first)
    if unlike:
        print(f"  {len(unlike)} of {len(got[0])} runs not bit for bit the first pass's: "
              + "; ".join(f"{described(got[0], r)}: {why}" for r, why in list(unlike.items())[:12]), flush=True)
    return not unlike


def described(rows: pd.DataFrame, run_id: str) -> str:
    """A run by its sweep and model: `patch p=7 h=4 d=6 seed 1 (3f2a…)`."""
    if run_id not in rows.index:
        return run_id
    r = rows.loc[run_id]
    return f"{r['sweep']} p={r['patch_size']} h={r['num_heads']} d={r['depth']} seed {r['seed']} ({run_id})"


def gpu_busy(out: Path) -> float:
    """The GPU's busy % over a pass's training phase (NVML's samples, the whole device: `Tables.phases`), NaN
    where none was measured (no GPU)."""
    phases = Tables(out).phases()
    return float(phases["util_pct"].iloc[-1]) if len(phases) and "util_pct" in phases else float("nan")


def summarise(combos: list[Combo], walls: dict, same: dict, steps: int, busy: dict, failed: dict) -> int:
    """Per (JOBS, evaluation, capture warm-up, thread reuse): median wall time and steps/s with their range over
    rounds, the ratio to the first (only where a paired t-test of the rounds calls them different), the GPU's median busy %
    over the training phases (blank without one), the most runs of a pass that did not finish ok, and whether its
    runs equal the first pass's; 1 where any does not. A combination with a run that did not finish trained fewer
    steps than counted: its time, rate and ratio are blank."""
    base = Spread.by_round([steps / w for w in walls[combos[0]]]) if not failed[combos[0]] else None
    rows = []
    for combo in combos:
        whole = not failed[combo]
        rate = Spread.by_round([steps / w for w in walls[combo]])
        rows.append({"jobs": combo[0], "evaluation": combo[1], "warmup": combo[2], "threads": combo[3], "pack": combo[4],
                     "wall_s": f"{np.median(walls[combo]):,.1f}" if whole else "—",
                     "steps_per_s": f"{rate.median:,.1f}" if whole else "—",
                     "range": f"{steps / max(walls[combo]):,.0f}–{steps / min(walls[combo]):,.0f}" if whole else "—",
                     f"vs JOBS={combos[0][0]} {combos[0][1]} warm-up {combos[0][2]} {combos[0][3]} PACK={combos[0][4]}":
                         "(reference)" if combo == combos[0]
                         else ratio_or_noise(rate, base) if whole and base is not None else "—",
                     "not_ok": failed[combo],
                     "gpu_busy_%": f"{np.median(measured):.0f}" if (measured := [b for b in busy[combo] if b == b])
                     else "—",
                     "same_as_first": "yes" if same[combo] else "NO"})
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    return 0 if all(same.values()) else 1


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
