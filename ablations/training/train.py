"""The trainer: AdamW, linear warm-up then cosine, label smoothing, gradient clipping, autocast.

Seeded and reproducible on CPU: the seed fixes the initial weights, the batch order and the
augmentation (one generator each); the same seed on the same machine gives the same accuracy.

No host synchronisation per step: the loss is summed on the device and read once per epoch, when a
non-finite epoch loss stops the run with `Diverged` naming the epoch. The learning rate is computed on
the host from the step count.

Checkpoints (`ablations.training.checkpoints`): `train` given an existing checkpoint of the same run resumes
after its epoch, and on the CPU ends with the same weights as a run that was never interrupted. The
step itself (AdamW, clipping, autocast, the CUDA-graph variant) is `bench.training.step`'s, so the cost phase
and `bench` time the very step the runs train with.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from ablations.training.checkpoints import (
    Checkpointing,
    load_checkpoint,
    restore,
    save_checkpoint,
    saved_param_groups,
    training_state,
)
from ablations.training.data import Dataset, recipe_data
from ablations.training.evaluation import evaluator
from bench.training.recipe import TrainConfig
from bench.training.step import make_step, train_mode, training_parts
from bench.utilisation import UtilSampler, reader_for


class Diverged(RuntimeError):
    """The loss became NaN or infinite."""


class Stopped(RuntimeError):
    """The run was asked to stop (its executor is stopping): nothing of it is recorded, its last checkpoint stays."""


Evaluation = Callable[[], tuple[float, float, Tensor]]   # an image set's loss, accuracy and predictions, now

# Set in the environment of a worker process that shares its device with other processes: its run never has
# the device alone, so its own utilisation figure would be theirs too.
SHARED_DEVICE_ENV = "VITBENCH_SHARED_DEVICE"


class Occupancy:
    """The runs in flight in this process (`executors.threads`), so that a run knows whether it had the device
    alone: its per-run utilisation is kept only then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self.started = 0

    @contextlib.contextmanager
    def run(self):
        with self._lock:
            self.in_flight += 1
            self.started += 1
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def mark(self) -> tuple[int, int]:
        return self.in_flight, self.started

    def alone_since(self, mark: tuple[int, int]) -> bool:
        """Whether the run that took `mark` has been the only one in flight since (and was then)."""
        return mark[0] <= 1 and self.in_flight <= 1 and self.started == mark[1]


@dataclass(frozen=True)
class EpochTick:
    """A run's progress after `n` of its `total` epochs, sent by a worker process to the driver, which draws it."""
    desc: str
    n: int
    total: int
    postfix: str


class _Context(threading.local):
    """What the thread that runs a training knows of its neighbours: a stop event and the process's occupancy
    (both None for a run alone in its process), and where its epochs' progress goes instead of a bar of its own
    (`relay`: a worker process sends it to its driver, so that one process draws every bar)."""
    stop: threading.Event | None = None
    occupancy: Occupancy | None = None
    relay: Callable[[EpochTick], None] | None = None


CONTEXT = _Context()


@contextlib.contextmanager
def beside_others(stop: threading.Event, occupancy: Occupancy):
    """Within the block, a training run in this thread stops (`Stopped`) once `stop` is set, and counts in
    `occupancy`."""
    CONTEXT.stop, CONTEXT.occupancy = stop, occupancy
    try:
        with occupancy.run():
            yield
    finally:
        CONTEXT.stop = CONTEXT.occupancy = None


class _RelayedEpochs:
    """The iterable and `set_postfix` of a tqdm bar over epochs, reported as `EpochTick`s to `relay`: one as it
    starts, one after each epoch."""

    def __init__(self, epochs: range, desc: str, relay: Callable[[EpochTick], None]) -> None:
        self.epochs, self.desc, self.relay, self.postfix = epochs, desc, relay, ""

    def __iter__(self):
        self.relay(EpochTick(self.desc, 0, len(self.epochs), ""))
        for n, epoch in enumerate(self.epochs, 1):
            yield epoch
            self.relay(EpochTick(self.desc, n, len(self.epochs), self.postfix))

    def set_postfix(self, **values: str) -> None:
        self.postfix = ", ".join(f"{key}={value}" for key, value in sorted(values.items()))   # as tqdm writes it


