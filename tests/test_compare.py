"""`python -m ablations compare A B`: two folders of the same sweeps matched run by run, point by point."""

import shutil

import numpy as np
import pandas as pd
import pytest
from helpers import run_sweep

from ablations.__main__ import main
from ablations.analysis.compare import compare_outs
from ablations.results.schema import read_table
from ablations.results.store import SweepPaths, load_preds
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions
from ablations.specs import Point
from bench.training.recipe import TrainConfig
from vit import ViTConfig

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)


@pytest.fixture(scope="module")
def sweep_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("a")
    points = [Point("cmp", "depth", d, TINY.replace(depth=d), TrainConfig(epochs=1, batch_size=128)) for d in (1, 2)]
    run_sweep("cmp", points, RunOptions(dataset="digits", out=str(out), seeds=(0, 1, 2), progress=False,
                                        cost=CostPlan(rounds=0)))
    return out


def test_a_float_field_swept_with_whole_values_names_its_points_as_a_spec_writes_them(tmp_path):
    """mlp_ratio 1 and 2 come back from the table as 1.0 and 2.0; the points are mlp_ratio=1 and 2, as the report's."""
    out = tmp_path / "a"
    points = [Point("mlp", "mlp_ratio", r, TINY.replace(mlp_ratio=float(r)), TrainConfig(epochs=1, batch_size=128))
              for r in (1, 2)]
    run_sweep("mlp", points, RunOptions(dataset="digits", out=str(out), seeds=(0, 1), progress=False,
                                        cost=CostPlan(rounds=0)))
    shutil.copytree(out, tmp_path / "b")
    assert compare_outs(out, tmp_path / "b")["point"].tolist() == ["mlp_ratio=1", "mlp_ratio=2"]


def test_a_folder_against_its_copy_is_the_same_everywhere_and_a_worse_copy_is_called_worse(sweep_out, tmp_path, capsys):
    copy = tmp_path / "b"
    shutil.copytree(sweep_out, copy)
    same = compare_outs(sweep_out, copy)
    assert same["point"].tolist() == ["depth=1", "depth=2"] and (same["seeds"] == 3).all()
    assert (same["diff_pts"] == 0).all() and same[["low_pts", "high_pts"]].isna().all().all()   # no width-0 interval
    assert (same["verdict"] == "identical predictions").all() and (same["family"] == 0).all()   # no interval taken
    assert main(["compare", str(sweep_out), str(copy)]) == 0
    printed = capsys.readouterr().out
    assert "; no point has an interval: see each one's verdict)" in printed and "NaN" not in printed
    assert all(line.split()[-4:-2] == ["—", "—"] for line in printed.splitlines() if "identical predictions" in line)
    assert "family" not in printed   # the header says how many points the intervals hold over (here none)

    # B's depth-1 runs now give another wrong class wherever they were wrong: the same accuracy on the same
    # images, but not the same predictions, so a bounded "same within noise", never ±0
    for run_id in read_table(copy / "ablations" / "cmp.csv").query("depth == 1")["run_id"]:
        path = SweepPaths.of(copy, "cmp").preds / f"{run_id}.npz"
        pred, target = load_preds(path)
        np.savez_compressed(path, pred=np.where(pred == target, pred, (pred + 1 + (pred + 1 == target)) % 10),
                            target=target)
    near = compare_outs(sweep_out, copy).set_index("point")
    assert near.loc["depth=1", "diff_pts"] == 0 and near.loc["depth=1", "verdict"] == "same within noise"
    assert near.loc["depth=1", "low_pts"] < 0 < near.loc["depth=1", "high_pts"]

    # B's depth-2 runs now miss every test image: A is higher there by exactly its own accuracy
    table_path = copy / "ablations" / "cmp.csv"
    rows = read_table(table_path)
    worse = rows["depth"] == 2
    for run_id in rows.loc[worse, "run_id"]:
        path = SweepPaths.of(copy, "cmp").preds / f"{run_id}.npz"
        pred, target = load_preds(path)
        np.savez_compressed(path, pred=(target + 1) % 10, target=target)
    rows.loc[worse, "test_acc"] = 0.0
    rows.to_csv(table_path, index=False)
    table = compare_outs(sweep_out, copy).set_index("point")
    accuracy = read_table(sweep_out / "ablations" / "cmp.csv").groupby("depth")["test_acc"].mean()
    assert table.loc["depth=2", "diff_pts"] == pytest.approx(100 * accuracy[2])
    assert 0 < table.loc["depth=2", "low_pts"] <= table.loc["depth=2", "high_pts"]
    assert table.loc["depth=2", "verdict"] == "A higher" and table.loc["depth=1", "verdict"] == "same within noise"

    assert main(["compare", str(sweep_out), str(copy), "--csv", str(tmp_path / "c.csv")]) == 0
    out = capsys.readouterr().out
    assert "with its interval, 95 % jointly over the 2 distinct points with one: Bonferroni)" in out
    assert f"largest |A − B|: {100 * accuracy[2]:.2f} accuracy points over 2 points of the sweeps" in out
    written = pd.read_csv(tmp_path / "c.csv")
    assert written["verdict"].tolist() == ["same within noise", "A higher"] and (written["family"] == 2).all()
    # the CSV in the printed units: accuracy in % beside differences in points (not a fraction beside points)
    assert written["acc_a"].tolist() == pytest.approx([100 * table.loc[p, "acc_a"] for p in written["point"]])
    assert (written["acc_a"] - written["acc_b"]).tolist() == pytest.approx(written["diff_pts"].tolist())


