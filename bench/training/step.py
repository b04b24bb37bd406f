"""The training step: what the sweeps train with, what the cost phase times and what `bench` times in
training mode. AdamW over parameter groups (no weight decay on biases, norms, CLS token and
positions; optional layer-wise lr decay), label smoothing, gradient clipping, autocast (on CUDA with the weights it
casts at every use cast in one kernel a step, `OneCast`).

`EagerStep` runs the step as written. `StaticStep` runs it on static buffers with the learning rate in
device tensors, and on CUDA captures it once per batch size into a CUDA graph and replays it.
`make_step` picks one. A step returns the batch's summed loss as a device tensor: nothing here reads a
value back to the host.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call
from tqdm import tqdm

from bench.loading import without_gc
from bench.training.precision import OneCast, autocast
from bench.training.recipe import TrainConfig

ALLOCATOR_BLOCK = 512  # the CUDA caching allocator rounds every allocation up to a multiple of this
# One capture at a time in a process: a capture synchronises the device, empties the allocator's cache and
# resets its peak statistics, none of which may happen inside another thread's capture.
CAPTURE_LOCK = threading.RLock()


def exact_device(device: torch.device) -> torch.device:
    """`device` with its index: plain "cuda" is the current CUDA device, as a tensor created there reports it."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def resident_bytes(track: Iterable[object], device: torch.device, grads: bool = True) -> int:
    """Bytes the allocator holds for the distinct storages on `device` of `track`: modules (parameters, their
    gradients unless `grads=False`, buffers), optimizers (state tensors) and tensors; a storage shared by several
    is counted once.
    `device` may be plain "cuda": it means the current CUDA device (a tensor there says "cuda:0", and torch
    holds "cuda:0" and "cuda" unequal)."""
    device = exact_device(device)
    storages: dict[int, int] = {}

    def add(t: object) -> None:
        if torch.is_tensor(t) and t.device == device:
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()

    for obj in track:
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                add(p)
                if grads:
                    add(p.grad)
            for b in obj.buffers():
                add(b)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for v in state.values():
                    add(v)
        else:
            add(obj)
    return sum(-(-n // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK for n in storages.values())


def layer_id(name: str, depth: int) -> int:
    """0 for the embeddings, i + 1 for block i, depth + 1 for the final norm and head."""
    if name.startswith(("patch_embed", "cls_token", "pos_embed")):
        return 0
    if name.startswith("blocks."):
        return int(name.split(".")[1]) + 1
    return depth + 1


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float = 1.0,
                 stacked: dict[str, Tensor] | None = None) -> list[dict[str, Any]]:
    """One group per (learning-rate scale, decay?), in the order of their layers: no weight decay on biases, norms,
    CLS token and positions; `lr_scale` = layer_decay^(depth + 1 − layer) for layer-wise lr decay, so without it
    two groups (one optimizer launch each), with it two a layer; `layers`: the layers a group holds. `stacked`: a
    pack's tensors (the model's parameters with a leading member dimension, by name), grouped in their place."""
    depth = len(getattr(model, "blocks", ()))
    groups: dict[tuple[float, bool], dict[str, Any]] = {}
    extra = 0 if stacked is None else 1
    for name, p in (model.named_parameters() if stacked is None else stacked.items()):
        if not p.requires_grad:
            continue
        layer = layer_id(name, depth)
        decays = not (p.ndim - extra <= 1 or name in ("cls_token", "pos_embed.weight"))
        scale = layer_decay ** (depth + 1 - layer)
        group = groups.setdefault((scale, decays), {"params": [], "weight_decay": weight_decay if decays else 0.0,
                                                    "lr_scale": scale, "layers": []})
        group["params"].append(p)
        if layer not in group["layers"]:
            group["layers"].append(layer)
    return [g for _, g in sorted(groups.items(), key=lambda kv: (min(kv[1]["layers"]), kv[0][1]))]


def adamw(groups: list[dict[str, Any]], lr: float) -> torch.optim.AdamW:
    """AdamW with the fused kernel where this torch has one for the parameters' device (CPU since torch 2.4),
    else the default implementation. The process's first optimizer loads `torch._dynamo` (torch's optimizers do
    on first use), without the garbage collector's passes meanwhile (`bench.loading`)."""
    with without_gc():
        try:
            return torch.optim.AdamW(groups, lr=lr, fused=True)
        except (RuntimeError, TypeError):  # no fused kernel for this device / torch
            return torch.optim.AdamW(groups, lr=lr)


def freeze_all_but_head(model: nn.Module) -> None:
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("head."))


