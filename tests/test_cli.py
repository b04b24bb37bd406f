"""python -m ablations and the Makefile as a user types them: what a command refuses, and what it prints."""

import subprocess
import sys
from pathlib import Path

from ablations.__main__ import main as ablations_main
from bench.csvio import read_rows
from conftest import write_spec

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--preset", "vit_digits", "--dataset", "digits", "--epochs", "1", "--cost-rounds", "0", "--device", "cpu"]


def test_train_refuses_a_field_the_dataset_fixes_before_any_work(tmp_path, capsys):
    for field in ("img_size=224", "num_classes=100", "in_chans=3"):
        assert ablations_main(["train", *QUICK, "--set", field, "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert f"--set {field}" in err and "fixed by the dataset (DATASET=digits)" in err
    assert not (tmp_path / "ablations").exists()


def test_make_train_prints_the_rows_of_its_own_runs_even_when_they_were_done_before(tmp_path, capsys):
    assert ablations_main(["train", *QUICK, "--seeds", "0,1", "--out", str(tmp_path)]) == 0
    ids = dict(zip(*(read_rows(tmp_path / "ablations" / "train.csv")[c] for c in ("seed", "run_id"))))
    capsys.readouterr()
    assert ablations_main(["train", *QUICK, "--seeds", "0", "--out", str(tmp_path)]) == 0  # already done: skipped
    out = capsys.readouterr().out
    table = out[out.index("run_id"):]
    assert "1 already done" in out and ids[0] in table and ids[1] not in table


def make_dry(*args) -> str:
    """The python command `make -n` prints (under `make test` this runs as a sub-make: no directory lines)."""
    out = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return next(line for line in out.splitlines() if " -m ablations " in line)


def test_make_download_and_data_root_reach_the_commands():
    assert "--download" in make_dry("ablate-depth", "DOWNLOAD=1")
    assert "--download" not in make_dry("ablate-depth")
    assert "--data-root /d" in make_dry("report", "DATA_ROOT=/d")


def test_specs_read_toml_without_tomllib_through_the_backport():
    # Python 3.10 has no tomllib; the spec reader must fall back to tomli (a dependency there)
    code = ("import sys; sys.modules['tomllib'] = None\n"
            "import ablations.specs as s\n"
            "spec = s.load_spec(s.find_spec('depth'))\n"
            "print(s.tomllib.__name__, spec.factor)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stdout.split() == ["tomli", "depth"]


def test_dry_run_lists_points_and_trains_nothing(tmp_path, capsys):
    spec = write_spec(tmp_path / "d.toml", "depth", "[1, 2]")
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path), "--dry-run",
                           "--seeds", "0,1"]) == 0
    out = capsys.readouterr().out
    assert out.count("depth=1") == 2 and out.count("depth=2") == 2 and "no" in out
    assert not (tmp_path / "ablations").exists()
