"""Packed runs: the seeds of one point trained as one stacked model, so one forward, backward and optimizer step
does the work of k runs.

The members' weights, buffers and AdamW state are stacked along a leading dimension (`torch.func.
stack_module_state`) and one template module, the model's stacked twin (`vit.stacked`: batched matmuls with the
bias added in them, grouped convolutions, each member's LayerNorm scale and shift), runs them all on the members'
images side by side (`functional_call`): autograd gives each member the gradient of its own loss, since no member's
rows meet another's weights. Each member keeps everything a run has alone: its initial weights (built under its
seed by the caller), its batch order and augmentation draws (its own generators, drawn as `train` draws them), its
own gradient clipping (its own global norm), its learning-rate schedule, evaluation, history, predictions, weights
and checkpoint (its own file, in a run's format). A member whose loss stops being finite is marked diverged at that
epoch's end; the others go on (its slot keeps computing, which touches no other slot).

Bits: a member's numbers do not depend on its slot or its companions, nor on the CPU on the pack's width (tested,
conv and patch stems, every state tensor), but they are not those of the same seed trained alone (a batched matmul
is not the same kernel as a plain one), so a packed run has its own run id (`TrainConfig.packed`). On CUDA, where
the members' rows go through fused kernels in one call, they may depend on the width (a kernel's plan follows the
batch): there a recipe pins the width (`TrainConfig.pack_width`, in the run id), and a narrower pack trains filled
out to it with copies of its first member whose results are dropped. A stacked model of one member runs other
kernels than of two (a grouped convolution of one group is a plain one), so a pack of one trains beside such a copy
on any device. Dropout (its draws would come from one shared generator), torch.compile and fp16's loss scaling (one
scaler would skip every member's step for one member's overflow) are refused before any run. What autocast and a
device's kernels make of a stacked model cannot be known before: each model to be packed takes one packed step on
the device before any run (`pack_trial`; at the pinned width and batch where one is pinned, so a pack too wide for
the device's memory is found then too), and one that fails is refused in one line.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state
from tqdm import tqdm

from ablations.choices import MIN_PACK
from ablations.training.checkpoints import Checkpointing, load_checkpoint, save_checkpoint, saved_param_groups
from ablations.training.data import Dataset, recipe_data
from ablations.training.train import (
    Diverged,
    Done,
    TrainResult,
    check_stop,
    epoch_bar,
    generators,
    lr_at,
    on_device,
    run_identity,
)
from bench.loading import without_gc
from bench.training.precision import OneCast, autocast
from bench.training.recipe import TrainConfig
from bench.training.step import (
    EagerStep,
    StaticStep,
    error_line,
    freeze_all_but_head,
    param_groups,
    train_mode,
)
from vit.stacked import in_matmul_order, stacked


def pack_refusal(cfg: TrainConfig, dropout: float, device: torch.device) -> str:
    """Why runs of this recipe and model (its dropout) cannot train packed (one line naming what to change), or ""
    where they can by design; `pack_trial` tries the model itself."""
    if dropout > 0:
        return ("packing needs dropout 0: a pack's members would draw their dropout masks from one shared "
                "generator, so a member's result would depend on its companions; set PACK=0 or dropout=0")
    if cfg.compile:
        return "packing and torch.compile are not supported together; set PACK=0 or compile=0"
    if cfg.resolved_dtype(device) == "fp16" and device.type == "cuda":
        return ("packing needs bf16 or fp32: fp16's one loss scaler would skip every member's step for one "
                "member's overflow; set DTYPE=bf16 or PACK=0")
    return ""


def pinned_width(pack: int, device: torch.device) -> int:
    """The width packs of at most `pack` seeds are pinned to on `device` (`TrainConfig.pack_width`): on CUDA, where
    a member's bits may depend on it, `pack` and at least `MIN_PACK`; elsewhere none."""
    return max(pack, MIN_PACK) if pack and device.type == "cuda" else 0


def narrower_pack(width: int) -> int:
    """The PACK to try where a pack `width` wide does not fit in memory: half as wide, or none."""
    return width // 2 if width > 2 else 0