def train_mode(model: nn.Module, cfg: TrainConfig) -> None:
    """`model.train()`, except that a frozen part stays in eval mode: a linear probe's features must not
    move, and BatchNorm (the conv stem's) would otherwise update its running statistics in train mode."""
    model.train()
    if cfg.freeze == "all_but_head":
        for name, child in model.named_children():
            if name != "head":
                child.eval()


class EagerStep:
    """One optimisation step: forward, loss, backward, clipping, AdamW. Returns the batch's summed loss as
    a device tensor: nothing here reads a value back to the host."""

    graphed = False
    # the weights autocast casts at every use cast in one kernel a step (`OneCast`, the same bits): None on CUDA, where
    # launches are what a small model's step costs (on a CPU in bf16 it was no faster: docs/gpu.md); True or False
    # everywhere (benchmarks/one_cast.py's two arms, the tests)
    ONE_CAST: bool | None = None

    def __init__(self, model: nn.Module, compiled: nn.Module, optimizer: torch.optim.Optimizer,
                 scaler: torch.amp.GradScaler, cfg: TrainConfig, device: torch.device, dtype: str) -> None:
        self.model, self.compiled, self.optimizer, self.scaler = model, compiled, optimizer, scaler
        self.cfg, self.device, self.dtype = cfg, device, dtype
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.one_cast: OneCast | None = None
        self._casts_found = False

    def _find_casts(self, x: Tensor) -> None:
        """At the first call, before anything is captured: which weights to cast in one kernel (none under
        torch.compile, which fuses its casts itself, or in fp32)."""
        if not self._casts_found:
            self._casts_found = True
            on = self.device.type == "cuda" if self.ONE_CAST is None else self.ONE_CAST
            if on and not self.cfg.compile:
                try:
                    self.one_cast = self._one_cast(x)
                except Exception as err:   # what this torch makes of the model: autocast's own casts still work
                    tqdm.write(f"casts: finding the weights to cast once failed ({error_line(err)}); autocast casts "
                               "them at each use")

    def _one_cast(self, x: Tensor) -> OneCast | None:
        return OneCast.find(self.model, dict(self.model.named_parameters()), dict(self.model.named_buffers()), x,
                            self.device, self.dtype)

    def _forward(self, x: Tensor) -> Tensor:
        if self.one_cast is None:
            return self.compiled(x)
        return functional_call(self.model, self.one_cast(), (x,))

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"]

    def _state_tensors(self) -> list[Tensor]:
        """The tensors the step trains besides the optimizer's state: the model's weights and buffers."""
        return list(self.model.state_dict().values())

    def _step(self, x: Tensor, y: Tensor, cache: bool = True) -> Tensor:
        with autocast(self.device, self.dtype, cache_enabled=cache):
            loss = F.cross_entropy(self._forward(x), y, label_smoothing=self.cfg.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.cfg.grad_clip:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.trainable, self.cfg.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach().float() * len(y)

    def __call__(self, x: Tensor, y: Tensor, lr: float) -> Tensor:
        self.set_lr(lr)
        self._find_casts(x)
        return self._step(x, y)


class StaticStep(EagerStep):
    """The step on static buffers: each batch is copied into input and label buffers of its batch size,
    the learning rates of all parameter groups live in one device table, each group's a view of it that
    AdamW reads (one kernel sets them all each step), and autocast
    runs without its cast cache. On CUDA the whole step is captured once per batch size into a
    `torch.cuda.CUDAGraph` and replayed (the last, smaller batch of an epoch gets its own graph, so every
    image is seen); elsewhere the same code runs eagerly, so its logic is tested on any machine."""

    WARMUP = 1  # eager steps on a side stream before a capture (undone before the captured step runs)
    # each training stream captures on a stream of its own (`capture_stream`); False: one capture stream for the
    # process, the other arm of benchmarks/concurrent_runs.py's --capture-streams
    OWN_CAPTURE_STREAMS = True

    def __init__(self, *args: Any, capture: bool | None = None, measured: bool = True) -> None:
        super().__init__(*args)
        self.capture = self.device.type == "cuda" if capture is None else capture
        # measured: a capture takes its own memory (`capture_bytes`), with the device synchronised and the
        # allocator's cache emptied around it; otherwise (training, where other runs of this process may be in
        # flight on other streams) it waits for its own streams only and leaves the cache as it is
        self.measured = measured
        self.graphed = self.capture
        groups = self.optimizer.param_groups
        self.lr_scales = torch.tensor([float(g["lr_scale"]) for g in groups], device=self.device)
        self.lr_table = torch.tensor([float(g["lr"]) for g in groups], device=self.device)  # the graph reads it
        for i, group in enumerate(groups):
            group["lr"] = self.lr_table[i]  # a view: set_lr's one multiplication updates every group
            if self.capture:  # torch refuses to capture an optimizer step unless every group says capturable
                group["capturable"] = True
        self.buffers: dict[int, tuple[Tensor, Tensor, Tensor]] = {}  # batch size -> (x, y, loss)
        self.graphs: dict[int, Any] = {}
        # bytes this call's capture added to what was alive before it (set by a call that captured, else None)
        self.first_call_bytes: int | None = None

    def set_lr(self, lr: float) -> None:
        torch.mul(self.lr_scales, lr, out=self.lr_table)

    def __call__(self, x: Tensor, y: Tensor, lr: float) -> Tensor:
        self.set_lr(lr)
        self._find_casts(x)
        self.first_call_bytes = None
        b = y.shape[-1]   # labels (B,), or (k, B) for k models trained at once
        new = b not in self.buffers
        if new:
            self.buffers[b] = (x.clone(), y.clone(), torch.zeros(y.shape[:-1], device=self.device))
        bx, by, bloss = self.buffers[b]
        bx.copy_(x)
        by.copy_(y)
        if self.capture and b not in self.graphs:
            try:
                state = resident_bytes([self.optimizer], self.device)
                self.graphs[b] = self._capture(bx, by, bloss)  # trains on this batch once, as the eager step does
                self.first_call_bytes = (resident_bytes(self.buffers[b], self.device) if new else 0) \
                    + resident_bytes([self.optimizer], self.device) - state + self.capture_bytes
                return bloss.clone()
            except Exception as err:  # weights and optimizer state are as before the attempt: go on eagerly
                say_capture_failed(f"the batch-{b} training step", err, "eager training step")
                self.capture = self.graphed = False
                self.graphs.clear()
        if self.capture:
            self.graphs[b].replay()
        else:
            bloss.copy_(self._step(bx, by, cache=False))
        return bloss.clone()

    def _capture(self, bx: Tensor, by: Tensor, bloss: Tensor) -> Any:
        """Warm up on a side stream (the optimizer's state is allocated there), put weights, buffers,
        optimizer state and the device's random generator back as they were, capture one step and replay
        it: the batch is trained on once, as by the eager step, and a run draws the same random numbers
        whether or not it captures. If anything fails, all of that is put back before raising.

        The saved copies are let go before the capture (a capture runs nothing, so the weights stay as put
        back), and `capture_bytes` is the capture's own peak over what was allocated when it began: the
        graph's pool (activations, gradients), not the copies nor the side stream's cuBLAS workspace, which
        the warm-up allocated."""
        with CAPTURE_LOCK:
            return self._capture_alone(bx, by, bloss)

    def _capture_alone(self, bx: Tensor, by: Tensor, bloss: Tensor) -> Any:
        saved: tuple[list[Tensor], dict[int, dict[str, Tensor]]] | None = self._saved_state()
        rng = None
        try:
            rng = torch.cuda.get_rng_state(self.device)
            stream = capture_stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(self.WARMUP):
                    self._step(bx, by, cache=False)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            self._put_back(*saved)  # the graph will read these very tensors
            saved = None            # the copies are not the step's memory: gone before the capture
            torch.cuda.set_rng_state(rng, self.device)  # the warm-up's draws leave no trace (dropout)
            graph = torch.cuda.CUDAGraph()
            self.optimizer.zero_grad(set_to_none=True)  # backward allocates the grads in the graph's pool
            if self.measured:
                torch.cuda.synchronize(self.device)
                start = torch.cuda.memory_allocated(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
            with capturing(graph, stream, self.device, tidy=self.measured):
                bloss.copy_(self._step(bx, by, cache=False))
            self.capture_bytes = torch.cuda.max_memory_allocated(self.device) - start if self.measured else 0
            graph.replay()
            return graph
        except BaseException:
            if saved is not None:
                self._put_back(*saved)
            self.optimizer.zero_grad(set_to_none=True)
            if rng is not None:
                torch.cuda.set_rng_state(rng, self.device)
            raise

    @torch.no_grad()
    def _saved_state(self) -> tuple[list[Tensor], dict[int, dict[str, Tensor]]]:
        """Copies of the weights, buffers and optimizer state, to put back after the warm-up; plain tensors, no
        autograd graph (a pack's state tensors are its trainable leaves: a copy that kept their gradient
        accumulators alive would have the warm-up's backward accumulate on the stream the copies were made on)."""
        return ([t.clone() for t in self._state_tensors()],
                {id(p): {k: v.clone() for k, v in st.items() if torch.is_tensor(v)}
                 for p, st in self.optimizer.state.items()})

    def _put_back(self, model_state: list[Tensor], optim_state: dict[int, dict[str, Tensor]]) -> None:
        """Copies the saved weights, buffers and optimizer state back in place (state created since: zeros)."""
        with torch.no_grad():
            for t, saved in zip(self._state_tensors(), model_state):
                t.copy_(saved)
            for p, st in self.optimizer.state.items():
                saved = optim_state.get(id(p), {})
                for k, v in st.items():
                    if torch.is_tensor(v):
                        v.copy_(saved[k]) if k in saved else v.zero_()


def error_line(err: BaseException) -> str:
    """The error in one line: its type and its message's first line (at most 160 characters)."""
    reason = (str(err).strip().splitlines() or [""])[0][:160]
    return f"{type(err).__name__}: {reason}"


def say_capture_failed(what: str, err: BaseException, instead: str) -> None:
    """One line: capturing `what` into a CUDA graph failed, why (the error's first line), and what runs instead."""
    tqdm.write(f"graphs: capturing {what} failed ({error_line(err)}); {instead} from here")


_CAPTURE_STREAMS: dict[tuple, Any] = {}


def capture_stream(device: torch.device) -> Any:
    """The stream the work queued on the current stream is captured on (captures take `CAPTURE_LOCK`): one per
    training stream, drawn once from the high-priority pool, which nothing else here draws from. Not a new one
    per capture: `torch.cuda.Stream()` hands out the streams of a pool of 32 in turn, so a new one would sooner or
    later be the stream another thread is training on, whose work would then land in the capture. Not one for
    the process: torch keeps cuBLAS's workspaces per (handle, stream), a captured graph keeps the address of the
    workspace it was captured with, and destroying a graph frees every workspace of the stream it was captured on
    (`CUDAGraph::reset` calls `clearCublasWorkspacesForStream`), so runs side by side that shared a capture stream
    would lose their graphs' workspaces when one of them ends, and that memory could be handed to other tensors
    while they replay. (The high-priority pool holds 32 streams: past 32 training streams, two share one.)
    `StaticStep.OWN_CAPTURE_STREAMS` False: one capture stream for the process."""
    device = exact_device(device)
    own = torch.cuda.current_stream(device) if StaticStep.OWN_CAPTURE_STREAMS else None
    key = (str(device), torch.cuda.Stream, own)
    if key not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[key] = torch.cuda.Stream(device, priority=-1)
    return _CAPTURE_STREAMS[key]


@contextlib.contextmanager
def capturing(graph: Any, stream: Any, device: torch.device, tidy: bool = True):
    """Capture the block's CUDA work into `graph` on `stream` (only this thread's work is checked), as
    `torch.cuda.graph` does: with `tidy`, the device synchronised and the allocator's cache emptied first
    (cached blocks are not released during a capture, so a warm-up's would stay reserved beside the graph's
    pool); without it (other runs of the process train meanwhile) only `stream` is waited for, and
    `capture_end` called whatever the block did. On a failure the previous stream is current again, and
    the graph's pool is released exactly once: by `graph.reset()` where `capture_end` succeeded (the block
    raised inside a capture that stayed valid); where `capture_end` refused the capture there is no pool to
    ask for (torch refuses `pool()` then) and nothing more is called. The first error, the real cause, is
    raised."""
    if tidy:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    else:
        stream.synchronize()
    failed: BaseException | None = None
    ended = False
    with torch.cuda.stream(stream):  # restores the previous current stream on the way out, raise or not
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            yield
        except BaseException as err:  # the block failed: still end the capture before anything else
            failed = err
        try:
            graph.capture_end()
            ended = True
        except BaseException as err:  # an op invalidated the capture without raising, or the block did
            failed = failed or err
    if failed is not None:
        if ended:
            graph.reset()   # the one release of the pool of a capture that ended well but is not used
        raise failed


def training_parts(model: nn.Module, cfg: TrainConfig,
                   device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer, torch.amp.GradScaler]:
    """What a training step of `model` (already on `device`) under `cfg` works with: the module it calls
    (torch.compile'd with cfg.compile), AdamW over its parameter groups (only the head's with
    freeze=all_but_head, whose freezing this applies) and the grad scaler (on for fp16 on CUDA)."""
    compiled = torch.compile(model) if cfg.compile else model
    if cfg.freeze == "all_but_head":
        freeze_all_but_head(model)
    optimizer = adamw(param_groups(model, cfg.weight_decay, cfg.layer_decay), cfg.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.resolved_dtype(device) == "fp16" and device.type == "cuda")
    return compiled, optimizer, scaler


def make_step(model: nn.Module, compiled: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
              cfg: TrainConfig, device: torch.device, dtype: str, graphs: bool, measured: bool = False) -> EagerStep:
    """On CUDA with `graphs`, the static-buffer step captured into CUDA graphs where it can work (else the
    eager step, with one line saying why); elsewhere the eager step. `measured`: its captures take their own
    memory (`StaticStep`), as the cost phase needs; training leaves that out."""
    if not graphs or device.type != "cuda":  # without capture the static buffers only add copies
        return EagerStep(model, compiled, optimizer, scaler, cfg, device, dtype)
    why = ("fp16 needs the grad scaler's host-side checks" if scaler.is_enabled() else
           "torch.compile already owns the step" if cfg.compile else
           "AdamW here has no fused kernel to read a tensor learning rate" if not optimizer.defaults.get("fused") else "")
    if why:
        tqdm.write(f"graphs: eager training step ({why})")
        return EagerStep(model, compiled, optimizer, scaler, cfg, device, dtype)
    return StaticStep(model, compiled, optimizer, scaler, cfg, device, dtype, measured=measured)



def training_step(cfg: TrainConfig, device: torch.device,
                  graphs: bool = False) -> Callable[..., tuple[Callable[[], object], list[object]]]:
    """`bench.measure.measure`'s step factory for the step the trainer runs under `cfg`: a fresh AdamW over
    the model's parameter groups, and `make_step`'s step (on CUDA with `graphs`, the static-buffer step
    captured into a CUDA graph at its first call; else the eager one) at the peak learning rate."""
    def build(model: nn.Module, images: Tensor, labels: Tensor):
        compiled, optimizer, scaler = training_parts(model, cfg, device)
        train_mode(model, cfg)
        step = make_step(model, compiled, optimizer, scaler, cfg, device, cfg.resolved_dtype(device), graphs,
                         measured=True)
        return StepCall(step, images, labels, cfg.lr), [model, optimizer, images, labels]
    return build


class StepCall:
    """One training step on a fixed batch at a fixed learning rate, as `measure` times it. `own_peak_bytes`:
    where the call just made captured a CUDA graph, the bytes it added to what was alive before it, as
    the step measured them (`StaticStep.first_call_bytes`); None otherwise."""

    def __init__(self, step: EagerStep, images: Tensor, labels: Tensor, lr: float) -> None:
        self.step, self.images, self.labels, self.lr = step, images, labels, lr

    def __call__(self) -> Tensor:
        return self.step(self.images, self.labels, self.lr)

    @property
    def own_peak_bytes(self) -> int | None:
        return getattr(self.step, "first_call_bytes", None)
