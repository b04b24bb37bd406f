"""TENSORBOARD=1: one TensorBoard event folder per run, `<out>/tensorboard/<sweep>/<run_id>/`, written by the
driver from the run's recorded epochs once it finishes (so it needs no shared filesystem with Ray): per
epoch the training loss, test loss and accuracy, validation loss and accuracy where there is a split, and
the learning rate; the run's model and recipe as hyperparameters with its final metrics. Needs the
`tensorboard` package (an optional extra)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench.training.recipe import TrainConfig
from vit import ViTConfig

SCALARS = {"train_loss": "loss/train", "test_loss": "loss/test", "val_loss": "loss/val", "test_acc": "accuracy/test",
           "val_acc": "accuracy/val", "lr": "lr"}
HPARAMS = ([f.name for f in dataclasses.fields(ViTConfig)] + [f.name for f in dataclasses.fields(TrainConfig)]
           + ["dataset", "seed", "sweep"])
METRICS = ("test_acc", "val_acc", "train_time_s", "gmacs")
INSTALL = "TENSORBOARD=1 needs the tensorboard package: make install EXTRAS=test,tensorboard (or pip install tensorboard)"


def available() -> str:
    """"" where the package imports, else the one-line reason."""
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except Exception:
        return INSTALL
    return ""


def folder(out: str | Path, sweep: str, run_id: str) -> Path:
    return Path(out) / "tensorboard" / sweep / run_id


def _plain(value: Any) -> Any:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value if isinstance(value, (int, float, str, bool)) else str(value)


def write_run(out: str | Path, row: dict[str, Any], history: list[dict[str, Any]]) -> Path:
    """The run's event folder (replaced if a rerun writes it again)."""
    import shutil

    from torch.utils.tensorboard import SummaryWriter

    where = folder(out, str(row["sweep"]), str(row["run_id"]))
    shutil.rmtree(where, ignore_errors=True)
    with SummaryWriter(log_dir=str(where)) as writer:
        for epoch in history:
            for column, tag in SCALARS.items():
                value = _plain(epoch.get(column))
                if value is not None:
                    writer.add_scalar(tag, float(value), int(epoch["epoch"]))
        hparams = {k: v for k, v in ((k, _plain(row.get(k))) for k in HPARAMS) if v is not None}
        metrics = {f"final/{k}": float(v) for k, v in ((k, _plain(row.get(k))) for k in METRICS) if v is not None}
        if metrics:
            writer.add_hparams(hparams, metrics, run_name=".")
    return where
