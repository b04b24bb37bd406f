"""The ablation runner: resume after SIGKILL, atomic rows, spec validation, faults, data loaders."""

import multiprocessing as mp
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from ablations.__main__ import main as ablations_main
from ablations.data import load_dataset
from ablations.cost import CostPlan
from ablations.runner import run_sweep
from ablations.tasks import RunOptions
from ablations.specs import Point, SpecError, load_spec
from ablations.train import TrainConfig, train
from bench.csvio import append_row, read_rows
from vit import ViTConfig, VisionTransformer

ROOT = Path(__file__).resolve().parents[1]
TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)
FAST = TrainConfig(epochs=1, batch_size=128)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


def write_spec(path: Path, factor: str, values: str, model: str = "", train: str = "epochs = 1") -> Path:
    path.write_text(f'[sweep]\nfactor = "{factor}"\nvalues = {values}\n\n[model]\npreset = "vit_digits"\n{model}\n\n'
                    f"[train]\n{train}\n")
    return path


def sweep_cmd(spec: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--out", str(out),
            "--device", "cpu", "--seeds", "0", "--cost-rounds", "1"]


def test_sigkill_mid_sweep_then_rerun_trains_only_missing_points(tmp_path):
    spec = write_spec(tmp_path / "depthk.toml", "depth", "[1, 2, 3]")
    out = tmp_path / "out"
    csv = out / "ablations" / "depthk.csv"
    env = {**os.environ, "VITBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(sweep_cmd(spec, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and not (csv.exists() and len(read_rows(csv)) >= 1):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = read_rows(csv)
    assert 1 <= len(first) < 3, "the kill should land mid-sweep"

    rerun = subprocess.run(sweep_cmd(spec, out), env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"{len(first)} already done" in rerun.stdout
    table = read_rows(csv)
    assert len(table) == 3 and (table["status"] == "ok").all()
    assert table["run_id"].is_unique and sorted(table["depth"]) == [1, 2, 3]
    # the rows written before the kill are untouched: not trained again
    pd.testing.assert_frame_equal(table.iloc[: len(first)].reset_index(drop=True), first)
    history = read_rows(out / "ablations" / "depthk-history.csv")
    assert set(history["run_id"]) == set(table["run_id"])
    weights = torch.load(out / "ablations" / "weights" / "depthk" / f"{table.run_id[0]}.pt", weights_only=True)
    assert "blocks.0.attn.qkv.weight" in weights


def _append_many(path, tag, n):
    for i in range(n):
        append_row(path, {"writer": tag, "i": i, "payload": f"{tag}-{i}-" + "x" * 3000}, ["writer", "i", "payload"])


def test_two_processes_appending_never_tear_a_line(tmp_path):
    path = tmp_path / "shared.csv"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(path, tag, 150)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    table = read_rows(path)
    assert len(table) == 300 and list(table.columns) == ["writer", "i", "payload"]
    assert (table["payload"] == table["writer"] + "-" + table["i"].astype(str) + "-" + "x" * 3000).all()
    for tag in ("a", "b"):
        assert sorted(table.loc[table.writer == tag, "i"]) == list(range(150))


def test_spec_with_invalid_point_fails_before_any_training(tmp_path, capsys):
    spec = write_spec(tmp_path / "badheads.toml", "num_heads", "[2, 3, 4]", model="embed_dim = 32")
    out = tmp_path / "out"
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "badheads.toml" in err and "num_heads=3" in err and "embed_dim=32" in err
    assert not out.exists()


@pytest.mark.parametrize("text,message", [
    ('[sweep]\nfactor = "depth"\nvalues = [1]\nvalue = 3\n', "unknown key 'value'"),
    ('[sweep]\nfactor = "depht"\nvalues = [1]\n', "factor='depht'"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\n[train]\nepochs = 0\n', "TrainConfig.epochs"),
    ('[sweep]\nfactor = "depth"\nvalues = [1]\n[model]\nimg_size = 32\n', "img_size is set by the dataset"),
    ('[sweeps]\n', "unknown section"),
])
def test_spec_errors_name_file_and_field(tmp_path, text, message):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message) as info:
        load_spec(path)
    assert "s.toml" in str(info.value)


def test_diverging_run_is_recorded_and_the_next_point_runs(tmp_path):
    points = [Point("div", "lr", lr, TINY, TrainConfig(epochs=1, batch_size=32, lr=lr, grad_clip=0.0))
              for lr in (1e6, 1e-3)]
    summary = run_sweep("div", points, RunOptions(dataset="digits", out=str(tmp_path), progress=False,
                                                  seeds=(0,), cost=CostPlan(rounds=0)))
    table = read_rows(tmp_path / "ablations" / "div.csv")
    assert list(table["status"]) == ["diverged", "ok"]
    assert "loss became" in table.loc[0, "error"] and pd.isna(table.loc[0, "test_acc"])
    assert 0 <= table.loc[1, "test_acc"] <= 1
    assert summary["statuses"] == {"diverged": 1, "ok": 1}


def test_cifar10_with_empty_root_names_path_and_download_flag(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}.*cifar-10-batches-py.*--download"):
        load_dataset("cifar10", tmp_path)


def test_cli_reports_missing_dataset_before_training(tmp_path, capsys):
    assert ablations_main(["sweep", "depth", "--dataset", "cifar10", "--data-root", str(tmp_path),
                           "--out", str(tmp_path / "out")]) == 2
    assert "DOWNLOAD=1" in capsys.readouterr().err


def write_cifar(root: Path, n: int = 20):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, n).tolist()
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "labels": labels}, f)
        batches[name] = (data, labels)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
    return batches


