"""The report's Method section, its constants imported from where they are defined."""

from __future__ import annotations

from ablations.analysis.budget import FAR_FROM_FIT, STILL_LEARNING
from ablations.analysis.findings import (
    POWER_DELTA,
)
from ablations.analysis.stats import (
    CHANCE_SDS,
    FLOOR_QUANTILE,
    MARGIN,
    MIN_WIN_SEEDS,
    POWER,
)
from ablations.choices import LOOKS, RelativeMargin, with_makefile
from bench.contention import CONTENDED_PCT
from bench.rounds import ALPHA, MIN_ROUNDS
from bench.units import percent


def method(margin: float | RelativeMargin = MARGIN) -> str:
    """The report's Method section: the tests, the designs and checks beside them, and how cost is measured."""
    return _method_tests(margin) + _method_checks() + _method_cost()


def _method_tests(margin: float | RelativeMargin) -> str:
    return f"""## Method

- **Seeds and test images.** Each setting is trained once per seed (the seed fixes the initial weights, batch
  order and augmentation) and every run is scored on the same test images. A setting's mean accuracy varies
  with the seed (a run shifted on every image), with coin flips (which borderline images a run gets right) and
  with which images the test set holds; each sweep's "Noise" line gives their shares.
- **Intervals.** A setting: the 95 % t-interval of its mean with variance S²/s + v (S² between its s runs'
  accuracies, v what the finite test set adds: the per-image variance net of the coin flips),
  Welch–Satterthwaite degrees of freedom, clipped to [0, 100] %; without saved predictions over seeds alone;
  with one seed the exact binomial interval over the test images. A pair (or an interaction contrast
  Σ w_j acc_j) gets the same variance, each source counted once (a bootstrap over seeds and images counts the
  coin flips twice: Owen 2007), compared seed by seed where the two settings share their seeds (⁼: the mean of
  the per-seed differences, what a seed does to both cancelling). The spread between seeds comes from the runs'
  integer counts of right answers and is never taken below a floor: what coin flips alone would give less
  than in {100 * FLOOR_QUANTILE:g} % of draws (Laplace's q/n where no image varies), so no interval is ±0.
- **Verdicts.** Each pair is **better** or **worse** where its two-sided p survives Holm's step-down over
  the sweep's pairs; **equivalent** where two one-sided tests (TOST) reject a difference beyond ±δ (δ =
  {margin if isinstance(margin, RelativeMargin) else f"{round(100 * margin, 2):g} points"} unless the sweep sets `margin`, or
  its SEEDS=auto design decided with another; Holm-adjusted too). The default, ±0.5 points, is about two
  seed-to-seed s.d. of one run on the reference task (0.26 points over its 48 same-setting seeds): a smaller
  difference does not change which setting a reader
  would pick. On an easy task it is a large share of the error, so each answer states that share, and a margin
  given as "N%" (`--margin 20%`, `margin = "20%"` in a spec) is that share of the best setting's error;
  **identical** where the runs predicted the same class for every image, seed by seed (an observation, not a
  test); **inconclusive** otherwise, which is not a finding of equality. A tie for the highest mean goes to the
  first name in sorted order and is said. At fixed seeds an open pair's sweep states the smallest difference a pair
  of its median noise could detect ((t₁₋α/2m + t_{{power}}) × the median s.e., {percent(POWER)} power) and the seeds a
  {100 * POWER_DELTA:.1f}-point difference would take. A setting under 1/classes + {CHANCE_SDS:g} binomial s.d. over
  the test images and within {CHANCE_SDS:g} standard errors of 1/classes over its seeds and test images is at chance
  (‡: not shown to learn) and compared like any other; a sweep whose settings are all at chance, or with one seed a
  setting, or without saved predictions, gets no verdict.
- **Pair tables.** The interval is the pair's own 95 % one at fixed seeds (p Holm-adjusted, so an interval
  clear of 0, or inside the margin, beside "inconclusive" did not survive the adjustment), under SEEDS=auto the
  repeated interval (Jennison & Turnbull) at one pair's level of the look the design stopped at (so one clear of
  0, or inside the margin, beside "inconclusive" did not survive the design's step-down; p the last look's,
  unadjusted; a pair with the leader that the design decided shows the look and the level its p crossed, a pair
  of two other settings the verdict of the last look's step-down). An open pair says how many seeds a setting would
  decide it by the design's own rule (the cap's level for one pair, seed terms shrinking, the test images'
  staying, over the 80 % interval of its difference; counted from one more than it has, as it is open at
  those), or that none can on this test set. P(a beats b) on a fresh seed, from {MIN_WIN_SEEDS} seeds a
  setting: paired, the share of seeds whose run of a beat its twin (ties half) with the exact Clopper–Pearson
  interval; unpaired, the Mann–Whitney share (Agarwal et al. 2021) with Newcombe's score interval on a t
  quantile.
"""


