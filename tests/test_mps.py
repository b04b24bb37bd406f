"""CUDA MPS for workers that share a GPU, with a fake `nvidia-cuda-mps-control` and a fake CUDA client: a
private daemon is started, checked, handed to the workers and stopped; each way it can fail says why and
leaves nothing running; a daemon already running is used and left alone."""

import os
import sys
from pathlib import Path

import pytest
import torch
from test_jobs import _no_data, _tasks

import ablations.executors.mps as mps
from ablations.executors import ExecutorOptions
from ablations.executors.local import LocalExecutor
from ablations.executors.mps import Mps
from ablations.tasks import Outcome

FAKE = """#!/bin/sh
echo "$* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY stdin=$(cat)" >> "{log}"
if [ "$1" = "-d" ] && [ -n "$FAKE_MPS_FAIL" ]; then echo "$FAKE_MPS_FAIL" >&2; exit 1; fi
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


def test_a_daemon_that_does_not_start_is_named_and_leaves_nothing(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_FAIL", "An instance of this daemon is already running")
    m = Mps("auto")
    assert m.start() == ("time-sliced (no MPS: the daemon did not start: An instance of this daemon is already "
                         "running)")
    assert m.own is None and m.env == {} and calls(fake)[-1].startswith(" pipe=")  # quit anyway, to be sure
    with pytest.raises(ValueError, match="MPS=on: the daemon did not start"):
        Mps("on").start()
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("vitbench-mps-*"))


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
    assert calls(fake) == []  # neither started nor stopped


def test_off_and_bad_modes(fake):
    assert Mps("off").start() == "time-sliced (MPS=off)" and calls(fake) == []
    with pytest.raises(ValueError, match="mps must be one of auto, on, off, got 'yes'"):
        Mps("yes")
    with pytest.raises(ValueError, match="mps must be auto, on or off, got 'yes'"):
        ExecutorOptions(mps="yes")


def _pipe_folder(task, data):
    return Outcome({"run_id": task.run_id, "seed": task.seed, "status": "ok",
                    "pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY")})


def test_workers_sharing_a_gpu_run_under_the_daemon_and_one_worker_per_gpu_needs_none(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cuda"))
    line = executor.start()
    folder = executor.mps.own
    assert line.startswith("local: 2 runs at once, sharing the GPU, under a private MPS daemon")
    try:
        got = list(executor.run(_tasks(tmp_path, (0, 1, 2)), _pipe_folder, _no_data))
    finally:
        executor.close()
    assert {o.row["pipe"] for _, o in got} == {str(folder / "pipe")}
    assert calls(fake)[-1].endswith("stdin=quit") and not folder.exists()
    assert LocalExecutor(ExecutorOptions(jobs=1, device="cuda")).mps is None
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert LocalExecutor(ExecutorOptions(jobs=2, device="cuda")).mps is None  # one worker per GPU
    assert LocalExecutor(ExecutorOptions(jobs=3, device="cuda")).mps is not None
    assert LocalExecutor(ExecutorOptions(jobs=2, device="cuda:1")).mps is not None  # both on GPU 1
