"""Calibration of the report's comparison against cases whose answer is known (`make calibrate`).

    python -m ablations calibrate --from results/reference [--trials 400] [--seeds 3]   # no training
    python -m ablations calibrate --train [--pairs 100] [--seeds 3] [--planted-pairs 30]  # trains on digits

**From saved predictions** (`--from OUT`: the regime the report speaks about, e.g. mnist5k at ~97 %).
Every finished run under `OUT/ablations` with saved test predictions joins one pool per test set (the
largest is used). Each trial builds two groups of `--seeds` runs and puts them through the report's
own test (`stats.compare_settings`), from two sources:

- **runs**: 2 × seeds runs drawn at random, without replacement, from the pool and split in two. The
  labels are random, so the two groups' expected accuracies are equal (A/A), with the real runs'
  seed, seed × image and between-setting variation.
- **coin flips**: runs simulated from the pool's per-image accuracies p_i (each image right with
  probability p_i, independently per run and image): the seed × image noise alone, with known truth.

A/A trials give the false-positive rate at α (with its exact binomial 95 % interval) and the
p-value distribution (share below 0.05 and 0.2, mean: uniform p has 5 %, 20 %, 0.5). Planted trials
take δ · n of each B run's correct answers away (chosen at random per run), a difference of exactly δ
in every run: the share called different with A ahead is the power at δ (0.5 and 1 point).

**By training** (`--train`): one small ViT on `digits` (sklearn's 8×8 digits: no download) trained under
many seeds; disjoint groups give the A/A pairs, and a copy trained on partly randomised labels the
planted cost. Minutes on a laptop's CPU; the digits regime (~35 %) is far from the report's.

Both print a summary and write `<out>/calibrate/calibration.csv` (one row per trial or pair).
"""

from __future__ import annotations

import dataclasses
import io
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps
from tqdm import tqdm

from ablations.analysis.sequential import run_design
from ablations.analysis.stats import ALPHA, MIN_SEEDS, Outcome, compare_settings
from ablations.choices import LOOKS
from ablations.results.schema import DEFAULT_WHEN_BLANK
from ablations.results.store import Tables, load_preds
from ablations.specs import MODEL_FIELDS, TRAIN_FIELDS
from bench.io.atomic import write_atomic
from bench.reference import CHECKOUT_REFERENCE, refusal
from bench.training.recipe import TrainConfig
from bench.units import count, percent
from vit import PRESETS

# the training mode's model: learns digits to 30–37 % (chance: 10 %) in about 1.4 s a run on a 2-core CPU, a
# learned model whose accuracy varies between seeds, which is all a calibration needs, at a few hundred runs
MODEL = PRESETS["vit_digits"].replace(embed_dim=32, depth=1)
RECIPE = TrainConfig(epochs=15, batch_size=64, lr=3e-3)
FIRST_SEED = 10_000  # calibration seeds stay clear of the sweeps' 0, 1, 2
PLANTED = (0.005, 0.01)  # the differences whose power the saved mode measures (0.5 and 1 point)


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

    def against_alpha(self) -> str:
        """A false-positive rate's verdict: above α only where its whole interval is; within α only where its whole
        interval is; else not shown above α, as too few trials cannot tell."""
        if self.low > ALPHA:
            return "ABOVE α: the test claims differences that are not there"
        if self.high <= ALPHA:
            return "within α"
        return f"not above α (its interval reaches {100 * self.high:.1f} %: more trials would narrow it)"


# --- from saved predictions ------------------------------------------------------------------------

@dataclass
class Pool:
    """The 0/1 test answers of finished runs that share one test set: (runs, n); and `same`, those of the one
    setting (model, recipe, data) with the most runs, each of another seed: real same-setting seeds."""
    correct: np.ndarray
    dataset: str
    sweeps: list[str]
    same: np.ndarray | None = None
    same_label: str = ""


