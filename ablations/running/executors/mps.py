"""CUDA MPS (Multi-Process Service) for the local executor's workers that share a GPU.

Processes on one GPU without MPS take turns: the GPU time-slices between their contexts, so several
runs per GPU overlap only their host-side work (start-up, data, Python), and a run whose step is one
CUDA graph keeps the GPU to itself while its slice lasts. Under MPS the workers' kernels run at the
same time, as if from one process.

`Mps(mode)`: `off` does nothing. `auto` and `on` use a daemon that already serves this user (its pipe
folder in `CUDA_MPS_PIPE_DIRECTORY`, or the default `/tmp/nvidia-mps`, whose daemon answers
`get_server_list`: a control pipe left behind by a daemon that is gone is stale, not MPS), as it is; otherwise they start
a private one (`nvidia-cuda-mps-control -d` with pipe and log folders of its own, so a system daemon is
never touched), check that a CUDA client can work under it (one short process), and stop it (`quit`)
when the executor closes. Where that cannot be done (no `nvidia-cuda-mps-control` on PATH, the daemon or
the check fails), `auto` goes on without MPS and says why; `on` stops the command before any run. The
GPU's compute mode and settings are never changed. Only the workers are MPS clients (the environment
they are started with); the driver, which measures the cost phase alone, is not. So a GPU whose compute
mode admits one process at a time (EXCLUSIVE_PROCESS) cannot hold the driver's context beside its
workers', MPS or not: `shared_gpu_refusal` says so before anything starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = ("auto", "on", "off")
BINARY = "nvidia-cuda-mps-control"
DEFAULT_PIPE = Path("/tmp/nvidia-mps")
# a CUDA client under the daemon: creates a context, runs a kernel, waits for it
PROBE = (sys.executable, "-c", "import torch; torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize()")
TIMEOUT_S = 120.0
ASK_TIMEOUT_S = 10.0   # a daemon answers its control pipe at once; a stale pipe fails at once
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}  # nvmlComputeMode_t


def compute_mode(index: int) -> str | None:
    """NVML's compute mode of CUDA device `index` (found by its UUID), or None where NVML cannot say."""
    try:
        import torch

        from bench.nvml import nvml_device

        pynvml, handle = nvml_device(torch.device("cuda", index))
        mode = pynvml.nvmlDeviceGetComputeMode(handle)
    except Exception:  # no NVML, no such device: nothing to refuse on
        return None
    return COMPUTE_MODES.get(int(mode), f"mode {mode}")


def shared_gpu_refusal(indices: list[int], jobs: int) -> str:
    """'' where each of these GPUs lets several processes hold a context (the driver, which measures the
    cost phase on it, and `jobs` workers); else why not, in a line."""
    for index in indices:
        mode = compute_mode(index)
        if mode == "PROHIBITED":
            return f"GPU {index} is in PROHIBITED compute mode: no CUDA process may use it (DEVICE=cpu, or another GPU)"
        if mode in ("EXCLUSIVE_PROCESS", "EXCLUSIVE_THREAD"):
            return (f"GPU {index} is in {mode} compute mode, which admits one process at a time, and JOBS={jobs} "
                    f"runs workers beside this process (which measures the cost phase on it): run with JOBS=1, "
                    f"or on a GPU in DEFAULT mode")
    return ""


class Mps:
    """The MPS state of one executor: `start()` says in words how the workers share their GPU, `env` is
    what the workers are started with, `close()` stops a daemon that `start` started."""

    def __init__(self, mode: str = "auto") -> None:
        if mode not in MODES:
            raise ValueError(f"mps must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.env: dict[str, str] = {}
        self.own: Path | None = None  # the private daemon's folder, while it runs
        self.stale = ""               # a control pipe found with no daemon behind it

    def start(self) -> str:
        if self.mode == "off":
            return "time-sliced (MPS=off)"
        running = self._running()
        if running:
            self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(running)}
            return f"under the MPS daemon already running ({running})"
        binary = shutil.which(BINARY)
        why = f"no {BINARY} on PATH" if binary is None else self._start_own(binary)
        stale = f"; {self.stale}" if self.stale else ""
        if why:
            if self.mode == "on":
                raise ValueError(f"MPS=on: {why}{stale}")
            return f"time-sliced (no MPS: {why}{stale})"
        return f"under a private MPS daemon ({self.own}{stale})"

    def _running(self) -> Path | None:
        """The pipe folder of a daemon that serves this user and answers; a control pipe whose daemon does not
        answer is noted in `stale` (left as it is)."""
        folder = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE)
        if not (folder / "control").exists():
            return None
        binary = shutil.which(BINARY)
        if binary is None:   # nothing to ask it with: the workers will find out, as any MPS client would
            return folder
        saved, self.env = self.env, {"CUDA_MPS_PIPE_DIRECTORY": str(folder)}
        answer = self._call([binary], "get_server_list\n", ASK_TIMEOUT_S)
        self.env = saved
        if answer:
            self.stale = f"{folder / 'control'} is stale ({answer})"
            return None
        return folder

    def _start_own(self, binary: str) -> str:
        """Start a private daemon and check a client under it; '' when it works, else why not (and nothing left running)."""
        folder = Path(tempfile.mkdtemp(prefix="vitbench-mps-"))
        env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
        for sub in ("pipe", "log"):
            (folder / sub).mkdir()
        self.own, self.env = folder, env
        try:
            started = self._call([binary, "-d"], "")
            if started:
                self.close()
                return f"the daemon did not start: {started}"
            checked = self._call(list(PROBE), None)
        except BaseException:  # Ctrl-C while it starts: no daemon is left behind
            self.close()
            raise
        if checked:
            self.close()
            return f"a CUDA process under it failed: {checked}"
        return ""

    def _call(self, argv: list[str], stdin: str | None, timeout_s: float = TIMEOUT_S) -> str:
        """'' when `argv`, run with the daemon's folders, exits 0 within `timeout_s`, else the last line it
        wrote (or how it ended)."""
        try:
            done = subprocess.run(argv, input=stdin, env={**os.environ, **self.env}, text=True,
                                  capture_output=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{type(err).__name__}: {err}"
        if done.returncode == 0:
            return ""
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[-1][:200] if lines else f"exit status {done.returncode}"

    def close(self) -> None:
        """Stop the private daemon (its server ends with it) and remove its folder; a daemon found running is left."""
        if self.own is None:
            return
        binary = shutil.which(BINARY)
        if binary is not None:
            self._call([binary], "quit\n")
        shutil.rmtree(self.own, ignore_errors=True)
        self.own, self.env = None, {}
