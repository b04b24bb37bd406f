"""The commands of `python -m ablations` that time or check models without training a sweep: cost (the speed
of every point already trained under an OUT, measured again), calibrate (the error rates of the report's
tests on simulated and real runs) and stepbench (the training step alone, eager against static buffers)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ablations.choices import say_out
from ablations.cli.prepare import check_device, check_out
from ablations.results.store import SweepError, SweepPaths
from ablations.running.cost import CostPlan
from bench.env import cudnn_attention, resolve_device
from bench.units import count


def cmd_cost(args: argparse.Namespace) -> int:
    from ablations.running.remeasure import measure_out

    out = Path(args.out)
    try:
        check_out(args)
        check_device(args)
        device = resolve_device(args.device)
        plan = CostPlan.standalone(args.cost_rounds, args.cost_budget)
        t0 = time.perf_counter()
        with cudnn_attention(args.cudnn_attention):
            done = measure_out(out, plan, device, graphs=bool(args.graphs))
    except (ValueError, SweepError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"\nCost phase done in {(time.perf_counter() - t0) / 60:.1f} min on {device}.")
    for sweep, (points, filled, other) in done.items():
        elsewhere = (f"; {count(other, 'row')} trained on another device left as they were (the report's speed tables "
                     f"say the phase's device)" if other else "")
        print(f"  {sweep:<12} {count(points, 'point')} measured, speed written into {count(filled, 'row')}{elsewhere}   cost → "
              f"{SweepPaths.of(out, sweep).cost}")
    print(f"Next: {say_out('report', out)}: its speed tables and "
          f"figures read these phases")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ablations.analysis.calibrate import run

    try:
        return run(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def cmd_stepbench(args: argparse.Namespace) -> int:
    from ablations.training.stepbench import run

    try:
        run(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
