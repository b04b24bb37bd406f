"""Questions beyond one model field: training and augmentation fields as factors, several factors (grid or
paired) with the interaction test, tuned settings picked on a validation split, rows that record the whole
recipe, and results folders from before the recipe had columns."""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import write_spec
from helpers import run_sweep, write_old_format

from ablations.analysis import designs, report, section, wording
from ablations.analysis.stats import interaction_contrasts
from ablations.results.schema import read_table
from ablations.results.store import SweepPaths, Tables, record, save_preds
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions, RunResult
from ablations.specs import SpecError, load_spec
from bench.training.recipe import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


def options(out, seeds=(0,)):
    return RunOptions(dataset="digits", out=str(out), seeds=seeds, progress=False, cost=CostPlan(rounds=0))


TINY = 'embed_dim = 16\ndepth = 1\nnum_heads = 2\nmlp_ratio = 1.0'


@pytest.mark.parametrize("factor, values, column", [("lr", "[1e-3, 4e-3]", "lr"),
                                                    ("weight_decay", "[0.0, 0.1]", "weight_decay"),
                                                    ("crop_padding", "[0, 2]", "crop_padding"),
                                                    ("flip", "[false, true]", "flip")])
def test_a_training_or_augmentation_field_is_a_factor_and_every_row_records_the_recipe(tmp_path, factor, values, column):
    spec = load_spec(write_spec(tmp_path / f"{factor}.toml", factor, values, TINY, "epochs = 1\nbatch_size = 128"))
    points = spec.points(8, 1, 10)
    assert [getattr(p.train, factor) for p in points] == list(spec.values)
    summary = run_sweep(spec.name, points, options(tmp_path / "out"))
    assert summary.statuses == {"ok": 2}
    rows = read_table(SweepPaths.of(tmp_path / "out", spec.name).rows)
    for point, (_, row) in zip(points, rows.iterrows()):
        for f in dataclasses.fields(TrainConfig):  # every recipe field under its own name
            expected = getattr(point.train, f.name)
            if f.name == "dtype":
                expected = "fp32"
            elif f.name == "compile":
                expected = int(expected)
            elif f.name == "crop_padding" and expected is None:
                expected = 1  # digits' default, as the run applied it
            elif f.name == "flip" and expected is None:
                expected = False
            got = row[f.name]
            assert (got == expected) or (isinstance(expected, float) and got == pytest.approx(expected)), f.name
        assert row["batch_size"] == 128 and row["train_size"] == 1437 and pd.isna(row["val_size"])
    # two settings of a training field that change what is learned give different runs
    assert rows["run_id"].nunique() == 2 and rows["experiment_id"].nunique() == 1


def test_a_value_a_field_refuses_names_the_file_point_and_field(tmp_path):
    with pytest.raises(SpecError, match=r"bad\.toml: point lr=-1\.0: TrainConfig\.lr must be"):
        load_spec(write_spec(tmp_path / "bad.toml", "lr", "[1e-3, -1.0]")).points(8, 1, 10)
    with pytest.raises(SpecError, match=r"fixed\.toml: \[sweep\] factor='num_classes' is not a field a sweep can "
                                        r"vary \(the dataset sets it\)"):
        load_spec(write_spec(tmp_path / "fixed.toml", "num_classes", "[2, 3]"))
    with pytest.raises(SpecError, match=r"crop\.toml: point crop_padding=-1: TrainConfig\.crop_padding must be"):
        load_spec(write_spec(tmp_path / "crop.toml", "crop_padding", "[-1, 1]")).points(8, 1, 10)


def grid_spec(tmp_path, design="grid", extra=""):
    path = tmp_path / f"{design}.toml"
    path.write_text(f'[sweep]\nfactors = ["depth", "lr"]\ndesign = "{design}"\n\n[values]\ndepth = [1, 2]\n'
                    f'lr = [1e-3, 4e-3]\n{extra}\n[model]\npreset = "vit_digits"\n{TINY}\n\n[train]\nepochs = 1\n')
    return load_spec(path)


