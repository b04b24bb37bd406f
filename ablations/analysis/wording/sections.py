"""The rest of a sweep section's lines and the report's other parts: runs line, shared runs, device sharing,
what was held fixed, sittings, tuning, grid interaction, GPU phases, the reference comparison, the Pareto fronts,
what a partial OUT lacks, and the attention backends' bench section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ablations.analysis.compare import differing_devices
from ablations.analysis.designs import Interaction, Tuning, close_pick, label_text, setting_label
from ablations.analysis.findings import (
    CostSource,
)
from ablations.analysis.sittings import SittingCheck
from ablations.analysis.stats import (
    ALPHA,
    Outcome,
)
from ablations.analysis.wording.method import either
from ablations.analysis.wording.verdicts import (
    and_list,
    bound,
    cost_source,
    margin_text,
    pct,
    runs_named,
    seed_ranges,
    setting_name,
)
from ablations.choices import say, with_makefile
from bench.contention import CONTENDED_PCT
from bench.units import macs


def shared_line(factor: str, shared: list[tuple[Any, list[str]]]) -> str:
    """The line naming the other sweeps whose verdicts rest on a verdict's runs (`sittings.shared_settings`);
    '' if none."""
    named = [f"{factor}={value}'s runs are also the {', '.join(others)} "
             f"{'sweeps' if len(others) > 1 else 'sweep'}'{'' if len(others) > 1 else 's'}" for value, others in shared]
    if not named:
        return ""
    return (f"Shared runs: {'; '.join(named)} (same run ids): one set of runs carries a verdict in each, so a "
            f"lucky or unlucky draw of them moves all of those verdicts together.")


def sharing_note(ok: pd.DataFrame, phase: bool) -> list[str]:
    """Training wall times that are not one run's own alone say so: a packed run's (its pack's, PACK) and those
    measured while other runs shared the device (JOBS > 1); `phase`: the sweep has a cost phase (whose figures
    were measured with nothing else running)."""
    said = []

    def of_its(k: int) -> str:   # "3 of its 8 runs", "all 8 of its runs", "its one run"
        return f"{k} of its {len(ok)} runs" if k < len(ok) else "its one run" if k == 1 else f"all {k} of its runs"

    packed = pd.to_numeric(ok["packed"], errors="coerce") == 1 if "packed" in ok else pd.Series(False, ok.index)
    if packed.any():
        runs = of_its(int(packed.sum()))
        member = "a member of a pack" if packed.sum() == 1 else "members of packs"
        said.append(f"{runs[0].upper()}{runs[1:]} trained as {member} (PACK: the seeds of a "
                    f"point as one stacked model): a member's training wall time (`train_time_s`) is its whole pack's, "
                    f"and its training img/s and MFU count its own images over that time")
    jobs = pd.to_numeric(ok["jobs"], errors="coerce") if "jobs" in ok else pd.Series(dtype=float)
    shared = jobs[jobs > 1]
    if not shared.empty:
        what = "runs or packs" if packed.any() else "runs"
        said.append(f"Training wall times (`train_time_s`, `train_util_pct`) of {of_its(len(shared))} "
                    f"were measured with up to {int(shared.max())} {what} sharing the device (JOBS)"
                    + ("; the cost-phase figures were measured alone" if phase else
                       "; no cost phase measured this sweep's speed alone"))
    return [". ".join(said) + ".", ""] if said else []


def reference_lines(table: pd.DataFrame, reference, margin: float) -> list[str]:
    """The reference comparison's heading, what it compares and its table (`compare.compare_outs`' rows: one
    per point both folders trained), with what the comparison could see; `margin`: the equivalence margin in
    points."""
    lines = ["## against the reference", "",
             f"The same points (same model, recipe, data and seed) in `{reference}`, trained there apart from "
             f"these runs; the difference is here − reference, with an "
             f"interval over the common seeds (paired by seed) and the test images, each source counted once "
             f"(one common seed: the test images' alone).", ""]
    if not len(table):
        return lines[:2] + [f"No point here was also trained in `{reference}` (same model, recipe, data and seed): "
                            f"nothing to compare point by point.", ""]
    family = int(table["family"].iloc[0])
    lines[-2] += (f" The intervals are simultaneous: 95 % jointly over the {family} distinct points with one "
                  f"(Bonferroni, each at {100 * (1 - 0.05 / family):.2f} %), so a point is called higher or "
                  f"lower only outside what chance over the whole table allows." if family > 1 else "")
    here_in, there_in = (" + ".join(sorted(set(table[c]))) for c in ("dtype_a", "dtype_b"))
    packs = [" + ".join(sorted(set(table[c]))) if c in table else "alone" for c in ("packing_a", "packing_b")]
    models = differing_devices(table)   # e.g. two CPU models
    whose = (["the device's", "the precision's"] if here_in != there_in else
             ["the device model's (its kernels can sum in another order, so the same seed can train to other floats)"]
             if models else []) + (["the packing's (the same function, other kernels)"] if packs[0] != packs[1] else [])
    here_in, there_in = (f"{trained}{f' ({model})' if model else ''}{'' if pack == 'alone' else f', {pack}'}"
                         for trained, model, pack in zip((here_in, there_in), models or ("", ""), packs))
    lines[-2] += (f" Trained in {here_in} here and in {there_in} in the reference" +
                  (f": a difference is {', '.join(whose[:-1])}{' and ' if len(whose) > 1 else ''}{whose[-1]}"
                   f"{' together' if len(whose) > 1 else ''}." if whose else "."))
    lines += ["| sweep | point | seeds | here % | reference % | here − reference (points) [simultaneous 95 % interval] | |",
              "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        verdict = {"A higher": "higher here", "B higher": "lower here",
                   "identical predictions": "identical"}.get(r.verdict, r.verdict)
        if r.verdict == "same within noise" and -margin <= r.low_pts and r.high_pts <= margin:   # all inside
            verdict = f"equivalent (within ±{round(margin, 2):g})"
        low, high = bound(r.low_pts / 100, True), bound(r.high_pts / 100, True)
        difference = ("0 (same predictions)" if r.verdict == "identical predictions" else f"{r.diff_pts:+.2f}"
                      if r.low_pts != r.low_pts else f"{r.diff_pts:+.2f} [{low}, {high}]")
        lines.append(f"| {r.sweep} | {r.point} | {r.seeds} | {100 * r.acc_a:.2f} | {100 * r.acc_b:.2f} | "
                     f"{difference} | {verdict} |")
    identical = table["verdict"] == "identical predictions"
    if identical.all():
        return lines + ["", f"Every point reproduced the reference bit for bit: the same predicted class on every test "
                            f"image, seed by seed ({len(table)} of {len(table)}).", ""]
    bounded = table[~identical & table["low_pts"].notna()]   # the points with an interval to read
    if bounded.empty:
        return lines + [""]
    half = ((bounded["high_pts"] - bounded["low_pts"]) / 2).median()
    same = (f"{int(identical.sum())} of {len(table)} points reproduced the reference bit for bit (the same predicted "
            f"class on every test image, seed by seed). " if identical.any() else "")
    whose = "the other points'" if same else "its"
    return lines + ["", f"{same}What this comparison could see: the median half-width of {whose} intervals is "
                        f"{half:.2f} points, so "
                        f"\"same within noise\" says no difference of about that size was found, not that the two "
                        f"agree; a point is called equivalent only where its whole interval lies within ±{round(margin, 2):g} "
                        f"points (more common seeds narrow the intervals).", ""]


def not_compared_line(sweep: str, differs: str) -> str:
    """A sweep both folders hold with no run in common; `differs`: what its runs differ in."""
    return f"- {sweep}: no run in common with the reference, whose runs differ in {differs} (here vs reference): not compared."


def pareto_left_out(single: list[str]) -> list[str]:
    return [f"Left out: {', '.join(single)} (one setting each: nothing to trade off).", ""]


def pareto_groups(groups: dict[tuple[str, str], list[str]]) -> list[str]:
    """{(dataset, budget): its sweeps}, more than one group: why each gets its own front."""
    return [f"The sweeps cover {len(groups)} datasets or training budgets ("
            + "; ".join(f"{d}, {b}: {', '.join(sweeps)}" for (d, b), sweeps in groups.items())
            + "): each gets its own front and figure, since accuracies on other test sets or after other "
              "training are not on one scale.", ""]


def pareto_front_lines(group: str, front: pd.DataFrame, factors: dict[str, str], figure: str) -> list[str]:
    """One group's Pareto front of setting means (`report.setting_means` rows) and its figure."""
    return [f"**{group}**: Pareto front of the setting means (no setting is both cheaper and more "
            "accurate on average over its seeds; a front point's lead can be inside the noise, see each sweep's "
            "comparisons): " + ", ".join(
                f"{r.sweep}: {setting_name(r.value, factors[r.sweep])} ({macs(r.gflops)} GFLOPs, {r.acc_mean * 100:.2f} %, "
                f"{r.seeds} seed{'s' if r.seeds != 1 else ''})" for r in front.itertuples()) + ".", "",
            f"![pareto {group}]({figure})", ""]


