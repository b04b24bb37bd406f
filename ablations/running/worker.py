"""What one run does, on whichever machine runs it: build the model under its seed, train it (resuming
from its checkpoint), and return its row, epoch rows, weights and test predictions as a `RunResult`.
A failure of the run itself (divergence, out of memory, an exception) becomes a row with its status;
only a failure of the results disk is raised, so that the sweep stops and keeps what is done."""

from __future__ import annotations

import errno
import io
import json
import threading
import traceback
from typing import Any

import torch
from tqdm import tqdm

from ablations.results.store import SweepPaths, save_preds
from ablations.running.tasks import RunOptions, RunResult, Task, base_row
from ablations.training.checkpoints import Checkpointing, saved_epoch
from ablations.training.data import Dataset, augmentation, cached_dataset
from ablations.training.packed import Member, narrower_pack, train_pack
from ablations.training.train import Diverged, Stopped, train
from bench.env import resolve_device, set_cudnn_attention
from bench.failures import classify_failure
from bench.flops import closed_form_size
from bench.mfu import Peak, matmul_peak, mfu
from bench.utilisation import thread_cores
from vit import VisionTransformer, init_from_checkpoint

DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
# torch's global generator seeds a model's initial weights: runs that share a process (`executors.threads`)
# seed and build their models one at a time, so each draws exactly what it draws alone
BUILD_LOCK = threading.Lock()


def load_data(options: RunOptions) -> Dataset:
    """A task's dataset, loaded once per process. An image folder must hold what the command's runs are
    named by (`files:` of their data_id): a worker that reads it after it changed refuses, rather than train
    runs on other images than their ids and rows say."""
    data = cached_dataset(options.dataset, options.data_root, options.download, options.img_size)
    named = next((p[len("files:"):] for p in (options.data_id or "").split(",") if p.startswith("files:")), "")
    if named and data.digest and not data.digest.startswith(named):
        raise ValueError(f"imagefolder: the files under {options.data_root} changed after this command read them "
                         f"(files:{named} → files:{data.digest[:12]}): its runs would train on other images than "
                         f"their run ids name; rerun the command once the folder is left as it is")
    return data


def _first_row(task: Task, data: Dataset, device: torch.device) -> dict[str, Any]:
    """A run's row before it trains: who it is, where, and the data it sees."""
    point = task.point
    return {**base_row(task, device), "torch_threads": torch.get_num_threads(),
            "util_cores": thread_cores() if device.type == "cpu" else None, **augmentation(data, point.train),
            "norm_mean": " ".join(f"{m:.6g}" for m in data.mean), "norm_std": " ".join(f"{s:.6g}" for s in data.std),
            "class_names": json.dumps(list(data.classes)) if data.classes else None}


def _build(task: Task) -> VisionTransformer:
    """The run's model, initialised under its seed (and from INIT where given)."""
    with BUILD_LOCK:
        torch.manual_seed(task.seed)
        model = VisionTransformer(task.point.model)
        if task.options.init:
            init_from_checkpoint(model, task.options.init, log=tqdm.write)
    return model


def _checkpointing(task: Task) -> Checkpointing:
    return Checkpointing(SweepPaths.of(task.options.out, task.point.sweep).checkpoint(task.run_id),
                         task.options.checkpoint_every)


def _finished(task: Task, model: VisionTransformer, row: dict[str, Any], result, data: Dataset,
              device: torch.device) -> RunResult:
    """The outcome of a run that trained to its end: its row with the results, history, weights, predictions."""
    history = [{"run_id": task.run_id, **h} for h in result.history]
    row.update(result.row())
    peak = task.peak or peak_or_none(device, row["dtype"])
    if peak is not None:
        row.update(train_mfu=mfu(row["gflops"], result.train_throughput_img_s, "train", peak.flops),
                   **peak.columns())
    row.update(task.cost)
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    row.update(status="ok", error="")
    return RunResult(row, history, buffer.getvalue(), save_preds(result.test_preds.numpy(), data.test_y.numpy()))


def _failed(row: dict[str, Any], err: BaseException) -> None:
    """Record a run's own failure in its row (a divergence, out of memory, an exception); a failure of the
    results disk or a stop is raised."""
    if isinstance(err, Stopped) or (isinstance(err, OSError) and err.errno in DISK_ERRORS):
        raise err
    if isinstance(err, Diverged):
        row.update(status="diverged", error=str(err))
        return
    row.update(status=classify_failure(err), error=f"{type(err).__name__}: {err}"[:500])
    traceback.print_exception(err)


