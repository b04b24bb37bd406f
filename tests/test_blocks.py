"""Norm placement: `post` normalises after the residual, `pre` leaves the residual stream raw."""

import pytest
import torch
import torch.nn.functional as F
from conftest import rel_err

from vit import VisionTransformer, ViTConfig

CFG = ViTConfig(img_size=16, patch_size=4, in_chans=3, num_classes=5, embed_dim=32, depth=3, num_heads=4)


def block_outputs(model, images):
    outs = []
    hooks = [b.register_forward_hook(lambda m, i, o: outs.append(o[0])) for b in model.blocks]
    model(images)
    for h in hooks:
        h.remove()
    return outs


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_outputs_are_normalised_only_under_post_norm(norm):
    model = VisionTransformer(CFG.replace(norm=norm)).eval()
    with torch.no_grad():
        for out in block_outputs(model, 3 * torch.randn(2, 3, 16, 16)):
            mean, var = out.mean(-1), out.var(-1, unbiased=False)
            normalised = mean.abs().max() < 1e-4 and (var - 1).abs().max() < 1e-3
            assert normalised == (norm == "post")


def test_post_norm_equals_float64_reference():
    model = VisionTransformer(CFG.replace(norm="post", attn="bmm")).double().eval()
    images = torch.randn(2, 3, 16, 16, dtype=torch.float64)

    def ln(x, norm):
        return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, eps=1e-6)

    def attention(x, attn):
        B, T, D = x.shape
        q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).reshape(B, T, 3, 4, D // 4).permute(2, 0, 3, 1, 4)
        probs = torch.softmax(q @ k.transpose(-1, -2) / (D // 4) ** 0.5, -1)
        return attn.proj((probs @ v).transpose(1, 2).reshape(B, T, D))

    with torch.no_grad():
        x = model.patch_embed(images)
        x = torch.cat([model.cls_token.expand(2, -1, -1), x], 1) + model.pos_embed.weight
        for block in model.blocks:
            x = ln(x + attention(x, block.attn), block.norm1)          # residual, then LN
            x = ln(x + block.mlp.fc2(F.gelu(block.mlp.fc1(x))), block.norm2)
        expected = model.head(x[:, 0])                                 # no final LN after post-norm
        assert rel_err(model(images), expected) < 1e-12
    assert isinstance(model.norm, torch.nn.Identity)
    assert isinstance(VisionTransformer(CFG).norm, torch.nn.LayerNorm)
    assert model.blocks[0].norm1.eps == 1e-6
