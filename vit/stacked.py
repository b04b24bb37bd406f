"""The model over the weights of k models of one config stacked along a first dimension, in one forward: a packed
model's own layers, so that k members cost the kernels of about one model rather than k.

`stacked(model)` is a copy of `model` whose layers read stacked weights (handed to it through
`torch.func.functional_call`, as `torch.func.stack_module_state` stacks them, under the same names) and whose forward
takes the members' images member-major, (k·B, C, H, W) → (k·B, classes); each member's rows meet only its own
weights. Each layer computes the function it computes alone:

- a linear layer: one batched matmul over the members with the bias added in it (`torch.baddbmm`, which autocast
  casts as it casts `F.linear`), the attention's own projections included (`linear`);
- a LayerNorm: normalised, then each member's scale and shift;
- the patch stem: its patches and one batched matmul (the strided convolution's arithmetic); the conv stem: grouped
  convolutions (one group a member), BatchNorm with each member's statistics, and its 1×1 projection a linear layer;
- the CLS token and positions: each member's added to its own rows.

Attention, pooling and the residuals need nothing of their own: they treat k·B images as one batch, except that off
CUDA the fused attention and BatchNorm kernels take each member's rows in a call of their own (`one_call`), since a
CPU's give a row other bits beside other rows.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import linear, one_call
from .model import VisionTransformer
from .pooling import POOLINGS
from .position import FixedPosition, LearnedPosition
from .stems import ConvStem, PatchEmbed


def _members(weight: Tensor) -> int:
    return weight.shape[0]


class StackedLinear(nn.Linear):
    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class StackedLayerNorm(nn.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        y = F.layer_norm(x, self.normalized_shape, None, None, self.eps)
        k = _members(self.weight)
        rows = y.reshape(k, -1, y.shape[-1])   # a multiplication and an add (`addcmul`'s backward multiplies by its 1)
        return (rows * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)).view(y.shape)


class StackedBatchNorm(nn.BatchNorm2d):
    """On (B, k·C, H, W): channel j·C + c is member j's channel c."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            self.num_batches_tracked.add_(1)
        if one_call(x):
            return F.batch_norm(x, self.running_mean.flatten(), self.running_var.flatten(), self.weight.flatten(),
                                self.bias.flatten(), self.training, self.momentum, self.eps)
        return torch.cat([F.batch_norm(part.contiguous(), mean, var, weight, bias, self.training, self.momentum,
                                       self.eps)
                          for part, mean, var, weight, bias in zip(x.chunk(_members(self.weight), 1), self.running_mean,
                                                                    self.running_var, self.weight, self.bias)], dim=1)


def _grouped_conv(x: Tensor, conv: nn.Conv2d) -> Tensor:
    """`conv` (no bias: a BatchNorm follows) with stacked weights (k, out, in, …) over (B, k·in, H, W), one group a
    member: (B, k·out, H', W')."""
    return F.conv2d(x, conv.weight.flatten(0, 1), None, conv.stride, conv.padding, conv.dilation,
                    groups=_members(conv.weight))


