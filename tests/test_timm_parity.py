"""After load_timm_weights, logits equal timm's; parameter counts equal timm's."""

import pytest
import timm
import torch
from timm.models.vision_transformer import VisionTransformer as TimmViT
from torch import nn

from vit import ATTENTION_BACKENDS, PRESETS, VisionTransformer, ViTConfig, load_timm_weights, timm_to_vit_keys


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def small_timm_pair():
    kwargs = dict(img_size=20, patch_size=4, in_chans=1, num_classes=7, embed_dim=30, depth=3,
                  num_heads=5, mlp_ratio=2.0, qkv_bias=False)
    return TimmViT(**kwargs), ViTConfig(**kwargs)


@pytest.mark.parametrize("preset", ["vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224"])
def test_preset_parameter_count_equals_timm(preset):
    with torch.device("meta"):
        theirs = timm.create_model(preset, pretrained=False)
        ours = VisionTransformer(PRESETS[preset])
    assert n_params(ours) == n_params(theirs)


def test_vit_tiny_logits_equal_timm_at_224_px():
    # one backend at full size; the four backends are compared with timm on the small model below
    theirs = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    ours = VisionTransformer(PRESETS["vit_tiny_patch16_224"].replace(attn="sdpa")).eval()
    load_timm_weights(ours, theirs.state_dict())
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert (ours(images) - theirs(images)).abs().max().item() < 1e-5


@pytest.mark.parametrize("backend", sorted(ATTENTION_BACKENDS))
def test_custom_timm_vit_logits_equal(backend):
    theirs, cfg = small_timm_pair()
    theirs.eval()
    ours = VisionTransformer(cfg.replace(attn=backend)).eval()
    assert n_params(ours) == n_params(theirs)
    load_timm_weights(ours, theirs.state_dict())
    images = torch.randn(4, 1, 20, 20)
    with torch.no_grad():
        assert (ours(images) - theirs(images)).abs().max().item() < 1e-5


def test_shape_mismatch_names_key_and_both_shapes():
    theirs, cfg = small_timm_pair()
    ours = VisionTransformer(cfg.replace(embed_dim=35))
    with pytest.raises(ValueError, match=r"cls_token.*\(1, 1, 30\).*\(1, 1, 35\)"):
        load_timm_weights(ours, theirs.state_dict())


def test_fixed_positions_refuse_a_learned_pos_embed():
    theirs, cfg = small_timm_pair()
    with pytest.raises(ValueError, match="pos='sincos2d'"):
        load_timm_weights(VisionTransformer(cfg.replace(embed_dim=40, pos="sincos2d")), theirs.state_dict())


def test_unsupported_timm_features_are_named():
    theirs = TimmViT(img_size=16, patch_size=4, embed_dim=16, depth=1, num_heads=2, init_values=1e-5)
    ours = VisionTransformer(ViTConfig(img_size=16, patch_size=4, embed_dim=16, depth=1, num_heads=2,
                                       num_classes=1000))
    with pytest.raises(ValueError, match=r"blocks\.0\.ls1\.gamma"):
        load_timm_weights(ours, theirs.state_dict())


@pytest.mark.parametrize("backend", ["bmm", "sdpa"])
def test_average_pooling_equals_timm_global_pool_avg(backend):
    kwargs = dict(img_size=16, patch_size=4, in_chans=2, num_classes=5, embed_dim=24, depth=2, num_heads=3)
    theirs = TimmViT(**kwargs, global_pool="avg").eval()  # fc_norm after the mean, CLS token kept
    ours = VisionTransformer(ViTConfig(**kwargs, pool="avg", attn=backend)).eval()
    assert n_params(ours) == n_params(theirs)
    load_timm_weights(ours, theirs.state_dict())
    images = torch.randn(3, 2, 16, 16)
    with torch.no_grad():
        assert (ours(images) - theirs(images)).abs().max().item() < 1e-5
    # a CLS-pooled checkpoint into an average-pooled model names the pool, not just a key
    with pytest.raises(ValueError, match="build it with pool='cls'"):
        load_timm_weights(ours, TimmViT(**kwargs).state_dict())


def timm_conv_stem_vit(cfg):
    """timm's own pieces: HybridEmbed over a Sequential of ConvNormAct (3×3, stride 2, BN, ReLU)."""
    from functools import partial

    from timm.layers import ConvNormAct, HybridEmbed

    chans = (cfg.in_chans, *cfg.stem_channels)
    backbone = nn.Sequential(*(ConvNormAct(a, b, kernel_size=3, stride=2, padding=1, norm_layer=nn.BatchNorm2d,
                                           act_layer=nn.ReLU) for a, b in zip(chans, chans[1:])))
    return TimmViT(img_size=cfg.img_size, patch_size=1, in_chans=cfg.in_chans, num_classes=cfg.num_classes,
                   embed_dim=cfg.embed_dim, depth=cfg.depth, num_heads=cfg.num_heads, mlp_ratio=cfg.mlp_ratio,
                   global_pool="avg" if cfg.pool == "avg" else "token",
                   embed_layer=partial(HybridEmbed, backbone=backbone))


@pytest.mark.parametrize("patch,pool", [(7, "avg"), (4, "cls")])
def test_conv_stem_equals_timm_hybrid_embed(patch, pool):
    cfg = PRESETS["vit_mnist"].replace(patch_size=patch, pool=pool)
    assert cfg.stem == "conv"
    theirs = timm_conv_stem_vit(cfg)
    ours = VisionTransformer(cfg)
    assert n_params(ours) == n_params(theirs)
    assert set(ours.state_dict()) == set(timm_to_vit_keys(theirs.state_dict()))
    theirs.train()
    with torch.no_grad():
        for _ in range(3):  # BatchNorm running statistics away from their initial 0 / 1
            theirs(torch.randn(8, 1, 28, 28) * 2 + 0.5)
    load_timm_weights(ours, theirs.state_dict())
    images = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        for mode in (False, True):  # running statistics (eval) and batch statistics (train)
            ours.train(mode), theirs.train(mode)
            assert (ours(images) - theirs(images)).abs().max().item() < 1e-5
    # a checkpoint of the other stem names the stem, not just a missing key
    with pytest.raises(ValueError, match="stem='conv'; build it with stem='patch'"):
        load_timm_weights(ours, VisionTransformer(cfg.replace(stem="patch")).state_dict())
    with pytest.raises(ValueError, match="has a conv stem .* stem='patch'; build it with stem='conv'"):
        load_timm_weights(VisionTransformer(cfg.replace(stem="patch")), theirs.state_dict())