def _method_checks() -> str:
    return f"""- **The sequential design (SEEDS=auto).** Looks after {"/".join(str(k) for k in LOOKS)} seeds a setting
  (the last is the cap). α is spent over the looks by Hwang, Shih & DeCani's function with γ = −3 (a design
  file that names none was read under O'Brien–Fleming's and is replayed so), its nominal levels from the joint
  normal law of the looks by an exact recursion (Armitage, McPherson & Rowe). At each look the pairs go through
  Holm's step-down with group-sequential levels (Maurer & Bretz: with r pairs standing, the level of a design
  spending α / r), differences and equivalence each by its own step-down: the chance of any false "better" is
  at most α, and of any false "equivalent" at most α (not jointly). A setting decided against the leader takes
  no more seeds; so does one no number of seeds up to the cap could decide (futility, a stop that only removes
  decisions); identical settings train together. Each look reads each setting's first seeds alone, so the
  decisions are a function of those runs: a rerun takes the same ones, runs trained past where the design stopped
  (AUTO_TRAIN=cap trains every setting to the cap) are not read, and a design is fixed once its looks are read.
- **Checks.** The reference comparison pairs each point trained here and in the reference, Bonferroni over
  the points, equivalent only where the whole interval lies within the margin. Budget: a setting is **not
  converged** where its last epoch raised its accuracy by more than {100 * STILL_LEARNING:g} point, where its
  last training loss is more than {percent(FAR_FROM_FIT)} of the way from the recipe's floor (label smoothing's) to
  ln classes, or where the same model trained longer in the same OUT reaches more than the margin more
  (one-sided Welch at 5 %). Sittings (commits, hosts, processors, thread counts, precisions): the seed is the
  unit; seeds split between sittings are compared by a permutation test of their mean residuals, sittings
  within a seed by an F test of setting + seed + sitting; a difference is said in bold.
- **Figures.** Accuracy: each setting's difference from the one with the highest mean, with its pair's interval
  (repeated under SEEDS=auto), the ±margin band where it informs, the marker the verdict; without a verdict each
  setting's accuracy with its interval, and guessing's accuracy dashed where some setting is within noise of it;
  speed and memory: the cost phase's
  median with its IQR; training wall time: over seeds; hollow markers: runs copied from another sweep.
"""


def _method_cost() -> str:
    return f"""- **Cost.** Before training, every point of a command's sweeps is measured side by side in interleaved
  rounds (every point once a round, the start rotating), with nothing else running: an inference step and the
  training step the runs train with (one CUDA graph per step on CUDA unless GRAPHS=0). Figures are medians over
  rounds with [Q1, Q3] (settings.csv); a ratio (of the medians) is printed only where each side rests on
  {MIN_ROUNDS} rounds or more taken while other processes used under {CONTENDED_PCT:.0f} % of the machine and a
  t-test of the logarithms gives p < {ALPHA}, else "same within noise": paired by round, so that what a
  round's drift does to both cancels (Welch's test where the two were timed in different phases). On a busy
  CPU each step's CPU time stands in for its wall time (an item with too few quiet rounds is read by CPU time
  over every round: its throughput and MFU from that time, its wall-clock latencies and busy share blank) and
  its ratios are said as approximate (≈):
  beside 4 CPU burners on 2 cores they came within 10 % of a quiet machine's wall-clock ratios for most of the
  main job's points, but up to 19 % off for some inference steps (`benchmarks/speed_under_load.py`), since
  time-slicing costs a step cache refills in proportion to its working set. Peak memory is one step's
  tensor-level peak. MFU = achieved FLOP/s ÷ the
  device's measured matmul peak (training counts 3 × the forward); "busy" is the device's busy share while
  timed (NVML's on CUDA, process CPU time ÷ wall ÷ cores on the CPU).
- **References.** Holm (1979) Scand. J. Statist. 6:65–70; Satterthwaite (1946) Biometrics Bull. 2:110–114;
  Schuirmann (1987) J. Pharmacokinet. Biopharm. 15:657–680; Owen (2007) Ann. Appl. Statist. 1:386–411;
  Bouthillier et al. (2021) MLSys; Agarwal et al. (2021) NeurIPS (rliable); Lan & DeMets (1983) Biometrika
  70:659–663; Hwang, Shih & DeCani (1990) Statist. Med. 9:1439–1445; Armitage, McPherson & Rowe (1969)
  J. R. Statist. Soc. A 132:235–244; Maurer & Bretz (2013) Statist. Biopharm. Res. 5:311–320; Jennison &
  Turnbull (2000) Group Sequential Methods with Applications to Clinical Trials; Newcombe (2006) Statist. Med.
  25:559–573.
"""


def either(make: str, cli: str) -> str:
    return f"{make} or {cli}" if with_makefile() else cli
