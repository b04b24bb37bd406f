"""Fine-tuning from timm checkpoints: file formats, grid resampling, head re-init, mismatches,
linear probe and layer-wise lr decay. Checkpoints are small timm ViTs the tests write."""

import pytest
import torch
from helpers import run_sweep
from safetensors.torch import save_file
from timm.layers import resample_abs_pos_embed
from timm.models.vision_transformer import VisionTransformer as TimmViT

from ablations.__main__ import main as ablations_main
from ablations.results.schema import read_table
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions
from ablations.specs import Point
from ablations.training.data import load_dataset
from ablations.training.train import train
from bench.training.recipe import TrainConfig
from bench.training.step import param_groups
from vit import VisionTransformer, ViTConfig, init_from_checkpoint

KW = dict(img_size=16, patch_size=4, in_chans=3, num_classes=10, embed_dim=32, depth=3, num_heads=4, mlp_ratio=2.0)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def timm_model():
    torch.manual_seed(0)
    return TimmViT(**KW).eval()


def save(model, path):
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path)) if path.suffix == ".safetensors" else torch.save(state, path)
    return path


@pytest.mark.parametrize("suffix", [".pth", ".safetensors", ".bin"])
def test_same_size_checkpoint_reproduces_timm_logits(tmp_path, timm_model, suffix):
    path = save(timm_model, tmp_path / f"ckpt{suffix}")
    ours = init_from_checkpoint(VisionTransformer(ViTConfig(**KW)), path, log=lambda m: None).eval()
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        assert (ours(images) - timm_model(images)).abs().max().item() < 1e-5


class _NotWeights:   # an object a weights-only load refuses to unpickle
    pass


def test_a_timm_training_checkpoint_loads_and_an_unsafe_one_is_refused_in_a_few_words(tmp_path, timm_model):
    """timm's train.py saves {'state_dict': …, 'args': argparse.Namespace, …}: its weights load as timm's logits
    say, the Namespace allowed and nothing else. A checkpoint pickling another object is refused naming it,
    without torch's advice to load with weights_only=False."""
    import argparse

    from vit.timm_interop import read_checkpoint

    state = {k: v.contiguous() for k, v in timm_model.state_dict().items()}
    torch.save({"epoch": 3, "arch": "vit", "state_dict": state, "args": argparse.Namespace(lr=0.1)},
               tmp_path / "train.pth")
    ours = init_from_checkpoint(VisionTransformer(ViTConfig(**KW)), tmp_path / "train.pth", log=lambda m: None).eval()
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        assert (ours(images) - timm_model(images)).abs().max().item() < 1e-5
    torch.save({"state_dict": state, "extra": _NotWeights()}, tmp_path / "unsafe.pth")
    with pytest.raises(ValueError) as refused:
        read_checkpoint(tmp_path / "unsafe.pth")
    said = str(refused.value)
    assert said == (f"checkpoint {tmp_path / 'unsafe.pth'}: not a readable .pth file (it pickles a "
                    f"{_NotWeights.__module__}._NotWeights object, which a weights-only load refuses; save the state dict "
                    f"alone); check the file or download it again")
    assert "weights_only" not in said and "\x1b" not in said


def test_larger_image_resamples_positions_and_trains_with_init_recorded(tmp_path, timm_model):
    path = save(timm_model, tmp_path / "ckpt.pth")
    logs = []
    cfg = ViTConfig(**{**KW, "img_size": 32})
    model = init_from_checkpoint(VisionTransformer(cfg), path, log=logs.append)
    expected = resample_abs_pos_embed(timm_model.pos_embed.detach(), [8, 8], num_prefix_tokens=1)
    torch.testing.assert_close(model.pos_embed.weight.detach(), expected)
    assert any("4×4 to a 8×8" in m for m in logs)

    from vit import checkpoint_id

    point = Point("ft", "img_size", 32, cfg, TrainConfig(epochs=1, batch_size=64))
    run_sweep("ft", [point], RunOptions(dataset="synthetic", out=str(tmp_path / "out"), progress=False,
                                        seeds=(0,), cost=CostPlan(rounds=0), init=str(path),
                                        init_id=checkpoint_id(path)))
    row = read_table(tmp_path / "out" / "ablations" / "ft.csv").iloc[0]
    assert row["status"] == "ok" and row["init"].startswith("ckpt.pth:") and len(row["init"]) == 9 + 12