def pack_trial(model_cfg: Any, cfg: TrainConfig, device: torch.device) -> str:
    """One packed training step of models of `model_cfg` under the recipe's precision on `device`: "" where it
    runs, else one line naming the error (what autocast and the device's kernels make of this model stacked cannot be
    known before). Two models on two random images each; where the recipe pins a width (`pack_width`, CUDA), that
    many on a batch of the recipe's size each, so a pack that cannot fit in memory is said before any run. The
    process's random generators are left as they were, and the device's cached memory given back."""
    from vit import VisionTransformer

    width, batch = (cfg.pack_width, cfg.batch_size) if cfg.pack_width else (2, 2)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            packed = PackedModel([VisionTransformer(model_cfg).to(device) for _ in range(width)])
            train_mode(packed.template, cfg)
            step = PackedStep(packed, pack_optimizer(packed, cfg), cfg, device, cfg.resolved_dtype(device))
            x = torch.randn(width, batch, model_cfg.in_chans, model_cfg.img_size, model_cfg.img_size, device=device)
            y = torch.randint(0, model_cfg.num_classes, (width, batch), device=device)
            step(x, y, cfg.lr).sum().item()
    except torch.cuda.OutOfMemoryError as err:   # torch.OutOfMemoryError since torch 2.5
        return (f"a pack {width} wide of this model does not fit in {device.type} memory at batch {batch} "
                f"({error_line(err)}); set PACK={narrower_pack(width)}")
    except Exception as err:   # any other failure of the step is the answer
        return f"a packed training step of this model failed on {device.type} ({error_line(err)}); set PACK=0"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return ""


@dataclass
class Member:
    """What a pack is given for one run: its model (built under its seed), seed and checkpoint."""
    model: nn.Module
    seed: int
    checkpoint: Checkpointing | None = None


@dataclass
class _MemberState:
    streams: dict[str, torch.Generator]
    done: Done
    identity: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    diverged: Diverged | None = None
    best_acc: float = 0.0
    preds: Tensor | None = None


class PackedModel:
    """k models of one architecture as stacked tensors and one template module that runs them all in one forward
    (`vit.stacked`)."""

    def __init__(self, models: list[nn.Module]) -> None:
        self.k = len(models)
        self.template = stacked(models[0])
        params, self.buffers = stack_module_state(models)
        self.params = in_matmul_order(self.template, params)
        trains = {name: p.requires_grad for name, p in models[0].named_parameters()}
        for name, p in self.params.items():   # stack_module_state makes every stacked tensor a trainable leaf
            p.requires_grad_(trains[name])

    def member_state(self, i: int) -> dict[str, Tensor]:
        """Member i's state dict, as its model alone would hold it (copies)."""
        return {name: t[i].detach().clone(memory_format=torch.contiguous_format)
                for name, t in {**self.params, **self.buffers}.items()}

    def forward(self, images: Tensor, shared: bool = False, cast: dict[str, Tensor] | None = None) -> Tensor:
        """(k, B, classes) logits of (k, B, …) images, or of one (B, …) batch every member sees (`shared`);
        `cast`: stacked weights already cast, used in place of those of the same names."""
        params = self.params if cast is None else {**self.params, **cast}
        return functional_call(self.template, (params, self.buffers), (self.rows(images, shared),)).unflatten(
            0, (self.k, -1))

    def rows(self, images: Tensor, shared: bool = False) -> Tensor:
        """The template's input: (k, B, …) images, or one (B, …) batch for every member (`shared`), as (k·B, …)."""
        return (images.expand(self.k, *images.shape) if shared else images).flatten(0, 1)


