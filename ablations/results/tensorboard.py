"""TENSORBOARD=1: one TensorBoard event folder per run, `<out>/tensorboard/<sweep>/<setting>,seed=<seed>,<run_id>/`
(e.g. `pool=cls,seed=0,2750c29b5aca`, the name TensorBoard's legend shows), written by the
driver from the run's recorded epochs once it finishes (so it needs no shared filesystem with Ray): per
epoch the training loss, test loss and accuracy, validation loss and accuracy where there is a split, and
the learning rate; the run's model and recipe as hyperparameters with its final metrics. Needs the
`tensorboard` package (an optional extra)."""

from __future__ import annotations

import dataclasses
import re
import shutil
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


def sweep_folder(out: str | Path, sweep: str) -> Path:
    """Where a sweep's runs' event folders live: `<out>/tensorboard/<sweep>/`."""
    return Path(out) / "tensorboard" / sweep


def folder(out: str | Path, sweep: str, run_id: str, label: str = "", seed: Any = None) -> Path:
    """The run's event folder: named by its setting and seed, then its run id (which alone keeps it unique)."""
    name = ",".join(p for p in (label.replace(", ", ","), "" if seed is None else f"seed={seed}", run_id) if p)
    return sweep_folder(out, sweep) / re.sub(r"[^A-Za-z0-9=.,_+-]", "", name)


def written(out: str | Path, sweep: str, run_id: str) -> list[Path]:
    """The run's event folders already there, whatever setting they were named by."""
    root = sweep_folder(out, sweep)
    return [p for p in root.glob(f"*{run_id}") if p.is_dir() and (p.name == run_id or p.name.endswith(f",{run_id}"))]


def _plain(value: Any) -> Any:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value if isinstance(value, (int, float, str, bool)) else str(value)


def write_run(out: str | Path, row: dict[str, Any], history: list[dict[str, Any]], label: str = "") -> Path:
    """The run's event folder (replaced if a rerun writes it again). `label`: its setting ("pool='cls'")."""
    from torch.utils.tensorboard import SummaryWriter

    for old in written(out, str(row["sweep"]), str(row["run_id"])):
        shutil.rmtree(old, ignore_errors=True)
    where = folder(out, str(row["sweep"]), str(row["run_id"]), label, row.get("seed"))
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
