"""The training speed paths that run everywhere: no host read of the loss per step, the static-buffer
step (what a CUDA graph replays) equal to the eager step, the parsed-dataset cache, and the utilisation
and MFU of training in every row. The CUDA-only checks are marked `gpu` (`make test-gpu`)."""

import contextlib
import dataclasses
import math
import os
import shutil
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from fake_cuda import FakeCuda, SideStream
from helpers import run_cost_phase, run_sweep
from test_data import write_idx
from torch import nn

from ablations.cli.parser import build, main
from ablations.results.schema import read_table
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions
from ablations.specs import Point
from ablations.training import stepbench
from ablations.training.data import _cache_file, load_dataset
from ablations.training.train import train
from bench.mfu import matmul_peak_flops
from bench.training.recipe import TrainConfig
from bench.training.step import EagerStep, StaticStep, adamw, param_groups
from vit import VisionTransformer, ViTConfig

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
    from ablations.training.train import Diverged

    data = load_dataset("digits")
    torch.manual_seed(0)
    with pytest.raises(Diverged, match=r"loss became nan in epoch 1 \(steps 1–12"):
        train(VisionTransformer(TINY), data, TrainConfig(epochs=2, batch_size=128, lr=1e6, grad_clip=0.0), 0,
              torch.device("cpu"), progress=False)


def _eager_and_static(model_cfg: ViTConfig, cfg: TrainConfig, capture: bool) -> tuple[list[nn.Module], list[EagerStep]]:
    """Two equal models on the CPU, one trained by the eager step, one by the static-buffer step."""
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
        steps.append(kind(*args, capture=capture) if kind is StaticStep else kind(*args))
    return [a, b], steps


def _assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    # atol 1e-5, 1 % of one AdamW step. The key third of a qkv bias is left out: softmax ignores it, so its
    # gradients are rounding noise, which Adam normalises to ±lr whatever their size, and a different
    # summation order (threads, fused kernels) flips their signs: the two copies walk apart by up to 2·lr a step
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        if name.endswith("attn.qkv.bias"):
            third = len(p) // 3
            p, q = torch.cat([p[:third], p[2 * third:]]), torch.cat([q[:third], q[2 * third:]])
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("stem", ["patch", "conv"])   # the conv stem has BatchNorm
def test_the_static_buffer_step_trains_like_the_eager_step(stem):
    model_cfg = TINY.replace(stem=stem, patch_size=4 if stem == "conv" else 2)
    models, steps = _eager_and_static(model_cfg, TrainConfig(batch_size=32, grad_clip=1.0), capture=False)
    g = torch.Generator().manual_seed(1)
    for i, batch in enumerate((32, 32, 32, 17, 32, 17)):   # a last, smaller batch gets its own buffers
        x, y = torch.randn(batch, 1, 8, 8, generator=g), torch.randint(0, 10, (batch,), generator=g)
        losses = [step(x, y, lr=1e-3 * (i + 1)) for step in steps]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert sorted(steps[1].buffers) == [17, 32] and not steps[1].graphed
    _assert_same_weights(*models)