def pack_optimizer(packed: PackedModel, cfg: TrainConfig, capturable: bool = False) -> torch.optim.AdamW:
    """AdamW over the stacked tensors in the recipe's parameter groups (only the head's with
    freeze=all_but_head, whose freezing this applies to the template and the stacked tensors). The fused kernel on
    CUDA (one launch a group, each element by the same arithmetic wherever it falls), `foreach` elsewhere: the CPU's
    fused kernel runs a vector body and a scalar tail that round differently, so an element's update would depend on
    where its member's slice falls in the stacked tensor. `capturable` (CUDA): its step counts on the device and its
    learning rate a device tensor, as a CUDA graph needs. The process's first optimizer loads `torch._dynamo`, here
    as in `adamw` without the garbage collector's passes meanwhile."""
    if cfg.freeze == "all_but_head":
        freeze_all_but_head(packed.template)
        for name, p in packed.params.items():
            p.requires_grad_(name.startswith("head."))
    cuda = next(iter(packed.params.values())).is_cuda
    with without_gc():
        return torch.optim.AdamW(param_groups(packed.template, cfg.weight_decay, cfg.layer_decay,
                                              stacked=packed.params),
                                 lr=cfg.lr, **({"fused": True} if cuda else {"foreach": True}), capturable=capturable)


class PackedStep(EagerStep):
    """One optimisation step of every member: forward, each member's loss, backward, each member's gradient
    clipping, AdamW over the stacked tensors (elementwise, so each member's update is its own). Returns the
    members' summed batch losses as a (k,) device tensor."""

    def __init__(self, packed: PackedModel, optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                 device: torch.device, dtype: str) -> None:
        no_scaler = torch.amp.GradScaler(device.type, enabled=False)   # fp16 is refused packed
        super().__init__(packed.template, packed.template, optimizer, no_scaler, cfg, device, dtype)
        self.packed = packed
        self.trainable = [p for p in packed.params.values() if p.requires_grad]

    def _state_tensors(self) -> list[Tensor]:
        return [*self.packed.params.values(), *self.packed.buffers.values()]

    def _one_cast(self, x: Tensor) -> OneCast | None:
        return OneCast.find(self.packed.template, self.packed.params, self.packed.buffers, self.packed.rows(x),
                            self.device, self.dtype, stacked=self.packed.k)

    def _step(self, x: Tensor, y: Tensor, cache: bool = True) -> Tensor:
        smoothing = self.cfg.label_smoothing
        with autocast(self.device, self.dtype, cache_enabled=cache):
            logits = self.packed.forward(x, cast=None if self.one_cast is None else self.one_cast())
            losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none",
                                     label_smoothing=smoothing).view(y.shape).mean(1)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        if self.cfg.grad_clip:
            self._clip(self.cfg.grad_clip)
        self.optimizer.step()
        return losses.detach().float() * y.shape[-1]

    @torch.no_grad()
    def _clip(self, max_norm: float) -> None:
        """`nn.utils.clip_grad_norm_` for each member over its own gradients: its global norm, its coefficient."""
        grads = [p.grad for p in self.trainable if p.grad is not None]
        k, n = self.packed.k, len(grads)
        slices = [g[j] for j in range(k) for g in grads]   # member by member: each its own tensors, as alone
        norms = torch.stack(torch._foreach_norm(slices)).view(k, n)
        coef = (max_norm / (torch.linalg.vector_norm(norms, dim=1) + 1e-6)).clamp(max=1.0)
        for j in range(k):
            torch._foreach_mul_(slices[j * n:(j + 1) * n], coef[j])


class GraphedPackedStep(StaticStep, PackedStep):
    """The packed step on static buffers, per batch size, with the learning rates in one device table, captured
    into a CUDA graph and replayed (`StaticStep`'s capture: warm-up undone, a failed capture goes on eagerly)."""


def pack_graphed(device: torch.device, graphs: bool) -> bool:
    """Whether a pack on `device` trains with the graphed step (`graphs`, on CUDA)."""
    return graphs and device.type == "cuda"


def packed_step(packed: PackedModel, optimizer: torch.optim.Optimizer, cfg: TrainConfig, device: torch.device,
                dtype: str) -> PackedStep:
    """The graphed packed step where its optimizer is `capturable` (built so where `pack_graphed`), else the eager
    one."""
    if optimizer.defaults["capturable"]:
        return GraphedPackedStep(packed, optimizer, cfg, device, dtype, measured=False)
    return PackedStep(packed, optimizer, cfg, device, dtype)