def runs_line(seeds: list[int], datasets: list[str], test_size: int | None, devices: str) -> str:
    """A sweep section's first line: its seeds (sorted), data, test-set size and devices."""
    test = f"{test_size:,} test images" if test_size else "test-set size not recorded"
    return f"Seed{'s' * (len(seeds) != 1)} {seed_ranges(seeds)}; {', '.join(datasets)}, {test}; device {devices}."


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _percent(share) -> float | None:
    """A share (0–1) as a percentage; None where it is blank."""
    value = _float(share)
    return None if value is None else 100 * value


def or_dash(value, fmt: str) -> str:
    return "—" if value is None or value != value else format(value, fmt)


def phases_lines(shown: list[dict[str, Any]], total: int) -> list[str]:
    """The newest training phases on a GPU (`store.PHASES` rows, as dicts) of `total` recorded."""
    lines = ["Training phases on a GPU (the whole device while a command's runs trained side by side; the newest "
             f"{len(shown)} of {total}):", "",
             "| when | sweeps | runs at once | images | s | busy % | SM active % | tensor cores % | MFU % | W | "
             "J per image (window s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in shown:
        energy = (f"{float(r['energy_j_per_img']):.2g} ({float(r['energy_window_s']):.1f})"
                  if str(r.get("energy_j_per_img") or "") not in ("", "nan") else "—")
        lines.append(f"| {r['when']} | {r['sweeps']} | {r['jobs']} | {int(float(r['images'])):,} | "
                     f"{float(r['wall_s']):.1f} | {or_dash(_float(r.get('util_pct')), '.0f')} | "
                     f"{or_dash(_float(r.get('sm_active_pct')), '.0f')} | "
                     f"{or_dash(_float(r.get('tensor_active_pct')), '.0f')} | "
                     f"{or_dash(_percent(r.get('mfu')), '.2g')} | "
                     f"{or_dash(_float(r.get('power_w')), '.0f')} | {energy} |")
    return lines + ["", "Busy %: the share of NVML's samples wholly inside the phase in which some kernel ran, however "
                        "few SMs it used; SM active and tensor cores: the share of time the SMs had work and any "
                        "tensor core was busy (NVML's GPM, Hopper and newer; — where the GPU has none); MFU: the "
                        "runs' training FLOPs over the phase's time, as a share of the matmul peak measured on the "
                        "device. Power and energy: the GPU's energy counter between two of its ticks at least 1 s "
                        "apart (— where the phase held no such window).", ""]


def tuning_lines(t: Tuning, factor: str, figure_name: str) -> list[str]:
    """The report's account of a tuning: the split, each setting's pick, and any pick at a grid's edge."""
    grid = "; ".join(f"{name} ∈ {{{', '.join(label_text(v) for v in g)}}}" for name, g in zip(t.fields, t.grids))
    size = f"{t.val_size:,} images, " if t.val_size else ""
    drawn = "stratified by class" if t.split == "stratified" else "drawn at random, not stratified by class"
    lines = [f"Tuned: every setting was trained at each {grid} on the training set less a validation split "
             f"({size}{100 * t.holdout:.0f} % of it, {drawn}, the same split for every run), and is compared below "
             f"at the value its mean validation accuracy over seeds picks (never the test set). The test "
             f"accuracies below are those of the runs that made each pick: a seed that did well on validation "
             f"may do well on test too, so they can lean slightly high."
             + (f" Under SEEDS=auto the picks were made at the first look, on seeds {seed_ranges(list(t.picked_on))}; "
                f"only the picks trained more seeds after it." if t.picked_on else ""), "",
             f"| {factor} | picked | validation accuracy % at each value (seeds) |", "|---|---|---|"]
    for c in t.choices:
        picked = ", ".join(f"{n}={label_text(v)}" for n, v in zip(t.fields, c.chosen))
        curve = "; ".join(f"{setting_label(k)}: {pct(acc)} ({c.seeds[k]})" for k, acc in c.curve.items())
        lines.append(f"| {label_text(c.setting)} | {picked} | {curve} |")
    lines.append("")
    edges: dict[tuple, list] = {}   # the settings that picked the same end of a grid, named together
    for c in t.choices:
        for name in c.at_edge:
            edges.setdefault((name, c.chosen[t.fields.index(name)]), []).append(label_text(c.setting))
    for (name, value), settings in edges.items():
        one = len(settings) == 1
        lines.append(f"- **Widen the grid**: {and_list(settings)} picked {name}={label_text(value)}, an end of the "
                     f"grid; a value beyond it may be better, so {'this setting' if one else 'these settings'} may be "
                     f"compared below {'its' if one else 'their'} best.")
    image = 1 / t.val_size if t.val_size else None
    for c in t.choices:
        why = close_pick(c, image)
        if why:
            runner = ", ".join(f"{n}={label_text(v)}" for n, v in zip(t.fields, c.runner_up))
            lines.append(f"- **A close pick**: {label_text(c.setting)} leads {runner} by {100 * c.lead:.2f} points of mean "
                         f"validation accuracy, {why}: another split or another seed could pick the other.")
    if any(c.at_edge for c in t.choices) or any(close_pick(c, image) for c in t.choices):
        lines.append("")
    return lines + [figure_link("tuning", figure_name), ""]


def interaction_lines(it: Interaction) -> list[str]:
    a, b = it.factors
    if it.contrasts is None:
        return [f"**Interaction of {a} and {b}: no test** ({it.reason}).", ""]
    shown = [c for c in it.contrasts if c.p_holm < ALPHA]
    within = margin_text(it.margin)
    a1, b1 = it.levels[0][0], it.levels[1][0]
    table = [f"| {a} | {b} | difference of differences (points) [95 % interval] | Holm p: differ / within {within} "
             f"| verdict |", "|---|---|---|---|---|"]
    for c in it.contrasts:
        (ai, bj) = c.a
        outcome = "interaction" if c.outcome() in (Outcome.BETTER, Outcome.WORSE) else c.outcome()
        table.append(f"| {label_text(ai)} | {label_text(bj)} | {100 * c.diff:+.2f} [{bound(c.low, True)}, "
                     f"{bound(c.high, True)}] | {c.p_holm:.3f} / {c.p_equiv_holm:.3f} | {outcome} |")
    what = (f"each row: ({a}={{a}} − {a}={label_text(a1)}) at {b}={{b}} minus the same at {b}={label_text(b1)}; 0 where the "
            f"effect of {a} does not depend on {b}")
    if shown:
        cells = ", ".join(f"{a}={label_text(c.a[0])} at {b}={label_text(c.a[1])} ({100 * c.diff:+.2f} points)" for c in shown)
        head = (f"**Interaction of {a} and {b} detected** (Holm-adjusted p < {ALPHA}): the effect of {a} depends on "
                f"{b}: {cells}.")
    elif all(c.p_equiv_holm < ALPHA for c in it.contrasts):
        head = (f"**No interaction of {a} and {b} beyond {within}**: every difference of differences is shown "
                f"within {within} (two one-sided tests, Holm-adjusted); read each factor's effect as the same at "
                f"every level of the other, up to that margin.")
    else:
        head = (f"**Interaction of {a} and {b}: inconclusive.** No difference of differences is detected (smallest "
                f"detectable with these seeds and test images ≈ {100 * it.detectable:.1f} points at 80 % power), "
                f"but not every one is shown within {within} either: this does not show that each factor's effect "
                f"is the same at every level of the other.")
    return [head, "", *table, "", f"_{what.format(a='a', b='b')}._", ""]


def figure_link(alt: str, name: str) -> str:
    """A figure under figures/ as Markdown, its file name quoted for a URL (a space or '#' in a sweep's name
    would otherwise break the link)."""
    from urllib.parse import quote

    return f"![{alt}](figures/{quote(name)})"


def held_fixed(fixed: list[tuple[str, Any, bool]]) -> str:
    """The line naming what a sweep held fixed: (field, value, is the dataset's default); value None and True:
    blank cells left to the dataset."""
    said = [f"{name}=the dataset's default" if value is None and dataset_default else
            f"{name}={value}" + (" (the dataset's default)" if dataset_default else "") for name, value, dataset_default in fixed]
    return "Held fixed: " + ", ".join(said) + "."


def sittings_line(check: SittingCheck | None, factor: str) -> str:
    """The report's sentence on a sweep's sittings ('' where its runs come from one)."""
    if check is None:
        return ""
    if check.confounded:
        return (f"Runs from {check.describe()}, each setting's in a sitting of its own: a difference between "
                f"{factor} settings here cannot be told apart from one between sittings.")
    if check.p is None:
        return (f"Runs from {check.describe()}, too few to test whether the sittings differ: the verdicts pool each "
                f"setting's runs from them as alike.")
    if check.differ:
        return (f"**Runs differ by sitting.** These {check.runs} runs come from {check.describe()}; with the "
                f"settings' own differences taken out their accuracy still differs between sittings (F = "
                f"{check.f:.2f}, p = {check.p:.2g}), so runs of one setting trained at different times or places are "
                f"not interchangeable here, and a verdict that pools them can reflect when or where they trained.")
    return (f"Runs from {check.describe()}: no difference between sittings detected with the settings' own "
            f"differences taken out (F = {check.f:.2f}, p = {check.p:.2g}).")


def lacking_lines(absent: list[str], has_pos: bool, has_bench: bool, unread: list[str] = ()) -> list[str]:
    """What a partial OUT lacks and the command that produces each ([] when it lacks nothing), and the bench
    tables it holds that the report does not read (`unread`)."""
    tokens = "`vitbench bench run --tokens 65,197,785 --batch-size 8 --name backends`"
    benches = f"`make bench` and `make bench-tokens`, the latter {tokens}" if with_makefile() else tokens
    lacks = [f"the sweeps {', '.join(absent)} ({either('`make ablate-<name>`', '`vitbench sweep <name>`')} trains "
             f"one)" if absent else "",
             "" if has_pos else f"the attention maps and position similarity (a sweep over pos: "
                                f"{either('`make ablate-pos`', '`vitbench sweep pos`')})",
             "" if has_bench else f"the attention backends' benchmarks "
                                  f"({benches})"]
    lines = [f"Not in this folder: {'; '.join(x for x in lacks if x)}.", ""] if any(lacks) else []
    if unread:
        train = ("; a `train` command's runs are one setting, which no verdict compares: a sweep of your settings "
                 "(a TOML file) gives them a section" if "ablations/train.csv" in unread else "")
        bench = (", and of the bench tables the attention backends' alone (bench/backends.csv, "
                 "bench/pytest-benchmark.csv)" if any(u.startswith("bench/") for u in unread) else "")
        lines += [f"Not read here: {', '.join(unread)}: the command that wrote each printed its own table; the report "
                  f"reads the sweeps' tables{bench}{train}.", ""]
    return lines


def _loaded(rows: pd.DataFrame) -> pd.Series | None:
    """Which rows were taken while other processes held the machine (`contended`); None where none says."""
    if "contended" not in rows or pd.to_numeric(rows["contended"], errors="coerce").isna().all():
        return None
    return pd.to_numeric(rows["contended"], errors="coerce").eq(1)


def _load_said(loaded: pd.Series | None, what: str, then: str) -> str:
    """The load the rows were taken under, in words."""
    if loaded is None:
        return "the machine's load not recorded"
    if not loaded.any():
        return f"other processes took under {CONTENDED_PCT:g} % of the machine throughout"
    return (f"{int(loaded.sum())} of {len(loaded)} {what} taken while other processes took ≥ {CONTENDED_PCT:g} % of "
            f"the machine: {then}")


def bench_lines(suite: Path, steps: pd.DataFrame | None, tokens_csv: Path, bench: pd.DataFrame | None,
                figure: str | None) -> list[str]:
    """The attention backends' section: `make bench`'s ok rows (`steps`, None where `suite` is missing) and
    `make bench-tokens`' ok rows (`bench`, None where `tokens_csv` is missing) with their figure's file name."""
    lines = ["## attention backends (bench)", ""]
    if steps is not None:
        loaded = _loaded(steps)
        lines += [f"`make bench` ({', '.join(sorted(steps['device_name'].astype(str).unique()))}, "
                  f"{', '.join(sorted(steps['dtype'].astype(str).unique()))}; median step over pytest-benchmark's "
                  f"rounds; {_load_said(loaded, 'benchmarks', '†')}):",
                  "", "| tokens | batch | mode | attn | img/s | step ms (IQR) | MFU % |", "|---|---|---|---|---|---|---|"]
        for i, r in steps.sort_values(["tokens", "mode", "attn"]).iterrows():
            mark = " †" if loaded is not None and loaded[i] else ""
            lines.append(f"| {r.tokens} | {r.batch_size} | {r['mode']} | {r.attn} | {r.throughput_img_s:,.1f}{mark} | "
                         f"{r.step_ms_median:.2f} ({r.step_ms_iqr:.2f}) | {or_dash(_percent(r.get('mfu')), '.2g')} |")
        lines.append("")
    else:
        lines += [f"_Missing: `{suite}`; `make bench` (`vitbench bench run`) produces it._", ""]
    if bench is not None:
        tokens = sorted(bench["tokens"].unique())
        devices = ", ".join(sorted(bench["device_name"].astype(str).unique()))
        lines += [f"Against sequence length (`make bench-tokens`; {devices}, "
                  f"{', '.join(sorted(bench['dtype'].astype(str).unique()))}; img/s: median over rounds; "
                  f"{_load_said(_loaded(bench), 'rounds', 'left out of img/s, blank where every one was')}):", "",
                  "| attn | " + " | ".join(f"img/s @ {t} tok" for t in tokens) + " | "
                  + " | ".join(f"peak MB @ {t} tok" for t in tokens) + " |", "|" + "---|" * (1 + 2 * len(tokens))]
        for attn, g in bench.groupby("attn"):
            by_t = g.groupby("tokens")
            rate, mem = by_t["throughput_img_s"].median(), by_t["peak_mem_mb"].median()
            lines.append(f"| {attn} | " + " | ".join(or_dash(rate.get(t), ".2f") for t in tokens) + " | "
                         + " | ".join(or_dash(mem.get(t), ".1f") for t in tokens) + " |")
        lines += ["", figure_link("backends", figure), ""]
    else:
        lines += [f"_Missing: `{tokens_csv}`; `make bench-tokens` (`vitbench bench run --tokens 65,197,785 --batch-size 8 "
                  f"--name backends`) produces it._", ""]
    return lines


def throughput_source(cost: CostSource | None, hosts: str) -> str:
    """Where a grid's training throughput comes from: the cost phase (`cost_source`) or, without one, the runs
    themselves on `hosts`."""
    return f"the training step in the {cost_source(cost)}" if cost else f"the runs' whole-run training throughput on {hosts}"


def grid_caption(source: str) -> str:
    return f"_Accuracy: mean over seeds with its 95 % interval beneath. Training throughput: {source}._"


def report_head(runs: pd.DataFrame, datasets: list[str], span: tuple[Any, Any] | None) -> list[str]:
    """The report's title and, given the runs (rows of every sweep), the devices, torch versions and commits they
    ran on (each with its count of runs where they differ, the most runs first), the datasets and the span of the
    runs' start times."""
    lines = ["# vitbench report", ""]
    if runs.empty:
        return lines + [f"No sweep results yet: run {either('`make ablations`', '`vitbench sweep default`')}.", ""]
    runs = runs.drop_duplicates("run_id") if "run_id" in runs else runs   # a run several sweeps share counts once

    def column(name: str) -> pd.Series:
        return runs[name].fillna("").astype(str).str.strip() if name in runs else pd.Series("", index=runs.index)

    def values(cells: pd.Series) -> str:   # "a", or "a for 545 runs, b for 6"
        counts = cells.value_counts(sort=True)
        if len(counts) == 1:
            return str(counts.index[0])
        return ", ".join(f"{value} for {n}{' runs' if i == 0 else ''}" for i, (value, n) in enumerate(counts.items()))
    named = column("device_name")
    devices = column("device") + (" (" + named + ")").where(named != "", "")   # a table from before the name: kind alone
    shas = column("git_sha").where(column("git_sha") != "", "no git commit recorded (not run from a checkout)")
    commit = values(shas)
    commit = commit if commit.startswith("no git commit") and "," not in commit else f"git {commit}"
    return lines + [f"- ablation runs: device {values(devices)}; torch {values(column('torch_version'))}; {commit}",
                    f"- data: {', '.join(datasets)}; runs from {span[0]} to {span[1]}", ""]


def sweep_heading(sweep: str, label: str) -> list[str]:
    """A sweep section's heading (its spec's description opens the section's first line)."""
    return [f"## {sweep}: {label}", ""]


def missing_table(sweep: str, path: Path) -> list[str]:
    """A sweep whose table cannot be read."""
    return [f"_Missing: `{path}` cannot be read (see Skipped inputs); "
            f"{say(f'`make ablate-{sweep}`', f'`vitbench sweep {sweep}`')} writes it again._", ""]


def failed_lines(factor: str, failed: list[dict[str, Any]], finished: bool = True) -> list[str]:
    """A sweep's failed runs (rows, in the sweep's order), those with the same status and error on one line naming
    their settings and seeds; `finished`: some other run of the sweep finished (its section is above)."""
    groups: dict[tuple[str, str], list[tuple]] = {}
    for r in failed:
        groups.setdefault((r["status"], r["error"]), []).append((r[factor], r["seed"]))
    head = (f"Failed runs ({len(failed)}), not counted above:" if finished else
            ("**No verdict: its one run did not finish.**" if len(failed) == 1 else
             f"**No verdict: none of its {len(failed)} runs finished.**"))
    return [head, "", *(f"- {runs_named(factor, runs)}: **{status}** {error}" for (status, error), runs in groups.items()),
            ""]


def not_built(what: str) -> list[str]:
    """A section that failed on bad input."""
    return [f"_{what} could not be built from its inputs; see Skipped inputs._", ""]


def skipped_lines(notes: list[str]) -> list[str]:
    """The rows and files left out of the report ([] where none was)."""
    if not notes:
        return []
    return ["## Skipped inputs", "", "These rows and files could not be read and were left out of the report:",
            "", *(f"- {note}" for note in notes), ""]


def pareto_heading(placed: bool) -> list[str]:
    """The accuracy-against-compute section's heading (and, with no finished runs to place, that line)."""
    return ["## accuracy against compute", "", *([] if placed else ["_No finished runs to place._", ""])]


def inside_heading() -> list[str]:
    return ["## inside the model", ""]


def needs_pos_sweep(out: Path) -> list[str]:
    """Inside the model, without a sweep over pos."""
    return [f"_Needs a sweep over pos with its weights: `make ablate-pos OUT={out}` produces one._", ""]


def attention_skipped(dataset: str, err: Exception) -> list[str]:
    """The attention maps, where their test images cannot be read."""
    return [f"_Attention maps skipped: they draw four {dataset} test images, and none could "
            f"be read ({err}). Pass DATA_ROOT=<folder> to `make report` (--data-root)._", ""]


def attention_lines(figure: str, reader: str, run: str) -> list[str]:
    """The attention maps and their caption: what the classifier reads (`reader`) attends to, in run `run`."""
    return [figure_link("attention maps", figure), "",
            f"_What the classifier reads ({reader}) attends to over the patches of four test images, per layer (mean "
            f"over heads) and rolled out over the layers (Abnar & Zuidema 2020), on one colour scale; run {run}._", ""]
