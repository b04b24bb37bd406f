"""python -m ablations predict: a run trained here, on a PNG and a JPEG written here. The probabilities
equal the model's softmax recomputed by hand from the pixels; each bad input is one line, exit 2."""

import shutil

import numpy as np
import pytest
import torch
from conftest import write_spec
from helpers import run_sweep
from PIL import Image

import ablations.__main__ as cli
from ablations.analysis.calibrate import MODEL, RECIPE
from ablations.results.schema import read_table
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions
from ablations.specs import Point
from ablations.training.data import cached_dataset
from bench.io.csvio import append_row
from vit import VisionTransformer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("predict")
    run_sweep("depth", [Point("depth", "depth", 1, MODEL, RECIPE)],
              RunOptions(dataset="digits", out=str(out), seeds=(0,), progress=False, cost=CostPlan(rounds=0)))
    row = read_table(out / "ablations" / "depth.csv").iloc[0]
    data = cached_dataset("digits")
    png, jpg = out / "seven.png", out / "three.jpg"
    pixels = [data.test_x[int((data.test_y == c).nonzero()[0])][0].numpy() for c in (7, 3)]
    Image.fromarray((pixels[0] * 255).round().astype(np.uint8), mode="L").save(png)
    Image.fromarray((pixels[1] * 255).round().astype(np.uint8), mode="L").convert("RGB").resize((32, 32)).save(jpg)
    return out, str(row["run_id"]), png, jpg


def by_hand(out, run_id, path):
    """The model's softmax for an image, recomputed from the file with PIL, numpy and the weights."""
    data = cached_dataset("digits")
    with Image.open(path) as image:
        array = np.asarray(image.convert("L").resize((8, 8), Image.Resampling.BILINEAR), dtype=np.float32) / 255
    x = (torch.from_numpy(array)[None, None] - data.mean[0]) / data.std[0]
    model = VisionTransformer(MODEL)
    model.load_state_dict(torch.load(out / "ablations" / "weights" / "depth" / f"{run_id}.pt", weights_only=True))
    with torch.no_grad():
        return model.eval()(x).softmax(-1)[0]


def test_predict_prints_the_top_5_of_the_models_own_softmax_and_draws_the_attention(trained, capsys):
    out, run_id, png, jpg = trained
    figure = out / "attention.png"
    assert cli.main(["predict", str(png), str(jpg), "--run", run_id[:6], "--out", str(out), "--figure", str(figure)]) == 0
    text = capsys.readouterr().out
    assert f"{run_id} (depth sweep, seed 0, digits, test acc" in text
    lines = [line.split() for line in text.splitlines() if line.split()[:1] in (["seven.png"], ["three.jpg"])]
    assert len(lines) == 10
    for name, path in (("seven.png", png), ("three.jpg", jpg)):
        rows = [(int(c), float(p)) for image, rank, c, p in lines if image == name]
        expected = by_hand(out, run_id, path)
        top = expected.topk(5)
        assert [c for c, _ in rows] == top.indices.tolist()
        assert [p for _, p in rows] == pytest.approx(top.values.tolist(), abs=5e-5)
        assert sum(p for _, p in rows) <= 1 + 1e-4
    assert figure.stat().st_size > 10_000


def test_images_of_one_name_are_told_apart_by_their_folders_and_the_figure_keeps_a_readable_height(trained, capsys):
    """Two files named x.png (an image folder's class folders) are a/x.png and b/x.png in the table and the
    figure; of more images than the figure holds, it draws the first and says so, the table lists them all."""
    from ablations.analysis.predict import FIGURE_IMAGES, image_labels

    out, run_id, png, _ = trained
    assert image_labels([png.parent / "a" / "x.png", png.parent / "b" / "x.png", png, png]) == [
        "a/x.png", "b/x.png", "seven.png", "seven.png"]
    assert image_labels([png.parent / "c" / "a" / "x.png", png.parent / "d" / "a" / "x.png"]) == ["c/a/x.png",
                                                                                                  "d/a/x.png"]
    for folder in "ab":
        (out / folder).mkdir(exist_ok=True)
        Image.open(png).save(out / folder / "x.png")
    many = [out / "a" / "x.png", out / "b" / "x.png"] + [png] * FIGURE_IMAGES
    figure = out / "many.png"
    assert cli.main(["predict", *map(str, many), "--run", run_id, "--out", str(out), "--figure", str(figure)]) == 0
    text = capsys.readouterr().out
    rows = [line.split()[0] for line in text.splitlines() if line.split()[1:2] == ["1"]]
    assert rows[:2] == ["a/x.png", "b/x.png"] and len(rows) == len(many)
    assert f"attention → {figure} (the first {FIGURE_IMAGES} of {len(many)} images)" in text
    with Image.open(figure) as drawn:
        assert drawn.height < 110 * (2.1 * FIGURE_IMAGES + 1.5)   # dpi × inches: 12 rows, not 14


