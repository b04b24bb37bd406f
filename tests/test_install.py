"""Running in the user's environment: `make … INSTALL=0 PY=…` uses the Python at hand with no venv and no
install step (so no network), after checking that it imports every requirement; one missing is named."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import user_make as make

from ablations.cli.envcheck import required

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_install_0_runs_with_the_python_at_hand_and_no_install_step(tmp_path):
    planned = make("-n", "ablations", "INSTALL=0", f"PY={sys.executable}", "DRY_RUN=1", f"OUT={tmp_path}")
    assert planned.returncode == 0
    assert "pip install" not in planned.stdout and "-m venv" not in planned.stdout  # no install: no network needed
    assert f"{sys.executable} -m ablations.cli.envcheck" in planned.stdout
    done = make("ablations", "INSTALL=0", f"PY={sys.executable}", "DRY_RUN=1", f"OUT={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert "every module vitbench needs is installed" in done.stdout and "sweep patch:" in done.stdout
    assert done.stdout.count("ablations.cli.envcheck") <= 1   # checked once, not again for the report


def _without(module: str, tmp_path: Path) -> dict[str, str]:
    """An environment in which the Python that make runs cannot find `module` (the check finds modules without
    importing them)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Gone:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r}:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Gone())\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def test_install_0_asks_for_the_test_extra_only_where_a_goal_runs_the_suite_or_the_linter(tmp_path):
    """A GPU box's Python with the project's requirements but not its test tools (ruff here) runs the sweeps;
    the goals that lint or test say in one line what they lack."""
    env = _without("ruff", tmp_path)
    done = make("ablations", "INSTALL=0", f"PY={sys.executable}", "DRY_RUN=1", f"OUT={tmp_path / 'out'}", env=env)
    assert done.returncode == 0, done.stderr
    assert "every module vitbench needs is installed" in done.stdout and "sweep patch:" in done.stdout
    lint = make("lint", "INSTALL=0", f"PY={sys.executable}", env=env)
    errors = [line for line in lint.stderr.splitlines() if line.startswith("error:")]
    assert lint.returncode != 0 and len(errors) == 1 and "cannot import ruff;" in errors[0]
    assert "pip install -e '.[test]'" in errors[0]


def test_install_0_names_a_missing_module_in_one_line(tmp_path):
    env = _without("einops", tmp_path)
    done = make("ablations", "INSTALL=0", f"PY={sys.executable}", "DRY_RUN=1", f"OUT={tmp_path / 'out'}", env=env)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot import einops;" in errors[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # stopped before any work


def test_the_check_reads_every_requirement_of_pyproject_with_its_module_name():
    names = required(["test"])
    assert {"torch", "torchvision", "einops", "sklearn", "pynvml", "pytest", "pytest_benchmark", "ruff"} <= set(names)
    assert ("tomli" in required([])) == (sys.version_info < (3, 11))  # a marker that applies or not
    # the test extra's tomli only tests the 3.10 fallback: a Python with tomllib is not asked for it
    assert ("tomli" in required(["test"])) == (sys.version_info < (3, 11))


def test_new_extras_on_an_existing_venv_install_what_it_lacks(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-test").touch()          # a venv installed with the default extras, newer than pyproject
    same = make("-n", "install", f"VENV={venv}", "EXTRAS=test")
    assert same.returncode == 0 and "pip install" not in same.stdout
    more = make("-n", "install", f"VENV={venv}", "EXTRAS=test,tensorboard")  # the line the TENSORBOARD=1 error gives
    assert more.returncode == 0 and "pip install --quiet -e '.[test,tensorboard]'" in more.stdout
    stamp = next(line for line in more.stdout.splitlines() if ".installed-" in line)   # the recipe's last line
    subprocess.run(stamp.replace(f"{venv}/bin/python", sys.executable), shell=True, check=True, cwd=ROOT)
    assert {p.name for p in venv.glob(".installed-*")} == {".installed-test", ".installed-tensorboard",
                                                          ".installed-test-tensorboard"}
    for extras in ("test", "tensorboard", "test,tensorboard"):   # what an install with more extras holds
        again = make("-n", "install", f"VENV={venv}", f"EXTRAS={extras}")
        assert again.returncode == 0 and "pip install" not in again.stdout, extras


def test_the_wheel_installs_the_three_packages_only_and_builds_without_a_deprecation(tmp_path):
    """`pip install .` from a clean copy: the wheel holds vit, bench and ablations (not the benchmarks/ folder of
    pytest files), its licence as an SPDX expression, and the build says nothing about a deprecated table."""
    import shutil
    import zipfile

    src = tmp_path / "src"
    top = {".venv", ".git", "results", "data", "build"}
    shutil.copytree(ROOT, src, ignore=lambda folder, names: [n for n in names if (Path(folder) == ROOT and n in top)
                                                             or n.endswith(".egg-info") or n == "__pycache__"])
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                            str(tmp_path / "wheel"), str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "deprecat" not in (built.stdout + built.stderr).lower(), built.stderr[-2000:]
    wheel = zipfile.ZipFile(next((tmp_path / "wheel").glob("vitbench-*.whl")))
    assert {name.split("/")[0] for name in wheel.namelist()} == {"ablations", "bench", "vit", "vitbench-0.1.0.dist-info"}
    metadata = wheel.read("vitbench-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "ablations/sweeps/depth.toml" in wheel.namelist() and "vit/presets.toml" in wheel.namelist()
    assert "ablations/results/store.py" in wheel.namelist() and "bench/training/step.py" in wheel.namelist()