def test_a_grid_gives_every_combination_once_and_paired_lists_go_together(tmp_path):
    grid = grid_spec(tmp_path).points(8, 1, 10)
    assert [(p.model.depth, p.train.lr) for p in grid] == [(1, 1e-3), (1, 4e-3), (2, 1e-3), (2, 4e-3)]
    assert [p.label for p in grid][1] == "depth=1, lr=0.004" and grid[0].fields == ("depth", "lr")
    paired = grid_spec(tmp_path, "paired").points(8, 1, 10)
    assert [(p.model.depth, p.train.lr) for p in paired] == [(1, 1e-3), (2, 4e-3)]
    with pytest.raises(SpecError, match="paired.*needs lists of one length, got depth: 2, lr: 3"):
        path = tmp_path / "uneven.toml"
        path.write_text('[sweep]\nfactors = ["depth", "lr"]\ndesign = "paired"\n[values]\ndepth = [1, 2]\n'
                        'lr = [1e-3, 2e-3, 4e-3]\n')
        load_spec(path)
    path = tmp_path / "repeats.toml"   # a paired list may repeat a value: the settings are what must differ
    path.write_text('[sweep]\nfactors = ["embed_dim", "depth"]\ndesign = "paired"\n[values]\nembed_dim = [32, 32, 64]\n'
                    'depth = [1, 2, 1]\n[model]\npreset = "vit_digits"\n')
    assert [(p.model.embed_dim, p.model.depth) for p in load_spec(path).points(8, 1, 10)] == [(32, 1), (32, 2), (64, 1)]
    with pytest.raises(SpecError, match="pair the same setting twice"):
        path.write_text('[sweep]\nfactors = ["embed_dim", "depth"]\ndesign = "paired"\n[values]\n'
                        'embed_dim = [32, 32]\ndepth = [1, 1]\n')
        load_spec(path)
    with pytest.raises(SpecError, match="has duplicates"):   # in a grid a repeated value is a repeated setting
        path.write_text('[sweep]\nfactors = ["embed_dim", "depth"]\n[values]\nembed_dim = [32, 32]\ndepth = [1]\n')
        load_spec(path)
    with pytest.raises(SpecError, match=r"\[values\] must give a list for each factor.*missing lr"):
        path = tmp_path / "missing.toml"
        path.write_text('[sweep]\nfactors = ["depth", "lr"]\n[values]\ndepth = [1, 2]\n')
        load_spec(path)
    # a grid sweep trains: every combination once
    summary = run_sweep("grid", grid, options(tmp_path / "out"))
    rows = read_table(SweepPaths.of(tmp_path / "out", "grid").rows)
    assert summary.statuses == {"ok": 4} and rows["run_id"].nunique() == 4
    assert sorted(zip(rows["depth"], rows["lr"])) == [(1, 1e-3), (1, 4e-3), (2, 1e-3), (2, 4e-3)]


# --- the interaction test --------------------------------------------------------------------------

def cell_runs(accuracy: dict, seeds=3, n=3000, seed=0) -> dict:
    """(seeds, n) 0/1 correctness per cell, each seed's images right with the cell's probability."""
    rng = np.random.default_rng(seed)
    return {cell: (rng.random((seeds, n)) < p).astype(float) for cell, p in accuracy.items()}


def test_interaction_contrasts_equal_the_difference_of_differences_and_find_a_planted_one():
    additive = {(a, b): 0.70 + 0.05 * a + 0.08 * b for a in (0, 1, 2) for b in (0, 1)}
    correct = cell_runs(additive)
    found = interaction_contrasts(correct, [0, 1, 2], [0, 1])
    means = {k: v.mean() for k, v in correct.items()}
    for c in found:
        (ai, bj) = c.a
        assert c.diff == pytest.approx(means[(ai, bj)] - means[(0, bj)] - means[(ai, 0)] + means[(0, 0)], abs=1e-12)
    assert len(found) == 2 and all(c.p_holm >= 0.05 for c in found)  # additive: none claimed
    planted = {**additive, (2, 1): additive[(2, 1)] + 0.10}
    found = interaction_contrasts(cell_runs(planted), [0, 1, 2], [0, 1])
    assert found[-1].a == (2, 1) and found[-1].p_holm < 0.05 and 0.06 < found[-1].diff < 0.14
    assert found[0].p_holm >= 0.05
    with pytest.raises(ValueError, match="every cell of a grid"):
        interaction_contrasts({k: v for k, v in planted.items() if k != (1, 1)}, [0, 1, 2], [0, 1])


