"""`make report`: figures and REPORT.md from whatever CSVs exist under the results root. Never trains.

Reads the OUT once (`store.Tables`) and lays out the report: each sweep's section (`section`), the GPU phases, the
accuracy-against-compute fronts, the look inside trained models (`inside`), the attention backends' bench results,
the comparison with a reference folder and the Method; `wording` writes every line. Every sentence with a number in
it is computed from the tables; the same CSVs give the same report.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from ablations.analysis import designs, sittings, wording
from ablations.analysis import figures as figs
from ablations.analysis.answers import Answer
from ablations.analysis.inside import inside_the_model
from ablations.analysis.predictions import load_correct
from ablations.analysis.section import SweepPage, as_analysed, sweep_section
from ablations.analysis.stats import MARGIN, MIN_SEEDS, accuracy_interval
from ablations.choices import RelativeMargin
from ablations.results import seed_design
from ablations.results.experiments import differences
from ablations.results.schema import uncontended
from ablations.results.store import SweepPaths, Tables, failed_rows, ok_rows, sweep_names
from ablations.specs import SPEC_DIR, SpecError, SweepSpec, available_sweeps, load_spec, spec_of_table
from bench.env import allowed_cores
from bench.io.atomic import WriteError, write_atomic
from bench.io.csvio import collecting_skips, read_rows, skipped
from bench.reference import CHECKOUT_REFERENCE
from bench.schema import BENCH_SCHEMA

PHASES_SHOWN = 5


def _phases_section(read: Tables) -> list[str]:
    """The GPU's own figures over the newest training phases of commands run into OUT (`store.PHASES`): runs
    that shared the GPU have no busy share or energy of their own, the phase as a whole has."""
    table = read.phases()
    if table.empty:
        return []
    return wording.phases_lines(table.tail(PHASES_SHOWN).to_dict("records"), len(table))


BENCH_READ = ("pytest-benchmark.csv", "backends.csv")   # `make bench`'s and `make bench-tokens`' tables


def _lacking(out: Path, specs: dict[str, SweepSpec], tables: dict[str, pd.DataFrame]
             ) -> tuple[list[str], bool, bool, list[str]]:
    """(the sweeps with no table here, whether a pos sweep has finished runs, whether bench results exist, one
    line saying what this OUT lacks and one naming the bench tables it does not read): a partial OUT's report
    shows what it has, not a section per absence."""
    absent = [sweep for sweep in specs if sweep not in tables and not SweepPaths.of(out, sweep).rows.exists()]
    has_pos = any(spec.factor == "pos" and name in tables and not ok_rows(tables[name]).empty
                  for name, spec in specs.items())
    has_bench = any((out / "bench" / name).exists() for name in BENCH_READ)
    unread = (["ablations/train.csv"] if SweepPaths.of(out, "train").rows.exists() else []) + \
        sorted(f"bench/{p.name}" for p in (out / "bench").glob("*.csv") if p.name not in BENCH_READ)
    return absent, has_pos, has_bench, wording.lacking_lines(absent, has_pos, has_bench, unread)


def _bench_section(bench_dir: Path, figures: Path) -> list[str]:
    """`make bench` (pytest-benchmark: each backend's forward and training step) and `make bench-tokens`
    (throughput and memory against sequence length)."""
    suite, tokens_csv = bench_dir / "pytest-benchmark.csv", bench_dir / "backends.csv"
    steps = ok_rows(read_rows(suite, BENCH_SCHEMA)) if suite.exists() else None
    bench = _quiet_speeds(ok_rows(read_rows(tokens_csv, BENCH_SCHEMA))) if tokens_csv.exists() else None
    scaling = figs.backend_scaling(bench, figures / "backends.png").name if bench is not None else None
    return wording.bench_lines(suite, steps, tokens_csv, bench, scaling)


def _quiet_speeds(rows: pd.DataFrame) -> pd.DataFrame:
    """`bench run` rows with the speed of those taken while other processes held the machine (`contended`) blanked,
    as `bench run` leaves them out of its own summary; their memory, which load does not move, kept."""
    loaded = ~rows.index.isin(uncontended(rows).index)
    if not loaded.any():
        return rows
    speeds = [c for c in ("throughput_img_s", "step_ms_median", "step_ms_iqr", "util_pct", "mfu") if c in rows]
    out = rows.copy()
    out[speeds] = out[speeds].astype(float)
    out.loc[loaded, speeds] = float("nan")
    return out


REQUIRED = ("run_id", "status", "seed", "started_at", "dataset", "device", "device_name", "torch_version",
            "git_sha", "test_acc", "params", "gmacs", "gflops")


def _read_table(path: Path, table: pd.DataFrame, spec: SweepSpec, read: Tables) -> pd.DataFrame | None:
    """A sweep's standing rows (`table`, as read from `path`) of its newest experiment
    (`ablations.results.experiments`), with each row's setting (`designs.with_settings`), or None (listed
    under Skipped inputs) when the file lacks the report's columns."""
    missing = [c for c in (*REQUIRED, *spec.varied) if c not in table]
    if missing:
        if len(table.columns):
            skipped(f"{path}: no column(s) {', '.join(missing)}; file skipped (not a sweep table of this version?)")
        return None
    table, notes = read.shown(spec.name, spec.varied)
    for note in notes:
        skipped(f"{path}: {note}")
    return designs.with_settings(spec, table)


