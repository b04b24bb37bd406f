"""The training paths of issue 13 that run everywhere: no host read of the loss per step, the static-buffer
step (what a CUDA graph replays) equal to the eager step, the parsed-dataset cache, and the utilisation
and MFU of training in every row. The CUDA-only checks are marked `gpu` (`make test-gpu`)."""

import os
import time

import numpy as np
import pytest
import torch

from ablations.cost import CostPlan
from ablations.data import _cache_file, load_dataset
from ablations.runner import run_sweep
from ablations.specs import Point
from ablations.tasks import RunOptions
from ablations.train import EagerStep, StaticStep, TrainConfig, adamw, param_groups, train
from bench.csvio import read_rows
from bench.mfu import matmul_peak_flops
from test_data import write_idx
from vit import ViTConfig, VisionTransformer

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)


def test_an_epoch_reads_the_loss_back_a_fixed_few_times_not_once_per_step(monkeypatch):
    data = load_dataset("digits")
    cfg = TrainConfig(epochs=2, batch_size=16)           # 90 steps per epoch
    torch.manual_seed(0)
    model = VisionTransformer(TINY)   # (its initialisation reads values back; training must not)
    reads = []
    real_item = torch.Tensor.item

    def counted(self):
        reads.append(1)
        return real_item(self)
    monkeypatch.setattr(torch.Tensor, "item", counted)
    train(model, data, cfg, 0, torch.device("cpu"), progress=False)
    steps = 2 * -(-len(data.train_y) // 16)
    # per epoch: the training loss once, the test loss and the correct count once each
    assert steps == 180 and len(reads) == 2 * 3, f"{len(reads)} host reads in {steps} steps"


def test_a_diverging_loss_is_caught_once_per_epoch_naming_it():
    from ablations.train import Diverged

    data = load_dataset("digits")
    torch.manual_seed(0)
    with pytest.raises(Diverged, match=r"loss became nan in epoch 1 \(steps 1–12"):
        train(VisionTransformer(TINY), data, TrainConfig(epochs=2, batch_size=128, lr=1e6, grad_clip=0.0), 0,
              torch.device("cpu"), progress=False)


@pytest.mark.parametrize("stem", ["patch", "conv"])   # the conv stem has BatchNorm
def test_the_static_buffer_step_trains_like_the_eager_step(stem):
    cfg = TrainConfig(batch_size=32, grad_clip=1.0)
    model_cfg = TINY.replace(stem=stem, patch_size=4 if stem == "conv" else 2)
    torch.manual_seed(0)
    a = VisionTransformer(model_cfg)
    b = VisionTransformer(model_cfg)
    b.load_state_dict(a.state_dict())
    steps = []
    for model, kind in ((a, EagerStep), (b, StaticStep)):
        model.train()
        opt = adamw(param_groups(model, 0.05), 1e-3)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        args = (model, model, opt, scaler, cfg, torch.device("cpu"), "fp32")
        steps.append(kind(*args, capture=False) if kind is StaticStep else kind(*args))
    g = torch.Generator().manual_seed(1)
    for i, batch in enumerate((32, 32, 32, 17, 32, 17)):   # a last, smaller batch gets its own buffers
        x, y = torch.randn(batch, 1, 8, 8, generator=g), torch.randint(0, 10, (batch,), generator=g)
        losses = [step(x, y, lr=1e-3 * (i + 1)) for step in steps]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert sorted(steps[1].buffers) == [17, 32] and not steps[1].graphed
    # atol 1e-5, 1 % of one AdamW step: the key bias gets gradients of rounding noise only (softmax ignores it),
    # which Adam normalises to ±lr, so float32 vs float64 learning rates may flip their sign
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_a_dataset_is_parsed_once_then_read_bit_identical_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(2)
    for split, n in (("train", 30), ("t10k", 10)):
        write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(raw / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8))
    parsed = {}
    for name, root in (("digits", tmp_path), ("mnist", tmp_path / "data")):
        first = parsed[name] = load_dataset(name, root)
        cached = _cache_file(name, root)
        assert cached.exists()
        again = load_dataset(name, root)
        for k in ("train_x", "train_y", "test_x", "test_y"):
            assert torch.equal(getattr(first, k), getattr(again, k)), (name, k)
        assert (again.mean, again.std, again.crop_padding, again.flip) == (first.mean, first.std,
                                                                            first.crop_padding, first.flip)
    # a changed source file is parsed again, not served stale
    labels = raw / "t10k-labels-idx1-ubyte"
    before = _cache_file("mnist", tmp_path / "data")
    write_idx(labels, np.full(10, 3, dtype=np.uint8))
    os.utime(labels, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert _cache_file("mnist", tmp_path / "data") != before
    assert load_dataset("mnist", tmp_path / "data").test_y.tolist() == [3] * 10
    # a damaged cache file is parsed again and replaced
    cached = _cache_file("digits", tmp_path)
    cached.write_bytes(b"not an npz")
    assert torch.equal(load_dataset("digits", tmp_path).train_x, parsed["digits"].train_x)
    assert np.load(cached)["train_x"].dtype == np.uint8


def test_every_row_has_the_utilisation_and_mfu_of_training(tmp_path):
    points = [Point("u", "depth", 1, TINY, TrainConfig(epochs=2, batch_size=64))]
    run_sweep("u", points, RunOptions(dataset="digits", out=str(tmp_path), seeds=(0,), progress=False,
                                      cost=CostPlan(rounds=1)))
    row = read_rows(tmp_path / "ablations" / "u.csv").iloc[0]
    assert 0 < row["train_util_pct"] <= 100
    peak = matmul_peak_flops(torch.device("cpu"), "fp32")
    expected = 3 * row["gflops"] * 1e9 * row["train_throughput_img_s"] / peak
    assert row["train_mfu"] == pytest.approx(expected, rel=0.05)   # the peak cache keeps the best seen
    assert row["util_pct"] > 0 and row["train_mfu"] != row["mfu"]


# CUDA only: `make test-gpu` ------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_graphed_step_trains_like_the_eager_step_on_cuda(dtype):
    device = torch.device("cuda")
    cfg = TrainConfig(batch_size=64)
    torch.manual_seed(0)
    a = VisionTransformer(TINY.replace(stem="conv", patch_size=4)).to(device)
    b = VisionTransformer(a.cfg).to(device)
    b.load_state_dict(a.state_dict())
    steps = []
    for model, kind in ((a, EagerStep), (b, StaticStep)):
        model.train()
        opt = adamw(param_groups(model, 0.05), 1e-3)
        steps.append(kind(model, model, opt, torch.amp.GradScaler("cuda", enabled=False), cfg, device, dtype))
    assert steps[1].graphed
    g = torch.Generator().manual_seed(1)
    for i, batch in enumerate((64, 64, 64, 17, 64, 17)):
        x, y = torch.randn(batch, 1, 8, 8, generator=g).to(device), torch.randint(0, 10, (batch,), generator=g).to(device)
        losses = [step(x, y, lr=1e-3) for step in steps]
        torch.testing.assert_close(losses[0], losses[1], rtol=2e-2 if dtype == "bf16" else 1e-4, atol=1e-3)
    assert sorted(steps[1].graphs) == [17, 64]
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=2e-2 if dtype == "bf16" else 1e-4, atol=1e-3, msg=name)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_reduced_precision_training_on_cuda_learns_and_samples_nvml(dtype, tmp_path):
    points = [Point("g", "depth", 1, TINY, TrainConfig(epochs=3, batch_size=64, dtype=dtype))]
    run_sweep("g", points, RunOptions(dataset="digits", out=str(tmp_path), seeds=(0,), progress=False, device="cuda",
                                      cost=CostPlan(rounds=1)))
    row = read_rows(tmp_path / "ablations" / "g.csv").iloc[0]
    assert row["status"] == "ok" and row["dtype"] == dtype and row["test_acc"] > 0.3
    assert row["util_source"] == "nvml" and 0 < row["train_util_pct"] <= 100 and row["peak_mem_mb"] > 0


@pytest.mark.gpu
@cuda
def test_compiled_training_on_cuda_runs(tmp_path):
    data = load_dataset("digits")
    torch.manual_seed(0)
    result = train(VisionTransformer(TINY), data, TrainConfig(epochs=1, batch_size=64, compile=True),
                   0, torch.device("cuda"), progress=False)
    assert 0 <= result.test_acc <= 1