@pytest.mark.parametrize("eager_first", [0, 2])   # fresh optimizer state (zeroed back), or state to copy back
def test_a_failed_capture_undoes_its_warm_up_and_goes_on_eagerly(eager_first, monkeypatch, capsys):
    def refuse() -> None:
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(torch.cuda, "Stream", SideStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SideStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", refuse)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.get_rng_state())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: torch.set_rng_state(state))
    model_cfg = TINY.replace(stem="conv", patch_size=4)
    models, steps = _eager_and_static(model_cfg, TrainConfig(batch_size=32, grad_clip=1.0), capture=eager_first == 0)
    g = torch.Generator().manual_seed(1)
    for i, batch in enumerate((32, 32, 32, 17, 32)):
        steps[1].capture = steps[1].capture or i == eager_first   # capture is tried from step `eager_first`
        x, y = torch.randn(batch, 1, 8, 8, generator=g), torch.randint(0, 10, (batch,), generator=g)
        losses = [step(x, y, lr=1e-3 * (i + 1)) for step in steps]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
        if i == eager_first:
            assert not steps[1].capture   # one failure turns capture off for the run
    out = capsys.readouterr().out
    assert out.count("graphs:") == 1 and ("graphs: capturing the batch-32 training step failed (RuntimeError: "
                                          "operation not permitted when stream is capturing); eager training step "
                                          "from here") in out
    assert not steps[1].graphed and not steps[1].graphs
    _assert_same_weights(*models)   # the three warm-up steps left no trace


@pytest.mark.parametrize("fail_in_block, fail_at_end", [(True, True), (True, False), (False, True)])
def test_a_capture_that_fails_inside_the_graph_leaves_cuda_as_it_was_and_names_the_first_error(
        fail_in_block, fail_at_end, monkeypatch, capsys):
    """A failure inside the capture (an op that raises, out of memory say, in a capture that stays valid; or
    one that invalidates the capture so that capture_end refuses it): the previous stream is current again,
    the graph's pool is released once where there is one (never twice: that aborts), the cache was emptied
    before the capture, the generator is as before the warm-up, the message names the first error, and the
    run goes on eagerly with the same losses as an eager step."""
    fake = FakeCuda(monkeypatch, fail_in_block, fail_at_end)
    model_cfg = TINY.replace(stem="conv", patch_size=4)
    models, steps = _eager_and_static(model_cfg, TrainConfig(batch_size=32, grad_clip=1.0), capture=True)
    fake.watch = steps[1]
    real_step, warm = steps[1]._step, []

    def step(x, y, cache=True):
        if len(warm) == StaticStep.WARMUP and fail_in_block:
            warm.append("capture")
            raise RuntimeError("operation not permitted when stream is capturing")
        warm.append("warm")
        if len(warm) <= StaticStep.WARMUP:
            fake.generator.manual_seed(len(warm) + 100)  # the warm-up draws from the device generator
        return real_step(x, y, cache)
    steps[1]._step = step
    before = fake.generator.get_state()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g)
    losses = [s(x, y, lr=1e-3) for s in steps]
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert fake.current == ["default"]                       # the capture stream is no longer current
    assert fake.releases == (0 if fail_at_end else 1)       # exactly once where there is a pool; never twice
    assert ("replay",) not in fake.calls
    begin = next(i for i, c in enumerate(fake.calls) if c[0] == "capture_begin")
    assert ("empty_cache",) in fake.calls[:begin]            # the warm-up's cached blocks freed before capture
    assert [c for c in fake.calls if c[0] == "capture_begin"] == [("capture_begin", fake.side, "thread_local")]
    assert torch.equal(fake.generator.get_state(), before)   # the warm-up's draws were undone
    cause = "operation not permitted when stream is capturing" if fail_in_block else "CUDA error: operation failed due to"
    out = capsys.readouterr().out
    assert f"graphs: capturing the batch-32 training step failed (RuntimeError: {cause}" in out
    assert not steps[1].capture and not steps[1].graphs
    _assert_same_weights(*models)


def test_each_training_stream_captures_on_a_high_priority_stream_of_its_own(monkeypatch):
    """Runs side by side never share a capture stream (destroying a graph frees the cuBLAS workspaces of the
    stream it was captured on, which the others' graphs would still use), and all the captures of work queued on
    one stream happen on one capture stream, drawn once; `OWN_CAPTURE_STREAMS` off: one for the process."""
    from bench.training import step as step_module
    drawn, current = [], {"stream": object()}

    class Stream:
        def __init__(self, device=None, priority=0):
            self.priority = priority
            drawn.append(self)

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current["stream"])
    monkeypatch.setattr(step_module, "_CAPTURE_STREAMS", {})
    cuda = torch.device("cuda", 0)
    first, again = step_module.capture_stream(cuda), step_module.capture_stream(cuda)
    current["stream"] = object()   # another thread's training stream
    other = step_module.capture_stream(cuda)
    assert first is again and other is not first and len(drawn) == 2 and {s.priority for s in drawn} == {-1}
    monkeypatch.setattr(step_module.StaticStep, "OWN_CAPTURE_STREAMS", False)
    shared = step_module.capture_stream(cuda)
    current["stream"] = object()
    assert step_module.capture_stream(cuda) is shared and shared not in (first, other) and len(drawn) == 3


