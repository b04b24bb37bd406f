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
from ablations.choices import LOOKS, with_makefile
from bench.contention import CONTENDED_PCT
from bench.rounds import MIN_ROUNDS


def method(margin: float = MARGIN) -> str:
    """The report's Method section: the tests, the designs and checks beside them, and how cost is measured."""
    return _method_tests(margin) + _method_checks() + _method_cost()


def _method_tests(margin: float) -> str:
    return f"""## Method

- **Seeds and test images.** Each setting is trained once per seed; the seed fixes the initial weights,
  the batch order and the augmentation. Every run is scored on the same test images, so a setting's
  answers form a seeds × images table. Its mean accuracy varies for three reasons: a seed shifts a run
  on every image (**seed**); which borderline images a run gets right is a coin flip per seed and image
  (**seed × image**); which images the test set holds (**test image**). The spread of the runs'
  accuracies between seeds already contains the first two; each sweep's table of variance components
  gives every source's share.
- **Accuracy intervals.** With two or more seeds and saved predictions: the 95 % t-interval of the mean
  with the variance S²/s + v (S² the variance between the s runs' accuracies; v what the finite test
  set adds, estimated from the per-image accuracies net of their coin flips, below), Welch–Satterthwaite
  degrees of freedom, clipped to [0, 100] %: it covers seeds and test images. Without predictions: the
  t-interval over seeds, the test set held fixed, labelled so. With one seed: the exact binomial
  (Clopper–Pearson) 95 % interval over the test images, labelled as such.
- **Comparisons.** Every pair of settings a, b (and each interaction contrast of a two-factor grid) is a
  contrast c = Σ w_j acc_j of settings' means, with variance S_a²/s_a + S_b²/s_b + v: each setting's
  variance between seeds, plus the test-image term v = max(0, var_i(D_i) − (coin flips of D_i)) / n of the
  per-image contrast D_i = Σ w_j ȳ_ji, its coin flips estimated by Σ w_j² · (mean over images of the
  per-image variance between seeds) / s_j. A two-level bootstrap that resamples both seeds and images
  counts the coin flips twice and is deaf (Owen 2007); this moment estimator counts each source once.
  t = c / s.e. with Welch–Satterthwaite degrees of freedom; two-sided p; the p-values of a sweep's
  pairs are adjusted together by Holm's step-down method. Two settings trained under the same seeds (same
  initial weights, batch order and augmentation) are compared seed by seed: the contrast is the mean of
  the per-seed differences d_si = y_a,si − y_b,si, with the same variance applied to d (its spread between
  seeds, plus its test-image term), so what a seed does to both cancels (marked ⁼). Where the runs of a
  pair predicted the same class for every image, seed by seed, the pair is **identical**: an observation,
  not a test. The spread between seeds is computed from the runs' counts of right answers (equal counts
  give exactly 0) and never taken below a floor: what coin flips alone (each image's variance between
  seeds, averaged over the images) would give less than in only {100 * FLOOR_QUANTILE:g} % of draws of that many
  seeds, so three runs with the same count do not give a standard error near 0; where no image varies
  between seeds, the variance of one run's accuracy over n independent answers at the observed rate with
  one imagined answer each way (Laplace), so no interval is ±0. `make calibrate` checks the test on the
  saved predictions of the committed runs (false-positive rate at α, power at planted differences).
- **Verdicts, three ways.** For each pair: **better** where the difference excludes 0 after Holm's
  adjustment; **equivalent** where two one-sided tests (TOST) reject a difference beyond ±δ, δ =
  {100 * margin:g} points unless the sweep sets its own (`margin` in the spec; `--margin` on the
  command line), Holm-adjusted over the pairs too; **inconclusive** where neither holds: not a finding of
  equality. Each pair also gives the probability that a fresh seed of a scores above one of b (the
  Mann–Whitney estimate over the runs' accuracies; Agarwal et al. 2021), from {MIN_WIN_SEEDS} seeds a
  setting (from fewer it takes a handful of values and reads as certainty). A sweep names a best setting
  only if the setting with the highest mean is better than every other; where it is inconclusive
  against some, the smallest difference the sweep could have detected is (t₁₋α/2m + t_power) × the
  median standard error of its pairs, at {POWER:.0%} power and the strictest Holm level α/m for m pairs.
  It then states how many seeds per setting would detect a {100 * POWER_DELTA:.1f}-point difference at
  {POWER:.0%} power: the difference of two means over s seeds has variance 2σ²/s + v (σ the seed-to-seed
  s.d. of one run's accuracy, pooled over settings; v the test-image term, mean over pairs), which more
  seeds do not remove; where v alone is too large it says so.
- **At chance.** A setting whose mean accuracy is below 1/classes + {CHANCE_SDS:g} binomial standard
  errors over the test images is marked ‡: it has not learned the task at this budget. It is compared
  like any other setting (a model that learns is *better* than one that does not where the test says
  so), and the text names it, adding that it may learn with more epochs.
- **No verdict** is given, and no p-value shown, for a sweep with one seed per setting (its binomial
  intervals cover the test images only: one seed says nothing of the variation between training
  seeds), for a sweep whose best setting is itself at chance (nothing was learned, so nothing is known
  about the factor), or without saved predictions.
"""