def test_an_interval_end_just_clear_of_0_is_printed_clear_of_0(sweep_out, tmp_path, monkeypatch, capsys):
    """A point called A higher whose interval starts 0.003 points above 0 prints that end as 0.003, not 0.00; a
    point without an interval prints — for both ends."""
    import ablations.analysis.compare as compare

    table = pd.DataFrame([{"sweep": "cmp", "point": "depth=1", "seeds": 3, "acc_a": 0.9, "acc_b": 0.89,
                           "diff_pts": 1.0, "low_pts": 0.003, "high_pts": 1.997, "verdict": "A higher", "family": 1},
                          {"sweep": "cmp", "point": "depth=2", "seeds": 3, "acc_a": 0.9, "acc_b": 0.9, "diff_pts": 0.0,
                           "low_pts": float("nan"), "high_pts": float("nan"), "verdict": "identical predictions",
                           "family": 1}])
    monkeypatch.setattr(compare, "compare_outs", lambda a, b: table)
    (tmp_path / "ablations").mkdir()
    assert main(["compare", str(sweep_out), str(tmp_path)]) == 0
    lines = {line.split()[1]: line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["cmp"]}
    assert lines["depth=1"][6:8] == ["0.003", "2.00"] and lines["depth=2"][6:8] == ["—", "—"], lines


