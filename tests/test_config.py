"""Invalid configs and inputs fail at construction with a message naming the field and the value."""

import pytest
import torch

from vit import PRESETS, VisionTransformer, ViTConfig

INVALID = [
    (dict(embed_dim=130, num_heads=4), r"embed_dim=130.*num_heads=4"),
    (dict(img_size=30, patch_size=4), r"img_size=30.*patch_size=4"),
    (dict(img_size=0), r"img_size.*0"),
    (dict(patch_size=-4), r"patch_size.*-4"),
    (dict(in_chans=0), r"in_chans.*0"),
    (dict(num_classes=0), r"num_classes.*0"),
    (dict(embed_dim=-8), r"embed_dim.*-8"),
    (dict(depth=0), r"depth.*0"),
    (dict(num_heads=0), r"num_heads.*0"),
    (dict(depth=2.5), r"depth.*2\.5"),
    (dict(mlp_ratio=0.0), r"mlp_ratio.*0\.0"),
    (dict(dropout=1.0), r"dropout.*1\.0"),
    (dict(attn_dropout=-0.1), r"attn_dropout.*-0\.1"),
    (dict(attn="flash"), r"attn='flash'.*bmm.*einops.*loop.*sdpa"),
    (dict(pos="rope"), r"pos='rope'.*learned"),
    (dict(norm="sandwich"), r"norm='sandwich'.*post.*pre"),
    (dict(embed_dim=30, num_heads=3, pos="sincos2d"), r"embed_dim=30.*sincos2d.*4"),
    (dict(embed_dim=27, num_heads=3, pos="sinusoidal"), r"embed_dim=27.*sinusoidal.*2"),
    (dict(qkv_bias="yes"), r"qkv_bias.*yes"),
    (dict(stem="resnet"), r"stem='resnet'.*conv.*patch"),
    # 2 stride-2 convolutions make 12 px a 3×3 grid, but 12 / 3 = 4 patches a side
    (dict(img_size=12, patch_size=3, stem="conv"), r"stem='conv' with patch_size=3.*3×3 grid.*4×4"),
    (dict(img_size=64, patch_size=32, embed_dim=8, num_heads=2, stem="conv"), r"embed_dim=8.*4 times"),
]


@pytest.mark.parametrize("changes,message", INVALID, ids=[next(iter(c)) + str(i) for i, (c, _) in enumerate(INVALID)])
def test_invalid_config_raises_naming_field_and_value(changes, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**changes)


def test_replace_rejects_unknown_field():
    with pytest.raises(ValueError, match=r"ViTConfig has no field 'heads' \(did you mean 'num_heads'\?\); fields are"):
        ViTConfig().replace(heads=3)
    with pytest.raises(ValueError, match=r"ViTConfig has no field 'colour'; fields are \["):
        ViTConfig().replace(colour=3)
    with pytest.raises(ValueError, match=r"ViTConfig has no field 'dept' \(did you mean 'depth'\?\); fields are"):
        ViTConfig().replace(dept=3)


def test_wrong_input_shape_names_expected_and_actual():
    model = VisionTransformer(ViTConfig(img_size=16, patch_size=4, in_chans=3, embed_dim=16, depth=1,
                                        num_heads=2))
    with pytest.raises(ValueError, match=r"\(B, 3, 16, 16\).*\(2, 1, 16, 16\)"):
        model(torch.randn(2, 1, 16, 16))
    with pytest.raises(ValueError, match=r"\(B, 3, 16, 16\).*\(3, 16, 16\)"):
        model(torch.randn(3, 16, 16))


