import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_thread_per_test_worker():
    """Under pytest-xdist (`make test` runs one worker per core) each worker's own torch work runs on one
    thread: two workers with two OpenMP threads each on two cores spin and wait on each other."""
    import os

    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Parsed datasets and matmul peaks go to a cache of this session, not the user's ~/.cache/vitbench
    (a test may point VITBENCH_CACHE elsewhere)."""
    import os

    previous = os.environ.get("VITBENCH_CACHE")
    os.environ["VITBENCH_CACHE"] = str(tmp_path_factory.mktemp("vitbench-cache"))
    yield
    if previous is None:
        os.environ.pop("VITBENCH_CACHE", None)
    else:
        os.environ["VITBENCH_CACHE"] = previous


@pytest.fixture(autouse=True)
def _cpu_unless_marked_gpu(request, monkeypatch):
    """On a GPU machine too, a test not marked `gpu` runs on the CPU, where runs are bit-reproducible and
    the exact-equality tests (resume, crashes, JOBS=2) hold: CUDA is hidden from it and from the processes
    it starts. The tests marked `gpu` (`make test-gpu`) see the GPU."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    yield


@pytest.fixture(autouse=True)
def _quiet_machine(request, monkeypatch):
    """A test that is not about the load meter must not depend on the machine's load (a user's `make test`
    beside other work): its timed regions see a quiet machine, all CPU time in them being the test's own
    (`/proc/stat`'s busy time read as this process's CPU time), so the meter's arithmetic runs and flags
    nothing. Tests marked `load_meter` read the real machine."""
    if request.node.get_closest_marker("load_meter") is None:
        import time

        from bench import contention

        monkeypatch.setattr(contention, "_cpu_busy_s", time.process_time)
    yield


@pytest.fixture(autouse=True)
def _runs_in_this_process(monkeypatch):
    """A command run inside a test (not a subprocess) trains in the test's process, as JOBS=1 does, so the
    test's fakes and captured output reach its runs; JOBS=auto itself is tested through the pool and a
    subprocess (tests/test_jobs.py)."""
    from ablations.running.executors import local

    monkeypatch.setattr(local, "auto_jobs", lambda device, threads=False: 1)
    yield


@pytest.fixture(autouse=True)
def _no_phase_given_up_before(monkeypatch):
    """Each test starts as a command does, with no cost phase given up (`cost.GIVEN_UP` lasts a process): two tests
    that ask for the same phase each measure it."""
    from ablations.running import cost

    monkeypatch.setattr(cost, "GIVEN_UP", set())
    yield


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


ROOT = Path(__file__).resolve().parents[1]
# the Makefile's own settings (NAME ?= ...): a `make test INSTALL=0 SEEDS=0 ...` running this suite exports them
MAKE_SETTINGS = frozenset(re.findall(r"^\s*([A-Z_]+)\s*\?=", (ROOT / "Makefile").read_text(), flags=re.M))


@pytest.fixture
def capturable_on_cpu(monkeypatch):
    """AdamW's `capturable` path on the CPU: torch allows it on CUDA only, and its arithmetic is the same tensor
    ops on either device (step counts and learning rates read from tensors, for a CUDA graph)."""
    import torch.optim.adam as adam
    if not hasattr(adam, "_get_capturable_supported_devices"):
        pytest.skip("this torch checks AdamW's capturable devices elsewhere")
    monkeypatch.setattr(adam, "_get_capturable_supported_devices", lambda supports_xla=True: ["cuda", "cpu"])


def user_make(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
    """`make ARGS` in the checkout as a user would call it: not inheriting the flags or the variables of a
    `make test` that runs this suite (MAKEFLAGS passes its flags down; the variables given to it are
    exported to its commands)."""
    import os
    import subprocess

    drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", *MAKE_SETTINGS}
    clean = {k: v for k, v in (os.environ if env is None else env).items() if k not in drop}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=clean)


def run_cli(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """A command line run in this process, as a refusal test needs it: (exit status, stdout, stderr),
    argparse's exit included."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    done = capsys.readouterr()
    return code, done.out, done.err


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64."""
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def write_spec(path: Path, factor: str, values: str, model: str = "", train: str = "epochs = 1") -> Path:
    """A sweep spec on the vit_digits base, for tests."""
    path.write_text(f'[sweep]\nfactor = "{factor}"\nvalues = {values}\n\n[model]\npreset = "vit_digits"\n{model}\n\n'
                    f"[train]\n{train}\n")
    return path


def kill_after_first_row(cmd: list[str], env: dict[str, str], csv: Path, timeout_s: float = 240):
    """Start a sweep command, SIGKILL it as soon as its table has a row; returns the table then."""
    import signal
    import subprocess
    import time

    from ablations.results.schema import read_table

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout_s
    while time.time() < deadline and not (csv.exists() and len(read_table(csv)) >= 1):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return read_table(csv)
