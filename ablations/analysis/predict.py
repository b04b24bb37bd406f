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

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ablations.analysis import figures as figs
from ablations.results.schema import recorded_normalisation
from ablations.results.store import SweepPaths, Tables
from vit import POOLINGS, PRESETS, VisionTransformer, ViTConfig, init_from_checkpoint

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TOP = 5


@dataclass
class Loaded:
    model: VisionTransformer
    name: str                       # how tables and figures name it
    mean: tuple[float, ...]
    std: tuple[float, ...]
    classes: tuple[str, ...] = ()   # the name of each class index (empty: shown as indices)
    note: str = ""                  # one line to show the user (why classes are indices)

    def class_name(self, index: int) -> str:
        return self.classes[index] if index < len(self.classes) else str(index)


def find_run(out: Path, run_id: str) -> tuple[str, pd.Series]:
    """(sweep, row) of the one finished run under `out` whose run_id is or starts with `run_id`; ValueError
    naming the id when none or several match."""
    if len(run_id) < 4:
        raise ValueError(f"--run {run_id!r}: give at least 4 characters of a run_id")
    found: dict[str, tuple[str, pd.Series]] = {}
    read = Tables(out)
    for sweep in read.names():
        paths = read.paths(sweep)
        ok = read.ok(sweep)
        if "run_id" not in ok:
            continue
        for _, row in ok[ok["run_id"].astype(str).str.startswith(run_id)].iterrows():
            if row["run_id"] not in found or paths.weights_file(row["run_id"]).exists():  # reused: one with weights
                found[str(row["run_id"])] = (sweep, row)
    if not found:
        raise ValueError(f"--run {run_id}: no finished run with that id under {Path(out) / 'ablations'} "
                         f"(the run_id column of a sweep's table)")
    if len(found) > 1:
        raise ValueError(f"--run {run_id}: matches {len(found)} runs ({', '.join(sorted(found)[:5])}"
                         f"{' …' if len(found) > 5 else ''}); give more characters")
    return next(iter(found.values()))


def _explicit(out: Path, sweep: str) -> set[str]:
    """The training fields a sweep set itself ([train], factors, tuned fields), from its spec where it is
    found; a row records the augmentation as it ran, the dataset's own included."""
    from ablations.specs import SPEC_DIR, SpecError, load_spec

    for path in (SweepPaths.of(out, sweep).spec, SPEC_DIR / f"{sweep}.toml"):
        if path.exists():
            try:
                spec = load_spec(path, check_files=False)
            except SpecError:
                continue
            return set(spec.train_overrides) | set(spec.varied)
    return set()


def retrain_command(row: pd.Series, out: Path, sweep: str = "") -> str:
    """The `python -m ablations train` line that trains this run again into `out` (same model, recipe,
    dataset and seed, so the same run_id), writing its weights where predict finds them."""
    import dataclasses
    import shlex

    from ablations.specs import DATASET_FIELDS
    from bench.training.recipe import TrainConfig

    model, recipe = ViTConfig.from_row(row), TrainConfig.from_row(row)
    set_here = _explicit(out, sweep)
    recipe = dataclasses.replace(recipe, **{k: None for k in ("crop_padding", "flip") if k not in set_here})
    sets = [f"{f.name}={getattr(model, f.name)}" for f in dataclasses.fields(ViTConfig) if f.name not in DATASET_FIELDS]
    sets += [f"{f.name}={getattr(recipe, f.name)}" for f in dataclasses.fields(TrainConfig)
             if getattr(recipe, f.name) != f.default]
    resized = [p.split(":", 1)[1] for p in str(row.get("data_id") or "").split(",") if p.startswith("resized:")]
    parts = ["python -m ablations train", "--dataset", str(row["dataset"]), "--seeds", str(int(row["seed"])),
             "--out", shlex.quote(str(out)), *(["--img-size", resized[0]] if resized else []),
             *(f"--set {shlex.quote(item)}" for item in sets)]
    return " ".join(parts)


