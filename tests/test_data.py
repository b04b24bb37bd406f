"""Datasets: the real on-disk formats of torchvision's loaders, the fixed mnist5k split, seeded augmentation,
and a missing dataset named with the way to get it."""

import dataclasses
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from ablations.__main__ import main as ablations_main
from ablations.training.data import load_dataset, published_statistics


def test_cifar10_with_empty_root_names_path_and_download_flag(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}.*cifar-10-batches-py.*--download"):
        load_dataset("cifar10", tmp_path)


def test_cli_reports_missing_dataset_before_training(tmp_path, capsys):
    assert ablations_main(["sweep", "depth", "--dataset", "cifar10", "--data-root", str(tmp_path),
                           "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "DOWNLOAD=1" in err and err.count("\n") == 1
    # torchvision's own way out (download=True) is not an option of this command, so it is not quoted
    assert f"no usable copy under {tmp_path / 'cifar-10-batches-py'} (Dataset not found or corrupted). " in err, err
    assert "download=True" not in err


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
    assert published_statistics("cifar10") == (data.mean, data.std)  # what predict uses without the files
    assert published_statistics("digits") is None


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


@pytest.mark.parametrize("flip", [False, True])
def test_an_epochs_augmentation_drawn_at_once_gives_the_images_of_drawing_batch_by_batch(flip):
    data = dataclasses.replace(load_dataset("digits"), flip=flip)
    x = data.train_x[:40]
    batches = x.split(16)   # 16, 16, 8: the last batch is smaller
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    one_by_one = torch.cat([data.augment(b, g1) for b in batches])
    draws = data.draw_augmentation([len(b) for b in batches], g2, x.device)
    at_once = torch.cat([data.apply_augmentation(b, d) for b, d in zip(batches, draws)])
    assert torch.equal(one_by_one, at_once) and torch.equal(g1.get_state(), g2.get_state())
    flipped = torch.cat(draws)[:, 2]
    assert (0 < flipped.sum() < len(x)) if flip else not flipped.any()
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
    for i in range(len(x)):   # a shift by at most the padding, mirrored where drawn so
        source = padded[i].flip(-1) if flipped[i] else padded[i]
        assert any(torch.equal(at_once[i], source[:, dy:dy + 8, dx:dx + 8]) for dy in range(3) for dx in range(3))


def test_a_download_that_fails_says_so_instead_of_asking_for_download(tmp_path, monkeypatch):
    import urllib.error

    import torchvision

    def offline(self):
        raise urllib.error.URLError("Temporary failure in name resolution")
    monkeypatch.setattr(torchvision.datasets.MNIST, "download", offline)
    with pytest.raises(FileNotFoundError, match=r"mnist: --download could not fetch it into .*URLError.*no network"):
        load_dataset("mnist", tmp_path, download=True)


@pytest.mark.parametrize("size", [None, 12])
@pytest.mark.parametrize("chunk_batches", [1, 2, 1000])
def test_an_epochs_batches_in_chunks_are_the_batch_by_batch_images_and_labels(size, chunk_batches):
    data = dataclasses.replace(load_dataset("digits"), flip=True, size=size)
    x, y = data.train_x[:88], data.train_y[:88]
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    image_bytes = 4 * x.shape[1] * max(size or 8, 8) ** 2
    got = list(data.epoch_batches(x, y, order, 16, g1, chunk_bytes=chunk_batches * 16 * image_bytes))
    expected = [(data.normalize(data.augment(x[idx], g2)), y[idx]) for idx in order.split(16)]
    assert [len(b) for b, _ in got] == [16] * 5 + [8]
    assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(got, expected, strict=True))
    assert torch.equal(g1.get_state(), g2.get_state())
    assert got[0][0].shape[-1] == (size or 8)


def test_an_epochs_augmentation_runs_once_per_chunk_not_once_per_batch():
    data = dataclasses.replace(load_dataset("digits"), flip=True)
    x, y = data.train_x, data.train_y
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    steps = -(-len(y) // 32)

    def gathers(chunk_bytes: int) -> int:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            batches = list(data.epoch_batches(x, y, order, 32, torch.Generator().manual_seed(0), chunk_bytes))
        assert len(batches) == steps
        return sum(e.count for e in prof.key_averages() if e.key == "aten::flip")

    assert gathers(10**9) == 1                      # the whole epoch in one chunk
    assert gathers(4 * 64 * 32 * 10) == -(-steps // 10)  # ten batches a chunk


@pytest.mark.parametrize("dataset,same,other", [("digits", {"flip": False, "crop_padding": 1}, {"flip": True}),
                                                ("mnist5k", {"crop_padding": 1}, {"crop_padding": 2}),
                                                ("imagefolder", {"flip": True, "crop_padding": 2}, {"flip": False})])
def test_augmentation_written_out_at_the_datasets_default_names_the_same_run(dataset, same, other):
    """`--set flip=false` on digits (which never flips) trains exactly what no setting trains: one run id; a
    value the dataset does not use by default is another run. An image folder read at 32 px pads by 2."""
    from ablations.results.identity import task_key
    from ablations.specs import Point
    from bench.env import run_id
    from bench.training.recipe import TrainConfig
    from vit import PRESETS

    cfg = PRESETS["vit_digits"].replace(img_size=32) if dataset == "imagefolder" else PRESETS["vit_digits"]
    key = lambda train: run_id(task_key(Point("s", "depth", 1, cfg, train), dataset, 0))  # noqa: E731
    assert key(TrainConfig(**same)) == key(TrainConfig())
    assert key(TrainConfig(**other)) != key(TrainConfig())