def write_grid_results(out: Path, spec, accuracy: dict, seeds=(0, 1, 2), n=2000) -> pd.DataFrame:
    """A results folder of the grid sweep `spec` whose runs have these cell accuracies (rows and predictions)."""
    paths = SweepPaths.of(out, spec.name)
    rng = np.random.default_rng(1)
    target = np.zeros(n, dtype=np.int32)
    for i, point in enumerate(spec.points(8, 1, 10)):
        for s in seeds:
            correct = rng.random(n) < accuracy[(point.model.depth, point.train.lr)]
            pred = np.where(correct, 0, 1)
            run_id = f"{i:06x}{s:06x}"
            row = {"run_id": run_id, "status": "ok", "seed": s, "started_at": "2026-11-23T10:00:00+00:00",
                   "dataset": "digits", "device": "cpu", "device_name": "test CPU", "torch_version": "2", "git_sha": "",
                   "test_acc": correct.mean(), "params": 1000 * point.model.depth, "gmacs": 0.001 * point.model.depth,
                   "gflops": 0.002 * point.model.depth, "test_size": n, "train_time_s": 1.0 + s,
                   "train_throughput_img_s": 500.0 / point.model.depth, "sweep": spec.name,
                   **point.model.to_dict(), **point.train.to_dict(), "dtype": "fp32", "compile": 0}
            record(RunResult(row, [], None, save_preds(pred, target)), paths)
    return read_table(paths.rows)


@pytest.mark.parametrize("planted, margin, claimed", [(0.0, 0.005, "inconclusive"), (0.0, 0.08, "within"),
                                                     (0.12, 0.005, "detected")])
def test_the_report_draws_a_grid_and_states_its_interaction_only_when_there_is_one(tmp_path, planted, margin, claimed):
    spec = grid_spec(tmp_path)
    accuracy = {(d, lr): 0.70 + 0.05 * (d - 1) + (0.08 if lr > 2e-3 else 0.0) for d in (1, 2) for lr in (1e-3, 4e-3)}
    accuracy[(2, 4e-3)] += planted
    rows = designs.with_settings(spec, write_grid_results(tmp_path / "out", spec, accuracy))
    assert set(rows[spec.factor]) == {"1 × 0.001", "1 × 0.004", "2 × 0.001", "2 × 0.004"}
    figures = tmp_path / "out" / "figures"
    figures.mkdir()
    lines = "\n".join(section.sweep_section(spec, rows, Tables(tmp_path / "out"), figures,
                                             margin=margin).lines)
    assert (figures / "grid-grid.png").exists() and "![grid grid](figures/grid-grid.png)" in lines
    assert "Training throughput: the runs' whole-run training throughput on cpu (test CPU)._" in lines   # where measured
    if claimed == "detected":
        assert "**Interaction of depth and lr detected**" in lines and "depth=2 at lr=0.004" in lines
    elif claimed == "within":   # a wide margin: the contrasts (s.e. about 1.5 points) are shown inside it
        assert "**No interaction of depth and lr beyond ±8 points**" in lines and "detected**" not in lines
    else:                       # no interaction planted, but ±0.5 points is more than 3 seeds can show
        assert "**Interaction of depth and lr: inconclusive.**" in lines and "detected**" not in lines
        assert "this does not show that each factor's effect is the same" in lines


# --- tuned comparisons -----------------------------------------------------------------------------