def _method_checks() -> str:
    return f"""- **Pair tables.** Each pair: a − b in points with its interval (⁼: paired by seed, the mean of the
  per-seed differences); the p of a difference and the p of two one-sided tests against ±margin; P(a beats b);
  the verdict. At fixed seeds the interval is the pair's own 95 % one and the p-values are Holm-adjusted over
  the sweep's pairs, so an interval that excludes 0 beside "inconclusive" is a difference that does not survive
  that adjustment. Under SEEDS=auto the p-values are the last look's, unadjusted, each setting at the seeds it
  ended with; a pair with the leader carries the design's verdict with the look it was taken at and the level its
  p crossed there, any other pair the last look's step-down; the intervals are repeated confidence intervals
  (Jennison & Turnbull) at the level of the look the design stopped at, which hold at 95 % whatever look it
  stopped at. An inconclusive pair says how many seeds a setting would decide it by the design's own rule: at
  the cap's level for one pair, with the seed terms shrinking as seeds are added and the test images' term
  staying, over the differences its data still allow (the 80 % interval of its difference): the fewest for the
  most favourable of them, the most for every one; or that no number of seeds decides it on this test set (its
  images alone keep the interval both across 0 and past the margin) — a guide for the next run, not a promise.
  P(a beats b) on a fresh seed, from {MIN_WIN_SEEDS} seeds a setting (from fewer it takes a handful of values and
  reads as certainty): paired by seed, the share of seeds whose run of a scored above its twin of b, ties
  counting half, with its exact (Clopper–Pearson) 95 % interval over the seeds; unpaired, the share of pairs of
  runs where a's scored higher (Mann–Whitney), with Newcombe's (2006) score interval on a t quantile. An
  interval that holds 0.5 says a fresh seed could go either way. Identical: seed by seed, the two settings' runs
  predicted the same class for every test image; an observation, not a test.
- **The sequential design (SEEDS=auto).** A sweep trained under it looks at its runs after
  {"/".join(str(k) for k in LOOKS)} seeds per setting (or the looks its design file names; the last look is
  the cap). α is spent over the looks by Hwang, Shih & DeCani's function with γ = −3 (a design file written
  before it was chosen says O'Brien–Fleming's, and is replayed with it); the nominal levels come
  from the joint normal law of the look statistics by an exact recursion (Armitage, McPherson & Rowe), the
  same in every process. At each look the sweep's pairs are tested by Holm's step-down with group-sequential
  levels (Maurer & Bretz): with r pairs still standing, the smallest p is tested at the level of a design
  that spends α / r over the looks; a rejection frees its share for the rest, at that look and later ones.
  Differences and equivalence within the margin (two one-sided tests) are tested apart, each by its own step-
  down at α: across looks and pairs the chance of any false "better" is at most α, and the chance of any false
  "equivalent" is at most α (the two are not controlled jointly; together at most 2α). A setting decided against
  the leader trains no more seeds; so does one stopped as futile: for every difference inside its 80 % interval,
  its pair would stay undecided at the cap even at the last look's most lenient level (the seed terms shrink
  with seeds, the test images' term does not) — a stop that only ever removes decisions, so it keeps the error
  rates. The report says why each futile pair stopped: the test set's images alone keep it within reach of the
  margin, or it would need more seeds than the cap. The intervals beside a sequential verdict are repeated
  confidence intervals (Jennison & Turnbull) at the level of the look the design stopped at, which hold at 95 %
  whatever look it stopped at. A setting with a failed run is left out of the design, and its headline says so.
- **The reference comparison** pairs each point (model, recipe, data and seed) trained both here and in the
  reference and gives the difference with an interval over the common seeds and the test images,
  simultaneous over the points compared (Bonferroni); it states the intervals' median half-width (what
  difference it could have seen) and calls a point equivalent only where its whole interval lies within the
  margin.
- **Budget.** Each setting is judged on its own runs. A sweep is labelled **not converged**, in the verdict's
  headline, the figure and a line naming the settings and why, where a setting's last epoch raised its test
  accuracy by more than {100 * STILL_LEARNING:g} point (mean over its runs), where its last training loss is more
  than {FAR_FROM_FIT:.0%} of the way from the least loss the recipe allows (label smoothing's floor, the entropy of
  the smoothed target) to the loss of guessing (ln classes; a cosine schedule flattens the last epoch), or where
  the same model, recipe and data trained for more epochs in the same OUT reaches more than the equivalence
  margin more (one-sided Welch test at 5 %, two runs or more on each side): the verdict is then this budget's.
  Runs without per-epoch history are said not checked.
- **Sittings.** A sweep's runs can come from several sittings (another commit, host, processor, thread
  count or precision: a sweep resumed later, or runs shared with other sweeps by run id). A sweep's settings
  share their seeds, and a seed lifts or lowers every setting's run of it alike, so the seed is the unit:
  where the sittings split the sweep by seed, each seed's mean distance from its settings' means is compared
  between sittings (one-way ANOVA); where a seed's runs sit in two sittings, an F test of accuracy ~ setting +
  seed + sitting against setting + seed. At p < 0.05 the section says so in bold, since its verdicts pool runs
  that are then not interchangeable. Where every setting sits alone, no test can tell the two apart.
"""


