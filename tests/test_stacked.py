"""The stacked model (`vit.stacked`): k members' weights in one forward compute each member's own function, its
outputs, BatchNorm statistics and gradients those of the member alone (float32, to rounding), for every variant the
config offers; a pack's step launches as many ops whatever its width; what has no stacked form is refused."""

import collections
import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import rel_err
from torch import nn
from torch.func import functional_call, stack_module_state
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import vit.attention
import vit.stacked
from vit import VisionTransformer, ViTConfig
from vit.stacked import stacked

SMALL = ViTConfig(img_size=16, patch_size=4, in_chans=3, num_classes=5, embed_dim=32, depth=2, num_heads=4)
VARIANTS = [dict(zip(("attn", "pos", "norm", "pool", "stem"), v)) for v in itertools.product(
    ["loop", "bmm", "einops", "sdpa"], ["learned", "sinusoidal", "sincos2d", "none"], ["pre", "post"], ["cls", "avg"],
    ["patch", "conv"])]


def _members(cfg: ViTConfig, k: int = 3) -> list[VisionTransformer]:
    models = []
    for seed in range(k):
        torch.manual_seed(seed)
        models.append(VisionTransformer(cfg))
    return models


def _stacked_and_alone(cfg: ViTConfig, training: bool):
    """(stacked logits, stacked gradients, stacked buffers after), (the same of each member alone)."""
    models = _members(cfg)
    params, buffers = stack_module_state(models)
    template = stacked(models[0]).train(training)
    x = torch.randn(3, 4, cfg.in_chans, cfg.img_size, cfg.img_size, generator=torch.Generator().manual_seed(9))
    y = torch.randint(0, cfg.num_classes, (3, 4), generator=torch.Generator().manual_seed(8))
    logits = functional_call(template, (params, buffers), (x.flatten(0, 1),)).unflatten(0, (3, -1))
    F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(3, -1).mean(1).sum().backward()
    alone = []
    for model, xi, yi in zip(models, x, y):
        model.train(training)
        out = model(xi)
        F.cross_entropy(out, yi).backward()
        alone.append((out, {n: p.grad for n, p in model.named_parameters()}, dict(model.named_buffers())))
    return (logits, {n: p.grad for n, p in params.items()}, buffers), alone


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(v.values()))
def test_the_stacked_model_computes_each_members_own_outputs_statistics_and_gradients(variant):
    (logits, grads, buffers), alone = _stacked_and_alone(SMALL.replace(**variant), training=True)
    for j, (out, member_grads, member_buffers) in enumerate(alone):
        assert rel_err(logits[j], out) < 1e-5
        assert {n: rel_err(grads[n][j], g) < 1e-4 for n, g in member_grads.items()} == dict.fromkeys(member_grads, True)
        assert all(torch.allclose(buffers[n][j].double(), b.double(), rtol=1e-5, atol=1e-6)
                   for n, b in member_buffers.items())


@pytest.mark.parametrize("attn", ["loop", "sdpa"])
def test_without_a_qkv_bias_the_stacked_model_computes_each_members_own_function(attn):
    (logits, grads, _), alone = _stacked_and_alone(SMALL.replace(attn=attn, qkv_bias=False), training=True)
    assert not any(n.endswith("qkv.bias") for n in grads)
    for j, (out, member_grads, _) in enumerate(alone):
        assert rel_err(logits[j], out) < 1e-5 and all(rel_err(grads[n][j], g) < 1e-4 for n, g in member_grads.items())


@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_in_eval_mode_the_stacked_model_reads_each_members_own_running_statistics(stem):
    models = _members(SMALL.replace(stem=stem))
    for model in models:   # statistics of their own, not the initial ones
        model.train()
        model(torch.randn(8, 3, 16, 16))
        model.eval()
    params, buffers = stack_module_state(models)
    x = torch.randn(3, 4, 3, 16, 16)
    logits = functional_call(stacked(models[0]).eval(), (params, buffers), (x.flatten(0, 1),)).unflatten(0, (3, -1))
    assert [rel_err(logits[j], m(x[j])) < 1e-5 for j, m in enumerate(models)] == [True] * 3