@pytest.mark.parametrize("fail_in_block", [False, True])
def test_a_runs_evaluation_is_captured_once_on_the_capture_stream_and_replayed_or_goes_on_eagerly(
        fail_in_block, monkeypatch, capsys):
    """A run's evaluation on CUDA: one eager pass, one capture on its stream's capture stream (thread_local,
    as the training step's), then a replay per call, with the eager evaluation's result. A capture that fails
    releases the graph's pool once, says why in one line, and the run evaluates eagerly from then on."""
    from ablations.training import evaluation
    data, device = load_dataset("digits"), torch.device("cpu")
    torch.manual_seed(0)
    model = VisionTransformer(TINY)
    images, labels = data.test_x[:300], data.test_y[:300]
    want = evaluation.evaluate(model, data, device, "fp32", 128, (images, labels))
    fake = FakeCuda(monkeypatch, fail_in_block=False, fail_at_end=False)
    real, passes = evaluation.eval_outputs, []

    def outputs(*args, **kw):
        passes.append(kw.get("cache", True))
        if fail_in_block and len(passes) == 2:
            raise RuntimeError("operation not permitted when stream is capturing")
        return real(*args, **kw)
    monkeypatch.setattr(evaluation, "eval_outputs", outputs)
    graphed = evaluation.GraphedEvaluation(model, data, device, "fp32", 128, (images, labels))
    for _ in range(3):
        got = graphed()
        assert got[:2] == want[:2] and torch.equal(got[2], want[2])
    assert fake.current == ["default"]
    assert [c for c in fake.calls if c[0] == "capture_begin"] == [("capture_begin", fake.side, "thread_local")]
    assert passes[:2] == [False, False]   # the warm-up and the capture, without autocast's cast cache
    out = capsys.readouterr().out
    if fail_in_block:
        assert fake.releases == 1 and ("replay",) not in fake.calls and graphed.eager and len(passes) == 5
        assert out.count("graphs: capturing the evaluation failed (RuntimeError: operation not permitted when "
                         "stream is capturing); eager evaluation from here") == 1
    else:
        assert fake.calls.count(("replay",)) == 3 and len(passes) == 2 and "graphs:" not in out


def test_a_run_evaluates_as_its_options_say_graphed_only_on_cuda(monkeypatch, tmp_path):
    """`RunOptions.evaluation` reaches each run's trainer; `evaluator` gives a GraphedEvaluation for "graphed" on
    CUDA alone (elsewhere, and for "eager", the eager evaluation, with its figures); an unknown evaluation is one
    line naming the choices, before anything trains."""
    from ablations.training import evaluation
    from ablations.training import train as trainer
    data = load_dataset("digits")
    torch.manual_seed(0)
    model = VisionTransformer(TINY)
    tests = data.test_x[:300], data.test_y[:300]
    made = {(kind, how): evaluation.evaluator(model, data, torch.device(kind), "fp32", 128, tests, how)
            for kind in ("cpu", "cuda") for how in evaluation.EVALUATIONS}
    assert [k for k, v in made.items() if isinstance(v, evaluation.GraphedEvaluation)] == [("cuda", "graphed")]
    want = evaluation.evaluate(model, data, torch.device("cpu"), "fp32", 128, tests)
    got = made[("cpu", "graphed")]()
    assert got[:2] == want[:2] and torch.equal(got[2], want[2])
    with pytest.raises(ValueError, match=r"^evaluation='fast' is unknown; choose one of \['eager', 'graphed'\]$"):
        evaluation.evaluator(model, data, torch.device("cpu"), "fp32", 128, tests, "fast")
    with pytest.raises(ValueError, match=r"^evaluation='fast' is unknown"):
        RunOptions(evaluation="fast")
    asked, real = [], trainer.evaluator
    monkeypatch.setattr(trainer, "evaluator", lambda *a: asked.append(a[-1]) or real(*a))
    point = Point("e", "depth", 1, TINY, TrainConfig(epochs=2, batch_size=64))
    run_sweep("e", [point], RunOptions(dataset="digits", out=str(tmp_path), seeds=(0,), progress=False, device="cpu",
                                       cost=CostPlan(rounds=0), evaluation="graphed"))
    assert asked == ["graphed"] and read_table(tmp_path / "ablations" / "e.csv").iloc[0]["status"] == "ok"


def _captured_once(monkeypatch, warmup: int) -> tuple[list[int], list[torch.Tensor], FakeCuda]:
    """One call of a static step that captures after `warmup` eager steps (under the fake): the device
    generator's draws of each step it ran, its weights and optimizer state afterwards, and the fake."""
    monkeypatch.setattr(StaticStep, "WARMUP", warmup)
    fake = FakeCuda(monkeypatch, fail_in_block=False, fail_at_end=False)
    _, steps = _eager_and_static(TINY.replace(stem="conv", patch_size=4), TrainConfig(batch_size=32, grad_clip=1.0),
                                 capture=True)
    fake.watch, real_step, draws = steps[1], steps[1]._step, []

    def step(x, y, cache=True):
        draws.append(torch.randint(0, 10**6, (1,), generator=fake.generator).item())
        return real_step(x, y, cache)
    steps[1]._step = step
    g = torch.Generator().manual_seed(1)
    steps[1](torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g), lr=1e-3)
    assert steps[1].graphed and ("replay",) in fake.calls
    optimizer = steps[1].optimizer
    return draws, [t.clone() for t in steps[1].model.state_dict().values()] + [
        v.clone() for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v)], fake


