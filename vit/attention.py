"""Multi-head self-attention with four interchangeable backends.

Each backend computes the same function, softmax(Q Kᵀ / √d) V for every head, from the same fused
`qkv` projection (timm's layout: output feature j·D + h·d + e is component j ∈ {q, k, v} of head h),
so one state dict serves all four. They differ only in how the work is written down:

- `loop`:   a Python loop over heads, each with its own slice of W_q, W_k, W_v (the textbook form)
- `bmm`:    one projection, heads folded into the batch, `torch.bmm` over B·H
- `einops`: `rearrange` and `einsum`, the shape change written in the pattern
- `sdpa`:   `F.scaled_dot_product_attention` (flash / memory-efficient kernels where available)

A backend is `fn(x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights) -> (out, probs)` with
x, out: (B, T, D) and probs: (B, H, T, T) or None; it projects with `linear`, so it serves a packed model's stacked
weights too (`vit.stacked`). It is looked up by name in `ATTENTION_BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import Tensor, nn

from .names import ATTENTION_BACKENDS

AttentionFn = Callable[[Tensor, Tensor, Tensor | None, int, float, bool], tuple[Tensor, Tensor | None]]


def register_backend(name: str) -> Callable[[AttentionFn], AttentionFn]:
    def add(fn: AttentionFn) -> AttentionFn:
        ATTENTION_BACKENDS[name] = fn   # the registry a config's `attn` is checked against
        return fn
    return add


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear`; with weights stacked along a first dimension, (k, out, in) and (k, out), x's rows member-major
    (k·B, …, in) and each member's rows by its own weights, in one batched matmul with the bias added in it (a
    packed model's, `vit.stacked`)."""
    if weight.dim() == 2:
        return F.linear(x, weight, bias)
    rows = x.reshape(weight.shape[0], -1, x.shape[-1])
    out = torch.bmm(rows, weight.mT) if bias is None else torch.baddbmm(bias.unsqueeze(1), rows, weight.mT)
    return out.view(*x.shape[:-1], weight.shape[1])


#: whether a packed model's members go through a fused kernel (attention, BatchNorm) in one call: None, on CUDA only.
#: The CPU's give a row other bits beside other rows (another batch, other channels), so there each member's rows go
#: in a call of their own, and a member's bits do not depend on its companions; True computes the same function in
#: one call everywhere (as CUDA launches it).
ONE_CALL: bool | None = None


def one_call(x: Tensor) -> bool:
    """Whether a packed model's members go through a fused kernel in one call on `x`'s device (`ONE_CALL`)."""
    return x.is_cuda if ONE_CALL is None else ONE_CALL


def _dropout(probs: Tensor, p: float) -> Tensor:
    return F.dropout(probs, p) if p > 0 else probs


@register_backend("loop")
def loop_attention(x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights):
    B, T, D = x.shape
    d = D // num_heads
    outs, all_probs = [], []
    for h in range(num_heads):
        # rows of W_qkv that belong to head h for q, k and v
        q, k, v = (linear(x, qkv_weight[..., j * D + h * d: j * D + (h + 1) * d, :],
                          None if qkv_bias is None else qkv_bias[..., j * D + h * d: j * D + (h + 1) * d])
                   for j in range(3))                                  # each (B, T, d)
        probs = torch.softmax((q * d**-0.5) @ k.transpose(-2, -1), dim=-1)  # (B, T, T)
        outs.append(_dropout(probs, dropout_p) @ v)                    # (B, T, d)
        all_probs.append(probs)
    out = torch.cat(outs, dim=-1)                                      # (B, T, D)
    return out, torch.stack(all_probs, dim=1) if need_weights else None


@register_backend("bmm")
def bmm_attention(x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights):
    B, T, D = x.shape
    d = D // num_heads
    qkv = linear(x, qkv_weight, qkv_bias).reshape(B, T, 3, num_heads, d)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).reshape(3, B * num_heads, T, d).unbind(0)  # each (B·H, T, d)
    probs = torch.softmax(torch.bmm(q * d**-0.5, k.transpose(1, 2)), dim=-1)        # (B·H, T, T)
    out = torch.bmm(_dropout(probs, dropout_p), v)                                   # (B·H, T, d)
    out = out.reshape(B, num_heads, T, d).transpose(1, 2).reshape(B, T, D)
    return out, probs.reshape(B, num_heads, T, T) if need_weights else None


@register_backend("einops")
def einops_attention(x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights):
    d = x.shape[-1] // num_heads
    q, k, v = rearrange(linear(x, qkv_weight, qkv_bias), "b t (three h d) -> three b h t d",
                        three=3, h=num_heads)
    scores = einsum(q * d**-0.5, k, "b h i d, b h j d -> b h i j")
    probs = scores.softmax(dim=-1)
    out = einsum(_dropout(probs, dropout_p), v, "b h i j, b h j d -> b h i d")
    return rearrange(out, "b h t d -> b t (h d)"), probs if need_weights else None


@register_backend("sdpa")
def sdpa_attention(x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights):
    if need_weights:
        # the fused kernels never materialise the probabilities; take the explicit path only when asked
        return bmm_attention(x, qkv_weight, qkv_bias, num_heads, dropout_p, need_weights)
    B, T, D = x.shape
    qkv = linear(x, qkv_weight, qkv_bias).reshape(B, T, 3, num_heads, D // num_heads)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)                     # each (B, H, T, d)
    members = qkv_weight.shape[0] if qkv_weight.dim() == 3 else 1
    if members > 1 and not one_call(x):
        out = torch.cat([F.scaled_dot_product_attention(*member, dropout_p=dropout_p)
                         for member in zip(q.chunk(members), k.chunk(members), v.chunk(members))])
    else:
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)  # (B, H, T, d)
    return out.transpose(1, 2).reshape(B, T, D), None


class Attention(nn.Module):
    """Self-attention sublayer: fused qkv projection, a backend, output projection.

    dim: token width D. num_heads: H (D % H == 0). backend: a key of `ATTENTION_BACKENDS`.
    qkv_bias: bias on the qkv projection. attn_dropout: on the probabilities. proj_dropout: on the output.
    """

    def __init__(self, dim: int, num_heads: int, backend: str, qkv_bias: bool = True,
                 attn_dropout: float = 0.0, proj_dropout: float = 0.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.backend = backend
        self.attn_dropout = attn_dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_dropout)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        attend = ATTENTION_BACKENDS[self.backend]
        out, probs = attend(x, self.qkv.weight, self.qkv.bias, self.num_heads,
                            self.attn_dropout if self.training else 0.0, need_weights)
        return self.proj_drop(self.proj(out)), probs

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, backend={self.backend!r}"