def test_cifar10_loader_reads_the_real_format(tmp_path, monkeypatch):
    import torchvision

    # the files are ours, so torchvision's md5 checks of the official archive cannot pass
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    batches = write_cifar(tmp_path)
    data = load_dataset("cifar10", tmp_path)
    assert data.train_x.shape == (100, 3, 32, 32) and data.test_x.shape == (20, 3, 32, 32)
    raw, labels = batches["test_batch"]
    expected = torch.as_tensor(raw.reshape(-1, 3, 32, 32)).float() / 255  # CHW planes in the pickle
    torch.testing.assert_close(data.test_x, expected)
    assert data.test_y.tolist() == labels and data.flip and data.num_classes == 10


def write_idx(path: Path, array: np.ndarray):
    magic = 2051 if array.ndim == 3 else 2049
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes())


def test_mnist_loader_reads_idx_files(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    images = {s: rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) for s, n in (("train", 30), ("t10k", 10))}
    labels = {s: rng.integers(0, 10, len(images[s]), dtype=np.uint8) for s in images}
    for split in images:
        write_idx(raw / f"{split}-images-idx3-ubyte", images[split])
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels[split])
    data = load_dataset("mnist", tmp_path)
    torch.testing.assert_close(data.test_x[:, 0], torch.as_tensor(images["t10k"]).float() / 255)
    assert data.train_y.tolist() == labels["train"].tolist() and not data.flip and data.in_chans == 1


def test_same_seed_gives_identical_accuracy_on_cpu():
    data = load_dataset("digits")
    accs = []
    for _ in range(2):
        torch.manual_seed(3)
        result = train(VisionTransformer(TINY), data, TrainConfig(epochs=2, batch_size=64), 3, torch.device("cpu"),
                       progress=False)
        accs.append((result.test_acc, result.train_loss))
    assert accs[0] == accs[1]
    torch.manual_seed(4)
    other = train(VisionTransformer(TINY), data, TrainConfig(epochs=2, batch_size=64), 4, torch.device("cpu"),
                  progress=False)
    assert (other.test_acc, other.train_loss) != accs[0]


def test_mnist5k_split_is_fixed_and_stratified():
    a, b = load_dataset("mnist5k"), load_dataset("mnist5k")
    assert len(a.train_y) == 4000 and len(a.test_y) == 1000
    assert torch.equal(a.test_x, b.test_x)
    assert a.test_y.bincount().tolist() == [100] * 10


def test_augmentation_is_a_shift_and_seeded():
    data = load_dataset("digits")
    x = data.train_x[:16]
    out1 = data.augment(x, torch.Generator().manual_seed(0))
    out2 = data.augment(x, torch.Generator().manual_seed(0))
    assert torch.equal(out1, out2) and out1.shape == x.shape
    # each output is the input shifted by at most the padding: some shift in [-1, 1]² matches exactly
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
    for i in range(16):
        assert any(torch.equal(out1[i], padded[i, :, dy:dy + 8, dx:dx + 8]) for dy in range(3) for dx in range(3))


def test_dry_run_lists_points_and_trains_nothing(tmp_path, capsys):
    spec = write_spec(tmp_path / "d.toml", "depth", "[1, 2]")
    assert ablations_main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path), "--dry-run",
                           "--seeds", "0,1"]) == 0
    out = capsys.readouterr().out
    assert out.count("depth=1") == 2 and out.count("depth=2") == 2 and "no" in out
    assert not (tmp_path / "ablations").exists()


@pytest.mark.parametrize("img_size,in_chans,base", [(28, 1, "vit_mnist"), (8, 1, "vit_digits"), (32, 3, "vit_cifar")])
def test_every_shipped_sweep_is_valid_for_every_dataset_size(img_size, in_chans, base):
    from ablations.specs import available_sweeps, find_spec
    from vit import PRESETS

    names = available_sweeps()
    assert {"patch", "heads", "depth", "pos", "norm", "pool", "attn"} <= set(names)
    for name in names:
        spec = load_spec(find_spec(name))
        points = spec.points(img_size, in_chans, 10)  # raises SpecError on any invalid point
        assert points and all(p.model.img_size == img_size and p.model.in_chans == in_chans for p in points)
        # preset auto: apart from the factor, each point is the dataset's base model
        base_cfg = PRESETS[base].replace(img_size=img_size, in_chans=in_chans, num_classes=10)
        for p in points:
            assert p.model == base_cfg.replace(**{spec.factor: p.value}), (name, p.value)


def test_preset_auto_without_a_base_for_the_image_size_says_so(tmp_path):
    spec = tmp_path / "a.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [1]\n')
    with pytest.raises(SpecError, match=r"a\.toml.*preset=auto has no base for 20 px"):
        load_spec(spec).points(20, 1, 10)