def test_presets_are_valid_and_derived_sizes_consistent():
    for name, cfg in PRESETS.items():
        assert isinstance(cfg, ViTConfig), name
        assert cfg.tokens == (cfg.img_size // cfg.patch_size) ** 2 + 1
    assert PRESETS["vit_small_patch16_224"].tokens == 197


def test_from_row_inverts_to_dict_through_a_csv(tmp_path):
    from ablations.results.schema import read_table
    from bench.io.csvio import append_row

    cfgs = [ViTConfig(img_size=28, patch_size=7, in_chans=1, embed_dim=48, num_heads=3, mlp_ratio=2.5,
                      pos="sincos2d", norm="post", pool="avg", stem="conv", qkv_bias=False, dropout=0.1),
            ViTConfig()]
    path = tmp_path / "t.csv"
    for cfg in cfgs:
        append_row(path, cfg.to_dict(), list(cfg.to_dict()))
    rows = read_table(path)
    assert [ViTConfig.from_row(r) for _, r in rows.iterrows()] == cfgs
    # a table written before a field existed (no `pool` column) gets that field's default
    assert ViTConfig.from_row(rows.drop(columns="pool").iloc[0]) == cfgs[0].replace(pool="cls")


@pytest.mark.parametrize("img,patch,convs,grid", [(28, 7, 3, 4), (28, 14, 4, 2), (28, 4, 2, 7), (32, 4, 2, 8),
                                                   (8, 2, 1, 4), (224, 16, 4, 14), (9, 3, 2, 3), (8, 1, 0, 8)])
def test_conv_stem_halves_to_the_patch_grid(img, patch, convs, grid):
    cfg = ViTConfig(img_size=img, patch_size=patch, in_chans=1, embed_dim=64, num_heads=4, stem="conv")
    assert cfg.stem_convs == convs and cfg.grid_size == grid
    assert cfg.stem_channels == tuple(64 // 2 ** (convs - 1 - i) for i in range(convs))
    with torch.no_grad():
        tokens = VisionTransformer(cfg).patch_embed(torch.randn(2, 1, img, img))
    assert tokens.shape == (2, grid * grid, 64)


def test_a_new_model_or_recipe_field_with_its_default_keeps_every_committed_reference_run_id():
    """A run id hashes the model's and the recipe's identities: the fields ids have always hashed, and a
    field added since only where set away from its default. Every finished run of the committed reference
    is found again from today's sweep specs, as ViTConfig and TrainConfig are and with a new defaulted field
    on either; set away from its default, the new field makes new runs."""
    import dataclasses
    from pathlib import Path

    from ablations.results.identity import task_key
    from ablations.results.schema import read_table
    from ablations.specs import find_spec, load_spec
    from bench.env import run_id
    from bench.training.recipe import TrainConfig

    extended = dataclasses.make_dataclass("Extended", [("layer_scale", float, dataclasses.field(default=0.0))],
                                          bases=(ViTConfig,), frozen=True)
    recipe = dataclasses.make_dataclass("Recipe", [("mixup", float, dataclasses.field(default=0.0))],
                                        bases=(TrainConfig,), frozen=True)
    reference = Path(__file__).resolve().parents[1] / "results" / "reference" / "ablations"
    tables = [t for t in sorted(reference.glob("*.csv")) if not t.stem.endswith(("-cost", "-history"))]
    assert len(tables) >= 10
    for table in tables:
        rows = read_table(table)
        finished = set(rows.loc[rows["status"] == "ok", "run_id"].astype(str))
        spec = load_spec(find_spec(table.stem))
        points = spec.points(28, 1, 10)
        points += [dataclasses.replace(p, train=dataclasses.replace(p.train, holdout_split="random"))
                   for p in points if p.train.holdout]    # the older experiment a tuned table keeps
        seeds = sorted({int(s) for s in rows["seed"]})   # 0-2, and more where a sweep ran SEEDS=auto

        def ids(model_of=lambda m: m, train_of=lambda t: t):
            return {run_id(task_key(dataclasses.replace(p, model=model_of(p.model), train=train_of(p.train)),
                                    "mnist5k", s)) for p in points for s in seeds}
        as_is = ids()
        assert finished and finished <= as_is, f"{table.name}: {len(finished - as_is)} run ids not recomputed"
        assert ids(model_of=lambda m: extended(**m.to_dict())) == as_is
        assert ids(train_of=lambda t: recipe(**t.to_dict())) == as_is
        assert not ids(model_of=lambda m: extended(**m.to_dict(), layer_scale=0.1)) & as_is
        assert not ids(train_of=lambda t: recipe(**t.to_dict(), mixup=0.2)) & as_is


def test_an_int_for_a_float_field_is_that_float_in_the_config_and_the_run_id():
    from ablations.results.identity import task_key
    from ablations.specs import Point
    from bench.env import run_id
    from bench.training.recipe import TrainConfig

    assert TrainConfig(warmup_epochs=1, grad_clip=1, weight_decay=0, lr=1) == TrainConfig(
        warmup_epochs=1.0, grad_clip=1.0, weight_decay=0.0, lr=1.0)
    assert isinstance(TrainConfig(weight_decay=0).weight_decay, float) and TrainConfig(epochs=2).epochs == 2
    base = ViTConfig(mlp_ratio=2)
    assert base == ViTConfig(mlp_ratio=2.0) and isinstance(base.mlp_ratio, float)
    ids = {run_id(task_key(Point("s", "depth", 1, ViTConfig(mlp_ratio=m), TrainConfig(warmup_epochs=w)), "digits", 0))
           for m, w in ((2, 1), (2.0, 1.0), (2, 1.0))}
    assert len(ids) == 1


def test_the_names_a_config_is_checked_against_are_the_keys_of_the_registries_that_build_the_model():
    """`vit.names` (read without torch) and the registries of the modules that build each part agree."""
    from vit import names
    from vit.attention import ATTENTION_BACKENDS
    from vit.blocks import NORM_PLACEMENTS
    from vit.pooling import POOLINGS
    from vit.position import POSITION_ENCODINGS
    from vit.stems import STEMS

    assert ATTENTION_BACKENDS is names.ATTENTION_BACKENDS and all(callable(f) for f in ATTENTION_BACKENDS.values())
    assert set(POSITION_ENCODINGS) == set(names.POSITION_DIM_MULTIPLE)
    assert {k: v.dim_multiple for k, v in POSITION_ENCODINGS.items()} == names.POSITION_DIM_MULTIPLE
    assert set(NORM_PLACEMENTS) == set(names.NORM_NAMES)
    assert {k: v.reader for k, v in POOLINGS.items()} == names.POOLING_READERS
    assert {k: v.check for k, v in STEMS.items()} == names.STEM_CHECKS
