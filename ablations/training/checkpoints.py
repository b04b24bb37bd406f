"""A run's checkpoint: at the end of an epoch the model, the optimizer, the grad scaler, every random
generator and the run's history go to one safetensors file (tensors, with JSON metadata), replaced
atomically. `Checkpointing` says where it lives and when it is due; `training_state` and `restore`
turn a run's state into the file's tensors and back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from ablations.choices import AUTO_CHECKPOINT_S
from bench.io.atomic import write_atomic


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


def saved_epoch(path: Path) -> int | None:
    """The last finished epoch a checkpoint holds (read from its metadata alone), or None where there is none
    or it cannot be read."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return int(json.loads(f.metadata()["vitbench"])["epoch"])
    except Exception:
        return None


def saved_param_groups(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The optimizer's hyperparameters as a checkpoint's metadata keeps them (JSON: tensors as floats, without
    the CUDA-graph `capturable` flag, which the eager step that resumes does not set)."""
    return [{k: float(v) if torch.is_tensor(v) else v for k, v in g.items() if k != "capturable"}
            for g in optimizer.state_dict()["param_groups"]]


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer,
                    generators: dict[str, torch.Generator]) -> dict[str, Tensor]:
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        tensors.update({f"optim.{index}.{k}": v for k, v in state.items() if torch.is_tensor(v)})
    tensors.update({f"rng.{name}": g.get_state() for name, g in generators.items()})
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    return tensors


def restore(tensors: dict[str, Tensor], meta: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer,
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