@dataclass(frozen=True)
class Section:
    """One section of the report: what it is (for a note where it fails), and the call that builds its lines, its
    builder with every argument named (`functools.partial`)."""
    what: str
    build: Callable[[], list[str]]

    def lines(self) -> list[str]:
        """Its lines; one that fails on bad input says so instead of failing the report. A file it cannot write
        (a full disk) fails the report, before REPORT.md and its tables are replaced."""
        try:
            return self.build()
        except WriteError:
            raise
        except Exception as err:
            skipped(f"{self.what}: could not be built ({type(err).__name__}: {str(err)[:200]})")
            return wording.not_built(self.what)


_FORKED: list[Section] = []   # the sections forked workers build: inherited by the fork, never pickled


def _may_fork() -> bool:
    """Whether this process can fork workers safely: on Linux (macOS's system libraries are not safe across a
    fork: Python spawns there), and with no other Python thread running (one could hold a lock the workers would
    then wait on forever; a command that trained in threads before its report builds it here, one section after
    another)."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


def _one_thread() -> None:
    """A forked worker's torch work on one thread: the OpenMP threads of the parent are not in the child, and a
    parallel region there waits for them forever."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _forked(i: int) -> tuple[list[str], list[str]]:
    """Section i of `_FORKED`, built in a forked worker: its lines and the inputs it skipped."""
    with collecting_skips() as notes:
        return _FORKED[i].lines(), notes


def _sections(sections: list[Section]) -> list[list[str]]:
    """Each section's lines (`Section.lines`), in order. Several sections on several cores are built at once in
    forked processes where that is safe (`_may_fork`; each draws its own figures; what they read is what this
    process has read, copied by the fork), their skipped inputs said here in section order, as one process would
    have said them; otherwise, or where a worker dies, one after another here."""
    def shown(lines):   # a bar on a terminal (never in a log or a pipe): the report takes seconds to a minute
        return tqdm(lines, total=len(sections), desc="report: sections", unit="section", leave=False, disable=None)

    def here() -> list[list[str]]:
        return [section.lines() for section in shown(sections)]
    workers = min(len(sections), allowed_cores())
    if workers < 2 or not _may_fork():
        return here()
    global _FORKED
    _FORKED = sections
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_one_thread) as pool:
            built = list(shown(pool.map(_forked, range(len(sections)))))
    except BrokenProcessPool:
        return here()
    finally:
        _FORKED = []
    for _, notes in built:
        for note in notes:
            skipped(note)
    return [lines for lines, _ in built]


REFERENCE = CHECKOUT_REFERENCE


def default_reference(out: Path) -> Path | None:
    """The checkout's reference results, unless `out` is that folder or there is none (an installed package)."""
    if not REFERENCE.is_dir() or Path(out).resolve() == REFERENCE:
        return None
    return REFERENCE


