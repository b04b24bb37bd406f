"""The cost phase's speed ratios on a busy CPU: CPU-time figures beside CPU burners against wall-clock ones idle.

    python benchmarks/speed_under_load.py [--burners 4] [--rounds 5] [--sweeps patch,heads,depth] [--keep DIR]

The main job's points (the default sweeps at mnist5k's 28 px, one torch thread, as `make ablations` measures
them on a CPU) go through the real cost phase twice: once on the otherwise idle machine, once beside
`--burners` CPU-bound processes. For each point and mode it prints the throughput ratio to its sweep's first
point: idle by wall clock (what the report states on a quiet machine), loaded by CPU time (what it states under
load, `ablations.results.store.by_cpu_time`), their difference in %, and what the report would say of the
loaded pair (a ratio, or "same within noise"). The machine must be otherwise idle.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from ablations import (  # noqa: E402
    CostPlan,
    find_spec,
    load_spec,
    model_key,
    read_table,
    run_cost_phases,
    spreads,
)
from bench import ratio_or_noise  # noqa: E402
from vit import ViTConfig  # noqa: E402


def phase(sweeps: list[str], rounds: int, folder: Path) -> dict[str, pd.DataFrame]:
    """{sweep: its cost-phase rows} of one real cost phase over the sweeps' points (no time limit)."""
    torch.set_num_threads(1)
    specs = [load_spec(find_spec(name)) for name in sweeps]
    points = [(s.name, s.points(28, 1, 10, {}), folder / "ablations" / f"{s.name}-cost.csv") for s in specs]
    run_cost_phases(points, CostPlan.standalone(rounds, None), torch.device("cpu"), progress=False, graphs=False,
                    reuse=False)
    return {name: read_table(csv) for name, _, csv in points}


def figures(rows: pd.DataFrame) -> dict[tuple[str, str], object]:
    """{(model, mode): the throughput Spread the report reads}: wall clock where enough rounds were quiet,
    else CPU time."""
    keyed = rows.assign(model=rows.apply(lambda r: model_key(ViTConfig.from_row(r)), axis=1))
    return {key: found["throughput_img_s"] for key, found in spreads(keyed, ["model", "mode"]).items()
            if "throughput_img_s" in found}


def compare(idle: pd.DataFrame, loaded: pd.DataFrame, sweep: str) -> list[tuple[str, float, float, str]]:
    """(point and mode, idle wall ratio, loaded CPU-time ratio, what the report says loaded) against the first
    point of the sweep, mode by mode."""
    quiet, busy = figures(idle), figures(loaded)
    found = []
    for mode in ("infer", "train"):
        keys = [k for k in quiet if k[1] == mode and k in busy]
        for key in keys[1:]:
            a, b = quiet[key].median / quiet[keys[0]].median, busy[key].median / busy[keys[0]].median
            found.append((f"{sweep} {key[0][:6]} {mode}", a, b, ratio_or_noise(busy[key], busy[keys[0]])))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burners", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sweeps", default="patch,heads,depth")
    parser.add_argument("--keep", type=Path, help="keep both phases' tables under this folder (idle/, loaded/)")
    args = parser.parse_args(argv)
    sweeps = args.sweeps.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        idle = phase(sweeps, args.rounds, where / "idle")
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)]
        try:
            time.sleep(1.0)
            loaded = phase(sweeps, args.rounds, where / "loaded")
        finally:
            for b in burners:
                b.kill()
    rows = [r for sweep in sweeps for r in compare(idle[sweep], loaded[sweep], sweep)]
    print(f"{'point / mode':<24} {'idle wall ratio':>16} {'loaded CPU ratio':>17} {'diff':>7}  report (loaded)")
    for name, a, b, said in rows:
        print(f"{name:<24} {a:>16.3f} {b:>17.3f} {100 * (b / a - 1):>+6.1f}%  {said}")
    worst = max((abs(b / a - 1) for _, a, b, _ in rows), default=math.nan)
    print(f"{len(rows)} ratios beside {args.burners} CPU burners; largest difference from idle {100 * worst:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
