"""The weights autocast casts at every use, cast in one kernel a step (`bench.training.precision.OneCast`): the same
bits as autocast's casts at each use, alone and packed, eager, on static buffers and captured; no weight cast at its
use; the weights it takes are exactly those autocast casts (linear layers and convolutions), each at an aligned
offset; none in fp32 or under torch.compile; by default on CUDA only. On the CPU in bf16 (slow matmuls: tiny
models, few steps); the CUDA check is marked `gpu`."""

import collections
import contextlib
import importlib.util
from pathlib import Path

import pytest
import torch
from fake_cuda import FakeCuda
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ablations.training.packed import GraphedPackedStep, PackedModel, PackedStep, pack_optimizer
from bench.training.precision import OneCast
from bench.training.recipe import TrainConfig
from bench.training.step import EagerStep, StaticStep, adamw, param_groups
from vit import VisionTransformer, ViTConfig

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=2, num_heads=2,
                 mlp_ratio=2.0)
CPU = torch.device("cpu")
RECIPE = TrainConfig(batch_size=16, grad_clip=1.0, layer_decay=0.75)


def _cfg(stem: str, attn: str) -> ViTConfig:
    return TINY.replace(stem=stem, attn=attn, patch_size=4 if stem == "conv" else 2)


class _Casts(TorchDispatchMode):
    """The casts a step dispatches: of each tensor (by id; a view's counts for its base) and in all."""

    def __init__(self) -> None:
        super().__init__()
        self.of: collections.Counter = collections.Counter()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default:
            self.total += 1
            t = args[0]
            self.of[id(t if t._base is None else t._base)] += 1
        return func(*args, **(kwargs or {}))


def _alone(cfg: ViTConfig, kind: type, one_cast: bool, dtype: str = "bf16", capture: bool = False):
    torch.manual_seed(0)
    model = VisionTransformer(cfg)
    model.train()
    optimizer = adamw(param_groups(model, 0.05, RECIPE.layer_decay), 1e-3)
    args = (model, model, optimizer, torch.amp.GradScaler("cpu", enabled=False), RECIPE, CPU, dtype)
    step = kind(*args, capture=capture) if kind is StaticStep else kind(*args)
    step.ONE_CAST = one_cast
    return step


def _packed(cfg: ViTConfig, graphed: bool, one_cast: bool, seeds=(0, 1, 2)):
    models = []
    for s in seeds:
        torch.manual_seed(s)
        models.append(VisionTransformer(cfg))
    packed = PackedModel(models)
    packed.template.train()
    if graphed:
        step = GraphedPackedStep(packed, pack_optimizer(packed, RECIPE, capturable=True), RECIPE, CPU, "bf16",
                                 capture=False, measured=False)
    else:
        step = PackedStep(packed, pack_optimizer(packed, RECIPE), RECIPE, CPU, "bf16")
    step.ONE_CAST = one_cast
    return step


def _state(step: EagerStep) -> list[torch.Tensor]:
    return [*step._state_tensors(), *(v for st in step.optimizer.state.values() for v in st.values()
                                      if torch.is_tensor(v))]


def _train(step: EagerStep, k: int = 0, steps: int = 3) -> tuple[list[torch.Tensor], _Casts]:
    g = torch.Generator().manual_seed(1)
    cfg = step.model.cfg if not isinstance(step, PackedStep) else step.packed.template.cfg
    losses, casts = [], None
    for i, batch in enumerate([16] * (steps - 1) + [9]):     # a last, smaller batch (its own buffers)
        lead = (k,) if k else ()
        x = torch.randn(*lead, batch, cfg.in_chans, cfg.img_size, cfg.img_size, generator=g)
        y = torch.randint(0, 10, (*lead, batch), generator=g)
        with _Casts() if i == steps - 1 else contextlib.nullcontext() as counted:   # the casts of the last step
            losses.append(step(x, y, 1e-3 * (i + 1)))
        casts = counted or casts
    return losses, casts


@pytest.mark.parametrize("stem, attn, kind, dtype", [
    ("conv", "sdpa", EagerStep, "bf16"), ("patch", "loop", EagerStep, "bf16"), ("patch", "einops", StaticStep, "bf16"),
    ("conv", "bmm", StaticStep, "bf16"), ("patch", "sdpa", EagerStep, "fp16")])
def test_a_step_with_its_weights_cast_once_trains_to_the_bits_of_autocasts_casts_at_each_use(stem, attn, kind, dtype):
    cfg = _cfg(stem, attn)
    each, once = _alone(cfg, kind, False, dtype), _alone(cfg, kind, True, dtype)
    (losses_each, casts_each), (losses_once, casts_once) = _train(each), _train(once)
    assert [torch.equal(a, b) for a, b in zip(losses_each, losses_once)] == [True] * 3
    differ = [i for i, (a, b) in enumerate(zip(_state(each), _state(once))) if not torch.equal(a, b)]
    assert differ == [] and len(_state(once)) > 2 * len(list(once.model.parameters()))
    # no weight is cast at its use; the one cast took every one autocast casts
    assert not {id(p) for p in once.model.parameters()} & set(casts_once.of)
    assert sum(casts_each.of[id(p)] > 0 for p in each.model.parameters()) == len(once.one_cast.names) > 2
    # each cast at a use (a loop attention casts a slice of qkv per head) had its gradient's cast back: 2 in all now
    at_use = sum(casts_each.of[id(p)] for p in each.model.parameters())
    assert casts_each.total - casts_once.total == 2 * at_use - 2