def build_report(out: Path, data_root: str | Path = "data", reference: Path | None = None,
                 margin: float | RelativeMargin = MARGIN) -> Path:
    """Figures and REPORT.md under `out`; `data_root` is read only for the attention maps' test images;
    with `reference` (a folder of reference results), a section compares the runs with it point by point;
    `margin` (a fraction, or a share of each sweep's best setting's error) is the equivalence margin of sweeps whose
    spec sets none.
    A damaged row or file is skipped and listed at the end under "Skipped inputs"."""
    read = Tables(out)   # each table under `out` read once, for every section
    with collecting_skips() as notes:
        lines, found = _report_lines(Path(out), data_root, margin, read, reference)
    lines += wording.skipped_lines(notes)
    if found:   # the method of what was found; a folder with nothing to report is told what to run, and that is all
        lines.append(wording.method(margin))
    path = Path(out) / "REPORT.md"
    write_atomic(path, ("\n".join(lines) + "\n").encode())   # whole or not at all: a killed report tears nothing
    return path


def _specs(out: Path) -> dict[str, SweepSpec]:
    """The shipped sweeps' specs, and for each table under `out` that a spec from elsewhere wrote, the copy
    kept beside it (it wins over a shipped spec of the same name: it is what wrote the table). A table
    with no spec anywhere is listed under Skipped inputs."""
    specs = {name: load_spec(SPEC_DIR / f"{name}.toml") for name in available_sweeps()}
    for name in sweep_names(out):
        paths = SweepPaths.of(out, name)
        source = spec_of_table(paths.spec, name)
        if source == paths.spec:
            try:
                specs[name] = load_spec(paths.spec, check_files=False)
            except SpecError as err:
                skipped(f"{paths.spec}: {err}; the {name} sweep is left out")
                specs.pop(name, None)
        elif source is None and name != "train":
            skipped(f"{paths.rows}: no spec for the {name} sweep (neither {SPEC_DIR / (name + '.toml')} nor "
                    f"{paths.spec}); rerun the sweep from its TOML file to keep a copy beside the table")
    return specs


def _picked_on(read: Tables, sweep: str) -> list[int] | None:
    """The seeds a tuned sweep picks on: its first look's under SEEDS=auto (later looks train the picks
    alone), else all (None)."""
    try:
        design_file = read.design(sweep)
    except ValueError:
        return None   # named under Skipped inputs by the sweep's analysis
    return None if design_file is None else seed_design.first_look_seeds(design_file)


def _tables(out: Path, specs: dict[str, SweepSpec], read: Tables
            ) -> tuple[dict[str, pd.DataFrame], dict[str, designs.Tuning]]:
    """Each sweep's rows as the report shows them (a tuned sweep: its picks), and the tunings."""
    tables, tunings = {}, {}
    for name, spec in specs.items():
        rows = SweepPaths.of(out, name).rows
        if rows.exists():
            table = _read_table(rows, read.rows(name), spec, read)
            if table is not None and spec.tune and not ok_rows(table).empty:
                try:
                    table, tunings[name] = designs.select(spec, table, _picked_on(read, name))
                except ValueError as err:
                    skipped(f"{rows}: {err}; the sweep is left out")
                    table = None
            if table is not None:
                tables[name] = table
    return tables, tunings


def _failed_in_order(spec: SweepSpec, rows: pd.DataFrame) -> list[dict]:
    """A sweep's failed runs (rows) in the sweep's order of settings (those the spec lacks last), then by seed."""
    order = {v: i for i, v in enumerate(dict.fromkeys(designs.setting_order(spec)))}
    failed = failed_rows(rows)
    at = failed[spec.factor].map(lambda v: order.get(v, len(order))) if spec.factor in failed else 0
    return (failed.assign(_at=at, _seed=pd.to_numeric(failed["seed"], errors="coerce"))
            .sort_values(["_at", "_seed"], kind="stable").drop(columns=["_at", "_seed"]).to_dict("records"))