def tuned_rows(spec, val: dict, test: dict) -> pd.DataFrame:
    found = []
    for i, point in enumerate(spec.points(8, 1, 10)):
        key = (point.value, point.train.lr)
        for s in (0, 1, 2):
            found.append({"run_id": f"{i:06x}{s:06x}", "status": "ok", "seed": s, "norm": point.value,
                          "lr": point.train.lr, "val_acc": val[key] + 0.001 * s, "test_acc": test[key],
                          "val_size": 144})
    return pd.DataFrame(found)


def test_tuning_picks_by_validation_accuracy_never_test_accuracy_and_warns_at_the_grid_edge(tmp_path):
    path = tmp_path / "tuned.toml"
    path.write_text('[sweep]\nfactor = "norm"\nvalues = ["pre", "post"]\n[tune]\nlr = [1e-3, 2e-3, 4e-3]\n'
                    'holdout = 0.1\n[model]\npreset = "vit_digits"\n[train]\nepochs = 1\n')
    spec = load_spec(path)
    points = spec.points(8, 1, 10)
    assert len(points) == 6 and all(p.train.holdout == 0.1 and p.train.holdout_seed == 0 for p in points)
    assert [dict(p.tuned)["lr"] for p in points] == [1e-3, 2e-3, 4e-3] * 2
    # pre: validation prefers 2e-3, the test set would prefer 4e-3; post: validation prefers 4e-3 (the edge)
    val = {("pre", 1e-3): 0.90, ("pre", 2e-3): 0.95, ("pre", 4e-3): 0.91,
           ("post", 1e-3): 0.80, ("post", 2e-3): 0.85, ("post", 4e-3): 0.88}
    test = {("pre", 1e-3): 0.90, ("pre", 2e-3): 0.92, ("pre", 4e-3): 0.97,
            ("post", 1e-3): 0.80, ("post", 2e-3): 0.90, ("post", 4e-3): 0.86}
    kept, tuning = designs.select(spec, tuned_rows(spec, val, test))
    picks = {c.setting: c.chosen for c in tuning.choices}
    assert picks == {"pre": (2e-3,), "post": (4e-3,)}
    assert sorted(kept.groupby("norm")["lr"].unique().map(tuple).items()) == [("post", (4e-3,)), ("pre", (2e-3,))]
    assert len(kept) == 6 and tuning.val_size == 144
    text = "\n".join(wording.tuning_lines(tuning, spec.factor, "x.png"))
    assert "**Widen the grid**: post picked lr=0.004, an end of the grid; a value beyond it may be better, so this " \
           "setting may be compared below its best." in text and "pre picked" not in text
    both = {**val, ("pre", 4e-3): 0.96}   # both at the same end: one line names them together
    grouped = "\n".join(wording.tuning_lines(designs.select(spec, tuned_rows(spec, both, test))[1], spec.factor, "x"))
    assert grouped.count("**Widen the grid**") == 1 and "**Widen the grid**: pre and post picked lr=0.004, an end " \
        "of the grid; a value beyond it may be better, so these settings may be compared below their best." in grouped
    assert "| pre | lr=0.002 |" in text and "144 images, 10 % of it, drawn at random" in text
    assert "those of the runs that made each pick" in text and "A close pick" not in text
    # post leads its runner-up by 0.3 points: under one image per seed of 144 (0.69 points)
    val[("post", 2e-3)] = 0.877
    _, tuning = designs.select(spec, tuned_rows(spec, val, test).assign(holdout_split="stratified"))
    text = "\n".join(wording.tuning_lines(tuning, spec.factor, "x.png"))
    assert "**A close pick**: post leads lr=0.002 by 0.30 points" in text and "stratified by class" in text
    assert "less than one validation image per seed (0.69 points)" in text
    rows = tuned_rows(spec, val, test).assign(val_acc=np.nan)
    with pytest.raises(ValueError, match="no validation accuracy"):
        designs.select(spec, rows)
    # pre leads its runner-up by 3 points of mean, but its seeds swing by ±4: under 2 s.e. of the lead
    rows = tuned_rows(spec, val, test)
    swing = (rows["norm"] == "pre") & (rows["lr"] == 2e-3)
    rows.loc[swing, "val_acc"] = [0.91, 0.95, 0.99]
    _, tuning = designs.select(spec, rows)
    pre = next(c for c in tuning.choices if c.setting == "pre")
    per_seed = np.array([0.91, 0.95, 0.99]) - (0.91 + 0.001 * np.arange(3))   # against lr=0.004, paired by seed
    assert pre.lead_se == pytest.approx(per_seed.std(ddof=1) / np.sqrt(3))
    text = "\n".join(wording.tuning_lines(tuning, spec.factor, "x.png"))
    assert (f"**A close pick**: pre leads lr=0.004 by {100 * pre.lead:.2f} points of mean validation accuracy, under 2 "
            f"standard errors of that lead over seeds ({200 * pre.lead_se:.2f} points)") in text