def test_other_width_fails_before_training_naming_key_and_shapes(tmp_path, timm_model, capsys):
    path = save(timm_model, tmp_path / "ckpt.pth")
    with pytest.raises(ValueError, match=r"cls_token.*\(1, 1, 32\).*\(1, 1, 64\)"):
        init_from_checkpoint(VisionTransformer(ViTConfig(**{**KW, "embed_dim": 64})), path, log=lambda m: None)
    with pytest.raises(ValueError, match=r"depth mismatch: checkpoint has 3 blocks.*depth=4"):
        init_from_checkpoint(VisionTransformer(ViTConfig(**{**KW, "depth": 4})), path, log=lambda m: None)
    # through the CLI: exit 2 before any training, nothing written
    assert ablations_main(["train", "--preset", "vit_digits", "--dataset", "synthetic", "--init", str(path),
                           "--out", str(tmp_path / "out")]) == 2
    assert "depth mismatch" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_checkpoint_of_other_input_channels_is_fitted_as_timm_fits_it(tmp_path, timm_model):
    """An RGB checkpoint fine-tuned on greyscale images: its first convolution summed over the channels computes, on
    a grey image, what the RGB model computes on that image in all three channels. In a 4-channel model its channels
    are repeated (R, G, B, R) and scaled by 3/4, so an image's RGB channels with a blank fourth, scaled by 4/3, give
    what the RGB model gives on the image."""
    rgb = save(timm_model, tmp_path / "rgb.pth")
    logs = []
    grey = init_from_checkpoint(VisionTransformer(ViTConfig(**{**KW, "in_chans": 1})), rgb, log=logs.append).eval()
    images = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(grey(images), timm_model(images.expand(-1, 3, -1, -1)), atol=1e-5, rtol=1e-5)
    assert logs == ["init: patch_embed.proj.weight takes 3-channel images, the model 1: summed over its channels "
                    "(timm's adapt_input_conv)"]
    four = init_from_checkpoint(VisionTransformer(ViTConfig(**{**KW, "in_chans": 4})), rgb, log=lambda m: None).eval()
    colour = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        padded = torch.cat([colour, torch.zeros(3, 1, 16, 16)], 1) * 4 / 3
        torch.testing.assert_close(four(padded), timm_model(colour), atol=1e-5, rtol=1e-5)


def test_other_class_count_reinitialises_only_the_head(tmp_path, timm_model):
    path = save(timm_model, tmp_path / "ckpt.pth")
    logs = []
    torch.manual_seed(5)
    model = init_from_checkpoint(VisionTransformer(ViTConfig(**{**KW, "num_classes": 3})), path, log=logs.append)
    source = timm_model.state_dict()
    for name, value in model.state_dict().items():
        if name.startswith("head."):
            assert value.shape[0] == 3
        else:
            assert torch.equal(value, source["pos_embed" if name == "pos_embed.weight" else name]), name
    assert any("head freshly initialised" in m for m in logs)


def test_linear_probe_leaves_everything_but_the_head_unchanged(tmp_path, timm_model):
    path = save(timm_model, tmp_path / "ckpt.pth")
    data = load_dataset("synthetic")
    model = init_from_checkpoint(VisionTransformer(ViTConfig(**{**KW, "img_size": 32})), path, log=lambda m: None)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train(model, data, TrainConfig(epochs=1, batch_size=64, freeze="all_but_head"), 0, torch.device("cpu"),
          progress=False)
    after = model.state_dict()
    for name in before:
        assert torch.equal(before[name], after[name]) != name.startswith("head."), name


def test_linear_probe_with_a_conv_stem_keeps_its_batchnorm_statistics():
    # the patch stem has no BatchNorm, so only a conv stem shows whether frozen modules stay in eval mode
    data = load_dataset("synthetic")
    model = VisionTransformer(ViTConfig(**{**KW, "img_size": 32, "stem": "conv", "pool": "avg"}))
    bn = model.patch_embed.backbone[0].bn
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train(model, data, TrainConfig(epochs=1, batch_size=64, freeze="all_but_head"), 0, torch.device("cpu"),
          progress=False)
    assert int(bn.num_batches_tracked) == 0
    for name, value in model.state_dict().items():
        assert torch.equal(before[name], value) != name.startswith("head."), name
    # without freezing, the same training does move them: the check above can fail
    train(model, data, TrainConfig(epochs=1, batch_size=64), 0, torch.device("cpu"), progress=False)
    assert int(bn.num_batches_tracked) > 0 and not torch.equal(before["patch_embed.backbone.0.bn.running_mean"],
                                                               bn.running_mean)