def _answers(shown: dict[str, SweepSpec], pages: dict[str, SweepPage], failed: dict[str, list[dict]]) -> list[Answer]:
    """The findings table's rows in the sweeps' order, each naming the runs its answer does not count; a sweep none
    of whose runs finished has a row that says so."""
    answers = []
    for sweep, spec in shown.items():
        runs = tuple((r[spec.factor], r["seed"], r["status"]) for r in failed.get(sweep, []))
        page = pages.get(sweep)
        if page is not None and page.answer is not None:
            page.answer.failed = runs
            answers.append(page.answer)
        elif page is None and runs:
            answers.append(Answer(sweep, spec.factor, spec.description or spec.label, None,
                                  no_verdict="none finished", failed=runs))
    return answers


def _report_lines(out: Path, data_root: str | Path, margin: float | RelativeMargin, read: Tables,
                  reference: Path | None) -> tuple[list[str], bool]:
    """The report's lines before its skipped inputs and Method, and whether they report anything (a sweep's runs or a
    closing section)."""
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    specs = _specs(out)
    tables, tunings = _tables(out, specs, read)
    all_rows = pd.concat(tables.values(), ignore_index=True) if tables else pd.DataFrame()
    runs = not all_rows.empty
    lines = wording.report_head(all_rows, sorted(all_rows["dataset"].astype(str).unique()) if runs else [],
                                (all_rows["started_at"].min(), all_rows["started_at"].max()) if runs else None)
    if runs:
        lines += Section("training phases on a GPU", partial(_phases_section, read)).lines()
    absent, has_pos, has_bench, lacking = _lacking(out, specs, tables)
    lines += lacking
    shown = {sweep: spec for sweep, spec in specs.items() if sweep not in absent}
    factors = {sweep: spec.factor for sweep, spec in shown.items() if sweep in tables}
    finished = [sweep for sweep in shown if sweep in tables and not ok_rows(tables[sweep]).empty]
    across = _Across.of(read, tables)
    built = _sections([_sweep_section(sweep, shown, tables, tunings, read, figures, margin, across)
                       for sweep in finished]
                      + _closing_sections(out, all_rows, shown, tables, figures, data_root, has_pos, has_bench,
                                          read, reference))
    pages = {sweep: page if isinstance(page, SweepPage) else SweepPage(page) for sweep, page in zip(finished, built)}
    failed = {sweep: _failed_in_order(spec, tables[sweep]) for sweep, spec in shown.items() if sweep in tables}
    lines += wording.findings_table(_answers(shown, pages, failed), pairs=any(page.pairs for page in pages.values()))
    for sweep, spec in shown.items():
        lines += wording.sweep_heading(sweep, spec.label)
        if sweep not in tables:
            lines += wording.missing_table(sweep, SweepPaths.of(out, sweep).rows)
            continue
        lines += pages[sweep].lines if sweep in pages else []
        if failed[sweep]:
            lines += wording.failed_lines(factors[sweep], failed[sweep], finished=sweep in pages)
    _write_csv(out / "verdicts.csv", [row for page in pages.values() for row in page.pairs], wording.PAIR_COLUMNS)
    _write_csv(out / "settings.csv", [row for page in pages.values() for row in page.settings],
               wording.SETTING_COLUMNS)
    closing = [line for section in built[len(finished):] for line in section]
    return lines + closing, runs or bool(closing)


@dataclass(frozen=True)
class _Across:
    """What a sweep's section needs of the others: the sweeps each run was recorded in, and every standing row under
    OUT (the same models trained for longer)."""
    sweeps_of: dict[str, set[str]]
    budgets: pd.DataFrame

    @classmethod
    def of(cls, read: Tables, tables: dict[str, pd.DataFrame]) -> _Across:
        standing = [t for t in (read.standing(name) for name in read.names()) if not t.empty and "run_id" in t]
        return cls(sittings.sweeps_of_runs(tables), pd.concat(standing, ignore_index=True) if standing
                   else pd.DataFrame())