@pytest.mark.parametrize("warmup", sorted({StaticStep.WARMUP, 3}))
def test_a_capture_that_succeeds_puts_the_warm_ups_generator_draws_back(warmup, monkeypatch):
    draws, _, fake = _captured_once(monkeypatch, warmup)
    # the warm-up steps, each drawing anew, then the captured one: it draws what the first warm-up step drew
    assert len(draws) == warmup + 1 and draws[-1] == draws[0] and len(set(draws[:warmup])) == warmup
    assert fake.current == ["default"]   # graphed and replayed: `_captured_once` asserts it


def test_how_many_warm_up_steps_precede_a_capture_leaves_no_trace(monkeypatch):
    """The warm-up before a capture is undone whatever its length: with one eager step or three, the captured
    step draws what the first warm-up step drew, and the weights and optimizer state after it are the same
    bit for bit (so `benchmarks/concurrent_runs.py --capture-warmup` compares the same runs)."""
    runs = {w: _captured_once(monkeypatch, w) for w in (1, 3)}
    for w, (draws, _, _) in runs.items():
        assert len(draws) == w + 1 and draws[-1] == draws[0]
    (_, one, _), (_, three, _) = runs[1], runs[3]
    assert len(one) == len(three) and all(torch.equal(a, b) for a, b in zip(one, three))


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
    row = read_table(tmp_path / "ablations" / "u.csv").iloc[0]
    assert 0 < row["train_util_pct"] <= 100
    peak = matmul_peak_flops(torch.device("cpu"), "fp32")
    expected = 3 * row["gflops"] * 1e9 * row["train_throughput_img_s"] / peak
    assert row["train_mfu"] == pytest.approx(expected, rel=0.05)   # the peak cache keeps the best seen
    cost = read_table(tmp_path / "ablations" / "u-cost.csv")
    if (cost["contended"] == 0).any():   # a round taken under other load is left out of the row's figures
        assert row["util_pct"] > 0 and row["train_mfu"] != row["mfu"]
    else:
        assert row["util_pct"] != row["util_pct"]  # blank: no round was measured alone


def test_the_step_benchmark_times_both_steps_in_interleaved_rounds_and_leaves_out_those_under_load(capsys,
                                                                                                 monkeypatch):
    """The machine's load is injected (a test must pass beside other work): quiet, every round counts; with the
    second timing of each round under load, those are left out and said."""
    from bench.contention import Load

    calls = []

    class Meter:   # as bench.contention.LoadMeter: what other processes took while the block ran
        def __init__(self, device):
            self.load = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append(1)
            self.load = Load(50.0 if busy(len(calls)) else 0.0, None, None)

    monkeypatch.setattr(stepbench, "LoadMeter", Meter)
    argv = ["stepbench", "--dataset", "digits", "--batch-size", "16", "--rounds", "3",   # preset auto: the base
            "--min-time", "0", "--device", "cpu"]
    busy = lambda n: False   # noqa: E731
    spreads = stepbench.run(build().parse_args(argv))
    assert set(spreads) == {"eager", "static"}
    assert all(s.n == 3 and 0 < s.q1 <= s.median <= s.q3 for s in spreads.values())
    out = capsys.readouterr().out
    assert out.startswith("vit_digits training step, batch 16, cpu fp32")   # the dataset's base model
    assert "static (static buffers, not captured)" in out and "static / eager: " in out and "left out" not in out
    calls.clear()
    busy = lambda n: n % 2 == 0   # noqa: E731
    spreads = stepbench.run(build().parse_args(argv))
    out = capsys.readouterr().out
    assert sorted(s.n for s in spreads.values()) == [1, 2]   # rounds alternate which step goes first
    assert ("3 interleaved rounds; 3 of 6 timings taken while other processes took ≥ 10 % of the machine, left out"
            in out)
    assert "static / eager: not compared (fewer than 3 measurements on a side)" in out


@pytest.mark.parametrize("args, message", [(["--batch-size", "0"], "argument --batch-size: --batch-size must be a "
                                                                    "positive integer, got '0'"),
                                           (["--rounds", "0"], "argument --rounds: --rounds must be a positive integer, "
                                                               "got '0'"),
                                           (["--min-time", "nan"], "--min-time must be a number of seconds ≥ 0, got "
                                                                   "'nan'"),
                                           (["--device", "cuda:7"], "cuda:7"),
                                           (["--preset", "vit_mnist"], "img_size=8 is not divisible by patch_size=7"),
                                           (["--dataset", "imagefolder", "--data-root", "/nonexistent"],
                                            "imagefolder: /nonexistent: no such folder; it needs train/ and")])