def test_a_validation_split_is_held_out_of_training_the_same_for_every_seed(tmp_path):
    spec_path = tmp_path / "t.toml"
    spec_path.write_text('[sweep]\nfactor = "depth"\nvalues = [1]\n[tune]\nlr = [1e-3, 4e-3]\nholdout = 0.2\n'
                         '[model]\npreset = "vit_digits"\nembed_dim = 16\nnum_heads = 2\nmlp_ratio = 1.0\n'
                         '[train]\nepochs = 1\nbatch_size = 128\n')
    spec = load_spec(spec_path)
    run_sweep(spec.name, spec.points(8, 1, 10), options(tmp_path / "out", seeds=(0, 1)))
    rows = read_table(SweepPaths.of(tmp_path / "out", "t").rows)
    assert (rows["train_size"] == 1437 - 287).all() and (rows["val_size"] == 287).all()
    assert rows["val_acc"].between(0, 1).all() and (rows["holdout"] == 0.2).all()
    history = read_table(SweepPaths.of(tmp_path / "out", "t").history)
    assert history["val_acc"].notna().all()
    # with no tuning asked for nothing changes: the same run ids as a recipe without the new fields
    plain = load_spec(write_spec(tmp_path / "plain.toml", "depth", "[1]")).points(8, 1, 10)[0]
    assert "holdout" not in plain.train.identity() and "crop_padding" not in plain.train.identity()
    assert "holdout_split" not in plain.train.identity()


def test_the_validation_split_is_stratified_by_class_and_a_random_split_keeps_its_older_run_id():
    from ablations.training.data import cached_dataset, recipe_data

    data = cached_dataset("digits")
    stratified, (_, val_y) = recipe_data(data, TrainConfig(holdout=0.2))
    share = torch.bincount(data.train_y) / len(data.train_y)
    assert (torch.bincount(val_y) - share * len(val_y)).abs().max() <= 1     # each class in its share
    assert len(val_y) == round(0.2 * len(data.train_y)) == len(data.train_y) - len(stratified.train_y)
    _, (_, random_y) = recipe_data(data, TrainConfig(holdout=0.2, holdout_split="random"))
    assert (torch.bincount(random_y) - share * len(random_y)).abs().max() > 1  # a random draw is not
    # a random split is what runs drew before the field existed: their identity (and run id) is unchanged
    older = TrainConfig(holdout=0.2, holdout_split="random").identity()
    assert "holdout_split" not in older and older["holdout"] == 0.2
    assert TrainConfig(holdout=0.2).identity() == {**older, "holdout_split": "stratified"}
    with pytest.raises(ValueError, match="holdout_split='x' is unknown"):
        TrainConfig(holdout=0.2, holdout_split="x")


def later(table) -> str:
    """A start time after every row of `table`: a row appended now is the newest, whenever the table was trained."""
    newest = pd.to_datetime(table["started_at"], utc=True).max()
    return (newest + pd.Timedelta(hours=1)).isoformat()


# --- results folders from before the recipe columns -------------------------------------------------