@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_with_one_fused_call_for_all_members_as_on_cuda_the_function_is_the_same(stem, monkeypatch):
    """Off CUDA fused attention and BatchNorm take each member's rows in a call of their own; the one call for all
    that CUDA makes computes the same function (checked here on the CPU)."""
    calls = collections.Counter()
    real_sdpa, real_bn = F.scaled_dot_product_attention, F.batch_norm

    def sdpa(q, *args, **kwargs):
        calls["sdpa", q.shape[0]] += 1
        return real_sdpa(q, *args, **kwargs)

    def bn(x, *args, **kwargs):
        calls["bn", x.shape[1]] += 1
        return real_bn(x, *args, **kwargs)
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    monkeypatch.setattr(F, "batch_norm", bn)
    cfg = SMALL.replace(stem=stem, attn="sdpa", depth=1)
    per_member = _stacked_and_alone(cfg, training=True)
    assert calls[("sdpa", 4)] == 3 + 3 and calls[("sdpa", 12)] == 0   # a call a member; and each alone
    calls.clear()
    monkeypatch.setattr(vit.attention, "ONE_CALL", True)
    (logits, grads, buffers), alone = _stacked_and_alone(cfg, training=True)
    assert calls[("sdpa", 12)] == 1 and calls[("sdpa", 4)] == 3   # the pack's one call; the members' own alone
    if stem == "conv":
        assert calls[("bn", 3 * cfg.stem_channels[0])] == 1
    for j, (out, member_grads, _) in enumerate(alone):
        assert rel_err(logits[j], out) < 1e-5
        assert all(rel_err(grads[n][j], g) < 1e-4 for n, g in member_grads.items())
    assert rel_err(logits, per_member[0][0]) < 1e-5


def _ops(cfg: ViTConfig, k: int) -> int:
    """Torch ops (views left out) of one forward and backward of a stacked model of k members."""
    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += not func.is_view and any(torch.is_tensor(t) and t.dim() for t in tree_leaves((args, kwargs)))
            return func(*args, **(kwargs or {}))
    models = _members(cfg, k)
    params, buffers = stack_module_state(models)
    template = stacked(models[0]).train()
    x = torch.randn(k * 4, cfg.in_chans, cfg.img_size, cfg.img_size)
    with Count() as count:
        functional_call(template, (params, buffers), (x,)).sum().backward()
    return count.ops


@pytest.mark.parametrize("attn", ["bmm", "loop", "einops"])
def test_a_stacked_models_step_dispatches_the_same_ops_whatever_its_width(attn):
    cfg = SMALL.replace(attn=attn)
    assert _ops(cfg, 2) == _ops(cfg, 3) == _ops(cfg, 8)


def test_the_stacked_model_is_a_copy_and_the_members_keep_their_layers():
    model = _members(SMALL.replace(stem="conv"))[0]
    template = stacked(model)
    assert type(template).__name__ == "StackedViT" and type(model) is VisionTransformer
    assert {type(m) for m in model.modules()} & set(vit.stacked.STACKED.values()) == set()
    assert isinstance(template.blocks[0].attn.qkv, vit.stacked.StackedLinear)
    x = torch.randn(2, 3, 16, 16)
    model.eval()
    assert model(x).shape == (2, 5)


def test_a_layer_with_no_stacked_form_is_refused_in_one_line():
    model = _members(SMALL)[0]
    model.blocks[0].mlp.act = nn.PReLU()   # a parameter of its own, in a layer with no stacked twin
    with pytest.raises(ValueError) as err:
        stacked(model)
    assert str(err.value) == "no stacked form of blocks.0.mlp.act (PReLU)"


def test_a_stacked_model_asked_for_attention_maps_or_given_another_shape_says_so():
    models = _members(SMALL, 2)
    params, buffers = stack_module_state(models)
    template = stacked(models[0])
    with pytest.raises(ValueError, match="does not return attention maps"):
        functional_call(template, (params, buffers), (torch.randn(4, 3, 16, 16),), {"return_attn": True})
    with pytest.raises(ValueError, match=r"expected input of shape \(k·B, 3, 16, 16\), got \(4, 3, 8, 8\)"):
        functional_call(template, (params, buffers), (torch.randn(4, 3, 8, 8),))
