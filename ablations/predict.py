"""Use a trained run: rebuild its model, classify images, and draw where its classifier looks.

    python -m ablations predict digit.png other.jpg --run 3f2a9c            # a run of a sweep under OUT
    python -m ablations predict cat.jpg --weights vit_small.pth --preset vit_small_patch16_224

`load_run` rebuilds a finished run's model from its row (every `ViTConfig` field is a column) and its
weights (`weights/<sweep>/<run_id>.pt`); `load_weights` builds a preset and loads a timm ViT checkpoint
or a vitbench state dict into it, as INIT does. Each image is read with Pillow, converted to the
model's channels, resized to its `img_size` and normalised with the run's dataset statistics (ImageNet's
for a checkpoint with no dataset). `predict` prints the top-5 classes with their softmax probabilities;
`attention_figure` overlays what the pooled token attends to (the CLS token, or the patch mean with
pool=avg), per layer averaged over heads and rolled out over the layers, on each image with one shared
colour scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vit import POOLINGS, PRESETS, ViTConfig, VisionTransformer, init_from_checkpoint

from . import figures as figs
from .schema import read_table

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TOP = 5


@dataclass
class Loaded:
    model: VisionTransformer
    name: str                       # how tables and figures name it
    mean: tuple[float, ...]
    std: tuple[float, ...]


def find_run(out: Path, run_id: str) -> tuple[str, pd.Series]:
    """(sweep, row) of the one finished run under `out` whose run_id is or starts with `run_id`; ValueError
    naming the id when none or several match."""
    if len(run_id) < 4:
        raise ValueError(f"--run {run_id!r}: give at least 4 characters of a run_id")
    found: dict[str, tuple[str, pd.Series]] = {}
    for csv in sorted((Path(out) / "ablations").glob("*.csv")):
        if csv.stem.endswith(("-history", "-cost")):
            continue
        table = read_table(csv)
        if table.empty or not {"run_id", "status"} <= set(table.columns):
            continue
        ok = table[(table["status"] == "ok") & table["run_id"].astype(str).str.startswith(run_id)]
        for _, row in ok.iterrows():
            weights = Path(out) / "ablations" / "weights" / csv.stem / f"{row['run_id']}.pt"
            if row["run_id"] not in found or weights.exists():  # a run reused in several sweeps: one with weights
                found[str(row["run_id"])] = (csv.stem, row)
    if not found:
        raise ValueError(f"--run {run_id}: no finished run with that id under {Path(out) / 'ablations'} "
                         f"(the run_id column of a sweep's table)")
    if len(found) > 1:
        raise ValueError(f"--run {run_id}: matches {len(found)} runs ({', '.join(sorted(found)[:5])}"
                         f"{' …' if len(found) > 5 else ''}); give more characters")
    return next(iter(found.values()))


def load_run(out: Path, run_id: str, data_root: str | Path = "data") -> Loaded:
    """The finished run's model with its trained weights, and its dataset's normalisation."""
    sweep, row = find_run(out, run_id)
    path = Path(out) / "ablations" / "weights" / sweep / f"{row['run_id']}.pt"
    if not path.exists():
        raise ValueError(f"run {row['run_id']}: no weights at {path} (rerun its sweep to write them)")
    model = VisionTransformer(ViTConfig.from_row(row))
    try:
        model.load_state_dict(torch.load(path, weights_only=True))
    except Exception as err:
        raise ValueError(f"{path}: not this run's weights ({type(err).__name__})") from None
    mean, std = _statistics(str(row["dataset"]), data_root)
    factor = f"{sweep} sweep, seed {row['seed']}"
    return Loaded(model.eval(), f"{row['run_id']} ({factor}, {row['dataset']}, test acc "
                                f"{100 * float(row['test_acc']):.2f} %)", mean, std)


def load_weights(weights: Path, preset: str, dataset: str | None = None, data_root: str | Path = "data") -> Loaded:
    """A preset with a checkpoint loaded into it: a vitbench state dict as saved, else a timm ViT checkpoint
    (adapted as INIT adapts it: grid and head)."""
    if preset not in PRESETS:
        raise ValueError(f"--preset {preset!r} is unknown; choose one of {sorted(PRESETS)}")
    if not Path(weights).is_file():
        raise ValueError(f"--weights {weights}: no such file")
    model = VisionTransformer(PRESETS[preset])
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
        own = isinstance(state, dict) and set(state) == set(model.state_dict())
    except Exception:
        own = False
    if own:
        model.load_state_dict(state)
    else:
        init_from_checkpoint(model, weights, log=lambda message: None)
    mean, std = _statistics(dataset, data_root) if dataset else (IMAGENET_MEAN[:model.cfg.in_chans],
                                                                  IMAGENET_STD[:model.cfg.in_chans])
    return Loaded(model.eval(), f"{Path(weights).name} in {preset}", mean, std)


def _statistics(dataset: str, data_root: str | Path) -> tuple[tuple[float, ...], tuple[float, ...]]:
    from .data import cached_dataset

    data = cached_dataset(dataset, str(data_root))
    return tuple(data.mean), tuple(data.std)


def read_images(paths: list[Path], cfg: ViTConfig) -> torch.Tensor:
    """(n, C, H, W) in [0, 1]: each image in the model's channels, resized to its img_size."""
    from PIL import Image, UnidentifiedImageError

    images = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such image file")
        try:
            with Image.open(path) as image:
                image = image.convert("L" if cfg.in_chans == 1 else "RGB")
                image = image.resize((cfg.img_size, cfg.img_size), Image.Resampling.BILINEAR)
                array = np.asarray(image, dtype=np.float32) / 255.0
        except (UnidentifiedImageError, OSError) as err:
            raise ValueError(f"{path}: not an image Pillow can read ({type(err).__name__})") from None
        tensor = torch.from_numpy(array)
        images.append(tensor[None] if tensor.ndim == 2 else tensor.permute(2, 0, 1))
    return torch.stack(images)