def _setting_key(row: pd.Series) -> tuple:
    """What defines a run's setting, seed aside: its model, its recipe (augmentation aside: blank in older
    rows for the value newer rows record) and where it started."""
    return tuple(str(row.get(c, "")) for c in (*MODEL_FIELDS, *TRAIN_FIELDS, "init") if c not in DEFAULT_WHEN_BLANK)


def saved_pool(out: Path) -> Pool:
    """The largest group of finished runs under `out/ablations` with saved predictions on one test set (one
    dataset, one data_id, the same labels), each run once, and within it the setting with the most seeds;
    ValueError naming the folder when there are none."""
    groups: dict[tuple, dict[str, np.ndarray]] = {}
    sweeps: dict[tuple, set[str]] = {}
    settings: dict[tuple, dict[tuple, dict[str, np.ndarray]]] = {}
    names: dict[tuple, str] = {}
    where: dict[tuple, set[str]] = {}
    damaged: list[str] = []
    read = Tables(out)
    for sweep in read.names():
        paths = read.paths(sweep)
        rows = read.ok(sweep)
        for _, r in rows.iterrows() if "run_id" in rows else ():
            path = paths.preds_file(str(r["run_id"]))
            if not path.exists():
                continue
            try:
                pred, target = load_preds(path)
            except ValueError as err:   # one damaged file leaves the rest of the pool
                damaged.append(str(err))
                continue
            data_id = r.get("data_id", "")
            key = (str(r.get("dataset", "?")), "" if pd.isna(data_id) else str(data_id), target.tobytes())
            answers = (pred == target).astype(float)
            groups.setdefault(key, {})[str(r["run_id"])] = answers
            sweeps.setdefault(key, set()).add(sweep)
            setting = _setting_key(r)
            settings.setdefault(key, {}).setdefault(setting, {})[str(r["run_id"])] = answers
            names.setdefault(setting, _point_name(r))
            where.setdefault(setting, set()).add(sweep)
    if damaged:
        print(f"note: {count(len(damaged), 'predictions file')} left out of the pool: {damaged[0]}"
              + (f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""), file=sys.stderr)
    if not groups:
        raise ValueError(f"--from {out}: no finished run with saved test predictions under {out}/ablations "
                         f"(run a sweep into it first, or pass the folder a sweep wrote)")
    key = max(groups, key=lambda k: len(groups[k]))
    runs = groups[key]
    setting, same = max(settings[key].items(), key=lambda item: len(item[1]))
    return Pool(np.stack([runs[k] for k in sorted(runs)]), key[0], sorted(sweeps[key]),
                np.stack([same[k] for k in sorted(same)]), f"{names[setting]} (in {', '.join(sorted(where[setting]))})")


def _point_name(row: pd.Series) -> str:
    return ", ".join(f"{k}={row[k]}" for k in ("patch_size", "depth", "num_heads", "embed_dim", "pos", "lr") if k in row)


def plant(runs: np.ndarray, delta: float, rng: np.random.Generator) -> np.ndarray:
    """`runs` with round(delta · n) of each run's correct answers made wrong, chosen at random per run."""
    runs = runs.copy()
    k = round(delta * runs.shape[1])
    for run in runs:
        right = np.flatnonzero(run == 1)
        if len(right) < k:
            raise ValueError(f"a run has {len(right)} correct answers, fewer than the {k} a planted "
                             f"{100 * delta:g}-point difference takes away")
        run[rng.choice(right, k, replace=False)] = 0
    return runs