def test_layer_decay_scales_each_block():
    model = VisionTransformer(ViTConfig(**KW))
    groups = param_groups(model, 0.05, layer_decay=0.5)
    assert all(len(g["layers"]) == 1 for g in groups)   # each layer's scale its own
    scales = {g["layers"][0]: g["lr_scale"] for g in groups}
    assert scales == {0: 0.5**4, 1: 0.5**3, 2: 0.5**2, 3: 0.5, 4: 1.0}
    names = {id(p): n for n, p in model.named_parameters()}
    for g in groups:
        for p in g["params"]:
            n = names[id(p)]
            assert g["layers"] == [0 if n.startswith(("patch_embed", "cls_token", "pos_embed"))
                                   else int(n.split(".")[1]) + 1 if n.startswith("blocks.") else 4]
            assert (g["weight_decay"] == 0.0) == (p.ndim <= 1 or n in ("cls_token", "pos_embed.weight"))
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def _one_group_a_layer(model, weight_decay, stacked=None):
    """The parameters grouped per (layer, decay?), every group at the full learning rate."""
    groups = param_groups(model, weight_decay, layer_decay=0.5, stacked=stacked)
    for group in groups:
        group["lr_scale"] = 1.0
    return groups


@pytest.mark.parametrize("kind", ["fused", "foreach"])
def test_without_layer_decay_adamw_steps_two_groups_with_the_bits_of_one_group_a_layer(kind):
    """Without layer-wise decay the parameters are two groups (decayed or not: one optimizer launch each, not two a
    layer), and AdamW's update is elementwise: training with them gives the weights of one group a layer, bit for
    bit."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    a = VisionTransformer(ViTConfig(**KW))
    b = VisionTransformer(ViTConfig(**KW))
    b.load_state_dict(a.state_dict())
    start = a.head.weight.detach().clone()
    merged, per_layer = param_groups(a, 0.05), _one_group_a_layer(b, 0.05)
    assert [g["weight_decay"] for g in merged] == [0.0, 0.05] and merged[0]["layers"] == [0, 1, 2, 3, 4]
    assert len(per_layer) == 2 * (KW["depth"] + 2)
    optimizers = [torch.optim.AdamW(groups, lr=1e-3, **{kind: True}) for groups in (merged, per_layer)]
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
        for model, optimizer in zip((a, b), optimizers):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    differ = [k for k, v in a.state_dict().items() if not torch.equal(v, b.state_dict()[k])]
    assert differ == [] and not torch.equal(a.head.weight, start)   # trained, and alike


def test_spec_init_key_starts_every_run_from_the_checkpoint(tmp_path, timm_model):
    save(timm_model, tmp_path / "ckpt.pth")
    spec = tmp_path / "ftspec.toml"
    spec.write_text('[sweep]\nfactor = "depth"\nvalues = [3]\ninit = "ckpt.pth"\n[model]\npreset = "vit_digits"\n'
                    'embed_dim = 32\nnum_heads = 4\npatch_size = 4\nmlp_ratio = 2.0\n[train]\nepochs = 1\n')
    assert ablations_main(["sweep", str(spec), "--dataset", "synthetic", "--out", str(tmp_path / "out"),
                           "--seeds", "0", "--cost-rounds", "0"]) == 0
    row = read_table(tmp_path / "out" / "ablations" / "ftspec.csv").iloc[0]
    assert row["status"] == "ok" and row["init"].startswith("ckpt.pth:")
    spec.write_text(spec.read_text().replace("ckpt.pth", "missing.pth"))
    assert ablations_main(["sweep", str(spec), "--dataset", "synthetic", "--out", str(tmp_path / "o2")]) == 2


def test_pretrained_without_network_says_to_pass_init(tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants

    # the hub reads HF_HUB_OFFLINE at import; set its constant so no request is tried (as with no network)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ablations_main(["train", "--preset", "vit_digits", "--dataset", "synthetic",
                           "--pretrained", "vit_tiny_patch16_224", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "vit_tiny_patch16_224" in err and "INIT=<file>" in err