def test_the_step_benchmark_refuses_bad_input_before_building_anything(args, message, capsys, monkeypatch):
    monkeypatch.setattr(stepbench, "build_steps", lambda *a: pytest.fail("built steps for bad input"))
    try:   # a bad count is refused as the command line is read (argparse exits 2)
        code = main(["stepbench", "--preset", "vit_digits", "--dataset", "digits"] + args)
    except SystemExit as exit:
        code = exit.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


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
    for batch in (64, 64, 64, 17, 64, 17):
        x, y = torch.randn(batch, 1, 8, 8, generator=g).to(device), torch.randint(0, 10, (batch,), generator=g).to(device)
        losses = [step(x, y, lr=1e-3) for step in steps]
        torch.testing.assert_close(losses[0], losses[1], rtol=2e-2 if dtype == "bf16" else 1e-4, atol=1e-3)
    assert sorted(steps[1].graphs) == [17, 64]
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=2e-2 if dtype == "bf16" else 1e-4, atol=1e-3, msg=name)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_one_warm_up_step_before_a_capture_trains_bit_for_bit_as_three_on_cuda(dtype, monkeypatch):
    """Two graphed steps from the same weights, one capturing after one eager warm-up step and one after
    three (the default): after steps of two batch sizes (a capture each) their weights are equal bit for bit."""
    # deterministic kernels (the conv stem's and attention's backward): what is compared is the warm-up's trace,
    # not the run-to-run wobble of atomics
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    was = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        _warm_ups_alike_on_cuda(dtype)
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])


def _warm_ups_alike_on_cuda(dtype: str) -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    a = VisionTransformer(TINY.replace(stem="conv", patch_size=4)).to(device)
    b = VisionTransformer(a.cfg).to(device)
    b.load_state_dict(a.state_dict())
    steps = []
    for model, warmup in ((a, 3), (b, 1)):
        model.train()
        step = StaticStep(model, model, adamw(param_groups(model, 0.05), 1e-3),
                          torch.amp.GradScaler("cuda", enabled=False), TrainConfig(batch_size=64), device, dtype)
        step.WARMUP = warmup
        steps.append(step)
    g = torch.Generator().manual_seed(1)
    for batch in (64, 64, 17, 64, 17):
        x, y = torch.randn(batch, 1, 8, 8, generator=g).to(device), torch.randint(0, 10, (batch,), generator=g).to(device)
        losses = [step(x, y, lr=1e-3) for step in steps]
        assert torch.equal(losses[0], losses[1])
    assert all(s.graphed and sorted(s.graphs) == [17, 64] for s in steps)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_graphed_evaluation_equals_the_eager_one_bit_for_bit_as_the_weights_train_on_cuda(dtype):
    """Replayed after the weights have changed in place (training steps between), the captured evaluation
    gives the eager evaluation's loss, accuracy and every prediction exactly: the same kernels in the same order."""
    from ablations.training.evaluation import GraphedEvaluation, evaluate
    device, data = torch.device("cuda"), load_dataset("digits")
    torch.manual_seed(0)
    model = VisionTransformer(TINY.replace(stem="conv", patch_size=4)).to(device)
    step = StaticStep(model, model, adamw(param_groups(model, 0.05), 1e-3), torch.amp.GradScaler("cuda", enabled=False),
                      TrainConfig(batch_size=64), device, dtype)
    tests = data.test_x.to(device), data.test_y.to(device)
    graphed = GraphedEvaluation(model, data, device, dtype, 128, tests)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        for _ in range(5):
            i = torch.randint(0, len(data.train_y), (64,), generator=g)
            model.train()
            step(data.normalize(data.train_x[i].to(device)), data.train_y[i].to(device), 1e-3)
        got, want = graphed(), evaluate(model, data, device, dtype, 128, tests)
        assert got[:2] == want[:2] and torch.equal(got[2], want[2])
    assert graphed.graph is not None and not graphed.eager


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("evaluation", ["eager", "graphed"])
def test_a_training_epoch_on_cuda_synchronises_a_fixed_few_times_not_per_step(evaluation):
    """torch's sync debug mode warns at each synchronising call (a blocking copy, .item()); the difference
    between a 4- and a 2-epoch run is two epochs' worth. A 1-epoch run goes first, uncounted: it pays what a
    process pays once (the dataset's device copies, kept for every later run), which would otherwise fall on
    the 2-epoch run alone and shrink the difference."""
    data = load_dataset("digits")

    def syncs(epochs: int) -> int:
        torch.manual_seed(0)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                train(VisionTransformer(TINY), data, TrainConfig(epochs=epochs, batch_size=32), 0,
                      torch.device("cuda"), progress=False, evaluation=evaluation)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in seen)
    syncs(1)
    counted = {epochs: syncs(epochs) for epochs in (2, 4)}
    per_epoch = (counted[4] - counted[2]) / 2
    steps = math.ceil(len(data.train_y) / 32)
    assert 0 < per_epoch <= 8 < steps, (counted, steps)