@pytest.mark.parametrize("warmup", [0, 1])
def test_the_weights_to_cast_once_are_found_before_a_capture_begins_and_the_capture_trains_to_the_same_bits(
        warmup, monkeypatch):
    """Under a CUDA as strict as torch's (a capture records the step, its first replay applies it): the forward that
    finds the weights runs before any capture, whatever the warm-up, and the captured step's weights and AdamW
    state after one call are those of the captured step with autocast's casts at each use."""
    monkeypatch.setattr(StaticStep, "WARMUP", warmup)
    cfg = _cfg("patch", "sdpa")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
    find, seen, trained = OneCast.find.__func__, [], {}
    for one_cast in (False, True):
        fake = FakeCuda(monkeypatch, fail_in_block=False, fail_at_end=False)

        def found(cls, *args, **kwargs):
            seen.append([call[0] for call in fake.calls])
            return find(cls, *args, **kwargs)
        monkeypatch.setattr(OneCast, "find", classmethod(found))
        step = fake.watch = _alone(cfg, StaticStep, one_cast, capture=True)
        step(x, y, 1e-3)
        assert step.graphed and [c[0] for c in fake.calls].count("capture_begin") == 1 and ("replay",) in fake.calls
        trained[one_cast] = step
    assert seen == [[]] and trained[True].one_cast is not None
    assert [i for i, (a, b) in enumerate(zip(_state(trained[False]), _state(trained[True])))
            if not torch.equal(a, b)] == []


@pytest.mark.parametrize("stem, graphed, matmul_order", [("conv", False, False), ("patch", True, False),
                                                         ("conv", False, True), ("patch", True, True)])
def test_a_pack_with_its_weights_cast_once_trains_to_the_bits_of_autocasts_casts_at_each_use(stem, graphed,
                                                                                            matmul_order, request,
                                                                                            monkeypatch):
    """Also with the matmul weights laid out as on CUDA (`vit.stacked.MATMUL_ORDER`): each is cast in its layout."""
    import vit.stacked
    monkeypatch.setattr(vit.stacked, "MATMUL_ORDER", matmul_order)
    if graphed:
        request.getfixturevalue("capturable_on_cpu")
    cfg = _cfg(stem, "sdpa")
    each, once = _packed(cfg, graphed, False), _packed(cfg, graphed, True)
    (losses_each, casts_each), (losses_once, casts_once) = _train(each, 3), _train(once, 3)
    assert [torch.equal(a, b) for a, b in zip(losses_each, losses_once)] == [True] * 3
    assert [i for i, (a, b) in enumerate(zip(_state(each), _state(once))) if not torch.equal(a, b)] == []
    # the stacked layers are cast as a model's alone: the linear layers' and convolutions' weights and biases, once
    stacked = {id(p) for p in once.packed.params.values()}
    assert not stacked & set(casts_once.of)
    expected = {f"{name}.{p}" for name, m in once.packed.template.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))
                for p, _ in m.named_parameters(recurse=False)}
    assert set(once.one_cast.names) == expected
    at_use = sum(casts_each.of[id(p)] for p in each.packed.params.values())
    assert at_use == len(once.one_cast.names) and casts_each.total - casts_once.total == 2 * at_use - 2


@pytest.mark.parametrize("stem, attn", [("conv", "sdpa"), ("patch", "loop")])
def test_the_weights_cast_once_are_those_of_the_linear_layers_and_convolutions(stem, attn):
    step = _alone(_cfg(stem, attn), EagerStep, True)
    _train(step, 0, 1)
    model = step.model
    expected = {f"{name}.{p}" for name, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))
                for p, _ in m.named_parameters(recurse=False)}
    assert set(step.one_cast.names) == expected
    assert "pos_embed.weight" not in expected and "cls_token" not in expected


