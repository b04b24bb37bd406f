"""Users' own images: an image folder (train/ and val/ of class folders, any format Pillow reads) trains
above chance, its bad inputs are one line naming what is wrong, and IMG_SIZE shows any dataset to a model
at another side (a 224 px checkpoint fine-tuned on 32 px images)."""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_sweep
from PIL import Image

from ablations.cli.prepare import data_id
from ablations.results.schema import read_table
from ablations.results.store import SweepPaths
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions
from ablations.specs import Point
from ablations.training.data import cached_dataset, load_dataset
from ablations.training.train import train
from bench.training.recipe import TrainConfig
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
    (lambda root: [(root / "val").rename(root / "elsewhere")], "images needs train/ and val/ \\(or test/\\) folders"),
    (lambda root: root.rename(root.with_name("moved")), "images: no such folder; it needs train/ and val/"),
    (lambda root: [shutil.rmtree(root), root.write_text("")], "images: not a folder; it needs train/ and val/"),
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


def test_a_folder_is_refused_before_any_image_is_read_where_its_points_or_the_free_memory_refuse(tmp_path, monkeypatch,
                                                                                                   capsys):
    """Reading a folder of photographs is the long part: a preset with no base model at IMG_SIZE is refused from the
    folder's listing, and images that would not fit in the memory free now are refused with what they would take."""
    from ablations.__main__ import main
    from ablations.training import data

    def read_square(*_, **__):
        raise AssertionError("an image was read")

    root = write_folder(tmp_path / "images", per_class=(4, 2))
    monkeypatch.setattr(data, "read_square", read_square)
    common = ["--dataset", "imagefolder", "--data-root", str(root), "--out", str(tmp_path / "o"), "--dry-run"]
    assert main(["sweep", "depth", "--img-size", "30", *common]) == 2
    assert "[model] preset=auto has no base model for 30 px images" in capsys.readouterr().err
    assert data.imagefolder_shape(root, 64) == data.FolderShape(64, 3, 2, 12)
    monkeypatch.setattr(data, "available_memory", lambda: 2**20)   # 12 images × 3 × 64² × 11 bytes: 1.5 MiB
    assert 12 * 3 * 51 ** 2 * data.READ_BYTES_PER_VALUE <= 2**20 < 12 * 3 * 52 ** 2 * data.READ_BYTES_PER_VALUE
    assert main(["train", "--preset", "vit_tiny_patch16_224", "--img-size", "64", *common]) == 2
    assert capsys.readouterr().err == ("error: imagefolder: reading 12 images at 64 px takes about 1.5 MiB of memory, "
                                       "and 1.0 MiB is free; IMG_SIZE (--img-size) 51 or less fits them\n")
    monkeypatch.setattr(data, "available_memory", lambda: 100)
    assert main(["train", "--preset", "vit_tiny_patch16_224", "--img-size", "64", *common]) == 2
    assert capsys.readouterr().err.endswith("and 100 B is free; fewer images, or a machine with more memory, would\n")


def test_a_test_folder_serves_as_the_evaluation_split(tmp_path):
    data = load_dataset("imagefolder", write_folder(tmp_path / "images", per_class=(6, 3), split="test"))
    assert data.train_x.shape[2:] == (32, 32) and len(data.test_y) == 6  # stored at 32 px by default


@pytest.mark.slow
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


def test_img_size_enters_run_ids_only_when_it_resizes(tmp_path, capsys):
    assert data_id("mnist5k", "data", None) == "" and data_id("mnist5k", "data", 224) == "resized:224"
    assert data_id("mnist5k", "data", 28, native=28) == ""          # the data's own side: no resize, no new id
    root = write_folder(tmp_path / "images")
    assert data_id("imagefolder", str(root), 32) == data_id("imagefolder", str(root), None)   # the default side
    assert data_id("imagefolder", str(root), 16).endswith("resized:16")
    from ablations.__main__ import main

    ids = []
    for size in ([], ["--img-size", "8"]):     # digits are 8 px: IMG_SIZE=8 is the same runs
        capsys.readouterr()
        assert main(["train", "--dataset", "digits", "--seeds", "0", "--epochs", "1", "--dry-run", *size]) == 0
        ids.append([line.split()[-2] for line in capsys.readouterr().out.splitlines() if line.strip().endswith(("yes", "no"))])
    assert ids[0] and ids[0] == ids[1]


# --- images read at their true brightness, folders told apart by their contents ----------------------

