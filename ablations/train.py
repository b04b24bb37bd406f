"""The trainer: AdamW, linear warm-up then cosine, label smoothing, gradient clipping, autocast.

Seeded and reproducible on CPU: the seed fixes the initial weights, the batch order and the
augmentation (one generator each); the same seed on the same machine gives the same accuracy.

No host synchronisation per step: the loss is summed on the device and read once per epoch, when a
non-finite epoch loss stops the run with `Diverged` naming the epoch. The learning rate is computed on
the host from the step count.

Checkpoints (`Checkpointing`): at the end of an epoch the model, optimizer, grad scaler, every random
generator and the run's history go to one safetensors file, atomically replaced; `train` given an
existing checkpoint of the same run resumes after its epoch, and on the CPU ends with the same weights
as a run that was never interrupted.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from bench.atomic import write_atomic
from bench.measure import autocast
from bench.mfu import DTYPES
from bench.utilisation import UtilSampler, reader_for

from .choices import AUTO_CHECKPOINT_S
from .data import Dataset


class Diverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass(frozen=True)
class TrainConfig:
    """epochs, batch_size; lr: peak AdamW rate after `warmup_epochs` of linear warm-up, then cosine to 0.
    weight_decay (AdamW, not on biases/norms/tokens), label_smoothing, grad_clip (max global norm, 0 = off).
    dtype: "fp32" or "bf16"/"fp16" autocast ("auto": bf16 on CUDA, fp32 on CPU). compile: torch.compile.
    layer_decay: fine-tuning's layer-wise lr decay (BEiT/MAE): block i of L trains at lr·decay^(L−i),
    embeddings at lr·decay^(L+1), final norm and head at lr (1.0 = off).
    freeze: "none", or "all_but_head" for a linear probe.
    """

    # defaults: the best mnist5k recipe measured within ~60 s on a 2-core CPU (see README)
    epochs: int = 20
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0
    grad_clip: float = 1.0
    dtype: str = "auto"
    compile: bool = False
    eval_batch_size: int = 500
    layer_decay: float = 1.0
    freeze: str = "none"

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}")
        for name in ("weight_decay", "warmup_epochs", "label_smoothing", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
                raise ValueError(f"TrainConfig.{name} must be a finite number ≥ 0, got {value!r}")
        if not 0 < self.layer_decay <= 1:
            raise ValueError(f"TrainConfig.layer_decay must be in (0, 1], got {self.layer_decay!r}")
        if self.freeze not in ("none", "all_but_head"):
            raise ValueError(f"TrainConfig.freeze={self.freeze!r} is unknown; choose none or all_but_head")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < math.inf:
            raise ValueError(f"TrainConfig.lr must be a finite number > 0, got {self.lr!r}")
        if self.label_smoothing >= 1:
            raise ValueError(f"TrainConfig.label_smoothing must be < 1, got {self.label_smoothing!r}")
        if self.dtype not in ("auto", *DTYPES):
            raise ValueError(f"TrainConfig.dtype={self.dtype!r} is unknown; choose auto, {', '.join(DTYPES)}")

    def resolved_dtype(self, device: torch.device) -> str:
        return ("bf16" if device.type == "cuda" else "fp32") if self.dtype == "auto" else self.dtype

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainResult:
    train_loss: float
    test_loss: float
    test_acc: float
    best_test_acc: float
    train_time_s: float
    train_throughput_img_s: float
    history: list[dict[str, float]] = field(default_factory=list)
    test_preds: Tensor | None = None  # (n_test,) the final model's class index for each test image
    resumed_after: int = 0  # the epoch of the checkpoint this run resumed from; 0 = not resumed
    train_util_pct: float | None = None  # NVML (CUDA) or process CPU use, sampled while training epochs ran

    def row(self) -> dict[str, float]:
        """The result-table columns: the scalars, and the test-set size."""
        scalars = {k: v for k, v in asdict(self).items() if k not in ("history", "test_preds")}
        return {**scalars, "test_size": None if self.test_preds is None else len(self.test_preds)}


def lr_at(step: int, total_steps: int, warmup_steps: int, peak: float) -> float:
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def layer_id(name: str, depth: int) -> int:
    """0 for the embeddings, i + 1 for block i, depth + 1 for the final norm and head."""
    if name.startswith(("patch_embed", "cls_token", "pos_embed")):
        return 0
    if name.startswith("blocks."):
        return int(name.split(".")[1]) + 1
    return depth + 1


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float = 1.0) -> list[dict[str, Any]]:
    """One group per (layer, decay?): no weight decay on biases, norms, CLS token and positions;
    `lr_scale` = layer_decay^(depth + 1 − layer) for layer-wise lr decay."""
    depth = len(getattr(model, "blocks", ()))
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        layer = layer_id(name, depth)
        decays = not (p.ndim <= 1 or name in ("cls_token", "pos_embed.weight"))
        group = groups.setdefault((layer, decays), {"params": [], "weight_decay": weight_decay if decays else 0.0,
                                                    "lr_scale": layer_decay ** (depth + 1 - layer), "layer": layer})
        group["params"].append(p)
    return [groups[k] for k in sorted(groups)]


def adamw(groups: list[dict[str, Any]], lr: float) -> torch.optim.AdamW:
    """AdamW with the fused kernel where this torch has one for the parameters' device (CPU since
    torch 2.4; on the 2-core CPU it cut vit_mnist's training step by 9–16% against the per-tensor loop),
    else the default implementation."""
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

    def __init__(self, model: nn.Module, runner: nn.Module, optimizer: torch.optim.Optimizer,
                 scaler: torch.amp.GradScaler, cfg: TrainConfig, device: torch.device, dtype: str) -> None:
        self.model, self.runner, self.optimizer, self.scaler = model, runner, optimizer, scaler
        self.cfg, self.device, self.dtype = cfg, device, dtype
        self.trainable = [p for p in model.parameters() if p.requires_grad]

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"]

    def _step(self, x: Tensor, y: Tensor, cache: bool = True) -> Tensor:
        with autocast(self.device, self.dtype, cache_enabled=cache):
            loss = F.cross_entropy(self.runner(x), y, label_smoothing=self.cfg.label_smoothing)
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
        return self._step(x, y)


class StaticStep(EagerStep):
    """The step on static buffers: each batch is copied into input and label buffers of its batch size,
    the learning rate lives in one device tensor per parameter group (AdamW reads it there), and autocast
    runs without its cast cache. On CUDA the whole step is captured once per batch size into a
    `torch.cuda.CUDAGraph` and replayed (the last, smaller batch of an epoch gets its own graph, so every
    image is seen); elsewhere the same code runs eagerly, so its logic is tested on any machine."""

    WARMUP = 3  # eager steps on a side stream before a capture (undone before the captured step runs)

    def __init__(self, *args: Any, capture: bool | None = None) -> None:
        super().__init__(*args)
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.graphed = self.capture
        for group in self.optimizer.param_groups:  # a tensor the graph reads; refilled before each replay
            group["lr"] = torch.tensor(float(group["lr"]), device=self.device)
            if self.capture:  # torch refuses to capture an optimizer step unless every group says capturable
                group["capturable"] = True
        self.buffers: dict[int, tuple[Tensor, Tensor, Tensor]] = {}  # batch size -> (x, y, loss)
        self.graphs: dict[int, Any] = {}

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"].fill_(lr * group["lr_scale"])

    def __call__(self, x: Tensor, y: Tensor, lr: float) -> Tensor:
        self.set_lr(lr)
        b = len(y)
        if b not in self.buffers:
            self.buffers[b] = (x.clone(), y.clone(), torch.zeros((), device=self.device))
        bx, by, bloss = self.buffers[b]
        bx.copy_(x)
        by.copy_(y)
        if self.capture and b not in self.graphs:
            try:
                self.graphs[b] = self._capture(bx, by, bloss)  # trains on this batch once, as the eager step does
                return bloss.clone()
            except Exception as err:  # weights and optimizer state are as before the attempt: go on eagerly
                reason = (str(err).strip().splitlines() or [""])[0][:160]
                tqdm.write(f"graphs: capturing the batch-{b} training step failed ({type(err).__name__}: "
                           f"{reason}); eager training step from here")
                self.capture = self.graphed = False
                self.graphs.clear()
        if self.capture:
            self.graphs[b].replay()
        else:
            bloss.copy_(self._step(bx, by, cache=False))
        return bloss.clone()

    def _capture(self, bx: Tensor, by: Tensor, bloss: Tensor) -> Any:
        """Warm up on a side stream (the optimizer's state is allocated there), put weights, buffers and
        optimizer state back in place, capture one step and replay it: the batch is trained on once, as
        by the eager step. If anything fails, weights and optimizer state are put back before raising."""
        model_state = [t.clone() for t in self.model.state_dict().values()]
        optim_state = {id(p): {k: v.clone() for k, v in st.items() if torch.is_tensor(v)}
                       for p, st in self.optimizer.state.items()}
        try:
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(self.WARMUP):
                    self._step(bx, by, cache=False)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            self._put_back(model_state, optim_state)  # the graph will read these very tensors
            graph = torch.cuda.CUDAGraph()
            self.optimizer.zero_grad(set_to_none=True)  # backward allocates the grads in the graph's pool
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # checks only this thread
                bloss.copy_(self._step(bx, by, cache=False))
            graph.replay()
            return graph
        except BaseException:
            self._put_back(model_state, optim_state)
            self.optimizer.zero_grad(set_to_none=True)
            raise

    def _put_back(self, model_state: list[Tensor], optim_state: dict[int, dict[str, Tensor]]) -> None:
        """Copies the saved weights, buffers and optimizer state back in place (state created since: zeros)."""
        with torch.no_grad():
            for t, saved in zip(self.model.state_dict().values(), model_state):
                t.copy_(saved)
            for p, st in self.optimizer.state.items():
                saved = optim_state.get(id(p), {})
                for k, v in st.items():
                    if torch.is_tensor(v):
                        v.copy_(saved[k]) if k in saved else v.zero_()


def training_parts(model: nn.Module, cfg: TrainConfig,
                   device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer, torch.amp.GradScaler]:
    """What a training step of `model` (already on `device`) under `cfg` works with: the module it calls
    (torch.compile'd with cfg.compile), AdamW over its parameter groups (only the head's with
    freeze=all_but_head, whose freezing this applies) and the grad scaler (on for fp16 on CUDA)."""
    runner = torch.compile(model) if cfg.compile else model
    if cfg.freeze == "all_but_head":
        freeze_all_but_head(model)
    optimizer = adamw(param_groups(model, cfg.weight_decay, cfg.layer_decay), cfg.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.resolved_dtype(device) == "fp16" and device.type == "cuda")
    return runner, optimizer, scaler


def make_step(model: nn.Module, runner: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
              cfg: TrainConfig, device: torch.device, dtype: str, graphs: bool) -> EagerStep:
    """On CUDA with `graphs`, the static-buffer step captured into CUDA graphs where it can work (else the
    eager step, with one line saying why); elsewhere the eager step."""
    if not graphs or device.type != "cuda":  # without capture the static buffers only add copies
        return EagerStep(model, runner, optimizer, scaler, cfg, device, dtype)
    why = ("fp16 needs the grad scaler's host-side checks" if scaler.is_enabled() else
           "torch.compile already owns the step" if cfg.compile else
           "AdamW here has no fused kernel to read a tensor learning rate" if not optimizer.defaults.get("fused") else "")
    if why:
        tqdm.write(f"graphs: eager training step ({why})")
        return EagerStep(model, runner, optimizer, scaler, cfg, device, dtype)
    return StaticStep(model, runner, optimizer, scaler, cfg, device, dtype)


@dataclass(frozen=True)
class Checkpointing:
    """Where a run's checkpoint lives and how often it is written: `every` epochs; 0 never; None (auto)
    every epoch once the first epoch projects the run to last longer than AUTO_CHECKPOINT_S."""
    path: Path
    every: int | None = None

    def due(self, epoch: int, epochs: int, seconds_per_epoch: float) -> bool:
        if epoch >= epochs:  # the finished run is recorded instead
            return False
        if self.every is None:
            return seconds_per_epoch * epochs > AUTO_CHECKPOINT_S
        return self.every > 0 and epoch % self.every == 0


def save_checkpoint(path: Path, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
    """Tensors and JSON metadata in one safetensors file, replaced atomically."""
    from safetensors.torch import save

    data = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, metadata={"vitbench": json.dumps(meta)})
    write_atomic(path, data)


def load_checkpoint(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]] | None:
    """(tensors, metadata), or None with a warning for a file that cannot be read (then the run restarts)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata()["vitbench"])
            return {k: f.get_tensor(k) for k in f.keys()}, meta
    except Exception as err:
        tqdm.write(f"checkpoint {path} unreadable ({type(err).__name__}); the run starts from epoch 1")
        return None