def test_an_old_results_folder_is_read_appended_to_and_reported(tmp_path):
    out = tmp_path / "old"
    source = ROOT / "results" / "reference" / "ablations"   # one sweep of the committed results: its files
    shutil.copytree(source / "preds" / "depth", out / "ablations" / "preds" / "depth")
    for table in source.glob("depth-*.csv"):
        shutil.copy(table, out / "ablations" / table.name)
    write_old_format(source / "depth.csv", out / "ablations" / "depth.csv")   # the format before recipe columns
    paths = SweepPaths.of(out, "depth")
    header = paths.rows.read_text().splitlines()[0].split(",")
    assert "mode" in header and "infer_batch_size" not in header  # the old format
    old = read_table(paths.rows)
    assert (old["infer_batch_size"] == 256).all() and old["batch_size"].isna().all()
    # append a row of today's format: the header grows, the old rows keep their cells
    new = old.iloc[0].to_dict()
    new.update(run_id="abcdef012345", seed=7, started_at=later(old), batch_size=64,
               infer_batch_size=256, weight_decay=0.05, grad_clip=1.0, val_acc=None, mode=None)
    target = np.load(paths.preds / f"{old.iloc[0]['run_id']}.npz")["target"]
    record(RunResult(new, [], None, save_preds(target, target)), paths)
    both = read_table(paths.rows)
    assert len(both) == len(old) + 1 and both.iloc[-1]["batch_size"] == 64 and both.iloc[0]["infer_batch_size"] == 256
    assert "infer_batch_size" in paths.rows.read_text().splitlines()[0]
    text = report.build_report(out, reference=None).read_text()
    assert "## depth: depth (blocks)" in text and "another experiment" not in text.split("## depth")[1].split("##")[0]


def test_tensorboard_events_read_back_equal_the_history_rows(tmp_path):
    EventAccumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator").EventAccumulator

    from ablations.results import tensorboard

    path = write_spec(tmp_path / "tb.toml", "depth", "[1]", TINY, "epochs = 3\nbatch_size = 256")
    path.write_text(path.read_text() + "\n[tune]\nlr = [2e-3]\nholdout = 0.1\n")   # a split: validation curves too
    spec = load_spec(path)
    run_sweep("tb", spec.points(8, 1, 10), dataclasses.replace(options(tmp_path / "out"), tensorboard=True))
    paths = SweepPaths.of(tmp_path / "out", "tb")
    row, history = read_table(paths.rows).iloc[0], read_table(paths.history)
    where = tmp_path / "out" / "tensorboard" / "tb" / f"depth=1,lr=0.002,seed=0,{row['run_id']}"   # legend: setting, seed
    assert tensorboard.written(tmp_path / "out", "tb", row["run_id"]) == [where]
    events = EventAccumulator(str(where)).Reload()
    for column, tag in tensorboard.SCALARS.items():
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        assert got == [(int(h["epoch"]), pytest.approx(float(h[column]), rel=1e-6)) for _, h in history.iterrows()], tag
    assert len(history) == 3 and history["val_acc"].notna().all()
    from ablations.options import RUN  # the help names the folder as it is written

    help_text = next(o for o in RUN if o.flag == "--tensorboard").help
    assert "<out>/tensorboard/<sweep>/<setting>,seed=<seed>,<run_id>/" in help_text