@torch.no_grad()
def evaluate_pack(packed: PackedModel, data: Dataset, device: torch.device, dtype: str, batch_size: int,
                  images: Tensor, labels: Tensor) -> list[tuple[float, float, Tensor]]:
    """Each member's (mean loss, accuracy, predictions on the CPU) of an image set on `device`, one read."""
    packed.template.eval()
    total = torch.zeros(packed.k, device=device)
    preds = []
    for i in range(0, len(labels), batch_size):
        x, y = data.normalize(images[i:i + batch_size]), labels[i:i + batch_size]
        with autocast(device, dtype):
            logits = packed.forward(x, shared=True)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.repeat(packed.k), reduction="none").view(
            packed.k, -1).sum(1)
        preds.append(logits.argmax(-1))
    pred, losses, n, truth = torch.cat(preds, dim=1).cpu(), total.cpu(), len(labels), labels.cpu()
    return [(losses[j].item() / n, (pred[j] == truth).sum().item() / n, pred[j]) for j in range(packed.k)]


def _resume(members: list[Member], identities: list[dict], cfg: TrainConfig) -> list[tuple[dict, dict] | None]:
    """Each member's saved (tensors, metadata) where its checkpoint is this very run's with epochs to go, else
    None; where the members found stand at different epochs, none is resumed (a pack trains in step)."""
    found: list[tuple[dict, dict] | None] = []
    for member, identity in zip(members, identities):
        path = member.checkpoint.path if member.checkpoint else None
        saved = load_checkpoint(path) if path is not None and path.exists() else None
        if saved is not None and (saved[1].get("identity") != identity or saved[1]["epoch"] >= cfg.epochs):
            if saved[1].get("identity") != identity:
                tqdm.write(f"checkpoint {path} is not this run's (another model, recipe or data); the run starts "
                           f"from epoch 1")
            saved = None
        found.append(saved)
    epochs = {saved[1]["epoch"] if saved else 0 for saved in found}
    if len(epochs) > 1:
        tqdm.write(f"the pack's checkpoints stand at epochs {sorted(epochs)}; its {len(members)} runs start from "
                   f"epoch 1 together")
        return [None] * len(members)
    return found


def _restore(packed: PackedModel, optimizer: torch.optim.Optimizer, saved: list[tuple[dict, dict]],
             states: list[_MemberState]) -> None:
    """Each member's model, optimizer state and generators from its checkpoint, into its slot."""
    with torch.no_grad():
        for j, (tensors, _) in enumerate(saved):
            for name, t in {**packed.params, **packed.buffers}.items():
                t[j].copy_(tensors[f"model.{name}"])
    order = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, Tensor]] = {}
    for index, param in enumerate(order):
        keys = {key.split(".", 2)[2] for key in saved[0][0] if key.startswith(f"optim.{index}.")}
        for key in keys:
            values = [tensors[f"optim.{index}.{key}"] for tensors, _ in saved]
            # a moment in its parameter's layout (a fused step reads the two in one memory order)
            state.setdefault(index, {})[key] = values[0] if values[0].dim() == 0 else torch.empty_like(
                param, dtype=values[0].dtype, device=values[0].device).copy_(torch.stack(values))
    optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})
    for (tensors, _), member in zip(saved, states):
        for name, g in member.streams.items():
            g.set_state(tensors[f"rng.{name}"])


def _save(packed: PackedModel, step: PackedStep, j: int, member: Member, state: _MemberState,
          meta: dict[str, Any]) -> None:
    """Member j's checkpoint, in a run's format: its model, its slice of the optimizer state, its generators."""
    tensors = {f"model.{k}": v for k, v in packed.member_state(j).items()}
    for index, values in step.optimizer.state_dict()["state"].items():
        tensors.update({f"optim.{index}.{k}": (v if v.dim() == 0 else v[j]).detach().clone(
                            memory_format=torch.contiguous_format) for k, v in values.items() if torch.is_tensor(v)})
    tensors.update({f"rng.{name}": g.get_state() for name, g in state.streams.items()})
    save_checkpoint(member.checkpoint.path, tensors,
                    {**meta, "param_groups": saved_param_groups(step.optimizer), "scaler": {}})


