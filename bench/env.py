"""Environment columns of every row, and the stable run id."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from bench.units import count

if TYPE_CHECKING:
    import torch


def cache_dir() -> Path:
    """vitbench's cache folder: $VITBENCH_CACHE, default ~/.cache/vitbench (matmul peaks, parsed datasets)."""
    return Path(os.environ.get("VITBENCH_CACHE", Path.home() / ".cache" / "vitbench"))


def device_name(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def allowed_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system says, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def resolve_device(name: str = "auto") -> torch.device:
    """`auto` → cuda if available else cpu. Asking for CUDA without one is an error that says so."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"unknown device {name!r}: use auto, cpu, cuda or cuda:N") from err
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but torch {torch.__version__} sees no CUDA GPU here; "
                             f"use DEVICE=cpu or DEVICE=auto")
        if (device.index or 0) >= torch.cuda.device_count():
            raise ValueError(f"device {name!r} asked for, but torch sees {count(torch.cuda.device_count(), 'GPU')}")
    elif device.type != "cpu":
        raise ValueError(f"device {name!r} is not supported: use auto, cpu, cuda or cuda:N")
    return device


def deterministic_algorithms() -> None:
    """torch's deterministic algorithms for this process (warn only where an op has none) and cuBLAS's fixed
    workspace, which cuBLAS reads once: call before CUDA starts."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)


def set_cudnn_attention(setting: str) -> None:
    """Whether `F.scaled_dot_product_attention` (the `sdpa` attention) may pick cuDNN's kernel in this process:
    `auto`, torch's own order (cuDNN's first on Hopper and Blackwell GPUs with a recent cuDNN, which plans each
    attention shape once per thread before its first call); `off`, never: flash, memory-efficient or math
    attention, which plan nothing. torch keeps one flag for the process; the CPU's kernels do not read it."""
    check_cudnn_attention(setting)
    import torch

    torch.backends.cuda.enable_cudnn_sdp(setting == "auto")


def check_cudnn_attention(setting: str) -> None:
    """ValueError naming `setting` unless it is one of CUDNN_ATTENTION."""
    from bench.choices import CUDNN_ATTENTION

    if setting not in CUDNN_ATTENTION:
        raise ValueError(f"cudnn_attention={setting!r} is unknown; choose one of {list(CUDNN_ATTENTION)}")


@contextlib.contextmanager
def cudnn_attention(setting: str):
    """`set_cudnn_attention(setting)` for the block, torch's flag as it was afterwards (whatever the block raised)."""
    import torch

    before = torch.backends.cuda.cudnn_sdp_enabled()
    set_cudnn_attention(setting)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def environment(device: torch.device) -> dict[str, str]:
    import torch

    return {"started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git_sha": git_sha(), "host": socket.gethostname(), "device": device.type,
            "device_name": device_name(device), "torch_version": torch.__version__}


def run_id(fields: dict) -> str:
    """Stable 12-hex hash of everything that defines a row (key order does not matter)."""
    blob = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