@pytest.mark.parametrize("kind", ["8-bit grey", "16-bit grey", "palette", "RGBA", "float"])
def test_images_are_read_at_their_true_brightness(kind, tmp_path):
    from ablations.training.data import read_square

    rng = np.random.default_rng(3)
    levels = rng.integers(0, 256, (6, 6)).astype(np.uint8)           # the brightness every kind encodes
    if kind == "8-bit grey":
        image = Image.fromarray(levels, mode="L")
    elif kind == "16-bit grey":
        image = Image.fromarray(levels.astype(np.uint16) * 257)       # 0..65535: mode I;16
        assert image.mode == "I;16"
    elif kind == "palette":
        image = Image.fromarray(levels, mode="L").convert("P")
    elif kind == "RGBA":
        image = Image.fromarray(np.dstack([levels] * 3 + [np.full_like(levels, 40)]), mode="RGBA")
    else:
        image = Image.fromarray(levels.astype(np.float32) / 255, mode="F")
    path = tmp_path / f"x.{'tiff' if kind == 'float' else 'png'}"
    image.save(path)
    with Image.open(path) as reopened:   # what numpy reads from the file, scaled from its own range
        raw = np.asarray(reopened.convert("RGB") if reopened.mode in ("P", "RGBA") else reopened, dtype=np.float64)
        top = 65535 if reopened.mode.startswith("I") else 1.0 if reopened.mode == "F" else 255
    truth = (raw[..., 0] if raw.ndim == 3 else raw) / top
    got = read_square(path, 6, "L")[0] / 255.0
    assert np.abs(got - truth).max() <= 1 / 255 + 1e-9, kind
    assert got.std() > 0.1                                            # not clipped to one white square


def test_a_16_bit_image_is_not_white_in_predict_or_an_image_folder(tmp_path):
    from ablations.analysis.predict import read_images

    path = tmp_path / "grey.png"
    Image.fromarray(np.full((8, 8), 30000, dtype=np.uint16)).save(path)
    seen = read_images([path], PRESETS["vit_digits"])
    assert seen.shape == (1, 1, 8, 8) and seen.max() == pytest.approx(30000 / 65535, abs=1 / 255)


def test_a_decompression_bomb_is_one_line(tmp_path):
    import struct
    import zlib

    from ablations.training.data import read_square

    path = tmp_path / "bomb.png"     # a PNG whose header claims 20000 × 20000 pixels (Pillow checks at open)
    Image.new("L", (8, 8)).save(path)
    data = bytearray(path.read_bytes())
    ihdr = data.index(b"IHDR")
    data[ihdr + 4:ihdr + 12] = struct.pack(">II", 20000, 20000)
    data[ihdr + 17:ihdr + 21] = struct.pack(">I", zlib.crc32(bytes(data[ihdr:ihdr + 17])))
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bomb.png: more pixels than Pillow reads safely"):
        read_square(path, 8)


def test_predict_crops_a_wide_photo_as_an_image_folder_does(tmp_path):
    from ablations.analysis.predict import read_images
    from ablations.training.data import read_square

    wide = np.zeros((30, 60, 3), dtype=np.uint8)
    wide[:, :4] = 255                                                 # a bar at the left edge, outside the centre crop
    Image.fromarray(wide).save(tmp_path / "wide.png")
    cfg = PRESETS["vit_cifar"]
    seen = read_images([tmp_path / "wide.png"], cfg)[0]
    stored = read_square(tmp_path / "wide.png", cfg.img_size)
    assert torch.equal(seen, torch.from_numpy(stored.astype(np.float32) / 255))
    assert seen.max() == 0                                            # cropped away, not squashed in


def test_two_folders_with_equal_names_and_sizes_but_other_contents_get_other_run_ids_and_caches(tmp_path):
    a = tmp_path / "a"
    for split in ("train", "val"):
        for label, value in (("dark", 20), ("light", 220)):
            (a / split / label).mkdir(parents=True)
            for i in range(3):
                Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(a / split / label / f"{i}.bmp")
    b = tmp_path / "b"
    import shutil

    shutil.copytree(a, b)
    for i in range(3):   # b: the training images of the two classes swapped (same names, same byte sizes)
        dark, light = b / "train" / "dark" / f"{i}.bmp", b / "train" / "light" / f"{i}.bmp"
        dark_bytes, light_bytes = dark.read_bytes(), light.read_bytes()
        dark.write_bytes(light_bytes)
        light.write_bytes(dark_bytes)
    assert data_id("imagefolder", str(a), None) != data_id("imagefolder", str(b), None)
    assert not torch.equal(load_dataset("imagefolder", a, img_size=8).train_x, load_dataset("imagefolder", b, img_size=8).train_x)


def test_a_symlinked_class_folder_enters_the_identity_and_the_cache(tmp_path):
    elsewhere = tmp_path / "cats"
    elsewhere.mkdir()
    root = tmp_path / "images"
    for split in ("train", "val"):
        (root / split / "dog").mkdir(parents=True)
        Image.fromarray(np.full((8, 8), 200, dtype=np.uint8)).save(root / split / "dog" / "0.png")
    (root / "val" / "cat").mkdir()
    Image.fromarray(np.full((8, 8), 10, dtype=np.uint8)).save(root / "val" / "cat" / "0.png")
    (root / "train" / "cat").symlink_to(elsewhere, target_is_directory=True)
    for i in range(6):
        Image.fromarray(np.full((8, 8), 10 + i, dtype=np.uint8)).save(elsewhere / f"{i}.png")
    before = data_id("imagefolder", str(root), None)
    assert len(load_dataset("imagefolder", root, img_size=8).train_y) == 7
    Image.fromarray(np.full((8, 8), 50, dtype=np.uint8)).save(elsewhere / "6.png")   # added through the link
    assert data_id("imagefolder", str(root), None) != before
    assert len(load_dataset("imagefolder", root, img_size=8).train_y) == 8            # the cache saw it
    (elsewhere / "loop").symlink_to(elsewhere, target_is_directory=True)                # a link loop ends
    assert data_id("imagefolder", str(root), None)


