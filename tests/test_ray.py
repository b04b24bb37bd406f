"""EXECUTOR=ray: the same rows as local, retries and `error` rows for killed workers, resume, clear errors.

One local Ray cluster with 2 CPUs serves the whole module (starting one costs seconds).
"""

import os
import signal
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

ray = pytest.importorskip("ray", reason="EXECUTOR=ray needs the optional extra: pip install -e '.[ray]'")
from helpers import run_sweep  # noqa: E402
from ray import cloudpickle  # noqa: E402

from ablations.__main__ import main as ablations_main  # noqa: E402
from ablations.results.schema import MEASURED, read_table  # noqa: E402
from ablations.running.cost import CostPlan  # noqa: E402
from ablations.running.executors import ExecutorOptions  # noqa: E402
from ablations.running.executors.local import LocalExecutor  # noqa: E402
from ablations.running.executors.ray import RayExecutor  # noqa: E402
from ablations.running.tasks import RunOptions, Task  # noqa: E402
from ablations.running.worker import execute  # noqa: E402
from ablations.specs import Point  # noqa: E402
from bench.training.recipe import TrainConfig  # noqa: E402
from vit import ViTConfig  # noqa: E402

pytestmark = pytest.mark.slow   # `make test-quick` leaves this module out

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)
FAST = TrainConfig(epochs=1, batch_size=128)

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module


@pytest.fixture(scope="module", autouse=True)
def cluster(tmp_path_factory):
    os.environ["VITBENCH_CACHE"] = str(tmp_path_factory.mktemp("cache"))  # before the workers start
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield
    ray.shutdown()


def depth_points(sweep: str, *depths: int) -> list[Point]:
    return [Point(sweep, "depth", d, TINY.replace(depth=d), FAST) for d in depths]


def options(out: Path, seeds=(0,)) -> RunOptions:
    return RunOptions(dataset="digits", out=str(out), seeds=seeds, progress=False,
                      cost=CostPlan(rounds=0))


def ray_executor(**kw) -> RayExecutor:
    return RayExecutor(ExecutorOptions(cpus_per_task=1, **kw))


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=MEASURED).sort_values("run_id").reset_index(drop=True)


def test_ray_gives_the_same_rows_history_and_weights_as_local(tmp_path):
    points = depth_points("rt", 1, 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what each 1-CPU Ray task uses: same threads, same float rounding
    try:
        local = run_sweep("rt", points, options(tmp_path / "local", seeds=(0, 1)), LocalExecutor())
    finally:
        torch.set_num_threads(threads)
    executor = ray_executor()
    assert "2 CPUs" in executor.start()
    remote = run_sweep("rt", points, options(tmp_path / "ray", seeds=(0, 1)), executor)
    assert local.statuses == remote.statuses == {"ok": 4}

    a, b = (read_table(tmp_path / d / "ablations" / "rt.csv") for d in ("local", "ray"))
    assert len(a) == 4 and a["test_acc"].notna().all()
    pd.testing.assert_frame_equal(comparable(a), comparable(b))
    ha, hb = (read_table(tmp_path / d / "ablations" / "rt-history.csv").drop(columns="elapsed_s")
              .sort_values(["run_id", "epoch"]).reset_index(drop=True) for d in ("local", "ray"))
    pd.testing.assert_frame_equal(ha, hb)
    for rid in a["run_id"]:  # weights came back to the driver and equal the local ones
        wa, wb = (torch.load(tmp_path / d / "ablations" / "weights" / "rt" / f"{rid}.pt", weights_only=True)
                  for d in ("local", "ray"))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def killing_execute(task: Task, data, marker_dir: str):
    """depth 2: the worker dies on its first attempt only; depth 3: on every attempt; others run."""
    marker = Path(marker_dir) / f"attempt-{task.point.value}"
    if task.point.value == 3 or (task.point.value == 2 and not marker.exists()):
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return execute(task, data)


def test_killed_worker_is_retried_then_recorded_as_error(tmp_path):
    from functools import partial

    summary = run_sweep("kill", depth_points("kill", 1, 2, 3, 4), options(tmp_path), ray_executor(max_retries=1),
                        fn=partial(killing_execute, marker_dir=str(tmp_path)))
    table = read_table(tmp_path / "ablations" / "kill.csv").set_index("depth")
    assert summary.statuses == {"ok": 3, "error": 1}
    assert (table.loc[[1, 2, 4], "status"] == "ok").all()  # depth 2 died once, then its retry finished
    assert table.loc[3, "status"] == "error" and "after 1 retry" in table.loc[3, "error"]
    assert pd.isna(table.loc[3, "test_acc"]) and table.loc[3, "sweep"] == "kill"
    assert not (tmp_path / "ablations" / "weights" / "kill" / f"{table.loc[3, 'run_id']}.pt").exists()
    # the error row is not `ok`, so a rerun (workers healthy again) trains exactly that point
    again = run_sweep("kill", depth_points("kill", 1, 2, 3, 4), options(tmp_path), ray_executor())
    assert again.skipped == 3 and again.statuses == {"ok": 1}


def test_cli_ray_sweep_resumes_and_trains_only_missing_points(tmp_path, capsys):
    spec = tmp_path / "d.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [1, 2]\n[model]\npreset = "vit_digits"\n'
                    '[train]\nepochs = 1\nbatch_size = 128\n')
    args = ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path), "--executor", "ray",
            "--cpus-per-task", "1", "--device", "cpu", "--seeds", "0", "--cost-rounds", "0"]
    assert ablations_main(args) == 0
    first = read_table(tmp_path / "ablations" / "d.csv")
    assert list(first["status"]) == ["ok", "ok"]
    spec.write_text(spec.read_text().replace("[1, 2]", "[1, 2, 3]"))
    assert ablations_main(args) == 0
    out = capsys.readouterr()
    assert "2 already done, 1 ok" in out.out and "ray: local cluster" in out.err
    table = read_table(tmp_path / "ablations" / "d.csv")
    assert sorted(table["depth"]) == [1, 2, 3] and (table["status"] == "ok").all() and table["run_id"].is_unique
    pd.testing.assert_frame_equal(table.iloc[:2], first)