def draw_groups(pool: np.ndarray, seeds: int, trials: int, source: str, delta: float,
                seed: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(A, B) per trial, each (seeds, n): from `source` 'runs' (drawn at random from the pool, split in two)
    or 'coin flips' (simulated from the pool's per-image accuracies); B with `delta` planted (0: A/A). The
    same arguments give the same groups."""
    rng = np.random.default_rng([seed, seeds, trials, round(1e6 * delta), SOURCE_KEYS[source]])
    p = pool.mean(0)
    for _ in range(trials):
        if source != "coin flips":
            pick = rng.choice(len(pool), 2 * seeds, replace=False)
            a, b = pool[pick[:seeds]], pool[pick[seeds:]]
        else:
            a, b = ((rng.random((seeds, len(p))) < p).astype(float) for _ in range(2))
        yield a, (plant(b, delta, rng) if delta else b)


SOURCE_KEYS = {"runs": 1, "coin flips": 0, "one setting": 2}   # each source's own random stream


FORMS = {"unpaired": None, "paired": True}   # how a trial's two groups are compared (the report's two forms)


def calibrate_saved(pool: Pool, seeds: int, trials: int, alpha: float = ALPHA) -> pd.DataFrame:
    """One row per trial and form: source, planted difference (points), form, the report's difference and p.
    Sources: 'one setting' (runs of the pool's largest setting, real same-setting seeds, where it has 2 × seeds),
    'runs' (any runs of the test set), 'coin flips'. Forms: 'unpaired' (settings trained under different
    seeds) and 'paired' (the same groups compared seed by seed, as settings that share their seeds are, and
    SEEDS=auto's are: run i of A against run i of B)."""
    if 2 * seeds > len(pool.correct):
        raise ValueError(f"{seeds} vs {seeds} seeds need {2 * seeds} runs; the pool has {len(pool.correct)}")
    found = []
    arrays = {"runs": pool.correct, "coin flips": pool.correct}
    if pool.same is not None and len(pool.same) >= 2 * seeds:
        arrays = {"one setting": pool.same, **arrays}
    cases = [(source, delta) for source in arrays for delta in (0.0, *PLANTED)]
    bar = tqdm(total=trials * len(cases) * len(FORMS), desc="trials", unit="trial", leave=False)   # as counted at the end
    for source, delta in cases:
        for i, (a, b) in enumerate(draw_groups(arrays[source], seeds, trials, source, delta)):
            for form, paired in FORMS.items():
                shared = {"A": list(range(seeds)), "B": list(range(seeds))} if paired else None
                c = compare_settings({"A": a, "B": b}, seeds=shared)[0]
                found.append({"source": source, "planted_pts": 100 * delta, "form": form, "trial": i,
                              "acc_a": a.mean(), "acc_b": b.mean(), "diff_pts": 100 * c.diff, "low_pts": 100 * c.low,
                              "high_pts": 100 * c.high, "p": c.p})
            bar.update(len(FORMS))
    bar.close()
    return pd.DataFrame(found)


def detected(trials: pd.DataFrame, alpha: float = ALPHA) -> pd.Series:
    """Per trial: called different (p < α), and for a planted trial with A ahead, the right sign."""
    return (trials["p"] < alpha) & ((trials["planted_pts"] == 0) | (trials["diff_pts"] > 0))


def summary_table(trials: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Per source: false positives with their exact interval, the A/A p-value distribution, power at each
    planted difference."""
    rows = []
    hit = detected(trials, alpha)
    for (source, form), g in trials.groupby(["source", "form"], sort=False):
        aa = g[g["planted_pts"] == 0]
        fp = Rate.of(int(hit[aa.index].sum()), len(aa))
        row = {"source": source, "form": form, f"false positives (A/A, α = {alpha})": fp.text(),
               "p < 0.05": percent((aa['p'] < 0.05).mean(), 1), "p < 0.2": percent((aa['p'] < 0.2).mean(), 1),
               "mean p": f"{aa['p'].mean():.2f}"}
        for delta, d in g[g["planted_pts"] > 0].groupby("planted_pts"):
            row[f"power at {delta:g} pt"] = percent(hit[d.index].mean(), 1)
        rows.append(row)
    return pd.DataFrame(rows)


# --- the sequential design on real same-setting seeds -----------------------------------------------

DESIGN_CASES = (("A/A", 0.0), ("0.5 point", 0.005), ("1 point", 0.01), ("5 points", 0.05))


def calibrate_design(same: np.ndarray, trials: int, looks: tuple[int, ...] = LOOKS, seed: int = 0) -> pd.DataFrame:
    """The SEEDS=auto design (`sequential.run_design`) on real runs of one setting: each trial shuffles them
    into k = min(4, runs // last look) settings of `looks[-1]` seeds; A/A as drawn, or every setting but the
    first with δ planted in each run (0.5 and 1 point). One row per trial: any setting decided different
    (a false positive under A/A), the second decided equivalent, the first found the winner (leading at
    the end, decided different from every other), and the runs it trained."""
    k = min(4, len(same) // looks[-1])
    if k < 2:
        raise ValueError(f"the sequential design needs 2 × {looks[-1]} runs of one setting; the pool's largest "
                         f"setting has {len(same)}")
    rng = np.random.default_rng([seed, trials, k])
    found = []
    bar = tqdm(total=trials * len(DESIGN_CASES), desc="sequential design", unit="trial", leave=False)
    for case, delta in DESIGN_CASES:
        for i in range(trials):
            order = rng.permutation(len(same))[:k * looks[-1]].reshape(k, looks[-1])
            draw = {j: same[idx] if j == 0 or not delta else plant(same[idx], delta, rng) for j, idx in enumerate(order)}
            result = run_design(draw, looks)
            decided = result.final.decided
            found.append({"case": case, "planted_pts": 100 * delta, "trial": i, "settings": k,
                          "any_different": any(d.outcome == Outcome.DIFFERENT for lk in result.looks
                                               for d in lk.decided.values()),
                          "equivalent": any(getattr(lk.decided.get(1), "outcome", "") == Outcome.EQUIVALENT
                                            for lk in result.looks),
                          "found": result.final.leader == 0 and all(
                              getattr(decided.get(j), "outcome", "") == Outcome.DIFFERENT and decided[j].leader == 0
                              for j in range(1, k)),
                          "runs": result.runs, "fixed_runs": k * looks[-1], "stopped_at": len(result.looks)})
            bar.update()
    bar.close()
    return pd.DataFrame(found)


def design_lines(trials: pd.DataFrame, looks: tuple[int, ...] = LOOKS) -> list[str]:
    """The design's rates on real seeds, each with its exact 95 % interval."""
    k = int(trials["settings"].iloc[0])
    by = dict(tuple(trials.groupby("case", sort=False)))
    aa, half, one = by["A/A"], by["0.5 point"], by["1 point"]
    fp = Rate.of(int(aa["any_different"].sum()), len(aa))
    eq = Rate.of(int(half["equivalent"].sum()), len(half))
    power = Rate.of(int(one["found"].sum()), len(one))
    share = one["runs"].mean() / one["fixed_runs"].iloc[0]
    five = by.get("5 points")
    early = (Rate.of(int((five["found"] & (five["stopped_at"] <= 2)).sum()), len(five)) if five is not None else None)
    return [f"sequential design (SEEDS=auto, looks {'/'.join(map(str, looks))}) on real same-setting seeds, {k} "
            f"settings × {looks[-1]} seeds drawn per trial, {len(aa)} trials per case:",
            f"  A/A: any setting decided different {fp.text()}",
            f"  0.5 point planted: the planted setting called equivalent within ±0.5 points {eq.text()}",
            f"  1 point planted: the winner found {power.text()}, with {share:.2f} × the runs of {looks[-1]} fixed seeds "
            f"(stopped at look {', '.join(f'{n}: {c}' for n, c in one['stopped_at'].value_counts().sort_index().items())})",
            *([f"  5 points planted: the winner found and every pair decided by the second look {early.text()}"]
              if early is not None else []),
            f"  A/A: {aa['runs'].mean() / aa['fixed_runs'].iloc[0]:.2f} × the runs of {looks[-1]} fixed seeds"]


def win_coverage(same: np.ndarray, trials: int, runs: tuple[int, ...] = (5, 12), seed: int = 0) -> list[str]:
    """P(a beats b)'s 95 % interval on real runs of one setting split at random into a and b (the truth is 1/2):
    how often it covers 1/2, with its exact interval, at each number of runs a side."""
    from ablations.analysis.stats import probability_of_improvement, win_interval

    acc = same.mean(1)
    rng = np.random.default_rng([seed, trials])
    lines = []
    for k in runs:
        if 2 * k > len(acc):
            continue
        covered = 0
        for _ in range(trials):
            draw = rng.permutation(acc)[:2 * k]
            low, high = win_interval(probability_of_improvement(draw[:k], draw[k:]), k, k)
            covered += low <= 0.5 <= high
        lines.append(f"  P(a beats b), {k} against {k} runs of one setting: its 95 % interval covers 1/2 in "
                     f"{Rate.of(covered, trials).text()}")
    return lines


def sittings_alarms(out: Path, trials: int, seed: int = 0) -> list[str]:
    """The sittings check on real runs relabelled as a behaviour-unchanged resume: in each of the OUT's sweeps
    whose settings share 12 seeds or more, half of those seeds drawn at random marked as a later commit. The
    runs are the same, so any alarm is false."""
    from ablations.analysis.sittings import check_sittings

    read = Tables(out)
    rng = np.random.default_rng([seed, trials])
    alarms = tested = 0
    for sweep in read.names():
        rows = read.ok(sweep)
        factor = next((c for c in ("attn", "depth", "num_heads", "pos", "pool", "norm", "stem", "patch_size")
                       if c in rows and rows[c].nunique() > 1), None)
        if factor is None or "seed" not in rows:
            continue
        shared = sorted(set.intersection(*(set(g["seed"]) for _, g in rows.groupby(factor))))
        if len(shared) < 12:
            continue
        rows = rows[rows["seed"].isin(shared)]
        for _ in range(trials):
            later = set(rng.choice(shared, len(shared) // 2, replace=False).tolist())
            check = check_sittings(rows.assign(git_sha=np.where(rows["seed"].isin(later), "later", "first")), factor)
            alarms += bool(check is not None and check.differ)
            tested += 1
    if not tested:
        return ["  sittings check: no sweep with 12 shared seeds to relabel"]
    return [f"  sittings check, half of the shared seeds of each sweep relabelled as a later commit (the same runs): "
            f"false alarms {Rate.of(alarms, tested).text()}"]


# --- by training -----------------------------------------------------------------------------------

def with_label_noise(data, share: float, seed: int):
    """`data` with `share` of its training labels replaced by classes drawn uniformly (the test set untouched)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    flip = torch.rand(len(data.train_y), generator=g) < share
    noisy = torch.where(flip, torch.randint(0, data.num_classes, data.train_y.shape, generator=g), data.train_y)
    return dataclasses.replace(data, train_y=noisy, _stats={})


def train_pool(data, seeds: list[int], keep: Path | None = None, desc: str = "runs") -> np.ndarray:
    """(len(seeds), test images) 0/1: which test images each seed's trained model classifies correctly. With
    `keep`, each run's answers are saved there as it finishes and a saved one is read instead of retrained,
    so an interrupted calibration resumes where it stopped."""
    import torch

    from ablations.training.train import train
    from vit import VisionTransformer

    rows = []
    for seed in tqdm(seeds, desc=desc, unit="run", leave=False):
        saved = keep / f"{seed}.npy" if keep else None
        if saved is not None and saved.exists():
            rows.append(np.load(saved))
            continue
        torch.manual_seed(seed)
        result = train(VisionTransformer(MODEL), data, RECIPE, seed, torch.device("cpu"), progress=False)
        row = (result.test_preds == data.test_y).numpy().astype(float)
        if saved is not None:   # written whole or not at all: a kill leaves no torn file to resume from
            buf = io.BytesIO()
            np.save(buf, row)
            write_atomic(saved, buf.getvalue())
        rows.append(row)
    return np.stack(rows)


def compare_pairs(a: np.ndarray, b: np.ndarray, seeds: int) -> pd.DataFrame:
    """The report's test on disjoint groups of `seeds` runs: A group i against B group i."""
    pairs = min(len(a), len(b)) // seeds
    found = []
    for i in range(pairs):
        ga, gb = a[i * seeds:(i + 1) * seeds], b[i * seeds:(i + 1) * seeds]
        c = compare_settings({"A": ga, "B": gb})[0]
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
              data=None, keep: Path | None = None) -> Calibration:
    """Train the pools and run the report's test on every pair (see the module docstring); with `keep`, runs
    are saved under it as they finish and reused by the next call."""
    from ablations.training.data import cached_dataset

    t0 = time.perf_counter()
    data = data or cached_dataset("digits")
    pool = train_pool(data, list(range(FIRST_SEED, FIRST_SEED + 2 * pairs * seeds)),
                      keep and keep / "clean", desc="A/A runs")
    aa = compare_pairs(pool[: pairs * seeds], pool[pairs * seeds:], seeds)
    false_positives = Rate.of(int((aa["p"] < alpha).sum()), len(aa))
    planted, power = pd.DataFrame(), None
    if planted_pairs:
        noisy = with_label_noise(data, label_noise, seed=FIRST_SEED)
        b = train_pool(noisy, list(range(FIRST_SEED, FIRST_SEED + planted_pairs * seeds)),
                       keep and keep / f"noise-{label_noise:g}", desc="planted runs")
        planted = compare_pairs(pool[: planted_pairs * seeds], b, seeds)
        power = Rate.of(int(((planted["p"] < alpha) & (planted["diff_pts"] > 0)).sum()), len(planted))
    return Calibration(aa, planted, false_positives, power, time.perf_counter() - t0)


# --- command line ----------------------------------------------------------------------------------

def _saved_main(args, folder: Path) -> int:
    pool = saved_pool(Path(args.source))
    if 2 * args.seeds > len(pool.correct):
        raise ValueError(f"--seeds {args.seeds}: {args.seeds} vs {args.seeds} seeds need {2 * args.seeds} runs; "
                         f"{args.source} has {len(pool.correct)} on one test set")
    n = pool.correct.shape[1]
    print(f"calibration from saved predictions: {len(pool.correct)} runs of {pool.dataset} ({n:,} test images, mean "
          f"accuracy {100 * pool.correct.mean():.2f} %) under {args.source} ({', '.join(pool.sweeps)}); one setting: "
          f"{len(pool.same)} seeds of {pool.same_label}; {args.seeds} vs {args.seeds} seeds, {args.trials} trials "
          f"per case, α = {ALPHA}", file=sys.stderr)
    t0 = time.perf_counter()
    trials = calibrate_saved(pool, args.seeds, args.trials)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "calibration.csv", trials.to_csv(index=False).encode())
    print(summary_table(trials).to_string(index=False))
    hit = detected(trials)
    within = True
    for form in FORMS:
        aa = trials[(trials["planted_pts"] == 0) & (trials["form"] == form)]
        fp = Rate.of(int(hit[aa.index].sum()), len(aa))
        within = within and fp.low <= ALPHA
        print(f"all A/A trials, {form}: false positives {fp.text()}: {fp.against_alpha()}")
    print(f"{len(trials)} trials in {time.perf_counter() - t0:.1f} s; trials → {folder / 'calibration.csv'}")
    if pool.same is None or len(pool.same) < 2 * LOOKS[-1]:
        print(f"sequential design: not calibrated here (it needs 2 × {LOOKS[-1]} runs of one setting; the largest "
              f"setting has {0 if pool.same is None else len(pool.same)}: the reference's `seeds` sweep has 48)")
        return 0 if within else 1
    print("\n".join(["checks on real runs:", *win_coverage(pool.same, args.trials),
                     *sittings_alarms(Path(args.source), max(20, args.trials // 10))]))
    t0 = time.perf_counter()
    design = calibrate_design(pool.same, args.design_trials)
    write_atomic(folder / "sequential.csv", design.to_csv(index=False).encode())
    print("\n".join(design_lines(design)))
    design_fp = Rate.of(int(design.loc[design["case"] == "A/A", "any_different"].sum()),
                        int((design["case"] == "A/A").sum()))
    print(f"{len(design)} sequential trials in {time.perf_counter() - t0:.1f} s; trials → {folder / 'sequential.csv'}")
    return 0 if within and design_fp.low <= ALPHA else 1


def _train_main(args, folder: Path) -> int:
    model, recipe = MODEL, RECIPE
    runs = 2 * args.pairs * args.seeds + args.planted_pairs * args.seeds
    print(f"calibration: {runs} runs of {model.embed_dim}-wide, depth-{model.depth} ViT on digits, "
          f"{recipe.epochs} epochs each, on the CPU (finished runs are kept in {folder / 'runs'}: a rerun "
          f"resumes)", file=sys.stderr)
    result = calibrate(args.pairs, args.seeds, args.planted_pairs, args.label_noise, keep=folder / "runs")
    folder.mkdir(parents=True, exist_ok=True)
    table = pd.concat([result.aa.assign(kind="A/A"), result.planted.assign(kind="planted")], ignore_index=True)
    write_atomic(folder / "calibration.csv", table.to_csv(index=False).encode())
    fp = result.false_positives
    print(f"A/A: {args.pairs} pairs of {args.seeds} vs {args.seeds} seeds of one setting: false positives at "
          f"α = {ALPHA}: {fp.text()}: {fp.against_alpha()}")
    print(f"     accuracy {100 * result.aa['acc_a'].mean():.2f} % (mean over runs); |A − B| median "
          f"{result.aa['diff_pts'].abs().median():.2f} points")
    if result.power is not None:
        print(f"planted: {percent(args.label_noise)} of training labels randomised, {args.planted_pairs} pairs: "
              f"mean cost {result.planted['diff_pts'].mean():.2f} points; detected (p < {ALPHA}, right sign) "
              f"{result.power.text()}")
    print(f"{runs} runs in {result.seconds / 60:.1f} min; pairs → {folder / 'calibration.csv'}")
    return 0 if fp.low <= ALPHA else 1


def run(args) -> int:
    """`python -m ablations calibrate` once its arguments are parsed (`ablations.cli.parser`): 0 when the
    false-positive rate's interval reaches down to α, 1 when it does not. ValueError in one line for bad
    input, before any trial."""
    if not args.train and args.source is None:
        if not CHECKOUT_REFERENCE.is_dir():
            raise ValueError("pass --from OUT (a folder a sweep wrote) or --train: there is no results/reference here")
        args.source = str(CHECKOUT_REFERENCE)
    if args.seeds < MIN_SEEDS:
        raise ValueError(f"--seeds must be ≥ {MIN_SEEDS}: a test needs the spread between seeds")
    for name in ("pairs", "trials", "design_trials"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be ≥ 1")
    if args.planted_pairs < 0 or not 0 < args.label_noise <= 1:
        raise ValueError("--planted-pairs must be ≥ 0 and --label-noise in (0, 1]")
    message = refusal(args.out, args.into_reference)
    if message:
        raise ValueError(message)
    folder = Path(args.out) / "calibrate"
    blocked = next((p for p in (Path(args.out), folder) if p.exists() and not p.is_dir()), None)
    if blocked is not None:   # said before any trial, not as a traceback after them all
        raise ValueError(f"--out {args.out}: {blocked} is a file, and the calibration writes "
                         f"{folder / 'calibration.csv'}; give a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {args.out}: cannot create {folder} ({err.strerror})") from None
    try:
        return _saved_main(args, folder) if args.source else _train_main(args, folder)
    except KeyboardInterrupt as err:   # SIGTERM and SIGHUP arrive as KeyboardInterrupt too (`Interrupted`)
        kept = sum(1 for _ in (folder / "runs").rglob("*.npy")) if args.train else 0
        said = (f": {count(kept, 'run')} finished and kept in {folder / 'runs'}; rerun the same command to resume"
                if args.train else "")
        print(f"\ninterrupted ({err or 'SIGINT'}){said}", file=sys.stderr)
        return getattr(err, "exit_status", 130)
