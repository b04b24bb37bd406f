"""Calibration of the report's comparison against cases whose answer is known (`make calibrate`).

    python -m ablations.calibrate [--pairs 100] [--seeds 3] [--planted-pairs 30] [--label-noise 0.3]

- **A/A.** One setting is trained under many independent seeds; the seeds are split into disjoint
  pairs of groups ("A" and "B", `--seeds` runs each: the same setting under two labels). Each pair
  goes through the report's own test (`stats.compare_settings`: the two-level paired bootstrap), and
  a pair with p < α is a false positive. The false-positive rate, with its exact binomial 95 %
  interval, must not be significantly above α.
- **Planted difference.** The same setting trained on training labels of which `--label-noise` are
  replaced by random classes, a change known to cost accuracy, against clean groups of the pool:
  the share of pairs the test calls different in the right direction is its power at that effect,
  and the mean difference says how large the effect was.

Every run is one `ablations.train.train` on `digits` (sklearn's 8×8 digits: no download) with a small
ViT for a few epochs, so the whole calibration runs on a laptop's CPU. Prints a summary and writes
`<out>/calibrate/calibration.csv` (one row per pair).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps
from tqdm import tqdm

from bench.recipe import TrainConfig
from vit import PRESETS, VisionTransformer, ViTConfig

from .data import Dataset, cached_dataset
from .stats import ALPHA, REPLICATES, compare_settings
from .train import train

# learns digits to 30–37 % (chance: 10 %) in about 1.4 s a run on a 2-core CPU: a learned model whose
# accuracy varies between seeds, which is all a calibration needs, at a few hundred runs in minutes
MODEL = PRESETS["vit_digits"].replace(embed_dim=32, depth=1)
RECIPE = TrainConfig(epochs=15, batch_size=64, lr=3e-3)
FIRST_SEED = 10_000  # calibration seeds stay clear of the sweeps' 0, 1, 2


@dataclass(frozen=True)
class Rate:
    hits: int
    trials: int
    low: float
    high: float

    @classmethod
    def of(cls, hits: int, trials: int) -> Rate:
        ci = sps.binomtest(hits, trials).proportion_ci(0.95, method="exact")
        return cls(hits, trials, float(ci.low), float(ci.high))

    @property
    def value(self) -> float:
        return self.hits / self.trials

    def text(self) -> str:
        return f"{self.hits}/{self.trials} = {100 * self.value:.1f} % [95 % interval {100 * self.low:.1f}, {100 * self.high:.1f}]"


def with_label_noise(data: Dataset, share: float, seed: int) -> Dataset:
    """`data` with `share` of its training labels replaced by classes drawn uniformly (the test set untouched)."""
    g = torch.Generator().manual_seed(seed)
    flip = torch.rand(len(data.train_y), generator=g) < share
    noisy = torch.where(flip, torch.randint(0, data.num_classes, data.train_y.shape, generator=g), data.train_y)
    return dataclasses.replace(data, train_y=noisy, _stats={})


def train_pool(data: Dataset, seeds: list[int], model: ViTConfig = MODEL, recipe: TrainConfig = RECIPE,
               desc: str = "runs") -> np.ndarray:
    """(len(seeds), test images) 0/1: which test images each seed's trained model classifies correctly."""
    rows = []
    for seed in tqdm(seeds, desc=desc, unit="run", leave=False):
        torch.manual_seed(seed)
        result = train(VisionTransformer(model), data, recipe, seed, torch.device("cpu"), progress=False)
        rows.append((result.test_preds == data.test_y).numpy().astype(float))
    return np.stack(rows)


def compare_pairs(a: np.ndarray, b: np.ndarray, seeds: int, replicates: int = REPLICATES) -> pd.DataFrame:
    """The report's test on disjoint groups of `seeds` runs: A group i against B group i."""
    pairs = min(len(a), len(b)) // seeds
    found = []
    for i in range(pairs):
        ga, gb = a[i * seeds:(i + 1) * seeds], b[i * seeds:(i + 1) * seeds]
        c = compare_settings({"A": ga, "B": gb}, replicates=replicates, seed=i)[0]
        found.append({"pair": i, "acc_a": ga.mean(), "acc_b": gb.mean(), "diff_pts": 100 * c.diff,
                      "low_pts": 100 * c.low, "high_pts": 100 * c.high, "p": c.p})
    return pd.DataFrame(found)