def epoch_bar(epochs: range, desc: str, progress: bool, name: str = ""):
    """A run's progress over `epochs`, named `name: desc`: ticks to CONTEXT.relay where one is set (the driver
    draws them), else a tqdm bar in this process on a terminal only (in a log, a bar nested under the sweep's
    writes a line and a cursor-up at every update; the sweep's bar says which runs ended)."""
    desc = f"{name}: {desc}" if name else desc
    if progress and CONTEXT.relay is not None:
        return _RelayedEpochs(epochs, desc, CONTEXT.relay)
    return tqdm(epochs, desc=desc, unit="ep", leave=False, disable=not (progress and sys.stderr.isatty()))


def check_stop() -> None:
    if CONTEXT.stop is not None and CONTEXT.stop.is_set():
        raise Stopped("the executor is stopping")


_ON_DEVICE: collections.OrderedDict[tuple, tuple[Tensor, Tensor]] = collections.OrderedDict()
_ON_DEVICE_LOCK = threading.Lock()
ON_DEVICE_KEPT = 8  # device copies of dataset tensors kept for the runs of this process


def on_device(t: Tensor, device: torch.device) -> Tensor:
    """`t` on `device`, copied once per process for every run that trains on it (the runs of one process
    share their dataset's device copy); on CUDA the copy is marked as used on the caller's stream, so
    the allocator never hands its memory to another use while that stream may still read it."""
    if t.device == device or device.type != "cuda":
        return t.to(device)
    key = (id(t), str(device))
    with _ON_DEVICE_LOCK:
        found = _ON_DEVICE.get(key)
        if found is None or found[0] is not t:
            copy = t.to(device)
            torch.cuda.current_stream(device).synchronize()  # whole before any other stream reads it
            found = _ON_DEVICE[key] = (t, copy)
            while len(_ON_DEVICE) > ON_DEVICE_KEPT:
                _ON_DEVICE.popitem(last=False)
        _ON_DEVICE.move_to_end(key)
    found[1].record_stream(torch.cuda.current_stream(device))
    return found[1]


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
    train_size: int | None = None  # images trained on (the training set less a validation split)
    val_size: int | None = None    # images of the validation split (None without one)
    val_loss: float | None = None  # on the validation split after the last epoch
    val_acc: float | None = None

    def row(self) -> dict[str, float]:
        """The result-table columns: the scalars, and the test-set size."""
        scalars = {k: v for k, v in asdict(self).items() if k not in ("history", "test_preds")}
        return {**scalars, "test_size": None if self.test_preds is None else len(self.test_preds)}


def lr_at(step: int, total_steps: int, warmup_steps: int, peak: float) -> float:
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@dataclass
class Done:
    """What a run has done before this call: its epochs, steps, training time and history (none when fresh)."""
    epoch: int = 0
    step: int = 0
    train_time_s: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)


def generators(seed: int) -> dict[str, torch.Generator]:
    """The run's random streams: the batch order, and the augmentation."""
    return {"order": torch.Generator().manual_seed(seed), "augment": torch.Generator().manual_seed(seed + 1)}


def resume(checkpoint: Checkpointing | None, identity: dict, model: nn.Module, cfg: TrainConfig, seed: int,
           device: torch.device) -> tuple[tuple[nn.Module, torch.optim.Optimizer, torch.amp.GradScaler],
                                          dict[str, torch.Generator], Done]:
    """The run's training parts (`training_parts`), generators and what it has done: restored from its
    checkpoint where that is this very run's (`identity`) with epochs still to go, else fresh. A checkpoint
    of another run, or one that cannot be restored, is said in one line and the run starts from epoch 1
    with the model as it was given."""
    parts, streams = training_parts(model, cfg, device), generators(seed)
    saved = load_checkpoint(checkpoint.path) if checkpoint and checkpoint.path.exists() else None
    if saved is None:
        return parts, streams, Done()
    tensors, meta = saved
    if meta.get("identity") != identity:
        tqdm.write(f"checkpoint {checkpoint.path} is not this run's (another model, recipe or data); the run "
                   f"starts from epoch 1", file=sys.stderr)
        return parts, streams, Done()
    if meta["epoch"] >= cfg.epochs:
        return parts, streams, Done()
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        restore(tensors, meta, model, parts[1], parts[2], streams)
    except Exception as err:  # a damaged or foreign state: back to the untouched start
        model.load_state_dict(fresh)
        tqdm.write(f"checkpoint {checkpoint.path} could not be restored ({type(err).__name__}); the run starts "
                   f"from epoch 1", file=sys.stderr)
        return training_parts(model, cfg, device), generators(seed), Done()
    tqdm.write(f"resumed from {checkpoint.path.name} after epoch {meta['epoch']} of {cfg.epochs}")
    return parts, streams, Done(meta["epoch"], meta["step"], meta["train_time_s"], meta["history"])


