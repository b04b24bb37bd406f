"""Sweep specs: validated whole before any run, errors that name file, point and field; every shipped
sweep valid for every dataset size; a new TOML file alone is a new sweep."""

import dataclasses
from pathlib import Path

import pytest
from conftest import user_make, write_spec

from ablations.__main__ import main as ablations_main
from ablations.analysis.report import build_report
from ablations.specs import SPEC_DIR, SpecError, available_sweeps, default_sweeps, load_spec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


def test_spec_with_invalid_point_fails_before_any_training(tmp_path, capsys):
    spec = write_spec(tmp_path / "badheads.toml", "num_heads", "[2, 3, 4]", model="embed_dim = 32")
    out = tmp_path / "out"
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "badheads.toml" in err and "num_heads=3" in err and "embed_dim=32" in err
    assert not out.exists()


@pytest.mark.parametrize("text,message", [
    ('[sweep]\nfactor = "depth"\nvalues = [1]\nvalue = 3\n', "unknown key 'value'"),
    ('[sweep]\nfactor = "depht"\nvalues = [1]\n', r"factor='depht' is not a field a sweep can vary \(did you mean "
                                                   r"'depth'\?\)"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\n[train]\nepoch = 3\n', r"\[train\] has unknown key 'epoch' \(did you "
                                                                     r"mean 'epochs'\?\); known"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\n[train]\nfoo = 3\n', r"\[train\] has unknown key 'foo'; known"),
    ('[sweep]\nfactors = ["depth", "num_heads"]\nvalues = [1, 2]\n', r"\[sweep\] values is one factor's list; with "
                                                                     r"factors, give each factor's list in a \[values\] "
                                                                     r"table \(\[values\] depth = \[...\]\)"),
    ('[sweep]\nfactor = "depth"\nfactors = ["depth", "num_heads"]\n', r"give factor \(one field\) or factors "
                                                                       r"\(several\), not both"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\n[train]\nepochs = 0\n', "TrainConfig.epochs"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\n[model]\nimg_size = 32\n', "img_size is set by the dataset"),
    ('[sweeps]\n', "unknown section"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\nmargin = 0\n', "margin must be a number of accuracy points above 0"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\nmargin = -0.5\n', "margin must be a number"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\nmargin = "half"\n', "margin must be a number"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\nmargin = nan\n', "margin must be a number"),
])
def test_spec_errors_name_file_and_field(tmp_path, text, message):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message) as info:
        load_spec(path)
    assert "s.toml" in str(info.value)


def test_a_misspelt_sweep_name_is_refused_with_the_sweep_it_is_one_typo_from():
    from ablations.specs import find_spec

    with pytest.raises(SpecError, match=r"no sweep named 'depht' in .* \(did you mean 'depth'\?\); available: \["):
        find_spec("depht")
    with pytest.raises(SpecError) as info:
        find_spec("zzz")
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("name", ["dd-cost", "lr-history"])
def test_a_sweep_named_like_another_sweeps_side_table_is_refused_before_it_trains(tmp_path, capsys, name):
    """`dd-cost.csv` would be read as the cost table of a sweep `dd`, `lr-history.csv` as the epochs of `lr`:
    such a name is refused in one line, before any work."""
    spec = write_spec(tmp_path / f"{name}.toml", "depth", "[1, 2]")
    out = tmp_path / "out"
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(out), "--seeds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{name}.toml: a sweep's name may not end in -history or -cost" in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("img_size,in_chans,base", [(28, 1, "vit_mnist"), (8, 1, "vit_digits"), (32, 3, "vit_cifar")])
def test_every_shipped_sweep_is_valid_for_every_dataset_size(img_size, in_chans, base):
    from ablations.specs import MODEL_FIELDS, TRAIN_FIELDS, available_sweeps, find_spec
    from vit import PRESETS

    # the shipped files: another test adds a throwaway zz_ spec to the folder for its duration (and removes it),
    # possibly while this one runs beside it on another worker
    names = [n for n in available_sweeps() if not n.startswith("zz_")]
    assert {"patch", "heads", "depth", "pos", "norm", "pool", "attn"} <= set(names)
    for name in names:
        spec = load_spec(find_spec(name))
        points = spec.points(img_size, in_chans, 10)  # raises SpecError on any invalid point
        assert points and all(p.model.img_size == img_size and p.model.in_chans == in_chans for p in points)
        # preset auto: apart from the factors, each point is the dataset's base model; its recipe is the
        # spec's [train] with the point's training factors and tuned values
        base_cfg = PRESETS[base].replace(img_size=img_size, in_chans=in_chans, num_classes=10)
        for p in points:
            setting = dict(zip(spec.factors, p.value if len(spec.factors) > 1 else (p.value,)))
            model = {k: v for k, v in setting.items() if k in MODEL_FIELDS}
            assert p.model == base_cfg.replace(**model), (name, p.value)
            recipe = {**spec.train_overrides, **{k: v for k, v in setting.items() if k in TRAIN_FIELDS}, **dict(p.tuned)}
            assert all(getattr(p.train, k) == v for k, v in recipe.items()), (name, p.label)


