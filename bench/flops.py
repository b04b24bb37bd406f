"""Multiply-accumulate counts: fvcore's tracer plus a handle for fused attention, and the closed form.

`gmacs` counts the multiply-adds of one image's forward pass in every matrix product: the patch
projection (a strided convolution), the qkv, output, MLP and head projections, and both attention
products QKᵀ and AV. Elementwise work (LayerNorm, softmax, GELU, residual adds, scaling) is excluded,
as in the ViT and timm literature. fvcore reports `aten::scaled_dot_product_attention` as unsupported,
which would silently drop the attention products of the `sdpa` backend; `_sdpa_macs` restores them,
so every backend counts the same.

Closed form for a ViT with N = (img/patch)² patches, T = N + 1 tokens, width D, MLP width M, depth L,
C input channels, P patch size and K classes:

    MACs = N·C·P²·D                         patch projection
         + L · (3·T·D² + T²·D + T²·D + T·D² + 2·T·D·M)   qkv, QKᵀ, AV, proj, MLP
         + D·K                              head (CLS token or mean token only)

With the conv stem (`stem="conv"`, n = ⌈log2 P⌉ 3×3 stride-2 convolutions of C_i channels, C_0 = C,
C_n = D, each producing an S_i × S_i map with S_0 = img and S_i = ⌈S_(i-1) / 2⌉, so S_n² = N), the
patch projection is replaced by

           Σ_i S_i²·C_(i-1)·9·C_i + N·D·D          the 3×3 convolutions and the 1×1 projection

BatchNorm and ReLU are elementwise and excluded, like LayerNorm.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import nn

with warnings.catch_warnings():  # fvcore.nn scripts its focal loss at import, which recent torch warns is deprecated
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning)
    from fvcore.nn import FlopCountAnalysis
    from fvcore.nn.jit_handles import (
        addmm_flop_jit,
        bmm_flop_jit,
        conv_flop_jit,
        einsum_flop_jit,
        get_shape,
        linear_flop_jit,
        matmul_flop_jit,
    )


def _sdpa_macs(inputs: list[Any], outputs: list[Any]) -> int:
    q, k, v = (get_shape(t) for t in inputs[:3])  # (..., T, d), (..., S, d), (..., S, dv)
    batch = math.prod(q[:-2])
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


def _einsum_macs(inputs: list[Any], outputs: list[Any]) -> int:
    # exact for any contraction without "...": one multiply-add per point of the joint index space
    # (fvcore's own handle estimates through np.einsum_path and is off by a few MACs)
    equation = inputs[0].toIValue().replace(" ", "")
    operands = equation.split("->")[0].split(",")
    if "." in equation:
        return einsum_flop_jit(inputs, outputs)
    sizes: dict[str, int] = {}
    for letters, value in zip(operands, inputs[1].node().inputs()):
        sizes.update(zip(letters, get_shape(value)))
    return math.prod(sizes.values())


# Matrix products only: fvcore's defaults also count norms, which the figure leaves out.
MATMUL_HANDLES = {
    "aten::_convolution": conv_flop_jit, "aten::linear": linear_flop_jit, "aten::addmm": addmm_flop_jit,
    "aten::mm": matmul_flop_jit, "aten::matmul": matmul_flop_jit, "aten::bmm": bmm_flop_jit,
    "aten::einsum": _einsum_macs, "aten::scaled_dot_product_attention": _sdpa_macs,
}


def count_macs(model: nn.Module, example: torch.Tensor) -> int:
    """MACs of model(example) as fvcore counts them, with fused attention restored and norms excluded."""
    was_training = model.training
    model.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python values
            analysis = FlopCountAnalysis(model, example).clear_op_handles().set_op_handle(**MATMUL_HANDLES)
            analysis.unsupported_ops_warnings(False)
            analysis.uncalled_modules_warnings(False)
            total = analysis.total()
    finally:
        model.train(was_training)
    return int(round(total))


def closed_form_macs(cfg) -> int:
    """The ViT formula in this module's docstring, for a `vit.ViTConfig`."""
    T, D, M = cfg.tokens, cfg.embed_dim, cfg.mlp_dim
    per_block = 3 * T * D * D + 2 * T * T * D + T * D * D + 2 * T * D * M
    return stem_macs(cfg) + cfg.depth * per_block + D * cfg.num_classes


def stem_macs(cfg) -> int:
    """MACs that turn one image into N tokens of width D: the patch projection or the conv stem."""
    N, D = cfg.num_patches, cfg.embed_dim
    if cfg.stem == "patch":
        return N * cfg.in_chans * cfg.patch_size**2 * D
    chans = (cfg.in_chans, *cfg.stem_channels)
    convs = sum(side * side * c_in * 9 * c_out for side, c_in, c_out in zip(cfg.stem_sides, chans, chans[1:]))
    return convs + N * chans[-1] * D


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def closed_form_size(model: nn.Module, cfg) -> dict[str, float]:
    """params (counted on `model`, a `vit.VisionTransformer` of `cfg`), gmacs (one image's forward, in closed
    form: exact, tests hold it to fvcore's count) and gflops = 2 × gmacs, without tracing the model."""
    macs = closed_form_macs(cfg)
    return {"params": param_count(model), "gmacs": macs / 1e9, "gflops": 2 * macs / 1e9}
