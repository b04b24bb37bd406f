"""CUDA MPS for workers that share a GPU, with a fake `nvidia-cuda-mps-control` and a fake CUDA client: a
private daemon is started, checked, handed to the workers and stopped; each way it can fail says why and
leaves nothing running; a daemon already running is used and left alone."""

import os
import sys
from pathlib import Path

import pytest
import torch
from test_jobs import _no_data, _tasks

import ablations.running.executors.mps as mps
from ablations.running.executors import ExecutorOptions
from ablations.running.executors.local import LocalExecutor
from ablations.running.executors.mps import Mps
from ablations.running.tasks import RunResult

FAKE = """#!/bin/sh
input=$(cat)
echo "$* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY stdin=$input" >> "{log}"
if [ "$1" = "-d" ] && [ -n "$FAKE_MPS_FAIL" ]; then echo "$FAKE_MPS_FAIL" >&2; exit 1; fi
if [ "$input" = "get_server_list" ] && [ -n "$FAKE_MPS_STALE" ]; then
    echo "Cannot find MPS control daemon process" >&2; exit 1
fi
exit 0
"""
CLIENT_OK = (sys.executable, "-c", "import os, sys; sys.exit(0 if os.environ['CUDA_MPS_PIPE_DIRECTORY'] else 3)")
CLIENT_FAILS = (sys.executable, "-c", "import sys; sys.exit('RuntimeError: CUDA error: MPS client failed to connect')")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake daemon binary on PATH whose calls go to a log; no daemon found running."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    script = bin_dir / mps.BINARY
    script.write_text(FAKE.format(log=log))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr(mps, "DEFAULT_PIPE", tmp_path / "no-daemon")
    monkeypatch.setattr(mps, "PROBE", CLIENT_OK)
    return log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_private_daemon_is_started_checked_given_to_the_workers_and_stopped(fake):
    m = Mps("auto")
    said = m.start()
    folder = m.own
    assert said == f"under a private MPS daemon ({folder})" and folder.is_dir()
    assert m.env == {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    assert calls(fake) == [f"-d pipe={folder}/pipe log={folder}/log stdin="]
    m.close()
    assert calls(fake)[1] == f" pipe={folder}/pipe log={folder}/log stdin=quit"  # the same daemon, told to quit
    assert not folder.exists() and m.env == {}
    m.close()
    assert len(calls(fake)) == 2  # closing twice quits once


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_without_the_binary_auto_goes_on_time_sliced_and_on_stops(monkeypatch, tmp_path, mode):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr(mps, "DEFAULT_PIPE", tmp_path / "no-daemon")
    if mode == "auto":
        assert Mps(mode).start() == "time-sliced (no MPS: no nvidia-cuda-mps-control on PATH)"
    else:
        with pytest.raises(ValueError, match="^MPS=on: no nvidia-cuda-mps-control on PATH$"):
            Mps(mode).start()


def test_a_daemon_that_does_not_start_is_named_and_leaves_nothing(fake, monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # its own temporary folder: other tests start daemons
    monkeypatch.setenv("FAKE_MPS_FAIL", "An instance of this daemon is already running")
    m = Mps("auto")
    assert m.start() == ("time-sliced (no MPS: the daemon did not start: An instance of this daemon is already "
                         "running)")
    assert m.own is None and m.env == {} and calls(fake)[-1].startswith(" pipe=")  # quit anyway, to be sure
    with pytest.raises(ValueError, match="MPS=on: the daemon did not start"):
        Mps("on").start()
    assert not list(tmp_path.glob("vitbench-mps-*"))


def test_a_client_that_fails_under_the_daemon_stops_it_and_says_why(fake, monkeypatch):
    monkeypatch.setattr(mps, "PROBE", CLIENT_FAILS)
    m = Mps("auto")
    assert m.start() == ("time-sliced (no MPS: a CUDA process under it failed: RuntimeError: CUDA error: MPS client "
                         "failed to connect)")
    assert [c.split(" pipe=")[0] for c in calls(fake)] == ["-d", ""]  # started, then told to quit
    assert m.own is None


def test_a_daemon_already_running_is_used_as_is_and_left_running(fake, monkeypatch, tmp_path):
    pipe = tmp_path / "theirs"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    m = Mps("on")
    assert m.start() == f"under the MPS daemon already running ({pipe})"
    assert m.env == {"CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
    m.close()
    assert calls(fake) == [f" pipe={pipe} log= stdin=get_server_list"]  # asked whether it answers; not started nor stopped


def test_a_control_pipe_whose_daemon_is_gone_is_stale_and_a_private_daemon_serves(fake, monkeypatch, tmp_path):
    """/tmp/nvidia-mps/control left behind by a daemon that died: workers pointed at it would time-slice
    while the start line said MPS. The daemon is asked first; a pipe that does not answer is said stale."""
    pipe = tmp_path / "left-behind"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setattr(mps, "DEFAULT_PIPE", pipe)
    monkeypatch.setenv("FAKE_MPS_STALE", "1")
    m = Mps("auto")
    said = m.start()
    assert said == (f"under a private MPS daemon ({m.own}; {pipe}/control is stale (Cannot find MPS control daemon "
                    f"process))")
    assert m.env["CUDA_MPS_PIPE_DIRECTORY"] == str(m.own / "pipe")
    m.close()


def _gpus_in_mode(monkeypatch, mode: int, count: int = 1) -> None:
    """CUDA with `count` GPUs whose NVML compute mode is `mode` (nvmlComputeMode_t), found by UUID."""
    import types

    fake_nvml = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
                                      nvmlDeviceGetComputeMode=lambda handle: mode)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(uuid=f"GPU-{d}"))


@pytest.mark.parametrize("mode, name", [(3, "EXCLUSIVE_PROCESS"), (2, "PROHIBITED")])
def test_a_gpu_that_admits_one_process_refuses_workers_in_a_line_before_any_daemon(fake, monkeypatch, mode, name):
    """In EXCLUSIVE_PROCESS compute mode the driver (which measures the cost phase on the GPU) and its
    workers cannot each hold a context, MPS or not: JOBS=2 is refused in one line before anything starts;
    JOBS=1 (runs in this process) goes on, and so do JOBS=2 runs side by side in this process (WORKERS=auto on
    one GPU: one context) where the mode admits one process."""
    _gpus_in_mode(monkeypatch, mode)
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cuda", workers="processes"))
    with pytest.raises(ValueError) as err:
        executor.start()
    assert f"GPU 0 is in {name} compute mode" in str(err.value) and "\n" not in str(err.value)
    assert calls(fake) == []                                   # no daemon started, so none left behind
    assert LocalExecutor(ExecutorOptions(jobs=1, device="cuda")).start().startswith("local: this process")
    threads = LocalExecutor(ExecutorOptions(jobs=2, device="cuda"))
    if name == "PROHIBITED":
        with pytest.raises(ValueError, match="PROHIBITED compute mode"):
            threads.start()
    else:
        assert threads.start().startswith("local: up to 2 runs at once in this process") and threads.mps is None
    assert calls(fake) == []


def test_a_gpu_in_default_mode_is_shared_as_before(fake, monkeypatch):
    _gpus_in_mode(monkeypatch, 0)
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cuda", workers="processes"))
    try:
        assert "under a private MPS daemon" in executor.start()
    finally:
        executor.close()


def test_off_and_bad_modes(fake):
    assert Mps("off").start() == "time-sliced (MPS=off)" and calls(fake) == []
    with pytest.raises(ValueError, match="mps must be one of auto, on, off, got 'yes'"):
        Mps("yes")
    with pytest.raises(ValueError, match="mps must be auto, on or off, got 'yes'"):
        ExecutorOptions(mps="yes")


def _pipe_folder(task, data):
    return RunResult({"run_id": task.run_id, "seed": task.seed, "status": "ok",
                    "pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY")})


