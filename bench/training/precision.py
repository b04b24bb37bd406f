"""The dtypes a step may run in, and the autocast context for each."""

from __future__ import annotations

import collections
import contextlib

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from bench import choices

DTYPES = {name: getattr(torch, attribute) for name, attribute in choices.DTYPES.items()}


def autocast(device: torch.device, dtype: str, cache_enabled: bool = True):
    """Autocast to `dtype` ("fp32": none). cache_enabled=False for steps captured into a CUDA graph."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[dtype], cache_enabled=cache_enabled)


def _memory_order(t: Tensor) -> list[int]:
    """t's dimensions from the outermost in memory to the innermost: the permutation that makes a dense tensor
    contiguous (the identity for a contiguous one)."""
    if t.is_contiguous():
        return list(range(t.dim()))
    return sorted(range(t.dim()), key=lambda d: (t.shape[d] == 1, -t.stride(d), d))


def _inverse(perm: list[int]) -> list[int]:
    return sorted(range(len(perm)), key=perm.__getitem__)


class OneCast:
    """The weights that autocast casts to the step's dtype at every use, cast in one kernel a step instead of one
    per use: concatenated (each at an aligned offset), cast once, and handed to the module as views of the cast
    (`torch.func.functional_call`); their gradients come back through the same one cast, so the backward casts
    them to float32 in one kernel too. Elementwise the same casts as autocast's, so the same bits.

    `find` decides which weights: those that one forward of an example (eval mode, no grad) casts to the dtype at
    each use and uses in no other way (the linear layers' and convolutions' weights and biases; not positions added
    to float32 activations, norms, a part run with autocast off, or a weight used more than once where the uses
    overlap, whose gradients autocast adds up in float32)."""

    # a weight (2 or more dimensions) starts at a 256-byte boundary, as a fresh allocation does and as cuBLAS's
    # choice of kernel may ask; a bias at 16 bytes (a vector load)
    ALIGN_BYTES = {True: 256, False: 16}

    def __init__(self, sources: dict[str, Tensor], dtype: torch.dtype, stacked: int = 0) -> None:
        """`sources`: the float32 weights to cast, by name (stacked, with a leading member dimension, for a pack of
        `stacked`); each call casts them as they are then."""
        per_element = torch.empty((), dtype=dtype).element_size()
        shapes = {n: t.shape[1:] if stacked else t.shape for n, t in sources.items()}   # a member's
        size = {n: t.numel() for n, t in sources.items()}
        # the aligned ones first, so that padding goes only where a size does not fill its boundary
        order = sorted(sources, key=lambda n: (len(shapes[n]) <= 1,
                                               size[n] % (self.ALIGN_BYTES[True] // per_element) != 0))
        self.sources, self.dtype = {n: sources[n] for n in order}, dtype
        self.pads: list[int] = []      # after each weight, the padding to the next one's boundary
        self.split: list[int] = []     # the one cast's split: each weight's size, and after it any padding
        self.at: list[int] = []        # where each weight's part is in that split
        end = 0
        for i, n in enumerate(order):
            end += size[n]
            nxt = order[i + 1] if i + 1 < len(order) else None
            align = 1 if nxt is None else self.ALIGN_BYTES[len(shapes[nxt]) > 1] // per_element
            pad = -end % align
            end += pad
            self.pads.append(pad)
            self.at.append(len(self.split))
            self.split += [size[n], pad] if pad else [size[n]]
        self.zeros = torch.zeros(max(self.pads, default=0), device=next(iter(sources.values())).device)
        # each weight read in its memory order (a pack's matmul weights are laid out transposed), so that it
        # flattens without a copy and its cast, laid out as it is, hands its gradient back in its own layout
        self.perms = [_memory_order(t) for t in self.sources.values()]

    @property
    def names(self) -> list[str]:
        return list(self.sources)

    def __call__(self) -> dict[str, Tensor]:
        """The cast weights by name, views of one cast of all of them."""
        pieces = []
        for t, perm, pad in zip(self.sources.values(), self.perms, self.pads):
            pieces.append(t.permute(perm).reshape(-1))
            if pad:
                pieces.append(self.zeros[:pad])
        parts = torch.cat(pieces).to(self.dtype).split_with_sizes(self.split)
        return {n: parts[i].view([t.shape[d] for d in perm]).permute(_inverse(perm))
                for (n, t), perm, i in zip(self.sources.items(), self.perms, self.at)}

    @classmethod
    def find(cls, module: nn.Module, params: dict[str, Tensor], buffers: dict[str, Tensor], example: Tensor,
             device: torch.device, dtype: str, stacked: int = 0) -> OneCast | None:
        """The one cast of `module`'s weights that autocast to `dtype` casts at every use in a forward of
        `example` run with `params` and `buffers` (for a pack of `stacked` members: stacked, with a template that
        takes them, `example` the members' rows); None where there are none (fp32) or fewer than two. `example` is
        best the step's own batch: a kernel that plans each new shape (cuDNN's attention) plans none for it."""
        if dtype == "fp32":
            return None
        low = DTYPES[dtype]
        weights = dict(params)
        state = {n: b.clone() for n, b in buffers.items()}

        def forward(w: dict[str, Tensor], b: dict[str, Tensor], x: Tensor) -> Tensor:
            return functional_call(module, (w, b), (x,))
        uses = _Uses({id(t): n for n, t in weights.items()}, low)
        modes = {m: m.training for m in module.modules()}
        module.eval()
        try:
            with torch.no_grad(), autocast(device, dtype, cache_enabled=False), uses:
                forward(weights, state, example)
        finally:
            for m, training in modes.items():
                m.training = training
        names = [n for n in weights if n in uses.cast and n not in uses.other]
        if len(names) < 2:
            return None
        one_cast = cls({n: params[n] for n in names}, low, stacked)
        with torch.no_grad():
            one_cast()   # the cast itself, once: a failure shows here, not in a step
        return one_cast


class _Uses(TorchDispatchMode):
    """Which weights (by name, from their tensors' ids) an op casts to `low` and which it uses otherwise, or casts
    more than once where the casts overlap: whole twice, or whole and in slices (slices of one, as a loop over
    attention heads takes them, are taken to be apart)."""

    def __init__(self, names: dict[int, str], low: torch.dtype) -> None:
        super().__init__()
        self.names, self.low = names, low
        self.cast: set[str] = set()
        self.other: set[str] = set()
        self.wholes: collections.Counter = collections.Counter()   # casts of a weight itself, and of slices of it
        self.slices: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not func.is_view:
            for i, t in enumerate(tree_leaves((args, kwargs))):
                if not torch.is_tensor(t):
                    continue
                name = self.names.get(id(t)) or (self.names.get(id(t._base)) if t._base is not None else None)
                if name is None:
                    continue
                casts = func is torch.ops.aten._to_copy.default and i == 0 and kwargs.get("dtype") == self.low
                if casts:   # a view of all of a weight (transposed, unsqueezed) is the weight
                    whole = t._base is None or t.numel() == t._base.numel()
                    self.wholes[name] += whole
                    self.slices[name] += not whole
                    if self.wholes[name] > 1 or (self.wholes[name] and self.slices[name]):
                        self.other.add(name)   # used more than once in part: its gradients would add up in the
                    #                            low dtype before the one cast back, not in float32 as autocast's do
                (self.cast if casts else self.other).add(name)
        return func(*args, **kwargs)