# A recipe that learns digits in seconds: 0.867, 0.850, 0.878, 0.894, 0.908 test accuracy (seeds 0-4) on the CPU
# in fp32, 3.6 s a run; the seeds' spread (s.d. 0.02) sets the tests' bounds below
LEARNS = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=32, depth=2, num_heads=2,
                   mlp_ratio=2.0)
LEARNS_RECIPE = TrainConfig(epochs=20, batch_size=64, lr=3e-3, crop_padding=0, warmup_epochs=1)


@pytest.mark.slow
def test_the_reduced_precision_tests_recipe_learns_on_the_cpu(tmp_path):
    """The recipe the GPU tests train in bf16 and fp16 learns in fp32 here, so those tests test precision."""
    points = [Point("g", "depth", 2, LEARNS, LEARNS_RECIPE)]
    run_sweep("g", points, RunOptions(dataset="digits", out=str(tmp_path), seeds=(0,), progress=False, device="cpu",
                                      cost=CostPlan(rounds=0)))
    row = read_table(tmp_path / "ablations" / "g.csv").iloc[0]
    assert row["status"] == "ok" and row["test_acc"] > 0.75, row["test_acc"]


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_reduced_precision_training_on_cuda_learns_and_samples_nvml(dtype, tmp_path):
    """The same seed in fp32 and in `dtype` on the GPU: both learn, and within 8 points (4 seed s.d.) of each other."""
    rows = {}
    for each in ("fp32", dtype):
        points = [Point("g", "depth", 2, LEARNS, dataclasses.replace(LEARNS_RECIPE, dtype=each))]
        run_sweep("g", points, RunOptions(dataset="digits", out=str(tmp_path / each), seeds=(0,), progress=False,
                                          device="cuda", cost=CostPlan(rounds=1)))
        rows[each] = read_table(tmp_path / each / "ablations" / "g.csv").iloc[0]
    row = rows[dtype]
    assert row["status"] == "ok" and row["dtype"] == dtype and row["test_acc"] > 0.75, row["test_acc"]
    assert rows["fp32"]["test_acc"] > 0.75 and abs(row["test_acc"] - rows["fp32"]["test_acc"]) < 0.08, \
        (row["test_acc"], rows["fp32"]["test_acc"])
    # a run of a second or so may hold no whole NVML sample period: then blank, never a neighbour's figure
    assert row["util_source"] == "nvml" and row["peak_mem_mb"] > 0
    assert pd.isna(row["train_util_pct"]) or 0 < row["train_util_pct"] <= 100


@pytest.mark.gpu
@cuda
def test_runs_side_by_side_in_one_process_train_exactly_as_alone_on_cuda(tmp_path):
    """JOBS=3 on one GPU (threads, each run on its own stream, graphs captured one at a time) gives every run
    the predictions and losses it has at JOBS=1, bit for bit, with its evaluation eager or replayed from a CUDA
    graph, and leaves each run's own busy % blank."""
    from ablations.running.executors import ExecutorOptions
    from ablations.running.executors.local import LocalExecutor

    points = [Point("s", "depth", d, LEARNS.replace(depth=d), dataclasses.replace(LEARNS_RECIPE, epochs=4))
              for d in (1, 2)]
    tables = {}
    for jobs, how in ((1, "eager"), (3, "eager"), (3, "graphed")):
        executor = LocalExecutor(ExecutorOptions(jobs=jobs, device="cuda"))
        line = executor.start()
        assert jobs == 1 or "in this process" in line, line
        out = tmp_path / f"j{jobs}-{how}"
        run_sweep("s", points, RunOptions(dataset="digits", out=str(out), seeds=(0, 1), device="cuda",
                                          progress=False, cost=CostPlan(rounds=0), evaluation=how), executor)
        tables[out.name] = read_table(out / "ablations" / "s.csv").set_index("run_id").sort_index()
        assert (tables[out.name]["status"] == "ok").all()
    alone = tables["j1-eager"]
    for name, table in tables.items():   # side by side, and with each epoch's evaluation replayed from its graph
        assert list(table["train_loss"]) == list(alone["train_loss"]), name
        assert list(table["test_loss"]) == list(alone["test_loss"]), name
        for rid in alone.index:
            a, b = (np.load(tmp_path / j / "ablations" / "preds" / "s" / f"{rid}.npz")["pred"] for j in ("j1-eager", name))
            assert np.array_equal(a, b), (name, rid)
    assert tables["j3-eager"]["train_util_pct"].isna().all()