def _batches(data: Dataset, train_x: Tensor, train_y: Tensor, states: list[_MemberState], n: int,
             batch_size: int, device: torch.device) -> Iterator[tuple[Tensor, Tensor]]:
    """The epoch's stacked batches: each member's own order and augmentation, drawn as `train` draws them."""
    streams = [data.epoch_batches(train_x, train_y, torch.randperm(n, generator=s.streams["order"]).to(device),
                                  batch_size, s.streams["augment"]) for s in states]
    for batch in zip(*streams):
        yield torch.stack([x for x, _ in batch]), torch.stack([y for _, y in batch])


def _start(members: list[Member], models: list[nn.Module], identities: list[dict], cfg: TrainConfig,
           device: torch.device, dtype: str, real: int,
           graphs: bool) -> tuple[PackedModel, PackedStep, list[_MemberState]]:
    """The pack, its step (`packed_step`) and each member's state: fresh, or restored where every member's
    checkpoint stands at the same epoch (`_resume`)."""
    saved = _resume(members, identities, cfg)
    packed = PackedModel(models)
    optimizer = pack_optimizer(packed, cfg, capturable=pack_graphed(device, graphs))
    layout = [group["params"] for group in optimizer.state_dict()["param_groups"]]
    if any(found is not None and [g["params"] for g in found[1]["param_groups"]] != layout for found in saved):
        tqdm.write(f"the pack's checkpoints group its optimizer's parameters otherwise than this version does; its "
                   f"{real} runs start from epoch 1")
        saved = [None] * len(saved)
    states = [_MemberState(generators(m.seed), Done(), identity) for m, identity in zip(members, identities)]
    if all(found is not None for found in saved):
        _restore(packed, optimizer, saved, states)
        for state, (_, meta) in zip(states, saved):
            state.done = Done(meta["epoch"], meta["step"], meta["train_time_s"], meta["history"])
            state.history = list(meta["history"])
            state.best_acc = max((h["test_acc"] for h in state.history), default=0.0)
        tqdm.write(f"resumed a pack of {real} after epoch {states[0].done.epoch} of {cfg.epochs}")
    return packed, packed_step(packed, optimizer, cfg, device, dtype), states


def _record(states: list[_MemberState], epoch: int, losses: list[float], tested: list, valued: list | None,
            lr: float, step: int, steps_per_epoch: int, elapsed: float) -> None:
    """Each member's epoch: its history row, or its divergence (a loss that is not finite)."""
    for j, state in enumerate(states):
        if state.diverged is not None:
            continue
        if not math.isfinite(losses[j]):
            state.diverged = Diverged(f"loss became {losses[j]} in epoch {epoch} (steps "
                                      f"{step - steps_per_epoch + 1}–{step}, lr {lr:.3g} at the last)")
            continue
        record = {"epoch": epoch, "lr": lr, "train_loss": losses[j], "test_loss": tested[j][0],
                  "test_acc": tested[j][1], "elapsed_s": elapsed}
        if valued is not None:
            record["val_loss"], record["val_acc"] = valued[j][0], valued[j][1]
        state.history.append(record)
        state.best_acc, state.preds = max(state.best_acc, tested[j][1]), tested[j][2]


def _checkpoint(packed: PackedModel, step_fn: PackedStep, members: list[Member], states: list[_MemberState],
                identities: list[dict], epoch: int, step: int, train_time: float, per_epoch: float,
                epochs: int) -> None:
    """Each member's checkpoint where one is due (the first member's `Checkpointing` decides for the pack)."""
    lead = members[0].checkpoint
    if lead is None or not lead.due(epoch, epochs, per_epoch):
        return
    for j, member in enumerate(members):
        if states[j].diverged is None and member.checkpoint is not None:
            _save(packed, step_fn, j, member, states[j], {"identity": identities[j], "epoch": epoch, "step": step,
                                                          "train_time_s": train_time, "history": states[j].history})


