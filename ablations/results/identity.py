"""What identifies a run and an experiment: hashes (`bench.env.run_id`) of what defines them. A run id
is what a resumed, reused or migrated row is found by; an experiment id is what a sweep's rows share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ablations.choices import AUGMENTATION, default_augmentation
from ablations.specs import Point
from bench.env import run_id

if TYPE_CHECKING:
    import torch


def task_key(point: Point, dataset: str, seed: int, init_id: str = "", data_id: str = "",
             device: torch.device | None = None) -> dict[str, Any]:
    """What defines a run: the model, the training recipe (with the precision it trains in on `device`: DTYPE
    auto is bf16 on CUDA and fp32 on a CPU, two trainings), the data, the seed and the starting weights. An
    augmentation field set to what the dataset does anyway (`choices.default_augmentation`) is the default:
    it names no other run."""
    train = (point.train.resolved_on(device) if device is not None else point.train).identity()
    if dataset in (*AUGMENTATION, "imagefolder"):
        for name, value in default_augmentation(dataset, point.model.img_size).items():
            if name in train and train[name] == value and type(train[name]) is type(value):
                del train[name]
    key = {"model": point.model.identity(), "train": train, "dataset": dataset, "seed": seed}
    return {**key, **({"init": init_id} if init_id else {}), **({"data": data_id} if data_id else {})}


def experiment_id(point: Point, dataset: str, init_id: str = "", data_id: str = "",
                  device: torch.device | None = None) -> str:
    """What a sweep's runs share: the task key without the seed and without the fields the sweep varies
    (its factors and tuned fields). Two rows of one table with different ids come from different
    experiments (other epochs, recipe, dataset or base model) and are never pooled."""
    key = task_key(point, dataset, 0, init_id, data_id, device)
    del key["seed"]
    varied = set(point.fields)
    for part in ("model", "train"):
        key[part] = {k: v for k, v in key[part].items() if k not in varied}
    return run_id({**key, "factor": point.factor})