def _training_state(model: nn.Module, optimizer: torch.optim.Optimizer,
                    generators: dict[str, torch.Generator]) -> dict[str, Tensor]:
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        tensors.update({f"optim.{index}.{k}": v for k, v in state.items() if torch.is_tensor(v)})
    tensors.update({f"rng.{name}": g.get_state() for name, g in generators.items()})
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    return tensors


def _restore(tensors: dict[str, Tensor], meta: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer,
             scaler: torch.amp.GradScaler, generators: dict[str, torch.Generator]) -> None:
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    if meta.get("scaler"):
        scaler.load_state_dict(meta["scaler"])
    for name, g in generators.items():
        g.set_state(tensors[f"rng.{name}"])
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])


@torch.no_grad()
def evaluate(model: nn.Module, data: Dataset, device: torch.device, dtype: str, batch_size: int,
             on_device: tuple[Tensor, Tensor] | None = None) -> tuple[float, float, Tensor]:
    """Test loss, test accuracy, and the predicted class of every test image (on the CPU). `on_device`:
    the test images and labels already on `device` (training copies them once, not once per epoch: a
    blocking copy waits for the device)."""
    model.eval()
    total_loss, preds = torch.zeros((), device=device), []
    test_x, test_y = on_device or (data.test_x.to(device), data.test_y.to(device))
    for i in range(0, len(test_y), batch_size):
        x, y = data.normalize(test_x[i:i + batch_size]), test_y[i:i + batch_size]
        with autocast(device, dtype):
            logits = model(x)
        total_loss += F.cross_entropy(logits.float(), y, reduction="sum")
        preds.append(logits.argmax(-1))
    pred = torch.cat(preds).cpu()  # one transfer, and one read of the loss, per evaluation
    n = len(data.test_y)
    return total_loss.item() / n, (pred == data.test_y).sum().item() / n, pred