class _Toy(nn.Module):
    """Sizes that fill no boundary, a weight also used outside a linear layer, a layer used twice, and a weight
    used whole and in part."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = nn.Linear(3, 5), nn.Linear(5, 7), nn.Linear(7, 10), nn.Linear(10, 10)
        self.e = nn.Linear(10, 10)
        self.scale = nn.Parameter(torch.ones(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.d(self.d(self.c(self.b(torch.relu(self.a(x))))))
        z = self.e(y) * self.scale + self.b.weight.sum()
        return torch.cat([z, torch.nn.functional.linear(y, self.e.weight[:5])], -1)


def test_each_weight_cast_once_starts_at_an_aligned_offset_and_one_used_otherwise_or_twice_is_left_to_autocast():
    toy = _Toy()
    params = dict(toy.named_parameters())
    found = OneCast.find(toy, params, {}, torch.randn(2, 3), CPU, "bf16")
    assert set(found.names) == {"a.weight", "a.bias", "b.bias", "c.weight", "c.bias", "e.bias"}   # not b.weight,
    # scale, d (used twice) or e.weight (whole and in part)
    cast = found()
    base = cast["a.weight"]._base
    for name, t in cast.items():
        assert t._base is base and t.dtype == torch.bfloat16 and torch.equal(t, params[name].to(torch.bfloat16))
        boundary = 256 if t.dim() > 1 else 16
        assert (t.storage_offset() * t.element_size()) % boundary == 0, (name, t.storage_offset())
    assert sum(found.pads) > 0   # 15, 5, 70, 10 elements: some padding was needed
    # the gradients come back through the one cast: those of autocast's casts at each use, bit for bit
    x = torch.randn(4, 3)
    grads = []
    for once in (False, True):
        toy.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            out = torch.func.functional_call(toy, found(), (x,)) if once else toy(x)
        out.float().square().sum().backward()
        grads.append({n: p.grad.clone() for n, p in toy.named_parameters()})
    assert [n for n in grads[0] if not torch.equal(grads[0][n], grads[1][n])] == []


def test_nothing_is_cast_once_in_fp32_or_under_torch_compile():
    assert OneCast.find(_Toy(), dict(_Toy().named_parameters()), {}, torch.randn(2, 3), CPU, "fp32") is None
    fp32 = _alone(TINY, EagerStep, True, dtype="fp32")
    _train(fp32, 0, 1)
    assert fp32.one_cast is None
    compiled = _alone(TINY, EagerStep, True)
    compiled.cfg = TrainConfig(compile=True)
    compiled._find_casts(torch.randn(2, 1, 8, 8))
    assert compiled.one_cast is None


def _benchmark():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "one_cast.py"
    spec = importlib.util.spec_from_file_location("one_cast", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_one_cast_benchmark_times_both_and_finds_the_same_bits(capsys):
    bench = _benchmark()
    assert bench.main(["--widths", "0,2", "--steps", "1", "--rounds", "1", "--depth", "1", "--device", "cpu",
                       "--stem", "patch", "--bits", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.split()[:1] in (["alone"], ["2"])]
    assert [r.split()[1:3] for r in rows] == [["at", "each"], ["once", "a"]] * 2
    each, once = (int(r.split()[-2]) for r in rows[:2])
    assert once < each   # torch ops a step
    assert out.count("0 of ") == 2 and "differ between the weights cast once and at each use" in out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("width", [0, 3])
def test_the_graphed_step_with_its_weights_cast_once_trains_to_the_same_bits_on_cuda(width):
    """Captured into CUDA graphs, in bf16, the patch stem (the conv stem is not deterministic on CUDA): the one
    cast and autocast's casts at each use give the same state after 20 steps, alone and in a pack of 3."""
    bench = _benchmark()
    cfg = TINY.replace(img_size=28, patch_size=4, stem="patch", depth=2, embed_dim=64, num_heads=4)
    recipe = TrainConfig(batch_size=64, packed=True, dtype="bf16")
    differ, total = bench.bits(width, cfg, recipe, torch.device("cuda"), True, 20)
    assert total > 0 and differ == 0


@pytest.mark.parametrize("device, expected", [("cuda", True), ("cpu", False)])
def test_by_default_the_weights_are_cast_once_on_cuda_and_at_each_use_elsewhere(device, expected):
    """On CUDA a step's launches cost more than the copy the one cast adds; on a CPU they do not."""
    assert EagerStep.ONE_CAST is None
    torch.manual_seed(0)
    model = VisionTransformer(TINY)
    step = EagerStep(model, model, adamw(param_groups(model, 0.05), 1e-3), torch.amp.GradScaler("cpu", enabled=False),
                     RECIPE, torch.device(device), "bf16")
    step._one_cast = lambda x: "found"
    step._find_casts(torch.randn(2, 1, 8, 8))
    assert (step.one_cast == "found") is expected


def test_a_model_whose_weights_cannot_be_found_trains_with_autocasts_casts_saying_so_in_one_line(monkeypatch, capsys):
    def refuse(cls, *args, **kwargs):
        raise RuntimeError("vmap: no batching rule for aten::something\nmore detail")
    monkeypatch.setattr(OneCast, "find", classmethod(refuse))
    step, each = _alone(TINY, EagerStep, True), _alone(TINY, EagerStep, False)
    assert [torch.equal(a, b) for a, b in zip(_train(step)[0], _train(each)[0])] == [True] * 3
    out = capsys.readouterr().out
    assert step.one_cast is None and out.count("\n") == 1
    assert out.startswith("casts: finding the weights to cast once failed (RuntimeError: vmap: no batching rule for "
                          "aten::something); autocast casts them at each use")