@pytest.mark.gpu
@cuda
def test_nvml_utilisation_of_a_second_of_matmuls_comes_from_samples_inside_it():
    from bench.utilisation import UtilSampler, reader_for

    a = torch.randn(4096, 4096, device="cuda")
    with UtilSampler(reader_for(torch.device("cuda"))) as sampler:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.5:
            for _ in range(10):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
    figures = sampler.summary()
    assert figures["util_source"] == "nvml" and figures["util_samples"] >= 1, figures
    assert figures["util_pct"] > 50 and figures["power_w"] > 0, figures


@pytest.mark.gpu
@cuda
def test_compiled_training_on_cuda_runs(tmp_path):
    if not any(shutil.which(c) for c in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang"))):
        pytest.skip("torch.compile's Triton kernels need a C compiler (CC, cc, gcc or clang), and none is on PATH")
    data = load_dataset("digits")
    torch.manual_seed(0)
    result = train(VisionTransformer(TINY), data, TrainConfig(epochs=1, batch_size=64, compile=True),
                   0, torch.device("cuda"), progress=False)
    assert 0 <= result.test_acc <= 1


@pytest.mark.gpu
@cuda
def test_the_cost_phase_on_cuda_times_the_graphed_training_step(tmp_path, monkeypatch):
    """With GRAPHS on (the default), the cost phase's train rows come from the captured step, as the runs
    train; with GRAPHS=0 from the eager one. Each is built (captured) once for the phase's two rounds."""
    import bench.training.step as step_module
    from bench.timing import TimingConfig

    built = []
    real = step_module.make_step
    monkeypatch.setattr(step_module, "make_step", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    plan = CostPlan(rounds=2, infer_batch_size=32, timing=TimingConfig(warmup=4, min_repeats=5, min_time_s=0.0))
    points = [Point("g", "depth", 1, TINY, TrainConfig(epochs=1, batch_size=64, dtype="bf16"))]
    for graphs in (True, False):
        phase = run_cost_phase("g", points, plan, torch.device("cuda"), tmp_path / f"{graphs}.csv",
                                           progress=False, graphs=graphs)
        assert (phase["status"] == "ok").all() and len(phase) == 2 * 2
    assert [type(s) for s in built] == [StaticStep, EagerStep]
    assert built[0].graphed and sorted(built[0].graphs) == [64]


@pytest.mark.gpu
@cuda
def test_a_cuda_peak_is_the_same_whatever_else_is_allocated_on_the_device():
    """Another model alive on the GPU (as in a cost phase, which keeps every model) is not counted."""
    from bench.memory import peak_mem_mb
    from bench.training.step import training_step

    device = torch.device("cuda")
    peaks = []
    for other_mb in (0, 256):
        other = torch.empty(other_mb * 2**20, dtype=torch.uint8, device=device) if other_mb else None
        torch.manual_seed(0)
        model = VisionTransformer(TINY).to(device)
        images, labels = torch.randn(64, 1, 8, 8, device=device), torch.randint(0, 10, (64,), device=device)
        step, alive = training_step(TrainConfig(batch_size=64), device, graphs=True)(model, images, labels)
        peaks.append(peak_mem_mb(step, device, alive))
        del other, step, alive, model
        torch.cuda.empty_cache()
    assert peaks[0] > 0 and abs(peaks[1] - peaks[0]) < 1.0, peaks
    from bench.training.step import resident_bytes

    model = VisionTransformer(TINY).to(device)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert resident_bytes([model], torch.device("cuda")) >= params > 0   # plain "cuda": the current device


@pytest.mark.gpu
@cuda
def test_two_jobs_on_one_gpu_say_whether_they_share_it_under_mps_and_train(tmp_path, capsys):
    """JOBS=2 WORKERS=processes on CUDA: the start line says MPS or time-sliced (with the reason), every run finishes, and a
    private daemon is gone after the command."""
    import glob
    import tempfile

    from ablations.running.executors import ExecutorOptions
    from ablations.running.executors.local import LocalExecutor
    from ablations.running.executors.mps import compute_mode

    if compute_mode(0) not in (None, "DEFAULT"):
        pytest.skip(f"GPU 0 is in {compute_mode(0)} compute mode: one process at a time, so JOBS=2 is refused")
    points = [Point("m", "depth", d, TINY.replace(depth=d), TrainConfig(epochs=2, batch_size=64)) for d in (1, 2)]
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cuda", workers="processes"))
    line = executor.start()
    assert "MPS" in line, line
    try:
        summary = run_sweep("m", points, RunOptions(dataset="digits", out=str(tmp_path), seeds=(0, 1), device="cuda",
                                                    progress=False, cost=CostPlan(rounds=0)), executor)
    finally:
        executor.close()
    assert summary.statuses == {"ok": 4}, summary
    assert not glob.glob(os.path.join(tempfile.gettempdir(), "vitbench-mps-*"))
    print(line)  # what the GPU machine did: under MPS, or time-sliced and why


def test_the_graphed_steps_memory_is_its_pool_not_the_captures_scaffolding(monkeypatch):
    """The first call of a graphed step warms up on a side stream (whose first matmul allocates that stream's
    cuBLAS workspace) with copies of the weights and optimizer state saved, then captures. Its memory is
    what the step keeps (input buffers, the optimizer state the warm-up created) and the capture's own peak
    (the graph's pool): the copies are gone before the capture begins, and the workspace is not counted."""
    import weakref

    from bench.memory import peak_mem_mb
    from bench.training.step import resident_bytes

    fake = FakeCuda(monkeypatch, fail_in_block=False, fail_at_end=False)
    model_cfg = TINY.replace(stem="conv", patch_size=4)
    models, steps = _eager_and_static(model_cfg, TrainConfig(batch_size=32, grad_clip=1.0), capture=True)
    step = fake.watch = steps[1]
    real_step, real_saved, copies = step._step, step._saved_state, []
    workspace, pool = 32 * 2**20, 5 * 2**20

    def saved():
        model_state, optim_state = real_saved()
        copies.extend(weakref.ref(t) for t in model_state)
        return model_state, optim_state

    def traced(x, y, cache=True):
        capturing_now = any(c[0] == "capture_begin" for c in fake.calls)
        if not capturing_now and fake.current[-1] is fake.side and not fake.calls.count(("workspace",)):
            fake.calls.append(("workspace",))
            fake.alloc(workspace)        # the side stream's cuBLAS workspace: allocated once, kept
        if capturing_now:
            fake.calls.append(("copies alive", any(r() is not None for r in copies)))
            fake.alloc(pool)             # the graph's activations and gradients at their peak ...
            fake.alloc(-pool)            # ... freed into its pool by the end of the step
        return real_step(x, y, cache)
    step._step, step._saved_state = traced, saved
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g)
    losses = [s(x, y, lr=1e-3) for s in steps]
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    _assert_same_weights(*models)        # trained once on the batch, as the eager step
    assert step.graphed and ("copies alive", False) in fake.calls
    kept = resident_bytes(step.buffers[32], torch.device("cpu")) + resident_bytes([step.optimizer], torch.device("cpu"))
    assert kept > 0 and step.first_call_bytes == kept + pool
    step(x, y, lr=1e-3)                  # a replay captures nothing: no figure of its own
    assert step.first_call_bytes is None

    class Measured:                      # a step that measured its own first call
        own_peak_bytes = 3 * 2**20

        def __call__(self):
            fake.alloc(workspace)        # scaffolding the allocator's peak would count
    assert peak_mem_mb(Measured(), torch.device("cuda"), ()) == 3.0


def test_the_static_step_sets_every_groups_learning_rate_with_one_kernel():
    """Each parameter group's learning rate is a view of one device table that a single multiplication
    refills per step (layer-wise decay included), instead of one fill per group."""
    model = VisionTransformer(TINY.replace(depth=3))
    opt = adamw(param_groups(model, 0.05, layer_decay=0.5), 1e-3)
    step = StaticStep(model, model, opt, torch.amp.GradScaler("cpu", enabled=False), TrainConfig(), torch.device("cpu"),
                      "fp32", capture=False)
    step.set_lr(2e-3)
    table = step.lr_table.untyped_storage().data_ptr()
    assert len(opt.param_groups) > 3
    for group in opt.param_groups:
        assert group["lr"].untyped_storage().data_ptr() == table
        assert float(group["lr"]) == pytest.approx(2e-3 * group["lr_scale"], rel=1e-6)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step.set_lr(3e-3)
    ops = [e.name for e in prof.events() if e.name.startswith("aten::")]
    assert ops.count("aten::mul") == 1 and "aten::fill_" not in ops
    assert float(opt.param_groups[-1]["lr"]) == pytest.approx(3e-3 * opt.param_groups[-1]["lr_scale"], rel=1e-6)
