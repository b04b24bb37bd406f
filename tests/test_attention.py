"""The four attention backends compute one function on one set of parameters."""

import random

import pytest
import torch
from conftest import rel_err

from vit import ATTENTION_BACKENDS, VisionTransformer, ViTConfig


def random_configs(n: int, seed: int = 1234):
    """Valid configs spanning head counts that are not powers of two and odd/even token counts."""
    rng = random.Random(seed)
    configs = []
    while len(configs) < n:
        heads = rng.choice([1, 2, 3, 5, 6])
        patch = rng.choice([2, 3, 4])
        grid = rng.choice([2, 3, 4, 5])
        configs.append(ViTConfig(img_size=patch * grid, patch_size=patch, in_chans=rng.choice([1, 3]),
                                 num_classes=rng.choice([3, 10]), embed_dim=heads * rng.choice([4, 8, 12]),
                                 depth=rng.choice([1, 2, 3]), num_heads=heads,
                                 mlp_ratio=rng.choice([1.0, 2.0, 4.0]), attn="bmm",
                                 qkv_bias=rng.choice([True, False])))
    return configs


CONFIGS = random_configs(6)


def logits_and_grads(model, images, weights):
    model.zero_grad()
    logits = model(images)
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def test_configs_cover_odd_and_even_tokens_and_non_power_of_two_heads():
    assert {c.tokens % 2 for c in CONFIGS} == {0, 1}
    assert any(c.num_heads in (3, 5, 6) for c in CONFIGS)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"D{c.embed_dim}h{c.num_heads}T{c.tokens}L{c.depth}")
@pytest.mark.parametrize("backend", sorted(ATTENTION_BACKENDS))
def test_backend_matches_float64_bmm(cfg, backend):
    reference = VisionTransformer(cfg).double()
    images = torch.randn(3, cfg.in_chans, cfg.img_size, cfg.img_size, dtype=torch.float64)
    weights = torch.randn(3, cfg.num_classes, dtype=torch.float64)
    ref_logits, ref_grads = logits_and_grads(reference, images, weights)

    model = VisionTransformer(cfg.replace(attn=backend))
    model.load_state_dict({k: v.float() for k, v in reference.state_dict().items()})
    logits, grads = logits_and_grads(model, images.float(), weights.float())

    assert rel_err(logits, ref_logits) < 1e-5
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        assert rel_err(grad, ref_grads[name]) < 1e-5, name


def test_state_dict_moves_between_backends():
    cfg = CONFIGS[0]
    models = {b: VisionTransformer(cfg.replace(attn=b)) for b in ATTENTION_BACKENDS}
    source = models["loop"].state_dict()
    images = torch.randn(2, cfg.in_chans, cfg.img_size, cfg.img_size)
    outs = {}
    for name, model in models.items():
        assert model.state_dict().keys() == source.keys()
        model.load_state_dict(source, strict=True)
        outs[name] = model.eval()(images)
    for name, out in outs.items():
        assert rel_err(out, outs["loop"]) < 1e-5, name


@pytest.mark.parametrize("backend", sorted(ATTENTION_BACKENDS))
def test_return_attn_gives_probabilities_for_every_backend(backend):
    cfg = ViTConfig(img_size=12, patch_size=4, in_chans=3, num_classes=4, embed_dim=30, depth=2,
                    num_heads=3, attn=backend)
    reference = VisionTransformer(cfg.replace(attn="bmm")).eval()
    model = VisionTransformer(cfg).eval()
    model.load_state_dict(reference.state_dict())
    images = torch.randn(2, 3, 12, 12)
    logits, attn = model(images, return_attn=True)
    ref_logits, ref_attn = reference(images, return_attn=True)
    assert len(attn) == cfg.depth
    for probs, ref in zip(attn, ref_attn):
        assert probs.shape == (2, cfg.num_heads, cfg.tokens, cfg.tokens)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, cfg.num_heads, cfg.tokens))
        assert rel_err(probs, ref) < 1e-5
    # asking for the weights does not change the function
    assert rel_err(logits, model(images)) < 1e-6


def test_attention_dropout_is_active_in_training_only():
    cfg = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=16, depth=1,
                    num_heads=2, attn_dropout=0.5)
    for backend in ATTENTION_BACKENDS:
        model = VisionTransformer(cfg.replace(attn=backend))
        x = torch.randn(4, 1, 8, 8)
        model.train()
        assert not torch.equal(model(x), model(x)), backend
        model.eval()
        assert torch.equal(model(x), model(x)), backend


def test_a_backend_registered_through_the_vit_package_is_a_choice_of_the_config():
    """`vit.register_backend` (what `python -m bench --help` points to for new backends) adds a backend that a
    ViTConfig accepts and the model calls: here bmm under another name, so the outputs are equal."""
    import vit
    from vit.attention import ATTENTION_BACKENDS

    calls = []

    @vit.register_backend("counted_bmm")
    def counted(x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights):
        calls.append(x.shape)
        return ATTENTION_BACKENDS["bmm"](x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights)
    try:
        cfg = vit.ViTConfig(img_size=8, patch_size=4, in_chans=1, embed_dim=16, depth=2, num_heads=2)
        torch.manual_seed(0)
        reference = vit.VisionTransformer(cfg.replace(attn="bmm")).eval()
        mine = vit.VisionTransformer(cfg.replace(attn="counted_bmm")).eval()
        mine.load_state_dict(reference.state_dict())
        x = torch.randn(3, 1, 8, 8)
        torch.testing.assert_close(mine(x), reference(x))
        assert len(calls) == cfg.depth
    finally:
        ATTENTION_BACKENDS.pop("counted_bmm", None)
    with pytest.raises(ValueError, match="attn='counted_bmm' is unknown"):
        vit.ViTConfig(attn="counted_bmm")


def test_a_backend_is_written_in_one_file_its_name_read_from_its_registration():
    """`vit.names` reads the backends' names from vit/attention.py's `@register_backend` lines (without torch), so
    a new backend is one function there: every name a config accepts has its function once the module loads, and
    every function registered there is a name a config accepts."""
    import vit.attention  # noqa: F401  (its registrations fill the functions in)
    from vit.names import registered_backends

    names = registered_backends()
    assert {"loop", "bmm", "einops", "sdpa"} <= set(names) and len(set(names)) == len(names)
    assert list(ATTENTION_BACKENDS) == list(names) and all(callable(fn) for fn in ATTENTION_BACKENDS.values())
    with pytest.raises(ValueError, match="attn"):
        ViTConfig(attn="flash2")
