"""A sweep on a shared machine: training steps/s and the quick pass's wall time, idle and beside CPU burners.

    python benchmarks/shared_machine.py [--burners 4] [--quick] [--before DIR]

1. Steps/s of the base `vit_mnist` training step (batch 64, the step the sweeps train with) at 1 and at
   2 torch threads, the 2-thread case also with OpenMP's waiting threads sleeping (OMP_WAIT_POLICY=PASSIVE)
   instead of spinning, idle and beside `--burners` CPU-bound processes, in interleaved rounds (each round
   times every case once, each case in a fresh process).
2. With `--quick`: the README's quick pass (`make ablations SEEDS=0 EPOCHS=2`, a fresh OUT each time) idle
   and beside the burners, for this checkout and, with `--before DIR`, for another checkout of vitbench
   (run with this Python: INSTALL=0), one after the other; a pass is stopped at `--limit` seconds and
   reported as "> limit".

Prints one table per part; the machine must be otherwise idle (the burners are the only load it adds).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STEPS_CODE = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
from bench import TrainConfig
from bench import training_step
from vit import PRESETS, VisionTransformer
torch.manual_seed(0)
model = VisionTransformer(PRESETS["vit_mnist"])
x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
step, _ = training_step(TrainConfig(), torch.device("cpu"))(model, x, y)
for _ in range(3):
    step()
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < float(sys.argv[2]):
    step()
    n += 1
print(n / (time.perf_counter() - t0))
"""


def _burn() -> None:
    while True:
        pass


class Burners:
    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def __enter__(self) -> Burners:
        self.procs = [mp.Process(target=_burn, daemon=True) for _ in range(self.n)]
        for p in self.procs:
            p.start()
        time.sleep(1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
            p.join()


def steps_per_s(threads: int, seconds: float, wait: str = "") -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | ({"OMP_WAIT_POLICY": wait} if wait else {})
    out = subprocess.run([sys.executable, "-c", STEPS_CODE, str(threads), str(seconds)], cwd=ROOT,
                         capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def quick_pass(checkout: Path, limit_s: float) -> float | None:
    """Seconds of `make ablations SEEDS=0 EPOCHS=2` in `checkout` into a fresh OUT; None past `limit_s`."""
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        try:
            subprocess.run(["make", "--no-print-directory", "ablations", "SEEDS=0", "EPOCHS=2", f"OUT={out}", "INSTALL=0",
                            f"PY={sys.executable}"],
                           cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=limit_s,
                           check=True)
        except subprocess.TimeoutExpired:
            return None
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burners", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per steps/s case")
    parser.add_argument("--quick", action="store_true", help="also time the quick pass")
    parser.add_argument("--before", type=Path, help="another vitbench checkout to time the quick pass of")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds after which a quick pass is stopped")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} before starting", flush=True)
    kinds = [(1, ""), (2, ""), (2, "PASSIVE")]
    cases = [(threads, wait, load) for load in ("idle", "busy") for threads, wait in kinds]
    found: dict[tuple[int, str, str], list[float]] = {c: [] for c in cases}
    for r in range(args.rounds):
        for threads, wait, load in cases[r % len(cases):] + cases[:r % len(cases)]:
            if load == "busy":
                with Burners(args.burners):
                    found[threads, wait, load].append(steps_per_s(threads, args.seconds, wait))
            else:
                found[threads, wait, load].append(steps_per_s(threads, args.seconds, wait))
    print(f"\nbase vit_mnist training step, batch 64: steps/s, median of {args.rounds} interleaved rounds [min, max]")
    print(f"{'':<28} {'1 thread':>22} {'2 threads':>22} {'2 threads, passive wait':>24}")
    for load, label in (("idle", "idle"), ("busy", f"beside {args.burners} CPU burners")):
        cells = [f"{statistics.median(v):6.1f} [{min(v):.1f}, {max(v):.1f}]" for v in
                 (found[1, "", load], found[2, "", load], found[2, "PASSIVE", load])]
        print(f"{label:<28} {cells[0]:>22} {cells[1]:>22} {cells[2]:>24}")
    if not args.quick:
        return 0
    checkouts = [("this checkout", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    print(f"\nquick pass (make ablations SEEDS=0 EPOCHS=2), wall seconds (> {args.limit:.0f}: stopped)", flush=True)
    for name, checkout in checkouts:
        idle = quick_pass(checkout, args.limit)
        with Burners(args.burners):
            busy = quick_pass(checkout, args.limit)
        text = [f"{t:.0f}" if t is not None else f"> {args.limit:.0f}" for t in (idle, busy)]
        ratio = f"×{busy / idle:.1f}" if idle and busy else "—"
        print(f"  {name:<14} idle {text[0]:>6} s   beside {args.burners} burners {text[1]:>6} s   {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