def test_placement_larger_than_the_cluster_fails_before_any_run(tmp_path, capsys):
    spec = tmp_path / "d.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [1]\n[model]\npreset = "vit_digits"\n')
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"),
                           "--executor", "ray", "--gpus-per-task", "1"]) == 2
    assert "asks for 1 CPU and 1 GPU, but the whole cluster has" in capsys.readouterr().err
    assert not (tmp_path / "o" / "ablations").exists()
    # a run that asks for nothing is not placed at all: every run would start at once
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"),
                           "--executor", "ray", "--cpus-per-task", "0", "--gpus-per-task", "0"]) == 2
    err = capsys.readouterr().err
    assert "each run asks for 0 CPUs and 0 GPUs, which bounds nothing" in err and err.count("\n") == 1, err
    assert not (tmp_path / "o" / "ablations").exists()


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ValueError, match=r"pip install -e '\.\[ray\]'"):
        RayExecutor().start()


def checking_execute(task: Task, data, driver_path: str, driver_bytes: bytes):
    """Fails the run unless the worker starts from its own copy of the driver's INIT checkpoint."""
    if task.options.init == driver_path or Path(task.options.init).read_bytes() != driver_bytes:
        raise AssertionError(f"worker opened {task.options.init!r}, not a shipped copy")
    return execute(task, data)


def test_init_checkpoint_reaches_workers_as_bytes_not_as_the_drivers_path(tmp_path):
    from functools import partial

    from timm.models.vision_transformer import VisionTransformer as TimmViT

    from vit import checkpoint_id

    path = tmp_path / "driver-only" / "ckpt.pth"
    path.parent.mkdir()
    torch.save(TimmViT(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                       mlp_ratio=1.0).state_dict(), path)
    opts = RunOptions(dataset="digits", out=str(tmp_path / "out"), seeds=(0,), progress=False,
                      cost=CostPlan(rounds=0), init=str(path), init_id=checkpoint_id(path))
    summary = run_sweep("init", depth_points("init", 1), opts, ray_executor(),
                        fn=partial(checking_execute, driver_path=str(path), driver_bytes=path.read_bytes()))
    assert summary.statuses == {"ok": 1}
    row = read_table(tmp_path / "out" / "ablations" / "init.csv").iloc[0]
    assert row["init"] == checkpoint_id(path)
