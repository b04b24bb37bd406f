"""Position encodings: closed forms, independent constructions, and what each makes the model see."""

import math

import numpy as np
import pytest
import torch
from einops import rearrange

from vit import VisionTransformer, ViTConfig, sincos_2d, sinusoidal_1d


def test_sinusoidal_matches_closed_form_at_sampled_positions():
    dim, positions = 64, 50
    table = sinusoidal_1d(positions, dim)
    rng = np.random.default_rng(0)
    for p, i in zip(rng.integers(0, positions, 40), rng.integers(0, dim // 2, 40)):
        angle = p / 10000 ** (2 * i / dim)
        assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def mae_2d_sincos(embed_dim, grid_size):
    """MAE's util/pos_embed.py, in numpy, CLS row of zeros prepended."""
    def one_d(dim, pos):
        omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    grid = np.meshgrid(np.arange(grid_size, dtype=np.float32), np.arange(grid_size, dtype=np.float32))
    grid = np.stack(grid, axis=0).reshape([2, 1, grid_size, grid_size])
    emb = np.concatenate([one_d(embed_dim // 2, grid[0]), one_d(embed_dim // 2, grid[1])], axis=1)
    return np.concatenate([np.zeros([1, embed_dim]), emb], axis=0)


@pytest.mark.parametrize("dim,grid", [(32, 4), (48, 7), (192, 14)])
def test_sincos2d_matches_mae(dim, grid):
    np.testing.assert_allclose(sincos_2d(grid, dim).numpy(), mae_2d_sincos(dim, grid), atol=1e-6)


@pytest.mark.parametrize("pos", ["sinusoidal", "sincos2d"])
def test_fixed_encodings_are_buffers_not_parameters(pos):
    cfg = ViTConfig(img_size=16, patch_size=4, embed_dim=32, depth=1, num_heads=2, pos=pos)
    model = VisionTransformer(cfg)
    names = dict(model.named_parameters())
    assert not any(n.startswith("pos_embed") for n in names)
    assert "pos_embed.weight" in dict(model.named_buffers())
    assert VisionTransformer(cfg.replace(pos="learned")).pos_embed.weight.requires_grad
    # the buffer holds exactly the table, including the CLS row
    expected = sinusoidal_1d(cfg.tokens, 32) if pos == "sinusoidal" else sincos_2d(4, 32)
    torch.testing.assert_close(model.pos_embed.weight[0], expected)


def permute_patches(images, patch, perm):
    patches = rearrange(images, "b c (h p1) (w p2) -> b (h w) c p1 p2", p1=patch, p2=patch)
    grid = images.shape[-1] // patch
    return rearrange(patches[:, perm], "b (h w) c p1 p2 -> b c (h p1) (w p2)", h=grid)


@pytest.mark.parametrize("pos,equivariant", [("none", True), ("learned", False), ("sinusoidal", False),
                                              ("sincos2d", False)])
def test_only_no_position_is_permutation_invariant(pos, equivariant):
    cfg = ViTConfig(img_size=16, patch_size=4, in_chans=3, num_classes=5, embed_dim=32, depth=2,
                    num_heads=4, pos=pos)
    model = VisionTransformer(cfg).eval()
    images = torch.randn(3, 3, 16, 16)
    perm = torch.randperm(cfg.num_patches)
    assert not torch.equal(perm, torch.arange(cfg.num_patches))
    with torch.no_grad():
        same = torch.allclose(model(images), model(permute_patches(images, 4, perm)), atol=1e-5)
    assert same is equivariant