def run_identity(model: nn.Module, cfg: TrainConfig, seed: int, n: int) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the recipe, the data, the seed and the model's parameters."""
    return {"seed": seed, "train": cfg.identity(), "n_train": n,
            "params": {k: list(v.shape) for k, v in model.state_dict().items()}}


def _check_finite(train_loss: float, epoch: int, step: int, steps_per_epoch: int, lr: float) -> None:
    """Diverged, naming the epoch, its steps and the last learning rate, for a loss that is not finite."""
    if not math.isfinite(train_loss):
        raise Diverged(f"loss became {train_loss} in epoch {epoch} (steps {step - steps_per_epoch + 1}–{step}, "
                       f"lr {lr:.3g} at the last)")


def _add_util(util_time: list[float], sampler: UtilSampler | None, seconds: float) -> None:
    """Add an epoch's busy share, weighted by its seconds, to [Σ util × seconds, Σ seconds] where it was read."""
    util = sampler.summary().get("util_pct") if sampler is not None else None
    if util is not None:
        util_time[0] += util * seconds
        util_time[1] += seconds


def _epoch_record(tests: Evaluation, vals: Evaluation | None, trained: dict[str, Any], elapsed: float
                  ) -> tuple[dict[str, Any], torch.Tensor]:
    """An epoch's history row (`trained`: its epoch, lr and training loss) with the test set's loss and accuracy
    (and the validation split's, where one is held out), and the test predictions."""
    test_loss, test_acc, test_preds = tests()
    record = {**trained, "test_loss": test_loss, "test_acc": test_acc, "elapsed_s": elapsed}
    if vals is not None:
        record["val_loss"], record["val_acc"], _ = vals()
    return record, test_preds


def _save(checkpoint: Checkpointing, model: nn.Module, optimizer, scaler, streams, meta: dict[str, Any]) -> None:
    """The run's checkpoint: its training state and `meta` (identity, epoch, step, time, history), with the
    optimizer's hyperparameters as the eager step keeps them and the loss scaler's state."""
    save_checkpoint(checkpoint.path, training_state(model, optimizer, streams),
                    {**meta, "param_groups": saved_param_groups(optimizer),
                     "scaler": scaler.state_dict() if scaler.is_enabled() else {}})


def _run_util(span: UtilSampler | None, util_time: list[float], occupancy, mark) -> list[float]:
    """[Σ util × seconds, Σ seconds] of the run: blank ([0, 0]) where the device was not the run's alone (the
    figure would hold other runs' work too). A device's sampled utilisation (NVML: one sample per 1/6–1 s) is read
    over the run's whole training (`span`), where its sample periods fit whole; the process's CPU time (exact at
    a region's ends) per epoch (`util_time`)."""
    alone = os.environ.get(SHARED_DEVICE_ENV) != "1" and (mark is None or occupancy.alone_since(mark))
    whole = span.summary().get("util_pct") if span is not None else None
    if not alone:
        return [0.0, 0.0]
    if span is not None:
        return [whole, 1.0] if whole is not None else [0.0, 0.0]
    return util_time


def _evaluations(model: nn.Module, data: Dataset, held_out: tuple[Tensor, Tensor] | None, device: torch.device,
                 dtype: str, cfg: TrainConfig, how: str) -> tuple[Evaluation, Evaluation | None]:
    """The run's evaluations of the test set and of its validation split (None without one), on the device: the
    test set's copy shared by the process's runs (`on_device`), the split's the run's own; eager where the step is
    compiled, else as `how` says (`evaluation.evaluator`)."""
    how = "eager" if cfg.compile else how
    tests = on_device(data.test_x, device), on_device(data.test_y, device)
    vals = (held_out[0].to(device), held_out[1].to(device)) if held_out else None
    return (evaluator(model, data, device, dtype, cfg.eval_batch_size, tests, how),
            evaluator(model, data, device, dtype, cfg.eval_batch_size, vals, how) if vals else None)


