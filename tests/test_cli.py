"""python -m ablations and the Makefile as a user types them: what a command refuses, and what it prints."""

import argparse
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli, user_make, write_spec

from ablations.__main__ import main as ablations_main
from ablations.results.schema import read_table
from vit import PRESETS

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--preset", "vit_digits", "--dataset", "digits", "--epochs", "1", "--cost-rounds", "0", "--device", "cpu"]


def test_train_refuses_a_field_the_dataset_fixes_before_any_work(tmp_path, capsys):
    for field in ("img_size=224", "num_classes=100", "in_chans=3"):
        assert ablations_main(["train", *QUICK, "--set", field, "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert f"--set {field}" in err and "fixed by the dataset (DATASET=digits)" in err
    assert not (tmp_path / "ablations").exists()


def test_a_command_whose_runs_all_diverged_names_only_the_files_it_wrote(tmp_path, capsys):
    """A learning rate far too high: the run diverges in its first epoch, leaving a row and no epochs, weights or
    predictions; the summary names the table it wrote and no file or folder that is not there."""
    assert ablations_main(["train", *QUICK, "--seeds", "0", "--set", "lr=1e4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "  train    1 run: 0 already done, 1 diverged\n" in out
    assert f"rows → {tmp_path / 'ablations' / 'train.csv'}\n" in out
    assert "epochs →" not in out and "weights →" not in out and "predictions →" not in out


def test_make_train_prints_the_rows_of_its_own_runs_even_when_they_were_done_before(tmp_path, capsys):
    assert ablations_main(["train", *QUICK, "--seeds", "0,1", "--out", str(tmp_path)]) == 0
    ids = dict(zip(*(read_table(tmp_path / "ablations" / "train.csv")[c] for c in ("seed", "run_id"))))
    capsys.readouterr()
    assert ablations_main(["train", *QUICK, "--seeds", "0", "--out", str(tmp_path)]) == 0  # already done: skipped
    out = capsys.readouterr().out
    table = out[out.index("run_id"):]
    assert "1 already done" in out and ids[0] in table and ids[1] not in table
    # in the report's units: accuracy in %, a blank figure (no cost phase) a dash, not a raw float or NaN
    row = read_table(tmp_path / "ablations" / "train.csv").set_index("seed").loc[0]
    header, line = table.splitlines()[:2]
    assert header.split() == ["run_id", "seed", "status", "test", "acc", "%", "train", "s", "GMACs", "infer", "img/s",
                              "(cost", "phase)"]
    cells = line.split()
    assert cells[:4] == [ids[0], "0", "ok", f"{100 * row['test_acc']:.2f}"] and cells[-1] == "—"   # COST_ROUNDS=0


def test_train_picks_the_datasets_base_preset_unless_one_is_named(tmp_path, capsys):
    base = ["train", "--dataset", "digits", "--epochs", "1", "--seeds", "0", "--cost-rounds", "0"]
    assert ablations_main([*base, "--out", str(tmp_path / "auto")]) == 0            # digits: vit_digits
    row = read_table(tmp_path / "auto" / "ablations" / "train.csv").iloc[0]
    digits = PRESETS["vit_digits"]
    assert (row["patch_size"], row["embed_dim"], row["depth"]) == (digits.patch_size, digits.embed_dim, digits.depth)
    capsys.readouterr()
    assert ablations_main([*base, "--preset", "vit_mnist", "--out", str(tmp_path / "named")]) == 2
    assert "img_size=8 is not divisible by patch_size=7" in capsys.readouterr().err   # a named preset is kept


def make_dry(*args) -> str:
    """The python command `make -n` prints (under `make test` this runs as a sub-make: no directory lines)."""
    done = user_make("-n", *args)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    return next(line for line in out.splitlines() if " -m ablations " in line)


def test_make_predict_and_compare_without_their_inputs_say_which_in_one_line(capsys):
    """Without IMAGES, or without A and B, the targets stop before Python starts and name the variables (an empty
    A and B had reached compare as '' '': the working folder twice)."""
    for target, given, said in (("ablate-dpth", [], "make ablate-dpth: no sweep named 'dpth' (no "
                                                    "ablations/sweeps/dpth.toml); the sweeps: attn depth heads"),
                                ("compare", ["A=x"], "make compare needs two OUT folders: make compare A="),
                                ("predict", ["RUN=3f2a9c"], 'make predict needs your images and a run: make predict '
                                                            'IMAGES="')):
        done = user_make("-n", target, *given)
        assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "compare 'x' 'y'" in make_dry("compare", "A=x", "B=y")
    assert "predict a.png --run 3f2a9c" in make_dry("predict", "IMAGES=a.png", "RUN=3f2a9c")
    code, _, err = run_cli(ablations_main, ["compare", "", "y"], capsys)
    assert code == 2 and err == "error: A is empty: pass two OUT folders a sweep wrote (compare A B)\n"


@pytest.mark.parametrize("argv,said", [
    (["swep", "depth"], "python -m ablations: error: argument command: invalid choice: 'swep' (did you mean 'sweep'?) "
                        "(choose from "),
    (["sweep", "depth", "--dataset", "mnst"], "invalid choice: 'mnst' (did you mean 'mnist'?) (choose from "),
    (["sweep", "depth", "--dataset", "zzz"], "invalid choice: 'zzz' (choose from "),
    (["train", "--preset", "vit_tiny"], "invalid choice: 'vit_tiny' (did you mean 'vit_tiny_patch16_224'?) (choose"),
    (["train", "--preset", "vit"], "invalid choice: 'vit' (choose from ")])   # part of many names: none named
def test_a_choice_a_typo_away_from_a_known_one_is_named_in_the_one_line_refusal(argv, said, capsys):
    code, _, err = run_cli(ablations_main, argv, capsys)
    assert code == 2 and said in err and err.count("\n") == 1 and err.endswith("(--help lists the options)\n"), err


def test_bench_refuses_a_mistyped_command_in_one_line_naming_the_one_meant(capsys):
    from bench.__main__ import main as bench_main

    with pytest.raises(SystemExit) as stop:
        bench_main(["rn"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("python -m bench: error: argument command: invalid choice: 'rn' "
                                                   "(did you mean 'run'?)") and err.count("\n") == 1, err


def test_no_command_at_all_is_answered_with_the_commands_there_are(capsys):
    from bench.__main__ import main as bench_main

    code, _, err = run_cli(ablations_main, [], capsys)
    assert code == 2 and err == ("python -m ablations: error: name a command: sweep, train, report, predict, cost, "
                                 "migrate, columns, known, compare, calibrate, stepbench (--help says what each does)\n")
    with pytest.raises(SystemExit) as stop:
        bench_main([])
    assert stop.value.code == 2 and capsys.readouterr().err == (
        "python -m bench: error: name a command: run, convert-json, peak (--help says what each does)\n")


def test_make_download_and_data_root_reach_the_commands():
    assert "--download" in make_dry("ablate-depth", "DOWNLOAD=1")
    assert "--download" not in make_dry("ablate-depth")
    assert "--data-root '/d'" in make_dry("report", "DATA_ROOT=/d")


def test_specs_read_toml_without_tomllib_through_the_backport():
    # Python 3.10 has no tomllib; the spec reader must fall back to tomli (a dependency there)
    pytest.importorskip("tomli")  # the test extra installs it to check this fallback; not needed to run vitbench
    code = ("import sys; sys.modules['tomllib'] = None\n"
            "import ablations.specs as s, ablations.choices as c\n"
            "spec = s.load_spec(s.find_spec('depth'))\n"
            "print(s.tomllib.__name__, c.tomllib.__name__, spec.factor, *c.default_sweeps())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stdout.split() == ["tomli", "tomli", "depth", "depth", "heads", "patch"]


def test_dry_run_lists_points_and_trains_nothing(tmp_path, capsys):
    spec = write_spec(tmp_path / "d.toml", "depth", "[1, 2]")
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path), "--dry-run",
                           "--seeds", "0,1"]) == 0
    out = capsys.readouterr().out
    assert out.count("depth=1") == 2 and out.count("depth=2") == 2 and "no" in out
    assert not (tmp_path / "ablations").exists()


# what --help and a refused argument load: the program, run as a user runs it, reports its own modules
_LOADED = ("import runpy, sys\n"
           "module = sys.argv[1]\n"
           "sys.argv = [f'python -m {module}', *sys.argv[2:]]\n"
           "try:\n"
           "    runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
           "finally:\n"
           "    print('loaded:', *sorted(m for m in ('torch', 'numpy', 'pandas', 'vit') if m in sys.modules), file=sys.stderr)")


@pytest.mark.parametrize("argv", [["ablations", "--help"], ["ablations", "sweep", "--help"],
                                  ["ablations", "train", "--help"], ["ablations", "report", "--help"],
                                  ["ablations", "compare", "--help"], ["ablations", "known", "--help"], ["bench", "--help"],
                                  ["bench", "run", "--help"],
                                  ["bench", "peak", "--help"], ["ablations", "train", "--dataset", "nope"],
                                  ["ablations", "sweep", "depth", "--seeds", "-3"], ["bench", "run", "--preset", "nope"]])
def test_help_and_refused_arguments_never_load_torch(argv):
    out = subprocess.run([sys.executable, "-c", _LOADED, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    loaded = out.stderr.strip().splitlines()[-1]
    assert loaded == "loaded:", f"{argv}: {loaded}"
    if argv[-1] == "--help":
        assert out.returncode == 0 and f"usage: python -m {argv[0]}" in out.stdout
    else:
        assert out.returncode == 2 and ("invalid choice: 'nope'" in out.stderr or "seed -3 is out of range" in out.stderr)


def test_no_help_text_shows_an_escaped_percent_sign(capsys):
    """argparse formats a help string with %, not a metavar: `N%%` there printed as typed."""
    from ablations.cli.parser import build

    sub = next(a for a in build()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert "%%" not in parser.format_help(), name
        # and every option and argument says what it is
        assert not [a.dest for a in parser._actions if not a.help], name


def test_train_help_offers_only_what_one_config_can_do(capsys):
    """SEEDS=auto compares a sweep's settings: train (one setting) refuses it, so its help neither offers it nor
    the option that says how it trains; the sweep's help offers both."""
    helps = {}
    for command in ("train", "sweep"):
        with pytest.raises(SystemExit):
            ablations_main([command, "--help"])
        helps[command] = " ".join(capsys.readouterr().out.split())
    assert "--auto-train" not in helps["train"] and "or auto:" not in helps["train"]
    assert "one run each" in helps["train"] and "spec's seeds" not in helps["train"]
    assert "--auto-train" in helps["sweep"] and "or auto:" in helps["sweep"]
    assert "--epochs EPOCHS training epochs (default 20)" in helps["train"]   # train has no spec to override
    assert "--epochs EPOCHS override the spec's epochs" in helps["sweep"]
    for command in ("train", "sweep"):   # what each dataset is, not its name alone
        assert "synthetic: random images and labels, nothing to learn" in helps[command]


def test_help_names_every_choice_the_registries_hold(capsys):
    from ablations.choices import DATASETS
    from ablations.cli.commands import EXECUTORS, default_sweeps
    from ablations.specs import SPEC_DIR, load_spec
    from bench.training.precision import DTYPES

    for argv in (["sweep", "--help"], ["train", "--help"]):
        with pytest.raises(SystemExit):
            ablations_main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert all(name in text for name in [*DATASETS, *DTYPES, *EXECUTORS])
    assert all(name in text for name in PRESETS)  # train --help
    specs = [load_spec(p) for p in sorted(SPEC_DIR.glob("*.toml"))]
    assert default_sweeps() == sorted(s.name for s in specs if s.default)  # the light reader agrees with the spec loader


def test_every_dataset_the_command_line_names_has_a_loader_and_no_other_name_does():
    from ablations import choices
    from ablations.training import data

    assert data.DATASETS is choices.DATASETS  # one list
    assert tuple(data.LOADERS) == choices.DATASETS   # a loader the command line cannot name fails
    for name in choices.DATASETS:
        assert data.loader(name) is data.LOADERS[name] and callable(data.loader(name))
    with pytest.raises(ValueError, match=r"unknown dataset 'svhn'; choose one of \['cifar10',"):
        data.loader("svhn")


def test_a_command_reads_its_dataset_once(tmp_path, monkeypatch):
    """`train` checks the preset against the dataset, then trains on it: one read of the file, not two."""
    from ablations.training import data

    reads = []
    real = data.load_dataset
    monkeypatch.setattr(data, "load_dataset", lambda *a, **k: reads.append(a) or real(*a, **k))
    data.cached_dataset.cache_clear()
    assert ablations_main(["train", *QUICK, "--out", str(tmp_path)]) == 0
    assert len(reads) == 1
    data.cached_dataset.cache_clear()


@pytest.mark.parametrize("argv,expected", [(["--help"], "usage: vitbench COMMAND"),
                                           (["sweep", "--help"], "usage: vitbench sweep"),
                                           (["bench", "run", "--help"], "usage: vitbench bench run"),
                                           (["calibrate", "--help"], "usage: vitbench calibrate")])
def test_the_vitbench_command_wraps_the_programs_under_its_own_name_without_loading_torch_for_help(argv, expected):
    out = subprocess.run([sys.executable, "-c", _LOADED, "ablations.cli", *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and expected in out.stdout, out.stderr[-500:]
    assert out.stderr.strip().splitlines()[-1] == "loaded:"


def test_the_installed_vitbench_script_runs_a_command(tmp_path):
    script = Path(sys.executable).parent / "vitbench"
    assert script.exists(), "pip install -e . installs the vitbench console script ([project.scripts])"
    out = subprocess.run([str(script), "columns"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("# Result columns")


def test_preset_and_dtype_names_have_one_source_that_help_reads_without_torch():
    """--help lists presets from vit/presets.toml, the file vit.PRESETS is built from, and dtypes from the
    table bench.training.precision builds its torch dtypes from: nothing to keep in step by hand."""
    from bench import choices
    from bench.training.precision import DTYPES
    from vit import PRESETS, ViTConfig

    assert choices.PRESETS == tuple(PRESETS) and list(DTYPES) == list(choices.DTYPES)
    assert PRESETS["vit_mnist"] == ViTConfig(img_size=28, patch_size=7, in_chans=1, num_classes=10, embed_dim=64,
                                             depth=4, num_heads=4, mlp_ratio=2.0, pool="avg", stem="conv")
    assert str(DTYPES["bf16"]) == "torch.bfloat16"


def test_a_bad_point_of_a_sweep_on_the_datasets_base_model_is_refused_in_its_one_line(tmp_path, capsys):
    """The line saying what preset auto is comes once every point is valid: a refusal is the command's one line."""
    spec = tmp_path / "d0.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [0, 1]\n\n[model]\npreset = "auto"\n')
    code, _, err = run_cli(ablations_main, ["sweep", str(spec), "--dataset", "digits", "--seeds", "0", "--dry-run",
                                            "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and err == f"error: {spec}: point depth=0: ViTConfig.depth must be a positive int, got 0\n", err
    code, _, err = run_cli(ablations_main, ["sweep", "depth", "--dataset", "digits", "--seeds", "0", "--dry-run",
                                            "--out", str(tmp_path / "o")], capsys)
    assert code == 0 and err.startswith("model: preset auto is vit_digits at 8 px (digits)"), err


def test_train_builds_its_point_as_a_sweep_does_so_the_same_model_and_recipe_are_the_same_runs(tmp_path, capsys):
    """`train --set depth=3 --set lr=0.002` and a one-value depth sweep with lr 0.002 list the same run ids; a
    bad --set value names --set, the point and the field."""
    import re

    spec = write_spec(tmp_path / "d3.toml", "depth", "[3]", train="epochs = 1\nlr = 0.002")
    common = ["--dataset", "digits", "--epochs", "1", "--seeds", "0,1", "--dry-run", "--out", str(tmp_path)]
    assert ablations_main(["train", "--preset", "vit_digits", "--set", "depth=3", "--set", "lr=0.002", *common]) == 0
    from_train = re.findall(r"\b[0-9a-f]{12}\b", capsys.readouterr().out)
    assert ablations_main(["sweep", str(spec), *common]) == 0
    from_sweep = re.findall(r"\b[0-9a-f]{12}\b", capsys.readouterr().out)
    assert len(from_train) == 2 and from_train == from_sweep
    assert ablations_main(["train", "--preset", "vit_digits", "--set", "depth=0", *common]) == 2
    assert "error: --set depth=0: point preset='vit_digits': ViTConfig.depth must be a positive int, got 0" in \
        capsys.readouterr().err
    # a preset whose patch does not divide the dataset's images, with no --set given: named as train's, with the way out
    assert ablations_main(["train", "--preset", "vit_tiny_patch16_224", *common]) == 2
    assert ("error: train: point preset='vit_tiny_patch16_224': ViTConfig.img_size=8 is not divisible by "
            "patch_size=16; IMG_SIZE (--img-size) shows the 8 px images at a side the patch size divides\n") in \
        capsys.readouterr().err
    # the same preset with a --set that is not the cause: train's refusal, the --set named after it; a --set that is
    # the cause leads, and a hint for the patch size appears only under the patch size's error
    assert ablations_main(["train", "--preset", "vit_tiny_patch16_224", "--set", "depth=1", *common]) == 2
    assert ("error: train: point preset='vit_tiny_patch16_224': ViTConfig.img_size=8 is not divisible by "
            "patch_size=16; IMG_SIZE (--img-size) shows the 8 px images at a side the patch size divides (with --set "
            "depth=1)\n") in capsys.readouterr().err
    assert ablations_main(["train", "--preset", "vit_tiny_patch16_224", "--set", "depth=0", *common]) == 2
    assert ("error: --set depth=0: point preset='vit_tiny_patch16_224': ViTConfig.depth must be a positive int, got "
            "0\n") in capsys.readouterr().err


def test_compile_as_set_and_as_the_makefile_passes_it_is_one_training_and_a_bad_value_is_refused(tmp_path, capsys):
    """`--set compile=0` is the default recipe's run and `--set compile=1` is `--compile 1`'s (the Makefile's
    COMPILE=1): the same run ids; `compile=off` is refused in one line before anything trains."""
    import re

    common = ["--preset", "vit_digits", "--dataset", "digits", "--epochs", "1", "--seeds", "0", "--dry-run",
              "--out", str(tmp_path)]

    def ids(*extra):
        assert ablations_main(["train", *common, *extra]) == 0
        return re.findall(r"\b[0-9a-f]{12}\b", capsys.readouterr().out)

    assert ids("--set", "compile=0") == ids() and ids("--set", "compile=1") == ids("--compile", "1") != ids()
    assert ablations_main(["train", *common, "--set", "compile=off"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TrainConfig.compile must be 0 or 1 (false or true), got 'off'" in err[0], err


@pytest.mark.slow
def test_a_command_parses_each_sweep_table_once(tmp_path, monkeypatch, capsys):
    """`make train` over runs already done reads its table to see what is done, to warn about other
    experiments and to print its rows, and counts what it recorded: one parse of the file, passed on. A
    sweep that reuses runs of another sweep under the same OUT parses that sweep's tables once too; the
    report parses each table, history, cost table and design file once for all its sections."""
    from collections import Counter

    import ablations.results.schema as schema

    assert ablations_main(["train", *QUICK, "--seeds", "0", "--out", str(tmp_path)]) == 0
    parsed, real = Counter(), schema.read_rows
    monkeypatch.setattr(schema, "read_rows", lambda path, *a: parsed.update([Path(path).name]) or real(path, *a))
    assert ablations_main(["train", *QUICK, "--seeds", "0", "--out", str(tmp_path)]) == 0  # done: nothing trains
    assert parsed == Counter({"train.csv": 1}), parsed
    parsed.clear()
    capsys.readouterr()
    spec = write_spec(tmp_path / "again.toml", "depth", "[2, 1]")    # depth 2 at seed 0: the run train trained
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--seeds", "0", "--cost-rounds", "0",
                           "--out", str(tmp_path), "--jobs", "1"]) == 0
    assert "1 reused from other sweeps" in capsys.readouterr().out
    assert parsed == Counter({"train.csv": 1, "train-history.csv": 1}), parsed   # again.csv: none before it ran
    parsed.clear()
    from ablations.results import seed_design, store
    from ablations.results.store import SweepPaths

    seed_design.write_design(SweepPaths.of(tmp_path, "again"), seed_design.new_design(0.005, 0.05, 10))   # a SEEDS=auto design
    assert ablations_main(["cost", "--out", str(tmp_path), "--cost-rounds", "3"]) == 0   # a cost table for each sweep
    parsed.clear()
    designs, real_plan = Counter(), store.read_design
    monkeypatch.setattr(store, "read_design", lambda paths: designs.update([paths.design.name]) or real_plan(paths))
    assert ablations_main(["report", "--out", str(tmp_path), "--reference", "none"]) == 0
    assert {"again.csv", "again-history.csv", "again-cost.csv", "train.csv"} <= set(parsed), parsed
    assert set(parsed.values()) == {1}, parsed      # every table, history and cost table, once
    assert designs == Counter({"again-design.json": 1}), designs              # its design, once for every section


def test_sweep_set_holds_a_field_in_every_point_records_it_and_the_report_shows_it(tmp_path, capsys):
    spec = write_spec(tmp_path / "depth.toml", "depth", "[1, 2]")
    out = tmp_path / "out"
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--seeds", "0", "--cost-rounds", "0",
                           "--out", str(out), "--set", "flip=true", "--set", "embed_dim=16"]) == 0
    rows = read_table(out / "ablations" / "depth.csv")
    assert sorted(rows["depth"]) == [1, 2] and set(rows["embed_dim"]) == {16}
    assert set(rows["flip"].astype(str).str.lower()) == {"true"}
    from ablations.analysis.report import build_report

    text = build_report(out, reference=None).read_text()
    held = text.split("## depth", 1)[1].split("Held fixed: ", 1)[1].split("\n", 1)[0]
    assert "embed_dim=16" in held and "flip=True." in held and "crop_padding=1 (the dataset's default)" in held
    for bad, said in (("depth=3", "depth is what sweep depth varies (1, 2)"),
                      ("img_size=16", "img_size is fixed by the dataset (DATASET=digits)"),
                      ("colour=red", "--set colour: not a ViTConfig or TrainConfig field; model: ['attn'"),
                      ("epoch=3", "--set epoch: not a ViTConfig or TrainConfig field (did you mean 'epochs'?); model:"),
                      ("flip", "--set 'flip' is not key=value"),
                      ("flip=maybe", "TrainConfig.flip must be true or false (or unset), got 'maybe' (with --set flip=maybe at"),
                      ("lr=-1", "TrainConfig.lr must be a finite number > 0, got -1.0 (with --set lr=-1 at every "
                                "point)"),
                      ("mlp_ratio=0", "mlp_ratio must be a positive number, got 0.0 (with --set mlp_ratio=0 at"),
                      ("warmup_epochs=50", "warmup_epochs=50 is longer than the run's ")):
        capsys.readouterr()
        assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--seeds", "5", "--cost-rounds", "0",
                               "--out", str(out), "--set", bad]) == 2, bad
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    for bad, said in ((["--set", "epochs=3", "--epochs", "2"], "--set epochs=3 and --epochs 2 both set epochs; give it once"),
                      (["--set", "dtype=bf16", "--dtype", "fp32"], "--set dtype=bf16 and --dtype fp32 both set dtype"),
                      (["--set", "compile=false", "--compile", "1"], "--set compile=false and --compile 1 both set")):
        for command in (["sweep", str(spec)], ["train"]):   # not the --set one of them silently, the flag the other
            capsys.readouterr()
            assert ablations_main([*command, "--dataset", "digits", "--seeds", "5", "--cost-rounds", "0",
                                   "--out", str(out), *bad]) == 2, bad
            err = capsys.readouterr().err
            assert said in err and err.count("\n") == 1, err
    assert len(read_table(out / "ablations" / "depth.csv")) == 2      # nothing trained for a refused --set
    code = ablations_main(["train", "--dataset", "digits", "--seeds", "5", "--out", str(out), "--set", "lr=-1"])
    assert code == 2 and "error: --set lr=-1: [train]: TrainConfig.lr must be" in capsys.readouterr().err


def test_make_passes_args_to_every_sweep_target():
    assert "--set flip=false" in make_dry("ablate-pos", "ARGS=--set flip=false")
    assert "--set flip=false" in make_dry("ablations", "ARGS=--set flip=false")


def known_args(*argv: str):
    """`known`'s options as the one parser reads them."""
    from ablations.cli.parser import build

    return build().parse_args(["known", *argv])


@pytest.mark.parametrize("status,signal", [(130, "SIGINT"), (143, "SIGTERM")])
def test_known_stops_at_a_stop_signal_with_its_status_and_trains_no_further_task(tmp_path, capsys, status, signal):
    """Ctrl-C or SIGTERM stops the sweep of the task in hand (it exits 130 or 143): `known` stops there too, with
    that status, rather than count the task as failed and train the next."""
    from ablations.cli import known

    called = []

    def stopped(argv):
        called.append(argv)
        return status

    assert known.cmd_known(known_args("--out", str(tmp_path), "--only", "backends", "planted"), stopped) == status
    assert len(called) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith(f"known: stopped by {signal} during backends; planted did not start")
    assert "resume" not in err   # the sweep's own line names the way on, once


def test_known_refuses_an_out_it_cannot_write_or_whose_data_leads_into_the_reference_in_one_line(tmp_path, capsys):
    """--out a file: one line naming what could not be written, exit 2 (a traceback and exit 1 read as a failed
    suite). OUT/data/quadrants a link into the committed reference: refused before a single image is written,
    as every other command refuses such an OUT."""
    from ablations.cli import known
    from bench.reference import REFERENCE_MARK

    def never(argv):
        raise AssertionError("no sweep runs")

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    assert known.cmd_known(known_args("--out", str(blocker)), never) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: OUT={blocker}: cannot write ") and "Traceback" not in err
    reference = tmp_path / "reference"
    (reference / "quadrants").mkdir(parents=True)
    (reference / REFERENCE_MARK).write_text("")
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "data" / "quadrants").symlink_to(reference / "quadrants")
    assert known.cmd_known(known_args("--out", str(out)), never) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data/quadrants/ leads into" in err and "--into-reference" in err
    assert list((reference / "quadrants").iterdir()) == []


@pytest.mark.slow
def test_known_judges_the_newest_experiment_of_a_tasks_table(tmp_path, capsys):
    """A second `known` into the same OUT with other epochs is another experiment: its check sees its own runs
    only (identical backends stay identical), not the mean of the two budgets."""
    from ablations.cli import known
    from ablations.cli.parser import main as run

    for epochs in ("4", "5"):   # both learn the task (about 69 % and 77 %; chance is 25 %)
        assert known.cmd_known(known_args("--out", str(tmp_path), "--only", "backends", "--epochs", epochs), run) == 0, \
            capsys.readouterr().out[-1500:]
    out = capsys.readouterr().out
    assert "bmm vs einops: identical" in out.split("Known answers")[-1]
    assert "Next:" not in out   # it writes the report itself: no sweep of it tells the user to make one


@pytest.mark.slow
def test_the_known_answer_suite_gets_every_known_answer_at_fixed_and_at_adaptive_seeds(tmp_path, capsys):
    """Synthetic tasks through the sweep command: positions needed, identical backends, shuffled labels and a
    planted difference, each with the answer the report must give. Then SEEDS=auto over the same runs (its
    first look is them): identical backends and the planted difference decided at the first look, shuffled
    labels stopped there at chance, positions decided at a later look; the report says where each design
    stopped; the same command again replays the looks from the finished runs and trains nothing."""
    status = ablations_main(["known", "--out", str(tmp_path)])
    done = capsys.readouterr()
    summary = done.out[done.out.index("Known answers"):]
    assert status == 0, summary + done.err[-2000:]
    assert summary.count("PASS") == 4 and "FAIL" not in summary
    assert "sincos2d vs none: better" in summary and "bmm vs einops: identical" in summary
    assert "expected flip=False decided better than flip=True\n        got: flip=False " in summary   # one spelling
    assert re.search(r"no verdict \(even the best setting, depth=\d \([\d.]+ %\), is within noise of chance "
                     r"\(25\.0 % for guessing\)\)\n", summary), summary   # the reason whole, not cut off
    report = (tmp_path / "REPORT.md").read_text()
    assert "pos=none (" in report and "not shown to learn this task at this budget" in report
    assert "| bmm | einops | 0 (same predictions) | — | — | identical |" in report
    argv = ["known", "--out", str(tmp_path), "--seeds", "auto"]
    status = ablations_main(argv)
    done = capsys.readouterr()
    summary = done.out[done.out.index("Known answers"):]
    assert status == 0 and summary.count("PASS") == 4, summary + done.err[-2000:]
    assert "bmm vs einops: identical (SEEDS=auto: stopped at look 1, 6 runs)" in summary
    assert "False vs True: better (SEEDS=auto: stopped at look 1, 6 runs)" in summary
    assert "sincos2d vs none: better (SEEDS=auto: stopped at look " in summary
    assert "known-shuffled: stopped at look 1: even the leader" in done.out + done.err
    assert re.search(r"depth=2 [\d.]+ % ‡; no verdict \(even the best setting, depth=\d \([\d.]+ %\), is within noise "
                     r"of chance \(25\.0 % for guessing\)\) \(SEEDS=auto: stopped at look 1, 6 runs\)\n", summary), summary
    report = (tmp_path / "REPORT.md").read_text()
    assert "Adaptive seeds (SEEDS=auto): looks at 3/5/8/12/18/24 seeds" in report
    assert "stopped at look 1 of 6 (3 seeds each): every other setting decided against the leader" in report
    assert "flip=False is best, " in report and "flip=True is worse by " in report   # the findings table
    assert "attn=bmm and einops tie for the highest mean, " in report   # identical: the same mean
    assert "attn=einops is identical to attn=bmm (the same predictions)" in report
    assert "| False | True |" in report and "a better (look 1: p " in report
    assert ablations_main(argv) == 0
    assert capsys.readouterr().out.count("nothing new") == 4


@pytest.mark.parametrize("seeds,said", [("auto:2,5,8", "at least 3 seeds at the first look (the spread between seeds), "
                                                       "got 2"),
                                        ("auto:3,8,5", "adaptive seeds need looks that increase, got [3, 8, 5]"),
                                        ("auto:3,5,500", "the last look (500 seeds) is above the 100 seeds allowed"),
                                        ("auto:3,x", "the looks of auto must be comma-separated integers"),
                                        ("automatic", "auto takes its looks as auto:3,5,8,12")])
def test_bad_adaptive_seeds_are_one_line_and_exit_2_before_any_work(tmp_path, capsys, seeds, said):
    code, _, err = run_cli(ablations_main, ["sweep", "depth", "--seeds", seeds, "--out", str(tmp_path)], capsys)
    assert code == 2 and said in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())


def test_a_spec_may_ask_for_adaptive_seeds_and_the_dry_run_gives_the_most_runs_it_can_take(tmp_path, capsys):
    """seeds = "auto:3,5" in a spec: the dry run lists seeds 0-4 of every setting and says 3 to 5 a setting;
    SEEDS on the command line wins over the spec; a tuned spec's dry run counts its grid at the first look only."""
    spec = write_spec(tmp_path / "d.toml", "depth", "[1, 2]", train="epochs = 1")
    spec.write_text(spec.read_text().replace("[sweep]\n", '[sweep]\nseeds = "auto:3,5"\n'))
    common = ["--dataset", "digits", "--dry-run", "--out", str(tmp_path / "out")]
    assert ablations_main(["sweep", str(spec), *common]) == 0
    out = capsys.readouterr().out
    assert "SEEDS=auto:3,5: seeds 0, 1, 2 of every setting first" in out and "6 to 10 runs" in out
    assert out.count(" no\n") == 10
    assert ablations_main(["sweep", str(spec), *common, "--seeds", "7"]) == 0
    assert capsys.readouterr().out.count(" no\n") == 2
    # a design of one look has no later look to train more seeds at
    assert ablations_main(["sweep", str(spec), *common, "--seeds", "auto:4"]) == 0
    out = capsys.readouterr().out
    assert "SEEDS=auto:4: one look, at seeds 0–3 of every setting: 8 runs\n" in out and "then more" not in out
    tuned = tmp_path / "t.toml"
    tuned.write_text('[sweep]\nfactor = "depth"\nvalues = [1, 2]\nseeds = "auto"\n[tune]\nlr = [0.001, 0.002]\n')
    assert ablations_main(["sweep", str(tuned), *common]) == 0
    out = capsys.readouterr().out
    assert "(every value of lr at the first look; then each setting's pick alone): 12 to 54 runs" in out
    assert ablations_main(["sweep", str(spec), *common, "--auto-train", "cap"]) == 0
    out = capsys.readouterr().out
    assert "SEEDS=auto:3,5, AUTO_TRAIN=cap: every setting's seeds 0–4 at once, then the looks at 3/5 seeds" in out
    assert "10 runs" in out and out.count(" no\n") == 10
    assert ablations_main(["sweep", str(spec), *common, "--seeds", "7", "--auto-train", "cap"]) == 0
    assert "note: AUTO_TRAIN=cap says how SEEDS=auto trains its seeds; these seeds are fixed" in capsys.readouterr().err


@pytest.mark.slow
def test_a_tuned_sweep_under_adaptive_seeds_picks_at_the_first_look_and_trains_only_the_picks_after(tmp_path, capsys):
    """SEEDS=auto on a tuned sweep: every lr at seeds 0-2, each setting's pick by mean validation accuracy
    over those seeds, then seeds 3 and 4 of the picks alone; a rerun trains nothing; the report analyses
    the picks under the design."""
    spec = tmp_path / "t.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [1, 2]\n[tune]\nlr = [3e-3, 1e-2]\nholdout = 0.2\n'
                    '[model]\npreset = "vit_digits"\nembed_dim = 16\nnum_heads = 2\nmlp_ratio = 1.0\n'
                    '[train]\nepochs = 6\nbatch_size = 32\n')
    out = tmp_path / "out"
    common = [str(spec), "--dataset", "digits", "--seeds", "auto:3,5", "--cost-rounds", "0", "--out", str(out)]
    assert ablations_main(["sweep", *common]) == 0
    rows = read_table(out / "ablations" / "t.csv")
    first = rows[rows["seed"] < 3]
    assert len(first) == 12 and (first["status"] == "ok").all()
    picks = first.groupby(["depth", "lr"])["val_acc"].mean().groupby(level="depth").idxmax()   # float64, by hand
    later = rows[rows["seed"] >= 3]
    assert sorted(later["seed"].unique()) == [3, 4]
    assert {(d, lr) for d, lr in zip(later["depth"], later["lr"])} <= set(picks)   # the picks alone
    assert later.groupby("depth").size().isin([2]).all()
    assert re.search(r"^Done in [\d.]+ s: (start [\d.]+ s, )?training [\d.]+ s in 2 phases, the rest [\d.]+ s\.$",
                     capsys.readouterr().out, re.M)   # a training phase per look
    assert ablations_main(["sweep", *common]) == 0
    assert "nothing new" in capsys.readouterr().out and len(read_table(out / "ablations" / "t.csv")) == len(rows)
    assert ablations_main(["report", "--out", str(out)]) == 0
    report = (out / "REPORT.md").read_text()
    assert "Adaptive seeds (SEEDS=auto): looks at 3/5 seeds" in report
    assert "the picks were made at the first look, on seeds 0, 1, 2; only the picks trained more seeds" in report
    for depth, lr in picks:
        assert f"| {depth} | lr={lr:g} |" in report


def test_auto_train_cap_widens_each_asked_setting_to_the_cap_and_leaves_a_grid_before_its_picks_as_asked():
    """AUTO_TRAIN=cap: a setting a look asks for trains the seeds it needs now and every one past what it has, up
    to the cap; a setting the look does not ask for (decided) trains nothing more; a tuned sweep's grid, asked for
    before its picks exist (no `have`), is asked as is."""
    from ablations.analysis.sequential import Design
    from ablations.cli.adaptive import to_the_cap

    order = [0, 1, 2, 3, 4, 5, 6, 7]
    look = Design([], {"a": 5, "b": 5, "c": 3}, {"a": [3, 4], "c": [1]}, (3, 5, 8))
    assert to_the_cap(look, order) == {"a": [3, 4, 5, 6, 7], "c": [1, 3, 4, 5, 6, 7]}
    shuffled = [7, 6, 5, 4, 3, 2, 1, 0, 9]   # a design file's own seed order, longer than the cap
    assert to_the_cap(Design([], {"a": 3}, {"a": [7, 6, 5]}, (3, 5)), shuffled) == {"a": [7, 6, 5, 4, 3]}
    grid = Design([], {}, {"lr=0.1": [0, 1, 2]}, (3, 5, 8))
    assert to_the_cap(grid, order) == {"lr=0.1": [0, 1, 2]}


@pytest.mark.slow
def test_seeds_auto_trained_to_the_cap_at_once_takes_the_look_by_look_decisions_from_the_same_runs(tmp_path, capsys):
    """The same two sweeps under SEEDS=auto:3,5, look by look and with AUTO_TRAIN=cap: the cap trains every
    setting's seeds 0-4 in one phase; the runs look by look trains are among them, bit for bit (ids, accuracies,
    predictions); the design files and verdicts are the same; the report of the cap's folder reads the design's
    runs alone (the Pareto front too) and says how many it leaves out; the summary says how each trained."""
    import numpy as np

    planted = tmp_path / "t.toml"   # decided at the first look: lr=1e-4 learns far less in 6 epochs
    planted.write_text('[sweep]\nfactor = "lr"\nvalues = [1e-4, 3e-3]\n[model]\npreset = "vit_digits"\n'
                       '[train]\nepochs = 6\nbatch_size = 64\n')
    alike = write_spec(tmp_path / "s.toml", "depth", "[1, 2]", "embed_dim = 16\nnum_heads = 2\nmlp_ratio = 1.0",
                       "epochs = 4\nlr = 1e-2\nbatch_size = 128")   # open at the first look: taken to the second
    said, progress = {}, {}
    for how in ("look", "cap"):
        argv = ["sweep", str(planted), str(alike), "--dataset", "digits", "--seeds", "auto:3,5", "--cost-rounds", "0",
                "--auto-train", how, "--out", str(tmp_path / how)]
        assert ablations_main(argv) == 0
        said[how], progress[how] = capsys.readouterr()
        assert ablations_main(argv) == 0
        assert capsys.readouterr().out.count("nothing new") == 2   # a rerun trains nothing
        assert ablations_main(["report", "--out", str(tmp_path / how)]) == 0
    tables = {how: {name: read_table(tmp_path / how / "ablations" / f"{name}.csv") for name in ("t", "s")}
              for how in ("look", "cap")}
    for name in ("t", "s"):
        cap, look = tables["cap"][name], tables["look"][name]
        assert sorted(cap["seed"]) == sorted([*range(5)] * 2) and (cap["status"] == "ok").all()
        assert set(look["run_id"]) <= set(cap["run_id"])
        mine = cap.set_index("run_id").loc[look["run_id"]]
        assert (mine["test_acc"].to_numpy() == look["test_acc"].to_numpy()).all()
        for rid in look["run_id"]:
            a, b = (np.load(next((tmp_path / how / "ablations" / "preds").glob(f"**/{rid}.npz")))
                    for how in ("look", "cap"))
            assert all((a[k] == b[k]).all() for k in a.files)
        assert ((tmp_path / "look" / "ablations" / f"{name}-design.json").read_text()
                == (tmp_path / "cap" / "ablations" / f"{name}-design.json").read_text())
    assert (tmp_path / "look" / "verdicts.csv").read_text() == (tmp_path / "cap" / "verdicts.csv").read_text()
    reports = {how: (tmp_path / how / "REPORT.md").read_text() for how in ("look", "cap")}
    assert "stopped at look 1 of 2 (3 seeds each)" in reports["cap"]
    assert "The table holds 4 more finished runs of these settings, at seeds the design did not reach" \
        in reports["cap"] and "more finished run" not in reports["look"]
    front = [line for line in reports["look"].splitlines() if "Pareto front of the setting means" in line]
    assert front and front == [line for line in reports["cap"].splitlines()
                               if "Pareto front of the setting means" in line]
    first = "s: every setting trains to the cap (5 seeds) at once; then the looks at 3/5 seeds are read in order"
    assert first in progress["cap"] and first not in progress["look"]
    assert "s: look 1 of 2 needs 3 seeds of every setting" in progress["look"]
    phases = {"t": 1, "s": 2}
    assert len(tables["look"]["t"]) == 6 and len(tables["look"]["s"]) == 10
    for name in ("t", "s"):
        runs = len(tables["look"][name])
        looks = f"the design took {phases[name]} look{'s' * (phases[name] > 1)} and reads {runs} runs"
        assert (f"SEEDS=auto, AUTO_TRAIN=look: each look's seeds trained as the design asked, in {phases[name]} "
                f"training phase{'s' * (phases[name] > 1)}; {looks}") in said["look"]
        rest = {"t": "; the other 4 stay out of the verdicts\n", "s": "\n"}[name]   # 10 trained, 6 or 10 read
        assert (f"SEEDS=auto, AUTO_TRAIN=cap: every open setting trained to the cap (5 seeds) at once, in 1 training "
                f"phase; {looks}{rest}") in said["cap"]


def _done_line(out: str) -> tuple[float, dict[str, float]]:
    """The closing summary's "Done in T s: part t s, ..." line: T and each part's seconds."""
    line = next(line for line in out.splitlines() if line.startswith("Done in "))
    total, parts = re.fullmatch(r"Done in ([\d.]+) s: (.*)\.", line).groups()
    return float(total), {m[1]: float(m[2]) for m in re.finditer(r"([a-z ]+?) ([\d.]+) s(?: in \d+ phases)?(?:, |$)", parts)}


def test_a_sweeps_summary_says_where_its_time_went_and_the_parts_add_up_to_its_wall_time(tmp_path, capsys):
    """The closing line splits the command's wall time (timed here, around the call) into its start, the cost
    phase, the training and the rest; a rerun with every run done has neither a cost phase nor training."""
    spec = write_spec(tmp_path / "d.toml", "depth", "[1, 2]")
    argv = ["sweep", str(spec), "--dataset", "digits", "--seeds", "0", "--cost-rounds", "2", "--device", "cpu",
            "--out", str(tmp_path / "out")]
    capsys.readouterr()
    wall = time.perf_counter()
    assert ablations_main(argv) == 0
    wall = time.perf_counter() - wall
    total, parts = _done_line(capsys.readouterr().out)
    order = ["start", "cost phase", "training", "the rest"]   # the start is left out where it is under 0.05 s
    assert [p for p in order if p in parts] == list(parts) and set(order[1:]) <= set(parts), parts
    assert wall - 0.3 <= total <= wall + 0.05 and abs(sum(parts.values()) - total) <= 0.25, (wall, total, parts)
    assert parts["cost phase"] > 0 and parts["training"] > 0
    assert ablations_main(argv) == 0
    total, parts = _done_line(capsys.readouterr().out)
    assert set(parts) <= {"start", "the rest"} and "the rest" in parts, parts


def test_another_adaptive_design_on_runs_already_read_under_one_is_refused_in_one_line(tmp_path, capsys):
    """SEEDS=auto:3,5 trains and reads its looks; SEEDS=auto:3 on the same OUT would drop runs and read the rest at
    the shorter design's more lenient levels: refused in one line (exit 2) before anything is trained or
    rewritten; the same design again is taken (nothing new)."""
    spec = write_spec(tmp_path / "s.toml", "depth", "[1, 2]", "embed_dim = 16\nnum_heads = 2\nmlp_ratio = 1.0",
                      "epochs = 1\nbatch_size = 128")
    out = tmp_path / "out"
    common = [str(spec), "--dataset", "digits", "--cost-rounds", "0", "--out", str(out)]
    assert ablations_main(["sweep", *common, "--seeds", "auto:3,5"]) == 0
    design = (out / "ablations" / "s-design.json").read_text()
    rows = read_table(out / "ablations" / "s.csv")
    capsys.readouterr()
    assert ablations_main(["sweep", *common, "--seeds", "auto:3"]) == 2
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(said) == 1 and "was trained under SEEDS=auto with looks at 3/5 seeds" in said[0]
    assert "Rerun with SEEDS=auto:3,5" in said[0]
    assert (out / "ablations" / "s-design.json").read_text() == design
    assert len(read_table(out / "ablations" / "s.csv")) == len(rows)
    assert ablations_main(["sweep", *common, "--seeds", "auto:3,5"]) == 0


def test_seeds_auto_is_refused_by_train_in_one_line(tmp_path, capsys):
    code, _, err = run_cli(ablations_main, ["train", "--seeds", "auto", "--out", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "SEEDS=auto compares a sweep's settings" in err
    assert not (tmp_path / "ablations").exists()


@pytest.mark.parametrize("args,said", [(["--jobs", "0"], "jobs must be auto or an integer ≥ 1, got '0'"),
                                       (["--jobs", "two"], "jobs must be auto or an integer ≥ 1, got 'two'"),
                                       (["--threads", "-1"], "must be a positive integer, got '-1'"),
                                       (["--threads", "1.5"], "must be a positive integer, got '1.5'"),
                                       (["--max-retries", "-1"], "must be an integer ≥ 0, got '-1'"),
                                       (["--cpus-per-task", "-1"], "must be a number ≥ 0, got '-1'"),
                                       (["--gpus-per-task", "nan"], "must be a number ≥ 0, got 'nan'")])
def test_bad_executor_options_are_one_line_and_exit_2_before_any_work_also_in_a_dry_run(tmp_path, capsys, args, said):
    for dry in ([], ["--dry-run"]):  # a dry run refuses what the run would
        code, _, err = run_cli(ablations_main, ["sweep", "depth", *args, *dry, "--out", str(tmp_path)], capsys)
        assert code == 2 and said in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())


def test_preset_auto_says_which_model_and_augmentation_it_stands_for(tmp_path, capsys):
    from vit import VisionTransformer

    assert ablations_main(["sweep", "depth", "--dataset", "digits", "--dry-run", "--out", str(tmp_path)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("model: preset auto")]
    cfg = PRESETS["vit_digits"].replace(img_size=8, in_chans=1, num_classes=10)
    params = sum(p.numel() for p in VisionTransformer(cfg).parameters())
    assert said == [f"model: preset auto is vit_digits at 8 px (digits): patch {cfg.patch_size}, width {cfg.embed_dim}, "
                    f"depth {cfg.depth}, {cfg.num_heads} heads, {cfg.stem} stem, {params:,} parameters, before each "
                    f"sweep's own changes; trained with random crops padded 1 px and no flips (the dataset's default; "
                    f"--set crop_padding=N, --set flip=true|false change them)"]
    assert ablations_main(["sweep", str(write_spec(tmp_path / "d.toml", "depth", "[1]")), "--dataset", "digits",
                           "--dry-run", "--out", str(tmp_path)]) == 0
    assert "preset auto" not in capsys.readouterr().err      # a named preset needs no such line


def test_without_a_makefile_the_next_step_is_told_as_the_vitbench_command(tmp_path, capsys, monkeypatch):
    """A pip-installed user has no Makefile: the sweep's closing line names `vitbench report`, not `make report`;
    in a checkout both forms."""
    from ablations import choices

    spec = write_spec(tmp_path / "d.toml", "depth", "[1]")
    argv = ["sweep", str(spec), "--dataset", "digits", "--epochs", "1", "--seeds", "0", "--cost-rounds", "0",
            "--out", str(tmp_path / "o")]
    assert choices.with_makefile()   # this checkout
    assert ablations_main(argv) == 0
    assert f"Next: make report OUT={tmp_path / 'o'} (or vitbench report --out {tmp_path / 'o'})" in \
        capsys.readouterr().out
    odd = tmp_path / "my res's"   # a word the shell must be given quoted; the Makefile's own quoting cannot take it
    assert ablations_main(argv[:-1] + [str(odd)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Next: "))
    assert line.startswith(f"Next: vitbench report --out {shlex.quote(str(odd))}: ") and "make " not in line
    assert shlex.split(line.split(": ", 1)[1].split(":", 1)[0])[-1] == str(odd)
    monkeypatch.setattr(choices, "SPEC_DIR", tmp_path / "site-packages" / "ablations" / "sweeps")
    assert not choices.with_makefile()
    assert ablations_main(argv) == 0
    out = capsys.readouterr().out
    assert f"Next: vitbench report --out {tmp_path / 'o'}: figures" in out and "make " not in out
