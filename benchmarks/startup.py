"""What a command costs around its work: loading its modules and exiting, with and without `bench.loading`.

    python benchmarks/startup.py [--rounds 5] [--out DIR]

Times whole commands as a user runs them (`python -m ablations ...`, a fresh interpreter each), wall clock from
start to exit, each in two ways in interleaved rounds (`bench.rounds`):
- `now`: as the project runs them (modules loaded without the garbage collector's passes, the exit without
  its walks over every object still alive: `bench.loading.without_gc`, `end_process`);
- `plain`: the same command with both turned into no-ops, as Python does by default.
The commands: `dry run` (`sweep default --dry-run`: the sweep's modules, its plan, the exit), `one run` (`train`: one
run of one epoch on the 8×8 digits on the CPU, no cost phase: the trainer's first optimizer loads
`torch._dynamo`) and `report` (`report` of that run's folder: pandas, scipy, matplotlib, seaborn). Prints each
command's median wall time and range per way and `now` against `plain` (a ratio only where a t-test
of the rounds, round by round, calls them different). One sitting, the machine otherwise idle: say its load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import Spread, interleaved, ratio_or_noise  # noqa: E402

# the `plain` way: Python's defaults, `bench.loading` made to do nothing before the command's modules bind it
PLAIN = ("import contextlib, runpy, sys\n"
         "import bench.loading as loading\n"
         "loading.without_gc = contextlib.nullcontext\n"
         "loading.end_process = sys.exit\n"
         "sys.argv = ['python -m ablations', *sys.argv[1:]]\n"
         "runpy.run_module('ablations', run_name='__main__', alter_sys=True)\n")
WAYS = ("now", "plain")


def commands(out: Path) -> dict[str, list[str]]:
    return {"dry run": ["sweep", "default", "--seeds", "0", "--dry-run", "--out", str(out / "dry")],
            "one run": ["train", "--dataset", "digits", "--seeds", "0", "--epochs", "1", "--cost-budget", "0",
                        "--device", "cpu", "--out", str(out / "run")],
            "report": ["report", "--out", str(out / "base")]}


def child_env() -> dict[str, str]:
    """This process's environment for a Python it starts: the project first on PYTHONPATH, then whatever the
    caller's PYTHONPATH holds (on the GPU lease, the folder the missing packages' wheels are installed in)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}


def timed(way: str, argv: list[str]) -> float:
    """Seconds from start to exit of `python -m ablations ARGV` run the given way; raises where it fails."""
    prefix = ["-m", "ablations"] if way == "now" else ["-c", PLAIN]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *prefix, *argv], cwd=ROOT, capture_output=True, text=True, env=child_env())
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{way}: python -m ablations {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-800:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="a folder for the commands' results (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        cmds = commands(out)
        base = [a if a != str(out / "run") else str(out / "base") for a in cmds["one run"]]
        timed("now", base)    # the report's input, and every file read once before any timing
        walls: dict[tuple[str, str], list[float]] = {(c, w): [] for c in cmds for w in WAYS}
        items = [(c, w) for c in cmds for w in WAYS]
        for r, (command, way) in interleaved(items, args.rounds):
            if command == "one run":   # a fresh run every time: nothing found done
                shutil.rmtree(out / "run", ignore_errors=True)
            walls[command, way].append(timed(way, cmds[command]))
            print(f"round {r}: {command:8} {way:6} {walls[command, way][-1]:6.2f} s", file=sys.stderr)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\ncommands from start to exit, {args.rounds} interleaved rounds, load average {load:.2f} at the end "
          f"({os.cpu_count()} cores)")
    for command in cmds:
        now, plain = Spread.by_round(walls[command, "now"]), Spread.by_round(walls[command, "plain"])
        print(f"  {command:8} now {now.median:6.2f} s [{min(walls[command, 'now']):.2f}–{max(walls[command, 'now']):.2f}]"
              f"   plain {plain.median:6.2f} s [{min(walls[command, 'plain']):.2f}–{max(walls[command, 'plain']):.2f}]"
              f"   now / plain: {ratio_or_noise(now, plain)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