def train(model: nn.Module, data: Dataset, cfg: TrainConfig, seed: int, device: torch.device,
          progress: bool = True, checkpoint: Checkpointing | None = None, graphs: bool = True,
          evaluation: str = "eager", name: str = "") -> TrainResult:
    """Train `model` (initialised by the caller under `seed`) on `data`; evaluate every epoch. With
    `checkpoint`, resume from its file when there is one and write it as `checkpoint` says. `graphs`:
    the static-buffer step (`StaticStep`: one CUDA graph per batch size on CUDA), else the eager one.
    `evaluation`: how each epoch's evaluation runs (`evaluation.evaluator`: "eager", or "graphed" on CUDA
    where the step is not compiled), the same figures either way. `name`: the run, as its progress bar names it."""
    dtype = cfg.resolved_dtype(device)
    data, held_out = recipe_data(data, cfg)
    model = model.to(device)
    train_x, train_y = on_device(data.train_x, device), on_device(data.train_y, device)
    n = len(train_y)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total_steps = cfg.epochs * steps_per_epoch
    warmup_steps = max(1, round(cfg.warmup_epochs * steps_per_epoch))
    identity = run_identity(model, cfg, seed, n)
    (compiled, optimizer, scaler), streams, done = resume(checkpoint, identity, model, cfg, seed, device)
    order_gen, aug_gen = streams["order"], streams["augment"]
    history, step, train_time, first = done.history, done.step, done.train_time_s, done.epoch + 1
    images_seen, best_acc = done.epoch * n, max((h["test_acc"] for h in history), default=0.0)
    reader, util_time = reader_for(device), [0.0, 0.0]  # Σ util × epoch seconds, Σ seconds (this process)
    span = UtilSampler(reader) if reader.source != "cpu" else None   # a device's: over the whole run (`_run_util`)
    train_step = make_step(model, compiled, optimizer, scaler, cfg, device, dtype, graphs)
    tests, vals = _evaluations(compiled, data, held_out, device, dtype, cfg, evaluation)
    epochs = epoch_bar(range(first, cfg.epochs + 1), "epochs", progress, name)
    mark = CONTEXT.occupancy.mark() if CONTEXT.occupancy is not None else None
    with span or contextlib.nullcontext():
        for epoch in epochs:
            check_stop()
            train_mode(model, cfg)
            t0 = time.perf_counter()
            order = torch.randperm(n, generator=order_gen).to(device)
            loss_sum = torch.zeros((), device=device)
            with UtilSampler(reader) if span is None else contextlib.nullcontext() as sampler:
                for x, y in data.epoch_batches(train_x, train_y, order, cfg.batch_size, aug_gen):
                    lr = lr_at(step, total_steps, warmup_steps, cfg.lr)
                    loss_sum += train_step(x, y, lr)
                    step += 1
                train_loss = loss_sum.item() / n  # the epoch's one read of the training loss (it waits for the device)
            epoch_time = time.perf_counter() - t0
            train_time += epoch_time
            _add_util(util_time, sampler, epoch_time)
            _check_finite(train_loss, epoch, step, steps_per_epoch, lr)
            images_seen += n
            record, test_preds = _epoch_record(tests, vals, {"epoch": epoch, "lr": lr, "train_loss": train_loss},
                                               train_time)
            best_acc = max(best_acc, record["test_acc"])
            history.append(record)
            epochs.set_postfix(loss=f"{train_loss:.3f}", acc=f"{record['test_acc']:.4f}")
            if checkpoint and checkpoint.due(epoch, cfg.epochs, train_time / (epoch - first + 1)):
                _save(checkpoint, model, optimizer, scaler, streams,
                      {"identity": identity, "epoch": epoch, "step": step, "train_time_s": train_time, "history": history})
    last = history[-1]
    util_time = _run_util(span, util_time, CONTEXT.occupancy, mark)
    return TrainResult(last["train_loss"], last["test_loss"], last["test_acc"], best_acc, train_time,
                       images_seen / train_time, history, test_preds, resumed_after=first - 1,
                       train_util_pct=util_time[0] / util_time[1] if util_time[1] else None, train_size=n,
                       val_size=len(held_out[1]) if held_out else None, val_loss=last.get("val_loss"),
                       val_acc=last.get("val_acc"))
