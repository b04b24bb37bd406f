"""`make report`: figures and REPORT.md from whatever CSVs exist under the results root. Never trains.

Every sentence with a number in it is computed from the tables; the same CSVs give the same report.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablations.analysis import designs, findings, sittings, wording
from ablations.analysis import figures as figs
from ablations.analysis.budget import (
    below_longer_budget,
    still_learning,
)
from ablations.analysis.stats import MARGIN, MIN_SEEDS, accuracy_interval
from ablations.choices import AUGMENTATION, default_augmentation, say
from ablations.results import seed_design
from ablations.results.experiments import differences, latest_rows, newest_experiment
from ablations.results.schema import DEFAULT_WHEN_BLANK
from ablations.results.store import SweepPaths, Tables, ok_rows, sweep_names
from ablations.specs import SPEC_DIR, SpecError, SweepSpec, available_sweeps, load_spec, spec_of_table
from bench.io.csvio import collecting_skips, read_rows, skipped
from bench.reference import CHECKOUT_REFERENCE
from bench.schema import BENCH_SCHEMA
from bench.training.recipe import TrainConfig
from vit.config import ViTConfig
from vit.names import POSITION_DIM_MULTIPLE


def _order(spec: SweepSpec, rows: pd.DataFrame) -> list:
    """The sweep's settings in the spec's order (settings the spec lacks go last, sorted)."""
    present = list(rows.loc[rows["status"] == "ok", spec.factor].unique())
    order = [v for v in dict.fromkeys(designs.setting_order(spec)) if v in present]
    return order + sorted(v for v in present if v not in order)


def _held_fixed(rows: pd.DataFrame, spec: SweepSpec) -> list[tuple[str, Any, bool]]:
    """What the sweep held fixed, as (field, value, is the dataset's default): every model field, the dataset,
    epochs and lr, any other training field set away from its default (a spec's [train] or --set), and the
    augmentation, each with one value across the sweep's ok runs. An augmentation value None: blank cells
    without a dataset default to fill them."""
    ok = ok_rows(rows)
    recipe = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    fields = [f.name for f in dataclasses.fields(ViTConfig)] + ["dataset", "epochs", "lr"]
    fields += [name for name in recipe if name not in (*fields, *DEFAULT_WHEN_BLANK) and name in ok
               and ok[name].nunique(dropna=False) == 1 and not _is_default(ok[name].iloc[0], recipe[name])]
    fixed: list[tuple[str, Any, bool]] = [(name, ok[name].iloc[0], False) for name in fields
                                          if name not in spec.varied and name in ok and ok[name].nunique(dropna=False) == 1]
    for name in DEFAULT_WHEN_BLANK:
        if name in spec.varied:
            continue
        values = ok[name] if name in ok else pd.Series([None] * len(ok), dtype=object)
        default = _augmentation_default(ok, name)   # a blank cell (older rows) is the dataset's default
        values = values.map(lambda v, d=default: d if (v is None or v != v or v == "") and d is not None else v)
        if values.nunique(dropna=False) == 1:
            value = values.iloc[0]
            if pd.isna(value) or value == "":
                fixed.append((name, None, True))
            else:
                shown = int(value) if name == "crop_padding" else bool(value) if isinstance(value, (bool, np.bool_)) \
                    else value
                fixed.append((name, shown, default is not None and str(shown) == str(default)))
    return fixed


def _augmentation_default(ok: pd.DataFrame, name: str):
    """The dataset's own value of an augmentation field for these runs (one dataset, one image size), or None."""
    datasets = ok["dataset"].dropna().astype(str).unique() if "dataset" in ok else []
    sides = pd.to_numeric(ok["img_size"], errors="coerce").dropna().unique() if "img_size" in ok else []
    if len(datasets) != 1 or len(sides) != 1 or datasets[0] not in (*AUGMENTATION, "imagefolder"):
        return None
    return default_augmentation(datasets[0], int(sides[0]))[name]


def _is_default(value, default) -> bool:
    """A table cell equal to a TrainConfig default (blank cells are the default; 1 and 1.0, "True" and True agree)."""
    if value is None or (isinstance(value, float) and value != value) or value == "":
        return True
    if isinstance(default, bool):
        return str(value).strip().lower() in (("1", "1.0", "true") if default else ("0", "0.0", "false"))
    try:
        return float(value) == float(default)
    except (TypeError, ValueError):
        return str(value) == str(default)


def _inside_the_model(out: Path, tables: dict[str, pd.DataFrame], factors: dict[str, str], figures: Path,
                      data_root: Path) -> list[str]:
    """Position-embedding similarity and attention maps from the saved weights of the first sweep over
    `pos` (one run per encoding)."""
    lines = ["## inside the model", ""]
    sweep = next((s for s, factor in factors.items() if factor == "pos" and (tables[s]["status"] == "ok").any()), None)
    if sweep is None:
        return lines + [f"_Needs a sweep over pos with its weights: `make ablate-pos OUT={out}` produces one._", ""]
    ok = ok_rows(tables[sweep])
    models = {}
    for name in (pos for pos in POSITION_DIM_MULTIPLE if pos != "none"):   # the encodings with a table to draw
        match = ok[ok["pos"] == name]
        if len(match):
            model = _trained_model(match.iloc[0], SweepPaths.of(out, sweep))
            if model is not None:
                models[name] = model
    if models:
        encodings = {name: model.pos_embed.weight[0].detach() for name, model in models.items()}
        grid = next(iter(models.values())).cfg.grid_size
        sim = figs.position_similarity(encodings, grid, figures / "position-similarity.png")
        lines += [f"![position similarity](figures/{sim.name})", ""]
    if "learned" in models:
        row = ok[ok["pos"] == "learned"].iloc[0]
        # torch loads only here, where a figure draws a trained model
        from ablations.training.data import load_dataset
        from vit import POOLINGS

        try:
            data = load_dataset(str(row["dataset"]), data_root)
        except (FileNotFoundError, ValueError, RuntimeError) as err:
            return lines + [f"_Attention maps skipped: they draw four {row['dataset']} test images, and none could "
                            f"be read ({err}). Pass DATA_ROOT=<folder> to `make report` (--data-root)._", ""]
        from ablations.analysis.predict import Loaded, attention_figure, predict

        loaded = Loaded(models["learned"].eval(), f"{row['run_id']} (pos=learned, seed {row['seed']}, "
                                                  f"{row['dataset']})", tuple(data.mean), tuple(data.std))
        images = data.test_x[:4]
        probs, attns = predict(loaded, images)
        labels = [f"test image {i} (label {int(data.test_y[i])})" for i in range(len(images))]
        maps = attention_figure(loaded, images, attns, probs, labels, figures / "attention.png")
        lines += [f"![attention maps](figures/{maps.name})", "",
                  f"_What the classifier reads ({POOLINGS[loaded.model.cfg.pool].reader}) attends to over the "
                  f"patches of four test images, per layer (mean over heads) and rolled out over the layers "
                  f"(Abnar & Zuidema 2020), on one colour scale; run {loaded.name}._", ""]
    return lines


def _trained_model(row: pd.Series, paths: SweepPaths):
    """The run's saved weights in its model (`vit.VisionTransformer`), or None (a damaged file is listed under
    Skipped inputs)."""
    path = paths.weights_file(str(row["run_id"]))
    if not path.exists():
        return None
    import torch

    from vit import VisionTransformer

    try:
        model = VisionTransformer(ViTConfig.from_row(row))
        model.load_state_dict(torch.load(path, weights_only=True))
    except Exception as err:
        skipped(f"{path}: weights unreadable or not this run's model ({type(err).__name__}); figures drawn without it")
        return None
    return model


def _sweep_section(spec: SweepSpec, rows: pd.DataFrame, read: Tables, figures: Path,
                   tuning: designs.Tuning | None = None, margin: float = MARGIN,
                   sweeps_of: dict[str, set[str]] | None = None, budgets: pd.DataFrame | None = None) -> list[str]:
    """`read`: the OUT's record; `budgets`: every standing row under it, for runs of the same models trained
    for more epochs."""
    sweep, factor, order = spec.name, spec.factor, _order(spec, rows)
    paths, phase = read.paths(sweep), read.cost_phase(sweep)
    f, rows, design_note = findings.analyse_sweep(rows, factor, order, paths, phase, spec.margin or margin, read)
    margin = f.margin
    ok = ok_rows(rows)
    seeds = sorted({int(s) for s in ok["seed"]})
    devices = ", ".join(f"{d} ({n})" for d, n in ok.groupby(["device", "device_name"]).size().index)
    fig = figures / f"{sweep}.png"
    history = read.history(sweep) if paths.history.exists() else None
    classes = int(pd.to_numeric(ok["num_classes"], errors="coerce").max()) if "num_classes" in ok and \
        pd.to_numeric(ok["num_classes"], errors="coerce").notna().any() else None
    convergence = still_learning(history if history is not None else pd.DataFrame(), ok["run_id"].astype(str), classes,
                                 below_longer_budget(ok, budgets if budgets is not None else pd.DataFrame(), factor))
    learning = wording.not_converged(convergence) if convergence else ""
    shown = findings.setting_rows(f)
    if len(f.settings) == 1 and isinstance(factor, str):   # one setting: its runs' spread, not six one-point panels
        one = f.settings[0]
        figs.seed_spread(ok.loc[ok[factor] == one.value, "test_acc"].astype(float).tolist(), one.acc, fig,
                         f"{sweep}: {factor}={one.value} over {len(one.seeds)} seeds on {devices}"
                         + (" (not converged)" if learning else ""))
    else:
        figs.sweep_figure(shown, fig, spec.label, device=devices, note="not converged" if learning else "")
    lines = [wording.runs_line(seeds, sorted(ok["dataset"].astype(str).unique()), f.test_size, devices), "",
             *(_tuning_lines(spec, tuning, figures) if tuning else []),
             wording.unconverged_headline(wording.verdict_sentence(f)) if learning else wording.verdict_sentence(f), "",
             *([learning, ""] if learning else []), *([design_note, ""] if design_note else []),
             *([sitting, ""] if (sitting := wording.sittings_line(sittings.check_sittings(ok, factor), factor)) else []),
             *([shared, ""] if (shared := wording.shared_line(factor, sittings.shared_settings(sweep, factor, f.verdict, ok,
                                                                                sweeps_of or {}))) else []),
             *([wording.cost_sentence(f), ""] if len(f.settings) > 1 else []),
             *wording.sharing_note(ok, phase is not None), wording.held_fixed(_held_fixed(rows, spec)),
             "", wording.table_markdown(f), ""]
    components = wording.components_markdown(f)
    if components:
        lines += [components, ""]
    if spec.design == "grid" and len(spec.factors) == 2:
        lines += _grid_lines(spec, f, ok, paths, figures, devices, margin)
    if f.comparisons:
        lines += [wording.pairs_heading(f, bool(spec.margin)), "", wording.comparisons_markdown(f), ""]
    lines += [f"![{sweep}](figures/{fig.name})", "", wording.figure_caption(f, spec.label, devices, shown), ""]
    if history is not None:
        curves = figs.learning_curves(history, rows, factor, figures / f"{sweep}-curves.png", order, sweep=sweep)
        lines += [f"![{sweep} learning curves](figures/{curves.name})", ""]
    return lines


def _tuning_lines(spec: SweepSpec, tuning: designs.Tuning, figures: Path) -> list[str]:
    curves = {c.setting: c.curve for c in tuning.choices}
    picks = {c.setting: c.chosen for c in tuning.choices}
    fig = figs.tuning_curves(curves, picks, ", ".join(tuning.fields), figures / f"{spec.name}-tuning.png",
                             f"{spec.name}: validation accuracy against {', '.join(tuning.fields)} (ring: the pick)")
    return wording.tuning_lines(tuning, spec.factor, fig.name)


def _grid_lines(spec: SweepSpec, f: findings.SweepFindings, ok: pd.DataFrame, paths: SweepPaths, figures: Path,
                devices: str, margin: float = MARGIN) -> list[str]:
    """A two-factor grid's heat maps (accuracy with its interval, GMACs, training throughput) and its
    interaction test."""
    a, b = spec.factors
    cells = []
    for s in f.settings:
        runs = ok[ok[spec.factor] == s.value]
        step = s.train.get("throughput_img_s")
        cells.append({a: runs[a].iloc[0], b: runs[b].iloc[0], "acc_mean": s.acc.mean, "acc_low": s.acc.low,
                      "acc_high": s.acc.high, "gmacs": s.gmacs,
                      "train_img_s": step.median if step else float(runs["train_throughput_img_s"].median())})
    phase = all(s.train.get("throughput_img_s") for s in f.settings)
    hosts = ", ".join(f"{h} ({n})" for h, n in ok.groupby(["host", "device_name"]).size().index) \
        if "host" in ok and ok["host"].notna().all() else devices
    source = wording.throughput_source(f.cost if phase else None, hosts)
    fig = figs.grid_heatmaps(pd.DataFrame(cells), a, b, figures / f"{spec.name}-grid.png",
                             f"{spec.label} on {devices}: each cell's mean over seeds", throughput_from=source)
    it = designs.interaction(spec, ok, paths.preds, margin)
    return [f"![{spec.name} grid](figures/{fig.name})", "",
            wording.grid_caption(source), "",
            *wording.interaction_lines(it)]


PHASES_SHOWN = 5


def _phases_section(read: Tables) -> list[str]:
    """The GPU's own figures over the newest training phases of commands run into OUT (`store.PHASES`): runs
    that shared the GPU have no busy share or energy of their own, the phase as a whole has."""
    table = read.phases()
    if table.empty:
        return []
    return wording.phases_lines(table.tail(PHASES_SHOWN).to_dict("records"), len(table))


def _lacking(out: Path, specs: dict[str, SweepSpec], tables: dict[str, pd.DataFrame]
             ) -> tuple[list[str], bool, bool, list[str]]:
    """(the sweeps with no table here, whether a pos sweep has finished runs, whether bench results exist, one
    line saying what this OUT lacks): a partial OUT's report shows what it has, not a section per absence."""
    absent = [sweep for sweep in specs if sweep not in tables and not SweepPaths.of(out, sweep).rows.exists()]
    has_pos = any(spec.factor == "pos" and name in tables and (tables[name]["status"] == "ok").any()
                  for name, spec in specs.items())
    has_bench = any((out / "bench" / name).exists() for name in ("pytest-benchmark.csv", "backends.csv"))
    return absent, has_pos, has_bench, wording.lacking_lines(absent, has_pos, has_bench)


def _bench_section(bench_dir: Path, figures: Path) -> list[str]:
    """`make bench` (pytest-benchmark: each backend's forward and training step) and `make bench-tokens`
    (throughput and memory against sequence length)."""
    suite, tokens_csv = bench_dir / "pytest-benchmark.csv", bench_dir / "backends.csv"
    steps = ok_rows(read_rows(suite, BENCH_SCHEMA)) if suite.exists() else None
    bench = read_rows(tokens_csv, BENCH_SCHEMA) if tokens_csv.exists() else None
    scaling = figs.backend_scaling(bench, figures / "backends.png").name if bench is not None else None
    return wording.bench_lines(suite, steps, tokens_csv, None if bench is None else ok_rows(bench), scaling)


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
    try:
        design_file = read.design(spec.name)
    except ValueError:
        design_file = None   # named under Skipped inputs by the sweep's analysis
    table, notes = newest_experiment(latest_rows(table), spec.varied, prefer=(design_file or {}).get("experiment"))
    for note in notes:
        skipped(f"{path}: {note}")
    return designs.with_settings(spec, table)


def _guarded(what: str, build, *args) -> list[str]:
    """A section of the report; one that fails on bad input says so instead of failing the report."""
    try:
        return build(*args)
    except Exception as err:
        skipped(f"{what}: could not be built ({type(err).__name__}: {str(err)[:200]})")
        return [f"_{what} could not be built from its inputs; see Skipped inputs._", ""]


REFERENCE = CHECKOUT_REFERENCE


def default_reference(out: Path) -> Path | None:
    """The checkout's reference results, unless `out` is that folder or there is none (an installed package)."""
    if not REFERENCE.is_dir() or Path(out).resolve() == REFERENCE:
        return None
    return REFERENCE


def build_report(out: Path, data_root: str | Path = "data", reference: Path | None = None,
                 margin: float = MARGIN) -> Path:
    """Figures and REPORT.md under `out`; `data_root` is read only for the attention maps' test images;
    with `reference` (a folder of reference results), a section compares the runs with it point by point;
    `margin` (a fraction) is the equivalence margin of sweeps whose spec sets none.
    A damaged row or file is skipped and listed at the end under "Skipped inputs"."""
    read = Tables(out)   # each table under `out` read once, for every section
    with collecting_skips() as notes:
        lines = _report_lines(Path(out), data_root, margin, read)
        if reference is not None:
            lines += _guarded("against the reference", _reference_section, read, Tables(reference))
    if notes:
        lines += ["## Skipped inputs", "", "These rows and files could not be read and were left out of the report:",
                  ""] + [f"- {note}" for note in notes] + [""]
    lines.append(wording.method(margin))
    path = Path(out) / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
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
            if table is not None and spec.tune and (table["status"] == "ok").any():
                try:
                    table, tunings[name] = designs.select(spec, table, _picked_on(read, name))
                except ValueError as err:
                    skipped(f"{rows}: {err}; the sweep is left out")
                    table = None
            if table is not None:
                tables[name] = table
    return tables, tunings


def _report_lines(out: Path, data_root: str | Path, margin: float, read: Tables) -> list[str]:
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    specs = _specs(out)
    tables, tunings = _tables(out, specs, read)
    all_rows = pd.concat(tables.values(), ignore_index=True) if tables else pd.DataFrame()
    lines = ["# vitbench report", ""]
    if all_rows.empty:
        lines += ["No ablation results yet: run `make ablations` or a `make ablate-*` target.", ""]
    else:
        newest = all_rows.sort_values("started_at").iloc[-1]
        lines += [f"- ablation runs: device {newest.device} ({newest.device_name}); torch {newest.torch_version}; "
                  f"git {newest.git_sha}",
                  f"- data: {', '.join(sorted(all_rows['dataset'].astype(str).unique()))}; runs from "
                  f"{all_rows['started_at'].min()} to {all_rows['started_at'].max()}", ""]
        lines += _guarded("training phases on a GPU", _phases_section, read)
    factors: dict[str, str] = {}
    absent, has_pos, has_bench, lacking = _lacking(out, specs, tables)
    lines += lacking
    sweeps_of = sittings.sweeps_of_runs(tables)
    standing = [read.standing(name) for name in read.names()]
    budgets = pd.concat([t for t in standing if not t.empty and "run_id" in t], ignore_index=True) \
        if any(not t.empty and "run_id" in t for t in standing) else pd.DataFrame()
    for sweep, spec in specs.items():
        if sweep in absent:
            continue
        lines.append(f"## {sweep}: {spec.label}")
        if spec.description:
            lines += ["", f"_{spec.description}_"]
        lines.append("")
        if sweep not in tables:
            lines += [f"_Missing: `{SweepPaths.of(out, sweep).rows}` cannot be read (see Skipped inputs); "
                      f"{say(f'`make ablate-{sweep}`', f'`vitbench sweep {sweep}`')} writes it again._", ""]
            continue
        rows = tables[sweep]
        factor = factors[sweep] = spec.factor
        failed = rows[rows["status"] != "ok"]
        if (rows["status"] == "ok").any():
            lines += _guarded(f"the {sweep} sweep's section", _sweep_section, spec, rows, read,
                              figures, tunings.get(sweep), margin, sweeps_of, budgets)
        if len(failed):
            lines.append(f"Failed runs ({len(failed)}), not counted above:")
            for _, r in failed.iterrows():
                lines.append(f"- {factor}={r[factor]} seed {r['seed']}: **{r['status']}** {r['error']}")
            lines.append("")
    if not all_rows.empty and (all_rows["status"] == "ok").any():
        lines += _guarded("accuracy against compute", _pareto_section, all_rows, factors, figures, out)
        if has_pos:
            lines += _guarded("inside the model", _inside_the_model, out, tables, factors, figures, Path(data_root))
    if has_bench:
        lines += _guarded("attention backends (bench)", _bench_section, out / "bench", figures)
    return lines


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
    ok = all_rows[(all_rows["status"] == "ok") & all_rows["sweep"].isin(list(factors))]
    found = []
    for sweep, rows in ok.groupby("sweep", sort=False):
        factor = factors[sweep]
        enough = rows.groupby(factor)["seed"].size().min() >= MIN_SEEDS
        correct = (findings.load_correct(rows, factor, SweepPaths.of(out, sweep).preds)[0]
                   if out is not None and enough else None)
        for value, group in rows.groupby(factor, sort=False):
            size = int(group["test_size"].dropna().iloc[0]) if "test_size" in group and group["test_size"].notna().any() else None
            interval = accuracy_interval(group["test_acc"].astype(float), size, correct.get(value) if correct else None)
            epochs = group["epochs"].iloc[0] if "epochs" in group else None
            found.append({"sweep": sweep, "value": value, "gflops": float(group["gflops"].iloc[0]),
                          "seeds": len(group), "acc_mean": interval.mean, "acc_low": interval.low,
                          "acc_high": interval.high, "dataset": str(group["dataset"].iloc[0]),
                          "budget": f"{int(epochs)} epochs" if pd.notna(epochs) else "epochs not recorded"})
    return pd.DataFrame(found)


def _pareto_section(all_rows: pd.DataFrame, factors: dict[str, str], figures: Path, out: Path) -> list[str]:
    """One front per dataset and training budget: accuracies on other test sets, or after other training,
    are not on one scale. The largest group is `pareto.png`, the others `pareto-2.png`, …"""
    settings = setting_means(all_rows, factors, out)
    lines = ["## accuracy against compute", ""]
    if settings.empty:
        return lines + ["_No finished runs to place._", ""]
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