class StackedPatchEmbed(PatchEmbed):
    def forward(self, x: Tensor) -> Tensor:
        weight = self.proj.weight                                         # (k, D, C, p, p)
        p = weight.shape[-1]
        n, c, h, w = x.shape
        patches = x.reshape(n, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(n, -1, c * p * p)
        return linear(patches, weight.flatten(2), self.proj.bias)         # (k·B, N, D), row-major patches


class StackedConvStem(ConvStem):
    def forward(self, x: Tensor) -> Tensor:
        k = _members(self.proj.weight)
        h = x.unflatten(0, (k, -1)).transpose(0, 1).flatten(1, 2)          # (B, k·C, H, W)
        for layer in self.backbone:
            h = layer.act(layer.bn(_grouped_conv(h, layer.conv)))
        h = h.unflatten(1, (k, -1)).flatten(3).permute(1, 0, 3, 2).flatten(0, 1)    # (k·B, N, C)
        return linear(h, self.proj.weight.flatten(2), self.proj.bias)     # the 1×1 projection: (k·B, N, D)


def _each_its_own(x: Tensor, table: Tensor) -> Tensor:
    """Each member's (1, T, D) table, stacked (k, 1, T, D), added to its own rows of x (k·B, T, D)."""
    return (x.unflatten(0, (_members(table), -1)) + table).flatten(0, 1)


class StackedLearnedPosition(LearnedPosition):
    def forward(self, x: Tensor) -> Tensor:
        return _each_its_own(x, self.weight)


class StackedFixedPosition(FixedPosition):
    def forward(self, x: Tensor) -> Tensor:
        return _each_its_own(x, self.weight)


class StackedViT(VisionTransformer):
    def forward(self, images: Tensor, return_attn: bool = False) -> Tensor:
        if return_attn:
            raise ValueError("a stacked model does not return attention maps; read them from a member alone")
        if images.dim() != 4 or tuple(images.shape[1:]) != self.expected_input_shape:
            raise ValueError(f"a stacked VisionTransformer expected input of shape (k·B, "
                             f"{', '.join(map(str, self.expected_input_shape))}), got {tuple(images.shape)}")
        k = _members(self.cls_token)
        x = self.patch_embed(images)                                                      # (k·B, N, D)
        cls = self.cls_token.expand(-1, x.shape[0] // k, -1, -1).flatten(0, 1)           # (k·B, 1, D)
        x = self.pos_drop(self.pos_embed(torch.cat([cls, x], dim=1)))
        for block in self.blocks:
            x, _ = block(x)
        pooled = POOLINGS[self.cfg.pool].pool(self.norm(x))                              # (k·B, D)
        return self.head(self.fc_norm(pooled))                                            # (k·B, num_classes)


STACKED: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: StackedLinear, nn.LayerNorm: StackedLayerNorm, nn.BatchNorm2d: StackedBatchNorm,
    PatchEmbed: StackedPatchEmbed, ConvStem: StackedConvStem, LearnedPosition: StackedLearnedPosition,
    FixedPosition: StackedFixedPosition, VisionTransformer: StackedViT,
}


#: whether a packed model keeps the weights `linear` multiplies in the order its batched matmul reads them
#: (`in_matmul_order`): None, on CUDA only. There it spares a copy of each such weight's gradient a step; a CPU's
#: batched matmul over weights so laid out gives a member's rows other bits where they start at another alignment (a
#: last, smaller batch), so a member's bits would depend on its slot. True lays them out so everywhere.
MATMUL_ORDER: bool | None = None


def matmul_weights(template: VisionTransformer) -> list[str]:
    """The names of the stacked weights that `linear` multiplies: every linear layer's and the stem's projection."""
    return [f"{name}.weight" for name, module in template.named_modules()
            if isinstance(module, nn.Linear) or name == "patch_embed.proj"]


def in_matmul_order(template: VisionTransformer, params: dict[str, Tensor]) -> dict[str, Tensor]:
    """`params` (stacked, for `template`) with each weight `linear` multiplies, (k, out, …), of the same shape and
    values but its memory laid out (k, …, out), where `MATMUL_ORDER` says: the order in which the batched matmul
    reads it (`weight.mT`, contiguous) and in which that matmul's backward writes its gradient, so the gradient
    arrives in the weight's own layout and autograd keeps it as it is instead of copying it. Each a tensor of its
    own (detached), not a view."""
    if not (next(iter(params.values())).is_cuda if MATMUL_ORDER is None else MATMUL_ORDER):
        return params
    return {**params, **{name: params[name].detach().movedim(1, -1).contiguous().movedim(-1, 1).clone()
                         for name in matmul_weights(template)}}


def stacked(model: VisionTransformer) -> VisionTransformer:
    """A copy of `model` to run with k members' weights and buffers stacked along a first dimension (its own are
    placeholders: `functional_call` hands it the stacked ones under the same names) on their images member-major,
    (k·B, C, H, W) → (k·B, num_classes). Each layer's class becomes its stacked twin, which adds only a forward."""
    template = copy.deepcopy(model)
    for name, module in template.named_modules():
        if type(module) in STACKED:
            module.__class__ = STACKED[type(module)]
        elif any(True for _ in module.parameters(recurse=False)) and not (
                type(module) is nn.Conv2d and name.startswith("patch_embed.")):   # a stem's: its stacked forward's
            raise ValueError(f"no stacked form of {name} ({type(module).__name__})")
    return template
