"""The order a command's runs start in: its sweeps trained in the listed order and longest expected first.

    python benchmarks/run_order.py [--sweeps default] [--epochs 4] [--seeds 0,1,2] [--rounds 3] [--jobs auto]
                                   [--order listed,longest] [--device auto] [--dataset mnist5k]

Measures the sweeps' cost phase once (all its rounds, with no time limit, as `make cost` would; `make ablations`
is `--sweeps default`), then trains
every run of the sweeps into a fresh folder once per order (`RUN_ORDER`: listed, longest) in each of `--rounds`
interleaved rounds: each pass finds that cost phase's tables in its folder, reuses them and goes straight to
training, its runs ordered by them. Prints per order: the training phase's wall time (median and range over the
rounds), the ratio to the first order (only where a t-test of the rounds, round by round, calls them different), the
training time that list scheduling of the runs in that order onto JOBS slots predicts from the first pass's
own run times (`train_time_s`; runs side by side on one GPU slow each other, so there it is a guide only),
and whether every run's test predictions, training loss and test loss equal the first pass's bit for bit (the
order must change when a run starts, never what it computes). One sitting, the machine otherwise idle: say
its load.
"""

from __future__ import annotations

import argparse
import heapq
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from concurrent_runs import alike, outcome  # noqa: E402  (this folder's: a pass's runs; every run bit for bit the first pass's)

from ablations import (  # noqa: E402
    COST_ROUNDS,
    RUN_ORDERS,
    CostPlan,
    ExecutorOptions,
    LocalExecutor,
    RunOptions,
    SweepPaths,
    cached_dataset,
    default_sweeps,
    find_spec,
    load_spec,
    longest_first,
    make_tasks,
    read_table,
    run_cost_phases,
    run_sweeps,
    train_step_ms,
)
from bench import (  # noqa: E402
    Spread,
    interleaved,
    ratio_or_noise,
    resolve_device,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", default="default", help="comma-separated sweep names, or default")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", default="auto", help="runs at once: auto or a number")
    parser.add_argument("--order", default="listed,longest", help=f"comma-separated: {', '.join(RUN_ORDERS)}")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dataset", default="mnist5k")
    args = parser.parse_args()
    orders = args.order.split(",")
    bad = [o for o in orders if o not in RUN_ORDERS]
    if bad or args.epochs < 1 or args.rounds < 1 or not (args.jobs == "auto" or args.jobs.isdigit() and int(args.jobs)):
        parser.error(f"--order {bad[0]!r} is not one of {', '.join(RUN_ORDERS)}" if bad
                     else "--epochs and --rounds must be ≥ 1, --jobs auto or ≥ 1")
    device, seeds = resolve_device(args.device), tuple(int(s) for s in args.seeds.split(","))
    if device.type == "cpu":
        torch.set_num_threads(1)   # as the command's own process has it (THREADS=1): its cost phase times that
    jobs = None if args.jobs == "auto" else int(args.jobs)
    data = cached_dataset(args.dataset)
    names = default_sweeps() if args.sweeps == "default" else args.sweeps.split(",")
    sweeps = [(name, load_spec(find_spec(name)).points(data.img_size, data.in_chans, data.num_classes,
                                                        {"epochs": args.epochs})) for name in names]
    plan = CostPlan.standalone(COST_ROUNDS, None)   # every round, whatever the training it precedes
    walls: dict[str, list[float]] = {o: [] for o in orders}
    same: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "cost"
        run_cost_phases([(name, points, SweepPaths.of(template, name).cost) for name, points in sweeps], plan, device,
                        workload=(len(data.train_y), len(seeds)))
        first, times = None, None
        for r, order in interleaved(orders, args.rounds):
            out = Path(tmp) / f"r{r}-{order}"
            for name, _ in sweeps:   # the phase measured above, found complete and reused by the pass
                SweepPaths.of(out, name).cost.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(SweepPaths.of(template, name).cost, SweepPaths.of(out, name).cost)
            options = RunOptions(dataset=args.dataset, seeds=seeds, device=args.device, out=str(out), cost=plan,
                                 progress=False, checkpoint_every=0, run_order=order)
            executor = LocalExecutor(ExecutorOptions(jobs=jobs, device=args.device))
            print(executor.start(), flush=True)
            spent = Counter()
            try:
                run_sweeps([(name, points, options) for name, points in sweeps], executor, spent=spent)
            finally:
                executor.close()
            walls[order].append(spent["training"])
            got = outcome(out, names)
            first, times = first or got, times or got[0]["train_time_s"].to_dict()
            print(f"round {r + 1}, RUN_ORDER={order}: training {spent['training']:.1f} s (cost phase "
                  f"{spent['cost phase']:.1f} s: reused)", flush=True)
            same[order] = alike(got, first) and same.get(order, True)
        slots = executor.jobs or 1
        guide = predicted(template, times, slots, orders, sweeps, options, len(data.train_y))
    each = sorted(times.values())
    print(f"{len(each)} runs on {slots} slot(s), first pass: {each[0]:.1f}–{each[-1]:.1f} s each, "
          f"{sum(each):.1f} s in all ({sum(each) / slots:.1f} s a slot)")
    return summarise(orders, walls, same, guide, slots)


def makespan(times: list[float], slots: int) -> float:
    """When the last of `times` ends, each started in turn on the first of `slots` to come free."""
    free = [0.0] * slots
    for t in times:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def predicted(template: Path, times: dict[str, float], slots: int, orders: list[str], sweeps,
              options: RunOptions, images: int) -> dict[str, float]:
    """Each order's training time as `makespan` predicts it from the first pass's run times (`times`), the runs
    started as the runner starts them: listed (sweep by sweep, point by point, seed by seed, a shared run where
    it first appears) or longest first (`running.order`, from the cost phase's tables under `template`)."""
    tasks, seen = [], set()
    for _, points in sweeps:
        for task in make_tasks(points, options):
            if task.run_id in times and task.run_id not in seen:
                seen.add(task.run_id)
                tasks.append(task)
    step_ms = {k: v for name, _ in sweeps for k, v in train_step_ms(read_table(SweepPaths.of(template, name).cost)).items()}
    if len(tasks) != len(times):
        raise RuntimeError(f"the runs' ids do not match the pass's: {len(tasks)} of {len(times)} found")
    return {order: makespan([times[t.run_id] for t in (longest_first(tasks, step_ms, lambda t: images)
                                                         if order == "longest" else tasks)], slots)
            for order in orders}


def summarise(orders, walls, same, predicted_s, slots) -> int:
    base = Spread.by_round(walls[orders[0]])
    rows = []
    for order in orders:
        spread = Spread.by_round(walls[order])
        rows.append({"run_order": order, "training_s": spread.median,
                     "range": f"{min(walls[order]):.1f}–{max(walls[order]):.1f}",
                     f"vs {orders[0]}": "(reference)" if order == orders[0] else ratio_or_noise(spread, base),
                     f"list scheduling on {slots} slots (s)": predicted_s.get(order, float("nan")),
                     "same_as_first": "yes" if same[order] else "NO"})
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