def execute(task: Task, data: Dataset) -> RunResult:
    """Train one run (or a pack of runs: `execute_pack`) on `data`; never raises for a failure of the run
    itself."""
    if task.members:
        return execute_pack(task, data)
    options = task.options
    device = resolve_device(options.device)
    set_cudnn_attention(options.cudnn_attention)   # a worker process's own flag (threads share the driver's)
    row = _first_row(task, data, device)
    try:
        model = _build(task)
        row.update(closed_form_size(model, task.point.model))
        result = train(model, data, task.point.train, task.seed, device, progress=options.progress,
                       checkpoint=_checkpointing(task), graphs=options.graphs, evaluation=options.evaluation,
                       name=f"{task.point.label} seed={task.seed}")
        return _finished(task, model, row, result, data, device)
    except Exception as err:
        _failed(row, err)
    return RunResult(row, [])


def execute_pack(pack: Task, data: Dataset) -> RunResult:
    """Train a pack's members as one stacked model (`training.packed`): each member's outcome as a run alone
    would give it, a diverged member's with its status; a failure of the pack itself is every member's."""
    options = pack.options
    device = resolve_device(options.device)
    set_cudnn_attention(options.cudnn_attention)
    rows = [_first_row(task, data, device) for task in pack.members]
    try:
        models = [_build(task) for task in pack.members]
        for row, model in zip(rows, models):
            row.update(closed_form_size(model, pack.point.model))
        results = _in_step([Member(model, task.seed, _checkpointing(task)) for task, model in zip(pack.members, models)],
                           data, pack, device)
    except Exception as err:
        for row in rows:
            _failed(row, err)
        return RunResult({}, members=[RunResult(row) for row in rows])
    outcomes = []
    for task, model, row, result in zip(pack.members, models, rows, results):
        if isinstance(result, Diverged):
            _failed(row, result)
            outcomes.append(RunResult(row))
        else:
            outcomes.append(_finished(task, model, row, result, data, device))
    return RunResult({}, members=outcomes)


def _in_step(members: list[Member], data: Dataset, pack: Task, device: torch.device) -> list:
    """Each member's result, the members trained as packs of those whose checkpoints stand at the same epoch
    (none: epoch 0), so a run that had gone on before keeps its progress beside fresh ones; a member's figures do
    not depend on its companions, so the grouping changes no result."""
    groups: dict[int, list[int]] = {}
    for i, member in enumerate(members):
        path = member.checkpoint.path if member.checkpoint else None
        groups.setdefault((saved_epoch(path) or 0) if path is not None and path.exists() else 0, []).append(i)
    results: list = [None] * len(members)
    for indices in groups.values():
        for i, result in zip(indices, _fitting([members[i] for i in indices], data, pack, device)):
            results[i] = result
    return results


_FITS: dict[tuple, int] = {}   # (model, recipe, device) → the widest pack that fitted in memory in this process


def _fitting(members: list[Member], data: Dataset, pack: Task, device: torch.device) -> list:
    """`train_pack` of the members, split in halves (each half in turn) where a pack runs out of device memory;
    the width that fitted is remembered for the packs of the same model that follow, and said once. A member's
    figures do not depend on its pack's width where its recipe pins none (`pack_width` 0), so a split changes no
    result; where one is pinned (CUDA), a pack that does not fit is an out-of-memory failure of its members that
    names the PACK that would fit."""
    key = (pack.point.model, pack.point.train, str(device))
    widest = _FITS.get(key, len(members))
    if len(members) > widest:
        return [r for i in range(0, len(members), widest) for r in _fitting(members[i:i + widest], data, pack, device)]
    try:
        return train_pack(members, data, pack.point.train, device, progress=pack.options.progress,
                          graphs=pack.options.graphs,
                          name=f"{pack.point.label} seeds={','.join(str(m.seed) for m in members)}")
    except torch.cuda.OutOfMemoryError as err:   # torch.OutOfMemoryError since torch 2.5, this name since 1.13
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if pinned := pack.point.train.pack_width:
            raise torch.cuda.OutOfMemoryError(
                f"a pack {pinned} wide did not fit in {device} memory, and a member's figures depend on its pack's "
                f"width there, so it is not split; set PACK={narrower_pack(pinned)}") from err
        if len(members) == 1:
            raise
        half = -(-len(members) // 2)
        _FITS[key] = min(_FITS.get(key, half), half)
        tqdm.write(f"a pack of {len(members)} runs of {pack.point.label} did not fit in device memory; its packs "
                   f"train at most {half} wide from here (the same figures at any width)")
        return _fitting(members, data, pack, device)


def peak_or_none(device: torch.device, dtype: str) -> Peak | None:
    """The device's matmul peak for the MFU columns, or None where none can be measured (they stay blank)."""
    try:
        return matmul_peak(device, dtype)
    except Exception:
        return None