def test_a_folder_stands_for_the_images_under_it_in_sorted_order(trained, tmp_path, capsys):
    """`predict FOLDER` predicts what naming its image files (its subfolders' too) one by one predicts; other files
    are left out."""
    out, run_id, png, jpg = trained
    folder = tmp_path / "images"
    (folder / "b").mkdir(parents=True)
    shutil.copy(png, folder / "b" / "seven.png")
    shutil.copy(jpg, folder / "three.jpg")
    (folder / "README.txt").write_text("not an image")
    files = [folder / "b" / "seven.png", folder / "three.jpg"]
    tables = []
    for args in ([str(folder)], list(map(str, files))):
        assert cli.main(["predict", *args, "--run", run_id, "--out", str(out), "--figure", str(tmp_path / "f.png")]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1] and "seven.png" in tables[0] and "README" not in tables[0]


@pytest.mark.parametrize("case,message", [
    ("missing", "no such image file or folder"), ("unreadable", "not an image Pillow can read"),
    ("empty folder", "a folder with no image files in it"),
    ("unknown run", "no finished run with that id"), ("two runs", "matches 2 runs"),
    ("neither", "give --run RUN_ID"), ("weights without preset", "--weights needs --preset"),
    ("unwritable figure", "; pass --figure PATH")])
def test_predict_bad_inputs_are_one_line_errors(trained, tmp_path, capsys, case, message):
    out, run_id, png, _ = trained
    image, run = str(png), ["--run", run_id[:6]]
    if case == "missing":
        image = str(tmp_path / "nope.png")
    elif case == "empty folder":   # a file Pillow has no suffix for is not an image
        (tmp_path / "empty" / "sub").mkdir(parents=True)
        (tmp_path / "empty" / "sub" / "notes.txt").write_text("")
        image = str(tmp_path / "empty")
    elif case == "unreadable":
        (tmp_path / "text.png").write_text("not a picture")
        image = str(tmp_path / "text.png")
    elif case == "unknown run":
        run = ["--run", "ffffffffffff" if not run_id.startswith("ffff") else "000000000000"]
    elif case == "two runs":
        copy = tmp_path / "out"
        (copy / "ablations").mkdir(parents=True)
        row = {k: (None if v != v else v) for k, v in read_table(out / "ablations" / "depth.csv").iloc[0].items()}
        append_row(copy / "ablations" / "depth.csv", row, list(row))
        append_row(copy / "ablations" / "depth.csv", {**row, "run_id": run_id[:4] + "00000000"}, list(row))
        out, run = copy, ["--run", run_id[:4]]
    elif case == "neither":
        run = []
    elif case == "weights without preset":
        run = ["--weights", str(png)]
    figure = tmp_path / "f.png"
    if case == "unwritable figure":   # its folder is a file: the system's reason, once, and the option that fixes it
        (tmp_path / "file").write_text("")
        figure = tmp_path / "file" / "f.png"
    assert cli.main(["predict", image, *run, "--out", str(out), "--figure", str(figure)]) == 2
    err = capsys.readouterr().err
    if case == "unwritable figure":   # after the run's notes: the system's reason alone, not a writer's advice
        err = err.splitlines()[-1] + "\n"
        assert err.startswith(f"error: cannot write {figure} (") and "free space" not in err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_checkpoint_for_a_torchvision_dataset_needs_none_of_its_files(tmp_path):
    """--weights with --dataset cifar10: CIFAR-10's published normalisation, no data folder read."""
    from ablations.analysis.predict import load_weights
    from ablations.training.data import published_statistics
    from vit import PRESETS

    weights = tmp_path / "cifar.pth"
    torch.save(VisionTransformer(PRESETS["vit_cifar"]).state_dict(), weights)
    loaded = load_weights(weights, "vit_cifar", "cifar10", data_root=tmp_path / "no-data-here")
    assert (loaded.mean, loaded.std) == published_statistics("cifar10")
    assert not (tmp_path / "no-data-here").exists()


def test_a_run_whose_weights_are_gone_says_the_command_that_trains_it_again_and_that_command_does(tmp_path, capsys):
    import shlex

    import pandas as pd

    from ablations.__main__ import main
    from ablations.analysis.predict import load_run
    from ablations.results.store import SweepPaths

    spec = write_spec(tmp_path / "w.toml", "lr", "[0.003]", "embed_dim = 16\nnum_heads = 2\ndepth = 1",
                      "epochs = 1\nbatch_size = 256\nweight_decay = 0.01")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--dataset", "digits", "--seeds", "1", "--out", str(out), "--cost-rounds", "0"]) == 0
    table = SweepPaths.of(out, "w")
    run_id = str(pd.read_csv(table.rows)["run_id"].iloc[0])
    table.weights_file(run_id).unlink()
    with pytest.raises(ValueError, match="train it again with the same settings") as info:
        load_run(out, run_id)
    command = str(info.value).split(": python -m ablations ", 1)[1]
    capsys.readouterr()
    assert main(shlex.split(command)) == 0                      # trains it again under the same run_id
    assert run_id in capsys.readouterr().out
    assert load_run(out, run_id).model is not None              # and predict finds its weights