def _sweep_section(sweep: str, specs: dict[str, SweepSpec], tables: dict[str, pd.DataFrame],
                   tunings: dict[str, designs.Tuning], read: Tables, figures: Path, margin: float | RelativeMargin,
                   across: _Across) -> Section:
    """The section of one sweep (`section.sweep_section`) over the rows the report shows of it."""
    return Section(f"the {sweep} sweep's section",
                   partial(sweep_section, specs[sweep], tables[sweep], read, figures, tuning=tunings.get(sweep),
                           margin=margin, sweeps_of=across.sweeps_of, budgets=across.budgets))


def sweep_page(out: Path, sweep: str, margin: float | RelativeMargin = MARGIN) -> SweepPage:
    """One sweep's part of the report alone (its answer, lines, pairs and settings), as `build_report` writes it
    under the sweep's heading; its figure goes to `<out>/figures`, the inputs it skipped to `SkippedInput` warnings."""
    read = Tables(out)
    specs = _specs(out)
    tables, tunings = _tables(out, specs, read)
    figures = Path(out) / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    page = _sweep_section(sweep, specs, tables, tunings, read, figures, margin, _Across.of(read, tables)).build()
    return page if isinstance(page, SweepPage) else SweepPage(page)


def _write_csv(path: Path, rows: list[dict], columns) -> None:
    """The report's machine-readable answers beside REPORT.md (verdicts.csv: every pair; settings.csv: every
    setting), in the columns docs/columns.md defines; none: no file."""
    if not rows:
        path.unlink(missing_ok=True)
        return
    write_atomic(path, pd.DataFrame(rows, columns=list(columns)).to_csv(index=False, float_format="%.6g").encode())


def _closing_sections(out: Path, all_rows: pd.DataFrame, specs: dict[str, SweepSpec],
                      tables: dict[str, pd.DataFrame], figures: Path, data_root: str | Path, has_pos: bool,
                      has_bench: bool, read: Tables, reference: Path | None) -> list[Section]:
    """The sections after the sweeps', in order: the accuracy-against-compute fronts and the look inside the
    models (where runs finished), the backends' bench results, and the comparison of this OUT's tables (`read`)
    with the reference folder (where there is one)."""
    sections: list[Section] = []
    analysed = {sweep: spec for sweep, spec in specs.items() if sweep in tables}
    factors = {sweep: spec.factor for sweep, spec in analysed.items()}
    if not ok_rows(all_rows).empty:
        sections.append(Section("accuracy against compute",
                                partial(_pareto_section, tables, analysed, read, figures=figures, out=out)))
        if has_pos:
            sections.append(Section("inside the model", partial(inside_the_model, out, tables, factors,
                                                                figures=figures, data_root=Path(data_root))))
    if has_bench:
        sections.append(Section("attention backends (bench)",
                                partial(_bench_section, out / "bench", figures=figures)))
    if reference is not None and not ok_rows(all_rows).empty:   # no finished run here: nothing to set beside it
        sections.append(Section("against the reference", partial(_reference_section, mine=read,
                                                                 theirs=Tables(reference))))
    return sections


def _reference_section(mine: Tables, theirs: Tables) -> list[str]:
    """Each point trained both here and in the reference (same run_id: model, recipe, data and seed), with
    the accuracy difference and its paired interval; for a sweep with no such point, what differs. `mine`,
    `theirs`: the tables of this OUT and of the reference folder."""
    from ablations.analysis.compare import compare_outs

    out, reference = mine.out, theirs.out
    try:
        table = compare_outs(out, reference, (mine, theirs))
    except ValueError:
        table = pd.DataFrame(columns=["sweep"])
    lines = wording.reference_lines(table, reference, 100 * MARGIN)
    compared = set(table["sweep"])
    for sweep in sweep_names(out):
        if sweep in compared or not SweepPaths.of(reference, sweep).rows.exists():
            continue
        here, ref = ok_rows(mine.rows(sweep)), ok_rows(theirs.rows(sweep))
        if len(here) and len(ref):
            spec = SPEC_DIR / f"{sweep}.toml"
            factor = load_spec(spec).varied if spec.exists() else ""
            what = differences(here.iloc[-1], ref.iloc[-1], factor) or "the seeds"
            lines.append(wording.not_compared_line(sweep, what))
    return lines + [""]