def test_predict_on_an_image_folder_run_needs_no_folder_its_normalisation_is_in_the_row(tmp_path, capsys):
    import shutil

    from ablations.__main__ import main
    from ablations.analysis.predict import load_run

    root = write_folder(tmp_path / "images", per_class=(6, 2))
    expected = load_dataset("imagefolder", root)
    first = root / "train" / expected.classes[0]
    (first / "notes.txt").write_text("not an image\n")      # not read, and said so
    (first / "more").mkdir()
    spec = tmp_path / "f.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [1]\n[model]\npreset = "vit_cifar"\nembed_dim = 16\n'
                    'num_heads = 2\n[train]\nepochs = 1\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--dataset", "imagefolder", "--data-root", str(root), "--seeds", "0",
                 "--out", str(out), "--cost-rounds", "0"]) == 0
    said = capsys.readouterr().err   # what was loaded, in one line
    assert (f"imagefolder {root}: {len(expected.train_y)} training and {len(expected.test_y)} test images, "
            f"{len(expected.classes)} classes ({', '.join(expected.classes)}), read at 32 px; 2 other entries in the "
            f"class folders not read (not an image by its suffix, or a folder): train/{expected.classes[0]}/more, "
            f"train/{expected.classes[0]}/notes.txt") in said
    run_id = str(read_table(SweepPaths.of(out, "f").rows)["run_id"].iloc[0])
    shutil.rmtree(root)
    loaded = load_run(out, run_id, data_root=root)
    assert loaded.mean == pytest.approx(expected.mean, rel=1e-5) and loaded.std == pytest.approx(expected.std, rel=1e-5)


def test_the_data_id_and_cache_cover_exactly_the_files_the_loader_reads(tmp_path):
    import os
    import shutil

    root = write_folder(tmp_path / "images", per_class=(6, 3))
    victim = root / "train" / "horizontal" / "extra.bmp"          # uncompressed: other pixels, same byte size
    Image.fromarray(np.full((32, 32, 3), 30, dtype=np.uint8)).save(victim)
    before = data_id("imagefolder", str(root), None)
    (root / ".DS_Store").write_bytes(b"\0\1")                    # files the loader never reads
    (root / "train" / "README.txt").write_text("my images\n")
    (root / "train" / "horizontal" / "Thumbs.db").write_bytes(b"x")
    (root / "test" / "x").mkdir(parents=True)                    # an unused split beside val/
    (root / "out" / "ablations").mkdir(parents=True)             # an OUT inside DATA_ROOT, with a run's outputs
    (root / "out" / "ablations" / "depth.csv").write_text("run_id\nabc\n")
    assert data_id("imagefolder", str(root), None) == before
    # another image of the same size and timestamps, copied in place (cp -p): another id and another cache
    data = load_dataset("imagefolder", root)
    other = tmp_path / "other.bmp"
    Image.fromarray(np.full((32, 32, 3), 230, dtype=np.uint8)).save(other)
    assert other.stat().st_size == victim.stat().st_size
    stat = victim.stat()
    shutil.copyfile(other, victim)
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert data_id("imagefolder", str(root), None) != before
    assert not torch.equal(load_dataset("imagefolder", root).train_x, data.train_x)


def test_a_worker_that_reads_a_changed_folder_refuses_instead_of_training_on_other_images(tmp_path):
    """The command reads the folder and names its runs by it; a worker that reads it later, after a file was
    replaced in place, must not train under the old name."""
    from ablations.running.tasks import RunOptions
    from ablations.running.worker import load_data
    from ablations.training.data import cached_dataset

    root = write_folder(tmp_path / "images", per_class=(6, 3))
    cached_dataset.cache_clear()
    data = cached_dataset("imagefolder", str(root))
    ident = data_id("imagefolder", str(root), None, digest=data.digest)
    assert ident == data_id("imagefolder", str(root), None)           # the bytes parsed are the bytes named
    options = RunOptions(dataset="imagefolder", data_root=str(root), data_id=ident)
    assert torch.equal(load_data(options).train_x, data.train_x)     # unchanged: the same data
    victim = sorted((root / "train" / "vertical").glob("*.png"))[0]
    Image.fromarray(np.zeros((20, 20, 3), dtype=np.uint8)).save(victim)   # replaced in place
    cached_dataset.cache_clear()                                       # a worker: a process of its own
    with pytest.raises(ValueError, match="changed after this command read them"):
        load_data(options)
    cached_dataset.cache_clear()
