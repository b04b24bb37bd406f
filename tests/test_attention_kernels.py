"""`benchmarks/attention_kernels.py` on the CPU: a setting's process measures every distinct model of the sweeps, each
step it times, the kernel torch picks for each model's attention, and the flag it ran under; a wrong setting is refused
in one line before anything runs."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import benchmark_module
from torch.nn.attention import SDPBackend

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def attention_kernels():
    return benchmark_module("attention_kernels")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


def test_a_settings_process_times_every_model_and_step_and_names_the_kernel_each_attention_gets(attention_kernels):
    args = argparse.Namespace(device="cpu", dataset="digits", sweeps="heads", repeats=2)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        got = attention_kernels.measure("no-cudnn", args)
        flag_in_it = torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
    models = attention_kernels.models(args)
    assert got["models"] == len(models) == 4 and not got["cudnn_sdp"] and not flag_in_it
    assert sorted(got["picked"]) == sorted(label for label, _, _ in models)
    names = {b.name for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)}
    assert set(got["picked"].values()) <= names   # every model's attention went through torch's SDPA, not cuDNN
    assert set(got["first_by_step"]) == set(attention_kernels.STEPS)   # digits: 1,437 images, a last batch of 29
    assert got["train_ms"] > 0 and got["first_s"] >= 0 and got["second_s"] >= 0


def test_an_unknown_setting_is_refused_in_one_line_before_anything_runs():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "attention_kernels.py"), "--kernels", "auto,fast",
                           "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--kernels: 'fast' is not one of auto, no-cudnn" in done.stderr.splitlines()[-1]


def test_a_settings_process_finds_the_project_and_whatever_the_callers_python_path_holds(attention_kernels, monkeypatch):
    """On a machine whose missing packages come from a folder on PYTHONPATH (the GPU lease's wheels), the measuring
    process must still import them."""
    seen = {}

    def run(argv, **kwargs):
        seen.update(argv=argv, env=kwargs["env"])
        return subprocess.CompletedProcess(argv, 0, stdout='{"setting": "auto"}\n', stderr="")
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    monkeypatch.setattr(attention_kernels.subprocess, "run", run)
    args = argparse.Namespace(device="cuda", dataset="mnist5k", repeats=20, sweeps="")
    assert attention_kernels.in_fresh_process("auto", args) == {"setting": "auto"}
    assert seen["env"]["PYTHONPATH"].split(":") == [str(ROOT), "/tmp/site"]
    assert seen["argv"][seen["argv"].index("--child") + 1] == "auto"
