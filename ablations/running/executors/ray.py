"""Runs a sweep's tasks on a Ray cluster (`EXECUTOR=ray`, `--executor ray`); Ray is the optional extra `ray`.

- Cluster: `RAY_ADDRESS` joins a running cluster (`ray start --head` on one node,
  `ray start --address=<head>:6379` on the others); without it a local one is started here.
  Joining a cluster ships this checkout's `vit`, `bench` and `ablations` packages with the job
  (`runtime_env py_modules`), so the nodes need only the dependencies, not the repository.
- Placement: one GPU per task where the cluster has GPUs, else one CPU (`cpus_per_task`,
  `gpus_per_task` override); each task sets torch's thread count to the CPUs it was given.
- Data: the driver loads the dataset once and puts it in Ray's object store, and an INIT checkpoint's
  bytes likewise; workers read both from there, so no node needs DATA_ROOT or the driver's files.
  Results (row, history, weights) come back to the driver, which alone writes files: no shared
  filesystem.
- Faults: a task whose worker process dies (killed, out of host memory, node lost) is retried up to
  `max_retries` times by Ray, then recorded as an `error` row; the other tasks go on.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ablations.running.executors.base import ExecutorOptions, Loader, RunFn
from ablations.running.tasks import RunResult, Task, lost_outcome
from ablations.training.data import Dataset
from bench.units import count

INSTALL_HINT = "EXECUTOR=ray needs Ray: pip install -e '.[ray]' (or pip install 'ray>=2.9')"


def _import_ray():
    try:
        import ray
    except ImportError as err:
        raise ValueError(f"{INSTALL_HINT} ({err})") from None
    return ray


def _run_on_worker(fn: RunFn, task: Task, data: Dataset, threads: int, init: bytes | None) -> RunResult:
    """The body of each Ray task: size torch's thread pool to the task's CPUs, put the driver's INIT
    checkpoint (its bytes) in a local file, then run the same function the local executor runs."""
    import tempfile

    import torch

    torch.set_num_threads(threads)
    options = dataclasses.replace(task.options, progress=False)
    with tempfile.TemporaryDirectory() as folder:
        if init is not None:
            local = Path(folder) / Path(task.options.init).name
            local.write_bytes(init)
            options = dataclasses.replace(options, init=str(local))
        return fn(dataclasses.replace(task, options=options), data)


class RayExecutor:
    remote = True
    jobs = None  # runs go to the cluster's nodes, not this machine

    def __init__(self, options: ExecutorOptions | None = None) -> None:
        self.options = options or ExecutorOptions()
        self._started_here = False

    def start(self) -> str:
        """Join or start the cluster; a missing Ray or an unreachable address fails here, before any run."""
        ray = _import_ray()
        address = os.environ.get("RAY_ADDRESS") or None  # ray.init reads it too; here it picks what to ship
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True,
                                      "configure_logging": True, "logging_level": "warning"}
            if address:
                import ablations
                import bench
                import vit

                kwargs["runtime_env"] = {"py_modules": [str(Path(m.__file__).parent) for m in (vit, bench, ablations)]}
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = f"the Ray cluster at {address!r} (RAY_ADDRESS)" if address else "a local Ray cluster"
                hint = ("; is `ray start --head` running there? Clusters started by Ray ≥ 2.59 use token "
                        "authentication: set RAY_AUTH_MODE=token here, with the head's token (`ray get-auth-token`) "
                        "in RAY_AUTH_TOKEN or ~/.ray/auth_token") if address else ""
                raise ValueError(f"could not start or join {where}: {err}{hint}") from None
            self._started_here = True
        resources = ray.cluster_resources()
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        cpus, gpus = self._placement(resources)
        return (f"ray: {'joined ' + address if address else 'local cluster'}, {count(nodes, 'node')}, "
                f"{resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs; "
                f"each run asks for {count(cpus, 'CPU')} and {count(gpus, 'GPU')}; retried up to {self.options.max_retries}×")

    def _placement(self, resources: dict[str, float]) -> tuple[float, float]:
        has_gpus = resources.get("GPU", 0) > 0
        gpus = self.options.gpus_per_task if self.options.gpus_per_task is not None else (1.0 if has_gpus else 0.0)
        cpus = self.options.cpus_per_task if self.options.cpus_per_task is not None else 1.0
        if cpus == 0 and gpus == 0:
            raise ValueError("each run asks for 0 CPUs and 0 GPUs, which bounds nothing: Ray would start every run at "
                             "once; give each run a CPU or more (--cpus-per-task, CPUS_PER_TASK) or a GPU")
        if gpus > resources.get("GPU", 0) or cpus > resources.get("CPU", 0):
            raise ValueError(f"each run asks for {count(cpus, 'CPU')} and {count(gpus, 'GPU')}, but the whole cluster has "
                             f"{count(resources.get('CPU', 0), 'CPU')} and {count(resources.get('GPU', 0), 'GPU')}: "
                             f"no run could start")
        return cpus, gpus

    def run(self, tasks: list[Task], fn: RunFn, load: Loader) -> Iterator[tuple[Task, RunResult]]:
        ray = _import_ray()
        if not ray.is_initialized():
            self.start()
        cpus, gpus = self._placement(ray.cluster_resources())
        remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=self.options.max_retries)(_run_on_worker)
        data_refs, init_refs = {}, {}
        for task in tasks:  # one copy of each dataset and checkpoint in the object store, read by the driver
            key = (task.options.dataset, task.options.data_root)
            if key not in data_refs:
                data_refs[key] = ray.put(load(task.options))
            if task.options.init and task.options.init not in init_refs:
                init_refs[task.options.init] = ray.put(Path(task.options.init).read_bytes())
        pending = {remote.remote(fn, task, data_refs[(task.options.dataset, task.options.data_root)],
                                 max(1, int(cpus)), init_refs.get(task.options.init)): task for task in tasks}
        try:
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayError as err:  # the worker died on every attempt, or the node went
                    outcome = lost_outcome(task, f"{type(err).__name__} after {self.options.max_retries} "
                                                 f"retr{'y' if self.options.max_retries == 1 else 'ies'}: "
                                                 f"{str(err).splitlines()[0] if str(err) else ''}")
                yield task, outcome
        finally:
            for ref in pending:  # interrupted: do not leave runs burning the cluster
                ray.cancel(ref, force=True)

    def close(self) -> None:
        """Leave the cluster (and stop it, if `start` started it here)."""
        if self._started_here:
            _import_ray().shutdown()
            self._started_here = False