def test_folders_with_no_run_in_common_are_refused_naming_them(sweep_out, tmp_path, capsys):
    (tmp_path / "bare").mkdir()   # not a folder a sweep wrote: named as such
    assert main(["compare", str(sweep_out), str(tmp_path / "bare")]) == 2
    err = capsys.readouterr().err
    assert f"error: B {tmp_path / 'bare'}: no ablations/ folder of sweep tables there" in err
    (tmp_path / "empty" / "ablations").mkdir(parents=True)   # a sweep's folder, but none of the same runs
    assert main(["compare", str(sweep_out), str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "empty have no finished run in common" in err
    (tmp_path / "link").symlink_to(sweep_out)   # one folder under two names: nothing to compare
    assert main(["compare", str(sweep_out), str(tmp_path / "link")]) == 2
    assert f"error: A and B are one folder ({sweep_out.resolve()})" in capsys.readouterr().err


def test_rows_of_an_older_table_with_blank_recipe_cells_join_their_points(tmp_path):
    """The committed lr and patch-depth tables mix rows that record the whole recipe with rows reused from
    older tables that leave it blank: a blank matches any value, so each point is labelled by its factors
    alone and holds all its seeds."""
    from pathlib import Path

    from ablations.analysis.compare import compare_outs

    reference = Path(__file__).resolve().parents[1] / "results" / "reference"
    copy = tmp_path / "copy" / "ablations"
    for sweep in ("lr", "patch-depth"):
        copy.joinpath("preds").mkdir(parents=True, exist_ok=True)
        shutil.copy(reference / "ablations" / f"{sweep}.csv", copy)
        shutil.copytree(reference / "ablations" / "preds" / sweep, copy / "preds" / sweep)
    table = compare_outs(tmp_path / "copy", reference)
    lr = table[table["sweep"] == "lr"]
    assert sorted(lr["point"]) == sorted(f"lr={v}" for v in (0.0005, 0.001, 0.002, 0.004, 0.008))
    grid = table[table["sweep"] == "patch-depth"]
    assert set(grid["point"]) == {f"patch_size={p}, depth={d}" for p in (7, 14) for d in (1, 2, 4)}
    # both trained under SEEDS=auto: each point holds every seed its table has for it
    for sweep, rows in (("lr", lr), ("patch-depth", grid)):
        mine = pd.read_csv(reference / "ablations" / f"{sweep}.csv")
        mine = mine[mine["status"] == "ok"]
        factors = ["lr"] if sweep == "lr" else ["patch_size", "depth"]
        have = {", ".join(f"{f}={v}" for f, v in zip(factors, key if isinstance(key, tuple) else (key,))):
                n for key, n in mine.groupby(factors)["seed"].nunique().items()}
        assert dict(zip(rows["point"], rows["seeds"])) == have
    assert (table["diff_pts"] == 0).all()


def test_the_intervals_hold_jointly_over_the_distinct_points_compared(sweep_out, tmp_path):
    """Two points compared: each interval at 1 − 0.05 / 2 (Bonferroni), from the paired difference's own
    estimate and degrees of freedom, recomputed here; a point called higher only outside it."""
    from scipy import stats as sps

    from ablations.analysis.stats import paired_difference

    copy = tmp_path / "b"
    shutil.copytree(sweep_out, copy)
    rng = np.random.default_rng(0)
    for run_id in read_table(copy / "ablations" / "cmp.csv")["run_id"]:   # B misses a few images at random
        path = SweepPaths.of(copy, "cmp").preds / f"{run_id}.npz"
        pred, target = load_preds(path)
        wrong = rng.random(len(pred)) < 0.03
        np.savez_compressed(path, pred=np.where(wrong, (target + 1) % 10, pred), target=target)
    table = compare_outs(sweep_out, copy).set_index("point")
    assert (table["family"] == 2).all()
    from ablations.analysis.wording.sections import reference_lines

    assert ("The intervals are simultaneous: 95 % jointly over the 2 distinct points with one (Bonferroni, each at "
            "97.50 %)") in "\n".join(reference_lines(table.reset_index(), copy, 0.5))
    rows = read_table(sweep_out / "ablations" / "cmp.csv")
    for depth in (1, 2):
        ids = rows.loc[rows["depth"] == depth].sort_values("seed")["run_id"]
        mine = [load_preds(SweepPaths.of(sweep_out, "cmp").preds / f"{r}.npz") for r in ids]
        theirs = [load_preds(SweepPaths.of(copy, "cmp").preds / f"{r}.npz") for r in ids]
        c = paired_difference(np.array([p == t for p, t in mine], float), np.array([p == t for p, t in theirs], float))
        half = sps.t.ppf(1 - 0.05 / 4, c.df) * c.se
        row = table.loc[f"depth={depth}"]
        assert row["low_pts"] == pytest.approx(100 * (c.diff - half)) and row["high_pts"] == pytest.approx(100 * (c.diff + half))
        assert row["high_pts"] - row["low_pts"] > 100 * (c.high - c.low)       # wider than one point's own 95 %
        assert row["verdict"] == ("A higher" if row["low_pts"] > 0 else "same within noise")


def _retrained_as(out, copy, train: TrainConfig, on, **columns) -> pd.DataFrame:
    """`out` copied to `copy` as if its `cmp` runs had trained with `train` on device `on`: rows under their own
    run ids and prediction files, with `columns` set."""
    from ablations.results.identity import task_key
    from bench.env import run_id

    shutil.copytree(out, copy)
    rows = read_table(copy / "ablations" / "cmp.csv")
    preds = SweepPaths.of(copy, "cmp").preds
    new_ids = []
    for _, row in rows.iterrows():
        p = Point("cmp", "depth", int(row["depth"]), TINY.replace(depth=int(row["depth"])), train)
        new = run_id(task_key(p, "digits", int(row["seed"]), device=on))
        (preds / f"{row['run_id']}.npz").rename(preds / f"{new}.npz")
        new_ids.append(new)
    rows = rows.assign(run_id=new_ids, **columns)
    rows.to_csv(copy / "ablations" / "cmp.csv", index=False)
    return rows


def test_dtype_auto_names_two_trainings_and_the_reference_comparison_meets_them_by_point(sweep_out, tmp_path):
    """DTYPE=auto trains in bf16 on CUDA and in fp32 on a CPU: two trainings, two run ids (a GPU command on an
    OUT of CPU runs does not take them as its own), while fp32 keeps the id CPU runs always had and an explicit
    DTYPE equal to what auto resolves to names the same run. The comparison of a GPU folder with a CPU one
    still meets the runs point by point and names each side's precision."""
    import torch

    from ablations.results.identity import task_key
    from bench.env import run_id

    point = Point("cmp", "depth", 1, TINY, TrainConfig(epochs=1, batch_size=128))
    bf16 = Point("cmp", "depth", 1, TINY, TrainConfig(epochs=1, batch_size=128, dtype="bf16"))
    fp32 = Point("cmp", "depth", 1, TINY, TrainConfig(epochs=1, batch_size=128, dtype="fp32"))
    ids = {name: run_id(task_key(p, "digits", 0, device=torch.device(device)))
           for name, p, device in (("auto cpu", point, "cpu"), ("auto cuda", point, "cuda"),
                                   ("bf16 cuda", bf16, "cuda"), ("fp32 cpu", fp32, "cpu"), ("fp32 cuda", fp32, "cuda"))}
    assert ids["auto cpu"] != ids["auto cuda"] == ids["bf16 cuda"]
    assert ids["auto cpu"] == ids["fp32 cpu"] == ids["fp32 cuda"]
    table = read_table(sweep_out / "ablations" / "cmp.csv")
    assert ids["auto cpu"] in set(table["run_id"])   # a CPU run's id as it was before (the committed runs keep theirs)

    # the same folder as if trained on a GPU: bf16 rows under their own run ids and prediction files
    gpu = tmp_path / "gpu"
    rows = _retrained_as(sweep_out, gpu, TrainConfig(epochs=1, batch_size=128), torch.device("cuda"), dtype="bf16",
                         device="cuda")
    assert not set(rows["run_id"]) & set(table["run_id"])
    met = compare_outs(gpu, sweep_out)
    assert met["point"].tolist() == ["depth=1", "depth=2"] and (met["seeds"] == 3).all()
    assert (met["verdict"] == "identical predictions").all()
    assert set(met["dtype_a"]) == {"bf16 on cuda"} and set(met["dtype_b"]) == {"fp32 on cpu"}


def test_packed_members_meet_the_runs_trained_alone_point_by_point_and_each_sides_packing_is_named(sweep_out,
                                                                                                 tmp_path, capsys):
    """Packing is how a run was computed, not what it is: a folder whose runs trained packed (their own run ids)
    meets the same points trained alone, names each side's packing, and the reference section says what a
    difference there is."""
    from ablations.analysis import wording

    packed = tmp_path / "packed"
    rows = _retrained_as(sweep_out, packed, TrainConfig(epochs=1, batch_size=128, packed=True, pack_width=3), None,
                         packed=1, pack_width=3, train_util_pct=float("nan"))   # a pack's is no member's own
    assert not set(rows["run_id"]) & set(read_table(sweep_out / "ablations" / "cmp.csv")["run_id"])
    met = compare_outs(packed, sweep_out)
    assert met["point"].tolist() == ["depth=1", "depth=2"] and (met["seeds"] == 3).all()
    assert set(met["packing_a"]) == {"packed 3 wide"} and set(met["packing_b"]) == {"alone"}
    assert set(met["dtype_a"]) == set(met["dtype_b"]) == {"fp32 on cpu"}
    said = " ".join(wording.reference_lines(met, "REF", 0.5))
    assert ("Trained in fp32 on cpu, packed 3 wide here and in fp32 on cpu in the reference: a difference is the "
            "packing's (the same function, other kernels).") in said
    gpu = met.assign(dtype_a="bf16 on cuda")
    assert ("a difference is the device's, the precision's and the packing's (the same function, other kernels) "
            "together.") in " ".join(wording.reference_lines(gpu, "REF", 0.5))
    assert main(["compare", str(packed), str(sweep_out)]) == 0
    out = capsys.readouterr().out
    assert "A train_util_pct not measured (runs that shared the device), B mean train_util_pct " in out
    # a member's time is its pack's, said of the side that packed
    assert "time_a: a packed run's train_time_s is its whole pack's (the pack's members trained at once)\n" in out
    shutil.copytree(sweep_out, tmp_path / "copy")
    assert main(["compare", str(sweep_out), str(tmp_path / "copy")]) == 0
    assert "whole pack's" not in capsys.readouterr().out
    alone = compare_outs(sweep_out, sweep_out)
    assert "Trained in fp32 on cpu here and in fp32 on cpu in the reference." in " ".join(
        wording.reference_lines(alone, "REF", 0.5))


def test_runs_of_another_cpu_model_are_named_as_such_in_the_reference_section_and_by_compare(sweep_out, tmp_path,
                                                                                              capsys):
    """The same code and seeds on an Intel Xeon and on an AMD EPYC gave other predictions at every one of the main
    job's 27 runs: a comparison of two folders whose runs trained on two CPU models names both, and says that a
    difference may be the device model's, where "fp32 on cpu" on both sides said nothing of it."""
    from ablations.analysis import wording

    other = tmp_path / "epyc"
    shutil.copytree(sweep_out, other)
    csv = other / "ablations" / "cmp.csv"
    rows = read_table(csv)
    here = set(rows["device_name"])
    rows.assign(device_name="AMD EPYC").to_csv(csv, index=False)
    met = compare_outs(sweep_out, other)
    assert set(met["device_a"]) == here and set(met["device_b"]) == {"AMD EPYC"} and "AMD EPYC" not in here
    said = " ".join(wording.reference_lines(met, "REF", 0.5))
    assert (f"Trained in fp32 on cpu ({next(iter(here))}) here and in fp32 on cpu (AMD EPYC) in the reference: a "
            f"difference is the device model's (its kernels can sum in another order, so the same seed can train to other "
            f"floats).") in said
    assert main(["compare", str(sweep_out), str(other)]) == 0
    out = capsys.readouterr().out
    assert f"A trained on {next(iter(here))}, B on AMD EPYC: on another device model the same seed can train " \
           f"to other floats\n" in out and "device_a" not in out
    unnamed = met.assign(device_b="")   # a table that recorded no device name: nothing to name
    assert "Trained in fp32 on cpu here and in fp32 on cpu in the reference." in " ".join(
        wording.reference_lines(unnamed, "REF", 0.5))


def test_a_point_whose_predictions_are_gone_shows_its_difference_without_an_interval(sweep_out, tmp_path):
    from ablations.analysis.wording.sections import reference_lines

    copy = tmp_path / "b"
    shutil.copytree(sweep_out, copy)
    shutil.rmtree(SweepPaths.of(copy, "cmp").preds)
    table = compare_outs(sweep_out, copy)
    assert (table["verdict"] == "no predictions to bound it").all() and table["low_pts"].isna().all()
    lines = reference_lines(table, copy, 0.5)
    rows = [line for line in lines if line.startswith("| cmp |")]
    assert len(rows) == 2 and all(row.endswith("| +0.00 | no predictions to bound it |") for row in rows), rows
    assert "nan" not in "\n".join(lines) and not any("What this comparison could see" in line for line in lines)