def _results(members: list[Member], states: list[_MemberState], packed: PackedModel, n: int, train_time: float,
             held_out: tuple[Tensor, Tensor] | None) -> list[TrainResult | Diverged]:
    """Each member's TrainResult (its final weights put back into its model), or its divergence. Its throughput
    is its own images over the pack's training time."""
    results: list[TrainResult | Diverged] = []
    for j, (member, state) in enumerate(zip(members, states)):
        if state.diverged is not None:
            results.append(state.diverged)
            continue
        member.model.load_state_dict(packed.member_state(j))
        last = state.history[-1]
        results.append(TrainResult(
            last["train_loss"], last["test_loss"], last["test_acc"], state.best_acc, train_time,
            last["epoch"] * n / train_time, state.history, state.preds, resumed_after=state.done.epoch,
            train_util_pct=None, train_size=n, val_size=len(held_out[1]) if held_out else None,
            val_loss=last.get("val_loss"), val_acc=last.get("val_acc")))
    return results


def train_pack(members: list[Member], data: Dataset, cfg: TrainConfig, device: torch.device,
               progress: bool = True, graphs: bool = True, name: str = "") -> list[TrainResult | Diverged]:
    """Train the members (models of one config, each initialised by the caller under its seed) as one pack;
    each gets its TrainResult, or the Diverged that stopped it. The pack trains `cfg.pack_width` wide where that
    is set, else as wide as its members and at least `MIN_PACK`, filled out with dropped copies of the first
    member. Checkpoints as `train` writes them, one file a member; a pack resumes where every member's checkpoint
    stands at the same epoch. `graphs`: on CUDA the step is captured into a CUDA graph per batch size
    (`GraphedPackedStep`); elsewhere it runs eagerly. `name`: the pack, as its progress bar names it."""
    dtype = cfg.resolved_dtype(device)
    data, held_out = recipe_data(data, cfg)
    real = len(members)
    width = cfg.pack_width or max(real, MIN_PACK)
    if real > width:
        raise ValueError(f"a pack of {real} runs is wider than its recipe's pack_width={width}")
    # filled out with copies of the first member, dropped (they resume from its checkpoint too, and never write one)
    members = members + [Member(copy.deepcopy(members[0].model), members[0].seed, members[0].checkpoint)
                         for _ in range(width - real)]
    models = [m.model.to(device) for m in members]
    train_x, train_y = on_device(data.train_x, device), on_device(data.train_y, device)
    n = len(train_y)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total_steps, warmup_steps = cfg.epochs * steps_per_epoch, max(1, round(cfg.warmup_epochs * steps_per_epoch))
    identities = [run_identity(m, cfg, member.seed, n) for m, member in zip(models, members)]
    packed, step_fn, states = _start(members, models, identities, cfg, device, dtype, real, graphs)
    tests = on_device(data.test_x, device), on_device(data.test_y, device)
    vals = (held_out[0].to(device), held_out[1].to(device)) if held_out else None
    done = states[0].done
    step, train_time, first = done.step, done.train_time_s, done.epoch + 1
    epochs = epoch_bar(range(first, cfg.epochs + 1), f"epochs (pack of {real})", progress, name)
    for epoch in epochs:
        check_stop()
        train_mode(packed.template, cfg)
        t0 = time.perf_counter()
        loss_sum = torch.zeros(packed.k, device=device)
        for x, y in _batches(data, train_x, train_y, states, n, cfg.batch_size, device):
            lr = lr_at(step, total_steps, warmup_steps, cfg.lr)
            loss_sum += step_fn(x, y, lr)
            step += 1
        losses = (loss_sum / n).tolist()   # the epoch's one read of the training losses
        train_time += time.perf_counter() - t0
        tested = evaluate_pack(packed, data, device, dtype, cfg.eval_batch_size, *tests)
        valued = evaluate_pack(packed, data, device, dtype, cfg.eval_batch_size, *vals) if vals else None
        _record(states, epoch, losses, tested, valued, lr, step, steps_per_epoch, train_time)
        if all(s.diverged is not None for s in states[:real]):
            break
        epochs.set_postfix(acc=" ".join(f"{s.history[-1]['test_acc']:.3f}" for s in states[:real] if s.history))
        _checkpoint(packed, step_fn, members[:real], states, identities, epoch, step, train_time,
                    train_time / (epoch - first + 1), cfg.epochs)
    return _results(members[:real], states, packed, n, train_time, held_out)