def test_preset_auto_without_a_base_for_the_image_size_says_so(tmp_path):
    spec = tmp_path / "a.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [1]\n')
    with pytest.raises(SpecError, match=r"a\.toml.*preset=auto has no base model for 20 px images \(bases: 8 px "
                                        r"vit_digits, 28 px vit_mnist, 32 px vit_cifar\): set IMG_SIZE \(--img-size\) "
                                        r"to 8, 28 or 32, or name a preset"):
        load_spec(spec).points(20, 1, 10)


def test_shipped_sweeps_label_their_factor_and_mark_what_make_ablations_runs():
    assert default_sweeps() == ["depth", "heads", "patch"]
    assert available_sweeps()[:3] == default_sweeps()  # then the others, by name
    assert load_spec(SPEC_DIR / "patch.toml").label == "patch size (px)"
    bad = SPEC_DIR.parent / "bad-label.toml"
    try:
        bad.write_text('[sweep]\nfactor = "depth"\nvalues = [1]\ndefault = "yes"\n')
        with pytest.raises(SpecError, match="default must be a bool"):
            load_spec(bad)
    finally:
        bad.unlink()


def test_a_new_toml_file_alone_gives_a_make_target_a_report_section_and_spec_coverage(tmp_path):
    name = "zz_throwaway_mlp"
    path = SPEC_DIR / f"{name}.toml"
    path.write_text('[sweep]\nlabel = "MLP ratio"\nfactor = "mlp_ratio"\nvalues = [1.0, 2.0]\n[train]\nepochs = 1\n')
    try:
        assert name in available_sweeps() and name not in default_sweeps()
        dry = user_make("-n", f"ablate-{name}")
        assert dry.returncode == 0 and f"-m ablations sweep {name} " in dry.stdout
        for img_size, in_chans in ((28, 1), (8, 1), (32, 3)):  # what the shipped-sweeps test checks of each file
            assert len(load_spec(path).points(img_size, in_chans, 10)) == 2
        assert ablations_main(["sweep", name, "--dataset", "digits", "--seeds", "0", "--cost-rounds", "0",
                               "--device", "cpu", "--out", str(tmp_path)]) == 0
        text = build_report(tmp_path).read_text()
        assert f"## {name}: MLP ratio" in text and "\n| 1.0 | 1 |" in text and "\n| 2.0 | 1 |" in text
    finally:
        path.unlink()