def test_predict_names_the_classes_of_an_image_folder_run_and_says_when_an_older_run_has_none(tmp_path, capsys):
    from test_imagefolder import write_folder

    root = write_folder(tmp_path / "shapes", per_class=(8, 4))        # classes: horizontal, vertical
    spec = write_spec(tmp_path / "d.toml", "depth", "[1]", "patch_size = 4\nembed_dim = 16\nnum_heads = 2",
                      "epochs = 1")
    out = tmp_path / "out"
    assert cli.main(["sweep", str(spec), "--dataset", "imagefolder", "--data-root", str(root), "--img-size", "16",
                     "--seeds", "0", "--cost-rounds", "0", "--out", str(out)]) == 0
    table = out / "ablations" / "d.csv"
    row = read_table(table).iloc[0]
    assert row["class_names"] == '["horizontal", "vertical"]'
    image = sorted((root / "val" / "vertical").iterdir())[0]
    figure = tmp_path / "f.png"
    capsys.readouterr()
    assert cli.main(["predict", str(image), "--run", str(row["run_id"]), "--out", str(out), "--figure", str(figure)]) == 0
    text = capsys.readouterr()
    ranked = [line.split() for line in text.out.splitlines() if line.split()[:1] == [image.name]]
    assert len(ranked) == 2 and {r[3] for r in ranked} == {"horizontal", "vertical"} and "classes are shown" not in text.err
    # a run from before rows kept class names: indices, and one line saying why
    rows = read_table(table)
    rows["class_names"] = None
    rows.to_csv(table, index=False)
    assert cli.main(["predict", str(image), "--run", str(row["run_id"]), "--out", str(out), "--figure", str(figure)]) == 0
    text = capsys.readouterr()
    assert "records no class names (trained before runs kept them): its classes are shown as indices 0–1" in text.err
    assert sum("classes are shown" in line for line in text.err.splitlines()) == 1 and "Traceback" not in text.err
    assert {line.split()[2] for line in text.out.splitlines() if line.split()[:1] == [image.name]} == {"0", "1"}


def test_a_figure_path_that_links_into_the_reference_is_refused_before_any_work(tmp_path, capsys):
    """`predict --figure F` where F is a link to a file of the committed reference would write through it: one
    line, exit 2, the reference's file as it was."""
    from bench.reference import REFERENCE_MARK

    reference = tmp_path / "reference"
    (reference / "figures").mkdir(parents=True)
    (reference / REFERENCE_MARK).write_text("reference\n")
    target = reference / "figures" / "attention.png"
    target.write_bytes(b"committed")
    link = tmp_path / "mine.png"
    link.symlink_to(target)
    assert cli.main(["predict", str(tmp_path / "x.png"), "--run", "abc", "--out", str(tmp_path / "o"),
                     "--figure", str(link)]) == 2
    err = capsys.readouterr().err
    assert "lies in (or links into) the committed reference results" in err and err.count("\n") == 1
    assert target.read_bytes() == b"committed"


def test_predict_on_a_run_that_had_not_converged_says_so(trained, capsys, tmp_path):
    """The run's history says its test accuracy was still rising by more than a point at its last epoch: predict
    prints a note that its predictions are a short budget's (the report's own rule); a settled and fitted history,
    none."""
    import shutil

    import pandas as pd

    out, run_id, png, _ = trained
    mine = tmp_path / "out"
    shutil.copytree(out, mine)
    history = mine / "ablations" / "depth-history.csv"
    rows = pd.read_csv(history)
    last = rows["epoch"].max()
    rows.loc[rows["epoch"] == last, "test_acc"] = rows.loc[rows["epoch"] == last - 1, "test_acc"].to_numpy() + 0.05
    rows.to_csv(history, index=False)
    figure = tmp_path / "a.png"
    assert cli.main(["predict", str(png), "--run", run_id, "--out", str(mine), "--figure", str(figure)]) == 0
    err = capsys.readouterr().err
    assert f"note: run {run_id} had not converged (its test accuracy rose 5.0 points over its last epoch)" in err
    rows.loc[rows["epoch"] == last, "test_acc"] = rows.loc[rows["epoch"] == last - 1, "test_acc"].to_numpy()
    rows["train_loss"] = 0.1   # a loss that has fitted: nothing to say
    rows.to_csv(history, index=False)
    assert cli.main(["predict", str(png), "--run", run_id, "--out", str(mine), "--figure", str(figure)]) == 0
    assert "had not converged" not in capsys.readouterr().err


def test_predict_names_the_setting_of_what_the_runs_sweep_varies(trained, capsys):
    """With the spec the sweep ran kept beside its table, the header says which setting the run is ('depth=2'),
    not only its sweep and seed."""
    out, run_id, png, _ = trained
    spec = out / "ablations" / "depth.toml"
    write_spec(spec, "depth", f"[{MODEL.depth}, {MODEL.depth + 1}]")
    try:
        assert cli.main(["predict", str(png), "--run", run_id, "--out", str(out), "--figure",
                         str(out / "a.png")]) == 0
    finally:
        spec.unlink()
    assert f"{run_id} (depth sweep, depth={MODEL.depth}, seed 0, digits, test acc" in capsys.readouterr().out