def test_workers_sharing_a_gpu_run_under_the_daemon_and_one_worker_per_gpu_needs_none(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cuda", workers="processes"))
    line = executor.start()
    folder = executor.mps.own
    assert line.startswith("local: up to 2 runs at once, sharing the GPU, under a private MPS daemon")
    try:
        got = list(executor.run(_tasks(tmp_path, (0, 1, 2)), _pipe_folder, _no_data))
    finally:
        executor.close()
    assert {o.row["pipe"] for _, o in got} == {str(folder / "pipe")}
    assert calls(fake)[-1].endswith("stdin=quit") and not folder.exists()
    assert LocalExecutor(ExecutorOptions(jobs=1, device="cuda")).mps is None
    assert LocalExecutor(ExecutorOptions(jobs=2, device="cuda")).mps is None  # one GPU: runs in this process
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert LocalExecutor(ExecutorOptions(jobs=2, device="cuda")).mps is None  # one worker per GPU
    assert LocalExecutor(ExecutorOptions(jobs=3, device="cuda")).mps is not None
    assert LocalExecutor(ExecutorOptions(jobs=2, device="cuda:1", workers="processes")).mps is not None  # both on GPU 1


@pytest.mark.slow
def test_the_gpu_check_says_which_cost_rows_ran_beside_other_work(tmp_path):
    """`.ci/gpu` starts with its preflight (on this machine: no driver), and `check-cost` counts the rows of the
    graphs and eager runs' cost tables taken while other work used the machine, naming what NVML saw."""
    import subprocess

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    for run, flags in (("graphs", [0, 1, 0]), ("eager", [0, 0, 0])):
        (tmp_path / run / "ablations").mkdir(parents=True)
        pd.DataFrame({"contended": flags, "gpu_procs_seen": ["ours 1", "ours 1, other 1", "ours 1"]}).to_csv(
            tmp_path / run / "ablations" / "depth-cost.csv", index=False)
    done = subprocess.run(["bash", str(root / ".ci" / "gpu"), "check-cost"], cwd=root, capture_output=True,
                          text=True, env={**os.environ, "OUT": str(tmp_path), "PY": sys.executable}, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "summary.txt").read_text()
    assert "## preflight" in summary and "torch " in summary
    assert ("graphs: cost tables: 1, 3 rows, 1 contended (WARNING: their speed is left out; NVML saw: ours 1; "
            "ours 1, other 1)") in summary
    assert "eager: cost tables: 1, 3 rows, 0 contended; GPU processes seen: ours 1" in summary