def test_a_sweeps_margin_is_its_equivalence_margin_and_the_command_line_sets_the_rest(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text('[sweep]\nfactor = "depth"\nvalues = [1, 2]\nmargin = 1.5\n')
    assert load_spec(path).margin == pytest.approx(0.015)
    assert load_spec(write_spec(tmp_path / "plain.toml", "depth", "[1]")).margin is None
    for bad in ("0", "-1", "abc", "nan", "100"):
        with pytest.raises(SystemExit) as exit_:
            ablations_main(["report", "--out", str(tmp_path), "--margin", bad])
        assert exit_.value.code == 2
        assert "the margin must be a number of accuracy points above 0 and below 100" in capsys.readouterr().err


@pytest.mark.parametrize("body, message", [
    ('factor = "norm"\nvalues = ["pre"]\n[tune]\nlr = [1e-3]\nholdout = 0.0001\n', "leaves 0 for validation"),
    ('factor = "norm"\nvalues = ["pre"]\n[tune]\nlr = [1e-3]\nholdout = 0.9999\n', "and 0 for training"),
    ('factor = "norm"\nvalues = ["pre"]\n[tune]\nlr = [1e-3]\nholdout = 0.005\n', "holdout_split = stratified"),
    ('factor = "depth"\nvalues = [1]\n[train]\ncrop_padding = 1000000\n', "crop_padding=1000000 px is larger"),
    ('factor = "depth"\nvalues = [1]\n[train]\nholdout = 0.1\n', "[train] holdout sets a validation split"),
    ('factor = "depth"\nvalues = [1]\n[tune]\nholdout = [0.1, 0.2]\nlr = [1e-3]\n', "holdout must be one fraction"),
])
def test_a_recipe_the_dataset_cannot_serve_is_one_line_before_any_run_and_in_the_dry_run(tmp_path, capsys, body, message):
    path = tmp_path / "h.toml"
    path.write_text(f'[sweep]\n{body}\n[model]\npreset = "vit_digits"\n'.replace("\n[model]", "\n[model]", 1))
    for dry in ([], ["--dry-run"]):
        assert ablations_main(["sweep", str(path), "--dataset", "digits", "--out", str(tmp_path / "out"), *dry]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "ablations").exists()


def test_a_10000_setting_grid_lists_in_seconds_and_trains_only_with_large(tmp_path, capsys):
    path = tmp_path / "big.toml"
    path.write_text('[sweep]\nfactors = ["lr", "weight_decay"]\n[values]\n'
                    f"lr = [{', '.join(f'{1e-4 * (i + 1):.4g}' for i in range(100))}]\n"
                    f"weight_decay = [{', '.join(f'{0.001 * i:.4g}' for i in range(100))}]\n"
                    '[model]\npreset = "vit_digits"\n')
    out = ["--dataset", "digits", "--seeds", "0", "--out", str(tmp_path / "out")]
    assert ablations_main(["sweep", str(path), "--dry-run", *out]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == "sweep big: 10,000 points × 1 seed" and sum(" no" in line for line in listed) == 10_000
    assert ablations_main(["sweep", str(path), *out]) == 2
    err = capsys.readouterr().err
    assert "may train 10,000 runs" in err and "--large (LARGE=1)" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "ablations").exists()


def test_a_sweep_from_a_spec_elsewhere_gets_its_report_section_and_a_table_without_one_is_named(tmp_path):
    mine = tmp_path / "elsewhere" / "mine.toml"
    mine.parent.mkdir()
    write_spec(mine, "depth", "[1, 2]", "embed_dim = 16\nnum_heads = 2\nmlp_ratio = 1.0", "epochs = 1\nbatch_size = 256")
    out = tmp_path / "out"
    assert ablations_main(["sweep", str(mine), "--dataset", "digits", "--out", str(out), "--seeds", "0",
                           "--cost-rounds", "0"]) == 0
    assert (out / "ablations" / "mine.toml").read_text() == mine.read_text()   # kept beside its table
    (out / "ablations" / "orphan.csv").write_text((out / "ablations" / "mine.csv").read_text())
    text = build_report(out).read_text()
    assert "## mine: " in text and "| 1 | 1 | " in text.split("## mine: ", 1)[1]
    assert "orphan.csv: no spec for the orphan sweep" in text.split("## Skipped inputs", 1)[1]


def test_a_train_table_that_writes_out_the_default_split_is_no_split(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text('[sweep]\nfactor = "depth"\nvalues = [1]\n[train]\nholdout = 0.0\nholdout_seed = 0\n')
    spec = load_spec(path)
    assert spec.train_overrides["holdout"] == 0.0 and not spec.tune


def test_report_with_a_reference_that_is_not_there_is_one_line(tmp_path, capsys):
    assert ablations_main(["report", "--out", str(tmp_path), "--reference", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "--reference" in err and "no ablations/ folder" in err and err.count("\n") == 1
    assert not (tmp_path / "REPORT.md").exists()


def test_a_shipped_sweep_keeps_the_spec_it_ran_beside_its_table_and_the_report_reads_that_one(tmp_path):
    """A sweep of ablations/sweeps/ keeps a copy of its spec beside its table, as one from elsewhere does: the
    report describes the sweep as it ran (here its label edited after the run stands for a later edit of the
    shipped file), not as the shipped file says now."""
    from ablations.specs import SPEC_DIR

    out = tmp_path / "out"
    assert ablations_main(["sweep", "stem", "--dataset", "digits", "--epochs", "1", "--seeds", "0",
                           "--set", "weight_decay=0.01", "--cost-rounds", "0", "--out", str(out)]) == 0
    kept = out / "ablations" / "stem.toml"
    note = b"\n# vitbench: the command that last trained this sweep set weight_decay=0.01, epochs=1 over the spec above\n"
    assert kept.read_bytes() == (SPEC_DIR / "stem.toml").read_bytes() + note   # the spec, and what the command set
    assert load_spec(kept) == dataclasses.replace(load_spec(SPEC_DIR / "stem.toml"), path=kept)
    kept.write_text("\n".join('label = "the stem as it ran"' if line.startswith("label =") else line
                               for line in kept.read_text().splitlines()) + "\n")
    assert "## stem: the stem as it ran" in build_report(out).read_text()