def normalise(images: torch.Tensor, loaded: Loaded) -> torch.Tensor:
    mean = torch.tensor(loaded.mean).view(1, -1, 1, 1)
    std = torch.tensor(loaded.std).view(1, -1, 1, 1)
    return (images - mean) / std


@torch.no_grad()
def predict(loaded: Loaded, images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(softmax probabilities (n, classes), attention probabilities of each block (n, H, T, T))."""
    logits, attns = loaded.model(normalise(images, loaded), return_attn=True)
    return logits.float().softmax(-1), attns


def top_table(paths: list[Path], probs: torch.Tensor, k: int = TOP) -> pd.DataFrame:
    """One row per image and rank: the class and its probability."""
    values, classes = probs.topk(min(k, probs.shape[1]), dim=1)
    return pd.DataFrame([{"image": Path(p).name, "rank": r + 1, "class": int(classes[i, r]),
                          "probability": float(values[i, r])}
                         for i, p in enumerate(paths) for r in range(values.shape[1])])


def attention_figure(loaded: Loaded, images: torch.Tensor, attns: list[torch.Tensor], probs: torch.Tensor,
                     labels: list[str], path: Path) -> Path:
    """Each image under the pooled token's attention over its patches: per layer (mean over heads) and
    rolled out over the layers, on one colour scale with one colour bar."""
    cfg = loaded.model.cfg
    query, g, n = POOLINGS[cfg.pool].query, cfg.grid_size, len(images)
    maps = [query(a.mean(1)).reshape(n, g, g) for a in attns] + [query(figs.rollout(attns)).reshape(n, g, g)]
    titles = [f"layer {i + 1}" for i in range(len(attns))] + ["rollout"]
    top = max(float(m.max()) for m in maps)
    cols = len(maps) + 1
    fig, axes = figs.subplots(n, cols, figsize=(1.9 * cols + 0.8, 2.1 * n + 0.6), squeeze=False)
    extent = (0, cfg.img_size, cfg.img_size, 0)
    shown = None
    for i in range(n):
        picture = images[i].permute(1, 2, 0).numpy()
        picture = picture[..., 0] if picture.shape[-1] == 1 else picture
        cls, p = int(probs[i].argmax()), float(probs[i].max())
        axes[i, 0].imshow(picture, cmap="gray", extent=extent)
        axes[i, 0].set_xlabel(f"{labels[i]}\nclass {cls} ({100 * p:.1f} %)", fontsize=9)
        for j, m in enumerate(maps):
            ax = axes[i, j + 1]
            ax.imshow(picture, cmap="gray", extent=extent)
            shown = ax.imshow(m[i].numpy(), cmap="magma", alpha=0.65, vmin=0.0, vmax=top, extent=extent,
                              interpolation="nearest")
            if i == 0:
                ax.set_title(titles[j], fontsize=10)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(shown, ax=axes, fraction=0.025, pad=0.02, label="attention (share of the row)")
    who = POOLINGS[cfg.pool].reader
    fig.suptitle(f"{who} attention over the patches: run {loaded.name}", fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