def test_an_unwritable_event_folder_stops_the_sweep_before_any_run(tmp_path):
    pytest.importorskip("tensorboard")
    from ablations.results.store import SweepError

    spec = load_spec(write_spec(tmp_path / "tb.toml", "depth", "[1]", TINY, "epochs = 1\nbatch_size = 256"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "tensorboard").write_text("a file where the event folder goes\n")   # unwritable, even for root
    with pytest.raises(SweepError, match="TENSORBOARD=1: cannot write"):
        run_sweep("tb", spec.points(8, 1, 10), dataclasses.replace(options(out), tensorboard=True))
    assert not SweepPaths.of(out, "tb").rows.exists()


def test_a_rerun_with_tensorboard_writes_the_events_of_runs_finished_without_them(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from ablations.results import tensorboard

    spec = load_spec(write_spec(tmp_path / "tb.toml", "depth", "[1, 2]", TINY, "epochs = 1\nbatch_size = 256"))
    out = tmp_path / "out"
    run_sweep("tb", spec.points(8, 1, 10), options(out))                        # finished, no events
    rows = read_table(SweepPaths.of(out, "tb").rows)
    assert not (out / "tensorboard").exists()
    again = run_sweep("tb", spec.points(8, 1, 10), dataclasses.replace(options(out), tensorboard=True))
    assert again.skipped == 2                                                # nothing trained again
    for run_id, depth in zip(rows["run_id"], rows["depth"]):
        (where,) = tensorboard.written(out, "tb", run_id)
        assert where.name == f"depth={depth},seed=0,{run_id}" and any(where.glob("events.out.tfevents.*")), run_id
    from ablations.cli.outcome import summary

    capsys.readouterr()
    summary([again], "Done.")   # the closing summary names the folder beside the weights and predictions
    assert f"tensorboard → {out / 'tensorboard' / 'tb'}/" in capsys.readouterr().out


def test_tensorboard_without_the_package_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    from ablations.__main__ import main
    from ablations.results import tensorboard

    monkeypatch.setattr(tensorboard, "available", lambda: tensorboard.INSTALL)
    assert main(["sweep", "depth", "--dataset", "digits", "--out", str(tmp_path), "--tensorboard"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tensorboard.INSTALL}"] and not (tmp_path / "ablations").exists()


def test_wall_times_of_runs_that_got_too_little_cpu_are_not_compared():
    from ablations.analysis.findings import CostSource, Setting, SweepFindings
    from ablations.analysis.stats import accuracy_interval
    from ablations.analysis.wording import cost_sentence
    from bench.rounds import Spread

    def setting(value, times, starved):
        return Setting(value, [0, 1, 2], accuracy_interval([0.97, 0.98, 0.975], 1000), 1000, 0.003,
                       Spread.of(times), starved=starved)
    fast, slow = setting("pre", [40.0, 41.0, 42.0], 0), setting("post", [20.0, 20.5, 21.0], 0)
    sentence = cost_sentence(SweepFindings("norm", [fast, slow], 1000, CostSource(3), None, None))
    assert "wall time of a training run ×0.50" in sentence  # 20.5 s against 41 s
    fast.starved = 2
    sentence = cost_sentence(SweepFindings("norm", [fast, slow], 1000, CostSource(3), None, None))
    assert "wall time of a training run not compared (2 of these runs got too little CPU" in sentence


def test_a_run_is_starved_when_busy_well_under_its_share_of_the_cores():
    from ablations.results.experiments import starved

    row = {"status": "ok", "device": "cpu", "train_util_pct": 65.0, "jobs": 1}
    assert starved(row) and not starved({**row, "train_util_pct": 99.0})
    assert not starved({**row, "jobs": 2, "train_util_pct": 40.0}) and starved({**row, "jobs": 2, "train_util_pct": 30.0})
    assert starved({**row, "jobs": float("nan")}) and not starved({**row, "device": "cuda"})
    # a row with util_cores measured against its threads' cores: one thread of two cores under Ray (no jobs)
    ray = {"status": "ok", "device": "cpu", "train_util_pct": 98.0, "jobs": float("nan"), "util_cores": 1}
    assert not starved(ray) and starved({**ray, "train_util_pct": 40.0})
    assert starved({**ray, "jobs": 2, "util_cores": 1, "train_util_pct": 48.0})  # half its one core: starved


def test_the_report_keeps_latency_percentiles_and_energy_where_the_cost_phase_measured_them():
    """settings.csv carries each setting's step-latency percentiles and energy per image where the cost phase
    measured them, blank where it did not (never a 0 from a counter that did not move)."""
    from ablations.analysis.findings import CostSource, Setting, SweepFindings
    from ablations.analysis.stats import accuracy_interval
    from ablations.analysis.wording import setting_rows_csv
    from bench.rounds import Spread

    def setting(value, p99):
        infer = {} if p99 is None else {"step_ms_p50": Spread.of([1.0, 1.2]), "step_ms_p90": Spread.of([2.0]),
                                        "step_ms_p99": Spread.of([p99]), "energy_j_per_img": Spread.of([0.0042])}
        return Setting(value, [0], accuracy_interval([0.9], 1000), 10, 0.1, Spread.of([5.0]), infer=infer)
    rows = setting_rows_csv(SweepFindings("depth", [setting(1, 3.5), setting(2, None)], 1000, CostSource(3), None,
                                          None), "depth")
    measured, blank = rows
    assert (measured["infer_step_ms_p50"], measured["infer_step_ms_p90"], measured["infer_step_ms_p99"]) == \
        pytest.approx((1.1, 2.0, 3.5)) and measured["infer_j_per_img"] == pytest.approx(0.0042)
    assert blank["infer_step_ms_p99"] is None and blank["infer_j_per_img"] is None and measured["train_j_per_img"] is None


def test_rows_from_before_a_model_field_existed_are_the_same_experiment_as_new_rows_at_its_default(tmp_path):
    """A table written before `attn_dropout` and `qkv_bias` had columns (their cells blank), then a seed appended
    by today's code: every row is one experiment (a blank reads as the default, as the run id did), the report
    keeps them all, and the runner does not warn about another experiment."""
    out = tmp_path / "old"
    source = ROOT / "results" / "reference" / "ablations"
    shutil.copytree(source / "preds" / "depth", out / "ablations" / "preds" / "depth")
    table = read_table(source / "depth.csv")
    table = table[table["seed"] < 3].drop(columns=["attn_dropout", "qkv_bias"])
    paths = SweepPaths.of(out, "depth")
    table.to_csv(paths.rows, index=False)
    new = {k: None if isinstance(v, float) and v != v else v for k, v in table.iloc[0].to_dict().items()}  # a row: no NaN
    new.update(run_id="abcdef012345", seed=7, started_at=later(table), attn_dropout=0.0, qkv_bias=True)
    target = np.load(paths.preds / f"{table.iloc[0]['run_id']}.npz")["target"]
    record(RunResult(new, [], None, save_preds(target, target)), paths)
    from ablations.results.experiments import newest_experiment

    kept, notes = newest_experiment(read_table(paths.rows), ("depth",))
    assert len(kept) == len(table) + 1 and notes == []
    text = report.build_report(out, reference=None).read_text()
    assert "another experiment" not in text.split("## depth")[1].split("\n## ")[0]
    moved = table.assign(epochs=3)
    moved.to_csv(paths.rows, index=False)
    record(RunResult(new, [], None, save_preds(target, target)), paths)
    kept, notes = newest_experiment(read_table(paths.rows), ("depth",))
    assert len(kept) == 1 and notes == [f"{len(table)} runs of another experiment (epochs 3 vs 20) left out: a table "
                                        f"is reported as one experiment, the newest; use another OUT to keep both"]


def test_runs_whose_validation_split_was_drawn_before_the_split_was_recorded_are_named_by_that_split(tmp_path):
    """The committed reference's norm-tuned table with 18 of its tuning runs written as before `holdout_split`
    existed (the cell blank: the random draw, which their ids leave out) and trained earlier than the rest. The
    note names the field that differs and what each side drew, not a bare 'the training recipe'."""
    from ablations.results.experiments import latest_rows, newest_experiment
    from ablations.specs import find_spec, load_spec

    spec = load_spec(find_spec("norm-tuned"))
    table = latest_rows(read_table(ROOT / "results" / "reference" / "ablations" / "norm-tuned.csv"))
    table = table[table["holdout_split"] == "stratified"].reset_index(drop=True)
    older = table.index < 18
    table.loc[older, "holdout_split"] = None
    table.loc[older, "started_at"] = "2026-01-01T00:00:00+00:00"
    table.to_csv(tmp_path / "norm-tuned.csv", index=False)
    kept, notes = newest_experiment(read_table(tmp_path / "norm-tuned.csv"), spec.varied)
    assert len(kept) == len(table) - 18 and (kept["holdout_split"] == "stratified").all()
    assert notes == ["18 runs of another experiment (holdout_split random vs stratified) left "
                                         "out: a table is reported as one experiment, the newest; use another OUT "
                                         "to keep both"]
