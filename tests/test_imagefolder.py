"""Users' own images: an image folder (train/ and val/ of class folders, any format Pillow reads) trains
above chance, its bad inputs are one line naming what is wrong, and IMG_SIZE shows any dataset to a model
at another side (a 224 px checkpoint fine-tuned on 32 px images)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_sweep
from PIL import Image

from ablations.commands import data_id
from ablations.cost import CostPlan
from ablations.data import cached_dataset, load_dataset
from ablations.schema import read_table
from ablations.specs import Point
from ablations.store import SweepPaths
from ablations.tasks import RunOptions
from ablations.train import train
from bench.recipe import TrainConfig
from vit import PRESETS, VisionTransformer, ViTConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))
    cached_dataset.cache_clear()


def stripes(kind: str, size: tuple[int, int], rng) -> Image.Image:
    """Horizontal or vertical stripes of a random period and colour, with noise: a task a small model learns."""
    w, h = size
    period = int(rng.integers(3, 6))
    axis = np.arange(h)[:, None] if kind == "horizontal" else np.arange(w)[None, :]
    pattern = ((axis // period) % 2).astype(float) * np.ones((h, w))
    colour = rng.uniform(0.4, 1.0, 3)
    pixels = pattern[..., None] * colour + rng.normal(0, 0.08, (h, w, 3))
    return Image.fromarray((np.clip(pixels, 0, 1) * 255).astype(np.uint8))


def write_folder(root: Path, per_class=(120, 40), split="val") -> Path:
    rng = np.random.default_rng(0)
    for name, count in (("train", per_class[0]), (split, per_class[1])):
        for kind in ("horizontal", "vertical"):
            folder = root / name / kind
            folder.mkdir(parents=True)
            for i in range(count):
                image = stripes(kind, (int(rng.integers(20, 48)), int(rng.integers(20, 48))), rng)
                image.save(folder / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root


def test_an_image_folder_trains_above_chance(tmp_path):
    root = write_folder(tmp_path / "images")
    data = load_dataset("imagefolder", root, img_size=16)
    assert data.train_x.shape == (240, 3, 16, 16) and data.test_x.shape == (80, 3, 16, 16) and data.num_classes == 2
    assert sorted(set(data.test_y.tolist())) == [0, 1] and all(0.0 < s for s in data.std)
    again = load_dataset("imagefolder", root, img_size=16)  # from the parsed-array cache
    assert torch.equal(again.train_x, data.train_x) and list((tmp_path / "cache" / "datasets").glob("imagefolder16-*"))
    model = ViTConfig(img_size=16, patch_size=4, in_chans=3, num_classes=2, embed_dim=32, depth=1, num_heads=2,
                      mlp_ratio=2.0)
    options = RunOptions(dataset="imagefolder", data_root=str(root), out=str(tmp_path / "out"), seeds=(0,),
                         progress=False, cost=CostPlan(rounds=0), img_size=16, data_id=data_id("imagefolder", str(root), 16))
    run_sweep("own", [Point("own", "depth", 1, model, TrainConfig(epochs=8, batch_size=32, lr=3e-3))], options)
    row = read_table(SweepPaths.of(tmp_path / "out", "own").rows).iloc[0]
    assert row["status"] == "ok" and row["test_acc"] > 0.8, row["test_acc"]  # chance: 0.5
    assert row["data_id"].startswith("files:") and row["data_id"].endswith("resized:16")


@pytest.mark.parametrize("damage, message", [
    (lambda root: (root / "val" / "vertical").rename(root / "val" / "diagonal"),
     "class 'diagonal' is in .*val only"),
    (lambda root: [f.unlink() for f in (root / "train" / "vertical").iterdir()], r"train/vertical holds no image"),
    (lambda root: (root / "train" / "horizontal" / "3.png").write_bytes(b"not a png"),
     r"train/horizontal/3\.png: not an image Pillow can read"),
    (lambda root: [(root / "val").rename(root / "elsewhere")], "needs train/ and val/ \\(or test/\\) folders"),
])
def test_a_bad_image_folder_is_one_line_naming_what_is_wrong(tmp_path, damage, message, capsys):
    from ablations.__main__ import main

    root = write_folder(tmp_path / "images", per_class=(4, 2))
    damage(root)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_dataset("imagefolder", root)
    status = main(["sweep", "depth", "--dataset", "imagefolder", "--data-root", str(root), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]


def test_a_test_folder_serves_as_the_evaluation_split(tmp_path):
    data = load_dataset("imagefolder", write_folder(tmp_path / "images", per_class=(6, 3), split="test"))
    assert data.train_x.shape[2:] == (32, 32) and len(data.test_y) == 6  # stored at 32 px by default


def test_img_size_fine_tunes_a_224_px_checkpoint_on_32_px_images(tmp_path):
    """A timm ViT-Ti/16 checkpoint (224 px) fine-tuned on synthetic 32 px images shown to it at 224 px."""
    import timm

    checkpoint = tmp_path / "vit_tiny.pth"
    torch.manual_seed(0)
    torch.save(timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=1000).state_dict(), checkpoint)
    data = load_dataset("synthetic", img_size=224)
    assert data.train_x.shape[-1] == 32 and data.img_size == 224
    data = dataclasses.replace(data, train_x=data.train_x[:48], train_y=data.train_y[:48], test_x=data.test_x[:16],
                               test_y=data.test_y[:16])
    from vit import init_from_checkpoint

    model = VisionTransformer(PRESETS["vit_tiny_patch16_224"].replace(num_classes=data.num_classes))
    init_from_checkpoint(model, checkpoint, log=lambda message: None)
    start = model.blocks[0].attn.qkv.weight.detach().clone()
    seen = []
    model.patch_embed.register_forward_pre_hook(lambda module, args: seen.append(tuple(args[0].shape[-2:])))
    result = train(model, data, TrainConfig(epochs=1, batch_size=24, lr=1e-4, warmup_epochs=0.5), 0,
                   torch.device("cpu"), progress=False)
    assert set(seen) == {(224, 224)} and np.isfinite(result.train_loss) and len(result.test_preds) == 16
    assert not torch.equal(model.blocks[0].attn.qkv.weight, start)  # the checkpoint's weights were trained


def test_img_size_enters_run_ids_only_when_given():
    assert data_id("mnist5k", "data", None) == "" and data_id("mnist5k", "data", 224) == "resized:224"