@dataclass
class Calibration:
    aa: pd.DataFrame
    planted: pd.DataFrame
    false_positives: Rate
    power: Rate | None
    seconds: float


def calibrate(pairs: int, seeds: int, planted_pairs: int, label_noise: float, alpha: float = ALPHA,
              replicates: int = REPLICATES, data: Dataset | None = None) -> Calibration:
    """Train the pools and run the report's test on every pair (see the module docstring)."""
    t0 = time.perf_counter()
    data = data or cached_dataset("digits")
    pool = train_pool(data, list(range(FIRST_SEED, FIRST_SEED + 2 * pairs * seeds)), desc="A/A runs")
    aa = compare_pairs(pool[: pairs * seeds], pool[pairs * seeds:], seeds, replicates)
    false_positives = Rate.of(int((aa["p"] < alpha).sum()), len(aa))
    planted, power = pd.DataFrame(), None
    if planted_pairs:
        noisy = with_label_noise(data, label_noise, seed=FIRST_SEED)
        b = train_pool(noisy, list(range(FIRST_SEED, FIRST_SEED + planted_pairs * seeds)), desc="planted runs")
        planted = compare_pairs(pool[: planted_pairs * seeds], b, seeds, replicates)
        power = Rate.of(int(((planted["p"] < alpha) & (planted["diff_pts"] > 0)).sum()), len(planted))
    return Calibration(aa, planted, false_positives, power, time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablations.calibrate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=100, help="A/A pairs (default 100; 6 runs each)")
    parser.add_argument("--seeds", type=int, default=3, help="runs per group, as the sweeps' seeds (default 3)")
    parser.add_argument("--planted-pairs", type=int, default=30, help="pairs with a planted difference (0: none)")
    parser.add_argument("--label-noise", type=float, default=0.3,
                        help="share of training labels randomised in the planted setting (default 0.3)")
    parser.add_argument("--out", default="out", help="writes <out>/calibrate/calibration.csv")
    args = parser.parse_args(argv)
    for name in ("pairs", "seeds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be ≥ 1")
    if args.planted_pairs < 0 or not 0 < args.label_noise <= 1:
        parser.error("--planted-pairs must be ≥ 0 and --label-noise in (0, 1]")
    runs = 2 * args.pairs * args.seeds + args.planted_pairs * args.seeds
    print(f"calibration: {runs} runs of {MODEL.embed_dim}-wide, depth-{MODEL.depth} ViT on digits, "
          f"{RECIPE.epochs} epochs each, on the CPU", file=sys.stderr)
    result = calibrate(args.pairs, args.seeds, args.planted_pairs, args.label_noise)
    folder = Path(args.out) / "calibrate"
    folder.mkdir(parents=True, exist_ok=True)
    table = pd.concat([result.aa.assign(kind="A/A"), result.planted.assign(kind="planted")], ignore_index=True)
    table.to_csv(folder / "calibration.csv", index=False)
    fp = result.false_positives
    verdict = "within α" if fp.low <= ALPHA else "ABOVE α: the test claims differences that are not there"
    print(f"A/A: {args.pairs} pairs of {args.seeds} vs {args.seeds} seeds of one setting: false positives at "
          f"α = {ALPHA}: {fp.text()}: {verdict}")
    print(f"     accuracy {100 * result.aa['acc_a'].mean():.2f} % (mean over runs); |A − B| median "
          f"{result.aa['diff_pts'].abs().median():.2f} points")
    if result.power is not None:
        print(f"planted: {args.label_noise:.0%} of training labels randomised, {args.planted_pairs} pairs: "
              f"mean cost {result.planted['diff_pts'].mean():.2f} points; detected (p < {ALPHA}, right sign) "
              f"{result.power.text()}")
    print(f"{runs} runs in {result.seconds / 60:.1f} min; pairs → {folder / 'calibration.csv'}")
    return 0 if fp.low <= ALPHA else 1


if __name__ == "__main__":
    sys.exit(main())