def setting_means(all_rows: pd.DataFrame, factors: dict[str, str], out: Path | None = None) -> pd.DataFrame:
    """One row per setting of each sweep: its factor value, GFLOPs, mean test accuracy over seeds and
    the accuracy interval the sweep's table gives (seeds and test images from the saved predictions under
    `out`; without them over seeds, or binomial for one seed)."""
    ok = ok_rows(all_rows)
    ok = ok[ok["sweep"].isin(list(factors))]
    found = []
    for sweep, rows in ok.groupby("sweep", sort=False):
        factor = factors[sweep]
        enough = rows.groupby(factor)["seed"].size().min() >= MIN_SEEDS
        correct = (load_correct(rows, factor, SweepPaths.of(out, sweep).preds)[0]
                   if out is not None and enough else None)
        for value, group in rows.groupby(factor, sort=True):   # by value, whatever order the runs finished in
            size = int(group["test_size"].dropna().iloc[0]) if "test_size" in group and group["test_size"].notna().any() else None
            interval = accuracy_interval(group["test_acc"].astype(float), size, correct.get(value) if correct else None)
            epochs = group["epochs"].iloc[0] if "epochs" in group else None
            found.append({"sweep": sweep, "value": value, "gflops": float(group["gflops"].iloc[0]),
                          "seeds": len(group), "acc_mean": interval.mean, "acc_low": interval.low,
                          "acc_high": interval.high, "dataset": _data_name(group.iloc[0]),
                          "budget": (f"{int(epochs)} epoch{'s' * (int(epochs) != 1)}" if pd.notna(epochs)
                                     else "epochs not recorded")})
    return pd.DataFrame(found)


def _data_name(row: pd.Series) -> str:
    """The data a run was scored on, as one front's title: the dataset's name, and for an image folder the
    contents its runs read (`files:` of its data_id), since two folders are two test sets."""
    files = [part for part in str(row.get("data_id") or "").split(",") if part.startswith("files:")]
    return f"{row['dataset']} ({files[0]})" if files else str(row["dataset"])


def _pareto_section(tables: dict[str, pd.DataFrame], specs: dict[str, SweepSpec], read: Tables, figures: Path,
                    out: Path) -> list[str]:
    """One front per dataset (an image folder: per contents) and training budget: accuracies on other test sets,
    or after other training, are not on one scale. The largest group is `pareto.png`, the others `pareto-2.png`,
    … A sweep's settings are over the runs its section analyses (under SEEDS=auto, its design's)."""
    factors = {sweep: spec.factor for sweep, spec in specs.items()}
    analysed = [as_analysed(spec, tables[sweep], read) for sweep, spec in specs.items()]
    settings = setting_means(pd.concat(analysed, ignore_index=True) if analysed else pd.DataFrame(), factors, out)
    lines = wording.pareto_heading(not settings.empty)
    if settings.empty:
        return lines
    single = [name for name, g in settings.groupby("sweep", sort=False) if len(g) == 1]
    if single:   # one setting trades nothing off; its point is drawn by the sweeps that vary it
        settings = settings[~settings["sweep"].isin(single)]
        lines += wording.pareto_left_out(single)
    if settings.empty:
        return lines
    groups = sorted(settings.groupby(["dataset", "budget"], sort=False), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(groups) > 1:
        lines += wording.pareto_groups({key: list(dict.fromkeys(g["sweep"])) for key, g in groups})
    for i, ((dataset, budget), group) in enumerate(groups):
        front = figs.pareto_front(group, "acc_mean")
        path = figures / ("pareto.png" if i == 0 else f"pareto-{i + 1}.png")
        figs.accuracy_vs_gflops(group, path, f"{dataset}, {budget}", factors)
        lines += wording.pareto_front_lines(f"{dataset}, {budget}", front, factors, f"figures/{path.name}")
    return lines