def load_run(out: Path, run_id: str, data_root: str | Path = "data") -> Loaded:
    """The finished run's model with its trained weights, and its dataset's normalisation."""
    sweep, row = find_run(out, run_id)
    path = SweepPaths.of(out, sweep).weights_file(str(row["run_id"]))
    again = (f"train it again with the same settings (same run_id; add DATA_ROOT or INIT as it had them): "
             f"{retrain_command(row, out, sweep)}")
    if not path.exists():
        raise ValueError(f"run {row['run_id']}: no weights at {path} (removed, or a folder that keeps none); {again}")
    model = VisionTransformer(ViTConfig.from_row(row))
    try:
        model.load_state_dict(torch.load(path, weights_only=True))
    except Exception as err:
        raise ValueError(f"{path}: not this run's weights, or damaged ({type(err).__name__}); delete it and "
                         f"{again}") from None
    mean, std = recorded_normalisation(row) or _statistics(str(row["dataset"]), data_root)
    factor = ", ".join(t for t in (f"{sweep} sweep", _setting(SweepPaths.of(out, sweep).spec, row),
                                   f"seed {row['seed']}") if t)
    classes, note = _row_classes(row, model.cfg.num_classes)
    unsettled = _not_converged(out, sweep, row, model.cfg.num_classes)
    return Loaded(model.eval(), f"{row['run_id']} ({factor}, {row['dataset']}, test acc "
                                f"{100 * float(row['test_acc']):.2f} %)", mean, std, classes,
                  "\n".join(t for t in (note, unsettled) if t))


def _setting(spec_copy: Path, row: pd.Series) -> str:
    """The run's setting of what its sweep varies ('pos=sincos2d'), read off the spec copied beside its table; ''
    where there is none (`train`'s runs, an older folder) or it cannot be read."""
    from ablations.specs import load_spec

    try:
        factors = load_spec(spec_copy, check_files=False).factors if spec_copy.exists() else ()
    except ValueError:
        return ""
    return ", ".join(f"{f}={row[f]}" for f in factors if f in row and row[f] == row[f])


def _not_converged(out: Path, sweep: str, row: pd.Series, classes: int) -> str:
    """One line where the run had not converged by the report's rule (`budget.still_learning`), else ''."""
    from ablations.analysis.budget import still_learning

    read = Tables(out)
    history = read.history(sweep) if read.paths(sweep).history.exists() else pd.DataFrame()
    check = still_learning(history, pd.DataFrame([row]).assign(run=row["run_id"]), "run", classes)
    if check.converged:
        return ""
    u = check.settings[0]
    why = (f"its test accuracy rose {100 * u.gain:.1f} points over its last epoch" if u.gain is not None else
           f"its training loss ended at {u.loss:.2f}, far from fitting its training set")
    return (f"note: run {row['run_id']} had not converged ({why}): its predictions are a short budget's; train it "
            f"longer (EPOCHS) for what the model can do")


def _row_classes(row: pd.Series, num_classes: int) -> tuple[tuple[str, ...], str]:
    """The run's class names from its row, or none and the one line that says why."""
    text = row.get("class_names")
    try:
        names = json.loads(text) if isinstance(text, str) and text.strip() else None
    except json.JSONDecodeError:
        names = None
    if isinstance(names, list) and len(names) == num_classes and all(isinstance(n, str) for n in names):
        return tuple(names), ""
    why = ("records no class names (trained before runs kept them)" if names is None
           else "has class names that do not fit its model")
    return (), f"note: run {row['run_id']} {why}: its classes are shown as indices 0–{num_classes - 1}"


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
    """The dataset's normalisation: the published figures of a torchvision dataset (its files are not
    needed), else the loaded dataset's (an image folder's are computed from its training images)."""
    from ablations.training.data import cached_dataset, published_statistics

    known = published_statistics(dataset)
    if known is not None:
        return known
    data = cached_dataset(dataset, str(data_root))
    return tuple(data.mean), tuple(data.std)