def _method_cost() -> str:
    return f"""- **Cost.** Before training, every point of a command's sweeps is measured side by side in
  interleaved rounds (each round measures every point once, the starting point rotating) with nothing
  else running: an inference step and the training step the runs train with (forward, backward, clipping,
  fused AdamW over their parameter groups; one CUDA graph per step on CUDA unless GRAPHS=0). Figures are the median
  over rounds with [Q1, Q3]; a ratio between two settings is printed only where each rests on at least
  {MIN_ROUNDS} uncontended rounds and their IQRs do not overlap, otherwise "same within noise" (or "not
  measured"). A round taken while other processes used ≥ {CONTENDED_PCT:.0f} % of
  the CPUs (or computed on the GPU) is left out, and the table's note says how many were. """ f"""\
Peak memory is the tensor-level peak of one step (CUDA
  allocator, or MemTracker on the CPU), taken in the first round: it is the same every time.
  MFU = achieved FLOP/s ÷ the device's measured matmul peak (a training step counts 3 × the forward);
  every row stores that peak and when it was measured.
  "MFU infer" and "busy % infer" come from the cost phase's inference timing; "MFU train runs" and
  "busy % train runs" (`train_mfu`, `train_util_pct`) from each training run's own epochs, data
  handling included.
- **References.** S. Holm (1979), A simple sequentially rejective multiple test procedure, Scand. J.
  Statist. 6:65–70. F. E. Satterthwaite (1946), An approximate distribution of estimates of variance
  components, Biometrics Bulletin 2:110–114. D. J. Schuirmann (1987), A comparison of the two one-sided
  tests procedure and the power approach for assessing the equivalence of average bioavailability,
  J. Pharmacokinet. Biopharm. 15:657–680. A. B. Owen (2007), The pigeonhole bootstrap, Ann. Appl.
  Statist. 1:386–411. X. Bouthillier et al. (2021), Accounting for variance in machine learning
  benchmarks, MLSys. R. Agarwal et al. (2021), Deep reinforcement learning at the edge of the
  statistical precipice, NeurIPS (rliable). K. K. G. Lan & D. L. DeMets (1983), Discrete sequential
  boundaries for clinical trials, Biometrika 70:659–663. P. Armitage, C. K. McPherson & B. C. Rowe (1969),
  Repeated significance tests on accumulating data, J. R. Statist. Soc. A 132:235–244. W. Maurer & F. Bretz
  (2013), Multiple testing in group sequential trials using graphical approaches, Statist. Biopharm. Res.
  5:311–320. C. Jennison & B. W. Turnbull (2000), Group Sequential Methods with Applications to Clinical
  Trials, Chapman & Hall.
"""


def either(make: str, cli: str) -> str:
    return f"{make} or {cli}" if with_makefile() else cli