def train(model: nn.Module, data: Dataset, cfg: TrainConfig, seed: int, device: torch.device,
          progress: bool = True, checkpoint: Checkpointing | None = None, graphs: bool = True) -> TrainResult:
    """Train `model` (initialised by the caller under `seed`) on `data`; evaluate every epoch. With
    `checkpoint`, resume from its file when there is one and write it as `checkpoint` says. `graphs`:
    the static-buffer step (`StaticStep`: one CUDA graph per batch size on CUDA), else the eager one."""
    dtype = cfg.resolved_dtype(device)
    model = model.to(device)
    runner, optimizer, scaler = training_parts(model, cfg, device)
    generators = {"order": torch.Generator().manual_seed(seed), "augment": torch.Generator().manual_seed(seed + 1)}
    order_gen, aug_gen = generators["order"], generators["augment"]
    train_x, train_y = data.train_x.to(device), data.train_y.to(device)
    test_on_device = data.test_x.to(device), data.test_y.to(device)
    n = len(train_y)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total_steps = cfg.epochs * steps_per_epoch
    warmup_steps = max(1, round(cfg.warmup_epochs * steps_per_epoch))
    history: list[dict[str, float]] = []
    best_acc, step, train_time, images_seen, first = 0.0, 0, 0.0, 0, 1
    # what a checkpoint must match to be resumed: the recipe, the data, the seed and the model's parameters
    identity = {"seed": seed, "train": cfg.to_dict(), "n_train": n,
                "params": {k: list(v.shape) for k, v in model.state_dict().items()}}
    reader, util_time = reader_for(device), [0.0, 0.0]  # Σ util × epoch seconds, Σ seconds (this process)
    saved = load_checkpoint(checkpoint.path) if checkpoint and checkpoint.path.exists() else None
    if saved and saved[1].get("identity") != identity:
        tqdm.write(f"checkpoint {checkpoint.path} is not this run's (another model, recipe or data); the run "
                   f"starts from epoch 1", file=sys.stderr)
    elif saved and saved[1]["epoch"] < cfg.epochs:
        tensors, meta = saved
        fresh = {k: v.clone() for k, v in model.state_dict().items()}
        try:
            _restore(tensors, meta, model, optimizer, scaler, generators)
        except Exception as err:  # a damaged or foreign state: back to the untouched start
            model.load_state_dict(fresh)
            runner, optimizer, scaler = training_parts(model, cfg, device)
            generators = {"order": torch.Generator().manual_seed(seed),
                          "augment": torch.Generator().manual_seed(seed + 1)}
            order_gen, aug_gen = generators["order"], generators["augment"]
            tqdm.write(f"checkpoint {checkpoint.path} could not be restored ({type(err).__name__}); the run starts "
                       f"from epoch 1", file=sys.stderr)
        else:
            history, step, train_time = meta["history"], meta["step"], meta["train_time_s"]
            first = meta["epoch"] + 1
            images_seen, best_acc = meta["epoch"] * n, max(h["test_acc"] for h in history)
            tqdm.write(f"resumed from {checkpoint.path.name} after epoch {meta['epoch']} of {cfg.epochs}")
    train_step = make_step(model, runner, optimizer, scaler, cfg, device, dtype, graphs)
    epochs = tqdm(range(first, cfg.epochs + 1), desc="epochs", unit="ep", leave=False, disable=not progress)
    for epoch in epochs:
        train_mode(model, cfg)
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=order_gen).to(device)
        draws = data.draw_augmentation([len(b) for b in order.split(cfg.batch_size)], aug_gen, device)
        loss_sum = torch.zeros((), device=device)
        with UtilSampler(reader) as sampler:
            for k, i in enumerate(range(0, n, cfg.batch_size)):
                idx = order[i:i + cfg.batch_size]
                x = data.normalize(data.apply_augmentation(train_x[idx], draws[k]))
                lr = lr_at(step, total_steps, warmup_steps, cfg.lr)
                loss_sum += train_step(x, train_y[idx], lr)
                step += 1
            train_loss = loss_sum.item() / n  # the epoch's one read of the training loss (it waits for the device)
        epoch_time = time.perf_counter() - t0
        train_time += epoch_time
        util = sampler.summary().get("util_pct")
        if util is not None:
            util_time[0] += util * epoch_time
            util_time[1] += epoch_time
        if not math.isfinite(train_loss):
            raise Diverged(f"loss became {train_loss} in epoch {epoch} (steps {step - steps_per_epoch + 1}–{step}, "
                           f"lr {lr:.3g} at the last)")
        images_seen += n
        test_loss, test_acc, test_preds = evaluate(runner, data, device, dtype, cfg.eval_batch_size, test_on_device)
        best_acc = max(best_acc, test_acc)
        record = {"epoch": epoch, "lr": lr, "train_loss": train_loss, "test_loss": test_loss,
                  "test_acc": test_acc, "elapsed_s": train_time}
        history.append(record)
        epochs.set_postfix(loss=f"{train_loss:.3f}", acc=f"{test_acc:.4f}")
        if checkpoint and checkpoint.due(epoch, cfg.epochs, train_time / (epoch - first + 1)):
            save_checkpoint(checkpoint.path, _training_state(model, optimizer, generators),
                            {"identity": identity, "epoch": epoch, "step": step, "train_time_s": train_time,
                             "history": history, "param_groups": [  # as the eager step keeps them
                                 {k: float(v) if torch.is_tensor(v) else v for k, v in g.items() if k != "capturable"}
                                 for g in optimizer.state_dict()["param_groups"]],
                             "scaler": scaler.state_dict() if scaler.is_enabled() else {}})
    last = history[-1]
    return TrainResult(last["train_loss"], last["test_loss"], last["test_acc"], best_acc, train_time,
                       images_seen / train_time, history, test_preds, resumed_after=first - 1,
                       train_util_pct=util_time[0] / util_time[1] if util_time[1] else None)