def image_files(names: list[str | Path]) -> list[Path]:
    """The images named: a file as given; a folder as every file under it (its subfolders too, an image folder's
    classes) whose suffix Pillow reads, in sorted order. ValueError naming a path that is neither, or a folder
    with no image in it."""
    from PIL import Image

    readable = {suffix.lower() for suffix in Image.registered_extensions()}
    files: list[Path] = []
    for name in map(Path, names):
        if name.is_dir():
            found = sorted(f for f in name.rglob("*") if f.is_file() and f.suffix.lower() in readable)
            if not found:
                raise ValueError(f"{name}: a folder with no image files in it (nor in its subfolders)")
            files += found
        elif name.is_file():
            files.append(name)
        else:
            raise ValueError(f"{name}: no such image file or folder")
    return files


def read_images(paths: list[Path], cfg: ViTConfig) -> torch.Tensor:
    """(n, C, H, W) in [0, 1]: each image in the model's channels, read as an image folder's images are
    (`data.read_square`: true brightness, shorter side resized to img_size, centre-cropped)."""
    from ablations.training.data import read_square

    images = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such image file")
        array = read_square(Path(path), cfg.img_size, "L" if cfg.in_chans == 1 else "RGB")
        images.append(torch.from_numpy(array.astype(np.float32) / 255.0))
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


FIGURE_IMAGES = 12   # rows of the attention figure: more would make it too tall to read


def image_labels(paths: list[Path]) -> list[str]:
    """Each image's file name, with as many of its folders as tell it apart from other files of the same name
    (train/one/0.png and train/two/0.png are one/0.png and two/0.png; a file given twice is one file)."""
    parts = [Path(p).parts for p in paths]
    distinct = list(dict.fromkeys(parts))

    def label(q: tuple[str, ...]) -> str:
        for depth in range(1, len(q)):
            if not any(o != q and o[-depth:] == q[-depth:] for o in distinct):
                return "/".join(q[-depth:])
        return str(Path(*q))

    return [label(q) for q in parts]


def top_table(paths: list[Path], probs: torch.Tensor, k: int = TOP, names: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per image and rank: the class (and its name where `names` has one that is not the index
    itself) and its probability."""
    values, classes = probs.topk(min(k, probs.shape[1]), dim=1)
    names = names if any(n != str(i) for i, n in enumerate(names)) else ()
    return pd.DataFrame([{"image": label, "rank": r + 1, "class": int(classes[i, r]),
                          **({"name": names[int(classes[i, r])]} if names else {}),
                          "probability": float(values[i, r])}
                         for i, label in enumerate(image_labels(paths)) for r in range(values.shape[1])])


def attention_figure(loaded: Loaded, images: torch.Tensor, attns: list[torch.Tensor], probs: torch.Tensor,
                     labels: list[str], path: Path) -> Path:
    """The first `FIGURE_IMAGES` images under the pooled token's attention over their patches: per layer (mean
    over heads) and rolled out over the layers (`figures.attention_grid`)."""
    cfg = loaded.model.cfg
    n = min(len(images), FIGURE_IMAGES)
    images, attns, probs, labels = images[:n], [a[:n] for a in attns], probs[:n], labels[:n]
    query, g = POOLINGS[cfg.pool].query, cfg.grid_size
    maps = [query(a.mean(1)).reshape(n, g, g) for a in attns] + [query(figs.rollout(attns)).reshape(n, g, g)]
    titles = [f"layer {i + 1}" for i in range(len(attns))] + ["rollout"]
    title = f"{POOLINGS[cfg.pool].reader} attention over the patches: run {loaded.name}"
    return figs.attention_grid(images, maps, titles, probs, labels, title, path, loaded.class_name)
