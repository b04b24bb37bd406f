"""The fixed-seed pairwise test under A/A with a true test-image term, on simulated runs whose answer is known.

    python benchmarks/fixed_seed_aa.py [--seeds 3,12,20] [--taus 0,0.5,1] [--trials 600] [--seed 0]

Two settings of one distribution are compared by `ablations.analysis.stats.contrast` (unpaired, the crossed
design's variance), 1,000 test images each: per image a base logit N(4, 1.8) (about 97 % accuracy), per setting
and image its own shift N(0, τ) (a true image term: on this test set the settings differ, over all images they
do not), per run a seed shift N(0, 0.15) and the answers drawn from the resulting probabilities. Prints, per seeds
and τ, the share of trials with p < 0.05 and its exact 95 % interval: the test's false-positive rate in the
regime the report speaks about.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablations import contrast  # noqa: E402

N_IMAGES = 1000


def trial(rng: np.random.Generator, seeds: int, tau: float, sd_seed: float = 0.15) -> bool:
    base = rng.normal(4.0, 1.8, N_IMAGES)
    settings = []
    for _ in range(2):
        shift = rng.normal(0.0, tau, N_IMAGES)
        logits = base + shift + rng.normal(0.0, sd_seed, (seeds, 1))
        settings.append((rng.random((seeds, N_IMAGES)) < 1 / (1 + np.exp(-logits))).astype(float))
    return contrast(settings, [1.0, -1.0]).p() < 0.05


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="3,12,20")
    parser.add_argument("--taus", default="0,0.5,1")
    parser.add_argument("--trials", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for seeds in (int(s) for s in args.seeds.split(",")):
        for tau in (float(t) for t in args.taus.split(",")):
            hits = sum(trial(rng, seeds, tau) for _ in range(args.trials))
            ci = sps.binomtest(hits, args.trials).proportion_ci(0.95, method="exact")
            print(f"seeds {seeds:3d}  τ {tau:4.2f}: p < 0.05 in {hits}/{args.trials} = {hits / args.trials:.1%} "
                  f"[{ci.low:.1%}, {ci.high:.1%}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
