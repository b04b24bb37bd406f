"""Packed runs (`ablations.training.packed`): a member's result does not depend on its slot or its companions,
nor on the CPU on the pack's width (on CUDA the width is pinned), every state tensor bit for bit; it keeps its
own generators, clipping, evaluation and checkpoint; a diverging member is marked and the others go on; a pack
resumes bit for bit."""

import copy
import dataclasses
import math
import re
import time

import pytest
import torch
from conftest import rel_err, run_cli, write_spec

import ablations.__main__ as cli
from ablations.results.experiments import differences
from ablations.results.schema import read_table
from ablations.results.store import SweepPaths
from ablations.training.checkpoints import Checkpointing
from ablations.training.data import cached_dataset
from ablations.training.packed import (
    Member,
    PackedModel,
    PackedStep,
    pack_optimizer,
    pack_refusal,
    pack_trial,
    packed_step,
    train_pack,
)
from ablations.training.train import Diverged, Stopped, train
from bench.training.recipe import TrainConfig
from vit import VisionTransformer, ViTConfig

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    return cached_dataset("digits", "data", False)


def _model(seed: int, cfg: ViTConfig = TINY) -> VisionTransformer:
    torch.manual_seed(seed)
    return VisionTransformer(cfg)


def _pack(seeds, data, cfg=TINY, recipe=None, folder=None):
    recipe = recipe or TrainConfig(epochs=1, batch_size=64, packed=True)
    members = [Member(_model(s, cfg), s, Checkpointing(folder / f"{s}.safetensors", 1) if folder else None)
               for s in seeds]
    results = train_pack(members, data, recipe, CPU, progress=False)
    return {s: (m.model.state_dict(), r) for s, m, r in zip(seeds, members, results)}


def _same(a, b) -> list[str]:
    """The names of the state tensors that differ, with the predictions and the histories."""
    (sa, ra), (sb, rb) = a, b
    differ = [k for k in sa if not torch.equal(sa[k], sb[k])]
    if not torch.equal(ra.test_preds, rb.test_preds):
        differ.append("test_preds")
    if ra.history != [{**h, "elapsed_s": ra.history[i]["elapsed_s"]} for i, h in enumerate(rb.history)]:
        differ.append("history")
    return differ


@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_a_member_is_the_same_bits_whatever_the_width_slot_or_companions(digits, stem):
    cfg = TINY.replace(stem=stem)
    three = _pack([0, 1, 2], digits, cfg)      # 23 steps of 64 images: more than 20
    assert all(not isinstance(r, Diverged) for _, r in three.values())
    swapped = _pack([1, 0], digits, cfg)       # other width, other slot
    others = _pack([7, 1, 5, 3], digits, cfg)  # other companions
    alone = _pack([1], digits, cfg)            # a pack of one
    for other in (swapped, others, alone):
        assert _same(three[1], other[1]) == []
    assert _same(three[0], swapped[0]) == []
    assert not torch.equal(three[0][0]["head.weight"], three[1][0]["head.weight"])   # the seeds differ


def test_a_member_does_the_math_of_the_run_alone_to_rounding_but_not_bit_for_bit(digits):
    recipe = TrainConfig(epochs=2, batch_size=64, lr=1e-3)
    alone = _model(3)
    solo = train(alone, digits, recipe, 3, CPU, progress=False)
    state, packed = _pack([3, 4], digits, recipe=dataclasses.replace(recipe, packed=True))[3]
    for mine, theirs in zip(packed.history, solo.history):   # the same batches, lr, clipping and AdamW
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-4)
        assert mine["test_loss"] == pytest.approx(theirs["test_loss"], rel=1e-4)
    assert max(rel_err(state[k], v) for k, v in alone.state_dict().items() if v.is_floating_point()) < 1e-3
    assert any(not torch.equal(state[k], v) for k, v in alone.state_dict().items())   # other kernels: other bits


def test_a_packs_optimizer_on_a_cpu_updates_an_element_the_same_wherever_it_falls():
    """On a CPU a pack takes `foreach` AdamW, which updates an element by the same arithmetic wherever it falls in
    its tensor, so a member's slice updates the same in any slot (the CPU's fused kernel rounds a vector body and a
    scalar tail apart)."""
    values = torch.randn(37, generator=torch.Generator().manual_seed(3))
    grads = torch.randn(37, generator=torch.Generator().manual_seed(4))
    optimizer = pack_optimizer(PackedModel([_model(0), _model(1)]), TrainConfig(packed=True))
    assert optimizer.defaults["foreach"] and not optimizer.defaults["fused"]

    def stepped(offset: int) -> torch.Tensor:   # the same 37 values at another place in a longer tensor
        p = torch.nn.Parameter(torch.cat([torch.ones(offset), values]))
        p.grad = torch.cat([torch.ones(offset), grads])
        adamw = torch.optim.AdamW([p], lr=0.1, weight_decay=0.05, **{k: optimizer.defaults[k] for k in ("foreach",
                                                                                                       "fused")})
        for _ in range(3):
            adamw.step()
        return p.detach()[offset:]
    assert all(torch.equal(stepped(0), stepped(offset)) for offset in (1, 5, 13, 64))


def test_a_pack_with_all_but_its_head_frozen_trains_only_each_members_head():
    recipe = TrainConfig(packed=True, freeze="all_but_head", grad_clip=1.0)
    packed = PackedModel([_model(0), _model(1)])
    before = {name: t.detach().clone() for name, t in packed.params.items()}
    step = PackedStep(packed, pack_optimizer(packed, recipe), recipe, CPU, "fp32")
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        step(*_batch(2, 16, g), lr=1e-2)
    moved = {name for name, t in packed.params.items() if not torch.equal(t, before[name])}
    assert moved == {"head.weight", "head.bias"}
    assert all(not torch.equal(packed.params[n][0], before[n][0]) and not torch.equal(packed.params[n][1], before[n][1])
               for n in moved)   # each member's own head


def test_each_member_is_clipped_by_its_own_norm():
    models = [_model(0), _model(1)]
    packed = PackedModel(models)
    step = PackedStep(packed, pack_optimizer(packed, TrainConfig()), TrainConfig(grad_clip=1.0), CPU, "fp32")
    for p in step.trainable:
        p.grad = torch.ones_like(p) * torch.tensor([3.0, 1e-6]).view(2, *([1] * (p.dim() - 1)))
    step._clip(1.0)
    norms = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.reshape(2, -1), dim=1)
                                                  for p in step.trainable], dim=1), dim=1)
    assert norms[0] == pytest.approx(1.0, rel=1e-5)             # clipped to the bound
    assert norms[1] < 1e-3                                       # small: left as it was
    alone = copy.deepcopy(models[1])
    for p in alone.parameters():
        p.grad = torch.full_like(p, 1e-6)
    torch.nn.utils.clip_grad_norm_(list(alone.parameters()), 1.0)
    assert torch.equal(step.trainable[0].grad[1], next(alone.parameters()).grad)


def test_a_diverging_member_is_marked_and_the_others_go_on(digits):
    members = [Member(_model(s), s) for s in (0, 1, 2)]
    with torch.no_grad():
        members[1].model.head.weight.fill_(float("nan"))
    results = train_pack(members, digits, TrainConfig(epochs=2, batch_size=64, packed=True), CPU, progress=False)
    assert isinstance(results[1], Diverged) and "epoch 1" in str(results[1])
    healthy = _pack([0, 2], digits, recipe=TrainConfig(epochs=2, batch_size=64, packed=True))
    for j, seed in ((0, 0), (2, 2)):
        assert results[j].test_acc == healthy[seed][1].test_acc
        assert torch.equal(results[j].test_preds, healthy[seed][1].test_preds)


@pytest.mark.parametrize("matmul_order", [False, True])
def test_a_pack_resumes_from_its_checkpoints_bit_for_bit(digits, tmp_path, monkeypatch, matmul_order):
    """Also with the matmul weights laid out in matmul order, as on CUDA: their AdamW moments come back in the
    weights' layout (a fused step reads a weight and its moments in one memory order)."""
    import vit.stacked
    monkeypatch.setattr(vit.stacked, "MATMUL_ORDER", matmul_order)
    recipe = TrainConfig(epochs=3, batch_size=64, packed=True)
    whole = _pack([0, 1], digits, recipe=recipe)
    first = _pack([0, 1], digits, recipe=TrainConfig(epochs=3, batch_size=64, packed=True), folder=tmp_path)
    assert _same(first[0], whole[0]) == []   # checkpointing changes nothing
    resumed = _resume_after(digits, tmp_path / "again", recipe, stop_after=2)
    for s in (0, 1):
        assert resumed[s][1].resumed_after == 2
        assert _same(resumed[s], whole[s]) == []


def _resume_after(data, folder, recipe, stop_after):
    """Train a pack with checkpoints every epoch, stop it after `stop_after` epochs (as a kill would), and
    train it again from the same checkpoints."""
    _killed_after(data, folder, recipe, stop_after)
    return _pack([0, 1], data, recipe=recipe, folder=folder)


def _killed_after(data, folder, recipe, stop_after):
    """A pack of seeds 0 and 1 with checkpoints every epoch in `folder`, stopped after `stop_after` epochs."""
    from ablations.training import train as train_module

    folder.mkdir()
    members = [Member(_model(s), s, Checkpointing(folder / f"{s}.safetensors", 1)) for s in (0, 1)]
    calls = {"n": 0}
    real = train_module.check_stop

    def stop_at_epoch():
        calls["n"] += 1
        if calls["n"] > stop_after:
            raise KeyboardInterrupt
        real()
    import ablations.training.packed as packed_module
    packed_module.check_stop = stop_at_epoch
    try:
        with pytest.raises(KeyboardInterrupt):
            train_pack(members, data, recipe, CPU, progress=False)
    finally:
        packed_module.check_stop = real


def test_a_pack_whose_checkpoints_group_the_optimizer_otherwise_starts_over_saying_so(digits, tmp_path, monkeypatch,
                                                                                    capsys):
    """Checkpoints whose optimizer state is numbered for other parameter groups (an older layout: one group a
    layer) are not restored into this one's, where a state would land on another parameter: the pack says so and
    trains from epoch 1, to the bits of a pack that never had checkpoints."""
    import ablations.training.packed as packed_module
    from bench.training.step import param_groups

    def one_group_a_layer(model, weight_decay, layer_decay=1.0, stacked=None):
        groups = param_groups(model, weight_decay, 0.5, stacked)
        for group in groups:
            group["lr_scale"] = 1.0
        return groups
    recipe = TrainConfig(epochs=3, batch_size=64, packed=True)
    with monkeypatch.context() as m:
        m.setattr(packed_module, "param_groups", one_group_a_layer)
        _killed_after(digits, tmp_path / "old", recipe, stop_after=2)
    capsys.readouterr()
    again = _pack([0, 1], digits, recipe=recipe, folder=tmp_path / "old")
    assert "the pack's checkpoints group its optimizer's parameters otherwise than this version does; its 2 runs " \
           "start from epoch 1" in capsys.readouterr().out
    whole = _pack([0, 1], digits, recipe=recipe)
    for s in (0, 1):
        assert again[s][1].resumed_after == 0 and _same(again[s], whole[s]) == []


@pytest.mark.parametrize("change,needle", [
    ({"model": {"dropout": 0.1}}, "dropout"),
    ({"train": {"compile": True}}, "torch.compile"),
])
def test_what_cannot_train_packed_is_refused_in_one_line(change, needle):
    recipe = TrainConfig(**change.get("train", {}))
    dropout = change.get("model", {}).get("dropout", 0.0)
    said = pack_refusal(recipe, dropout, CPU)
    assert needle in said and "\n" not in said and "PACK=0" in said
    assert pack_refusal(TrainConfig(), 0.0, CPU) == ""


def _sweep_rows(tmp_path, capsys, pack: str, out: str):
    spec = write_spec(tmp_path / "p.toml", "depth", "[1, 2]")
    code, said, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / out),
                                         "--seeds", "0,1,2", "--cost-rounds", "0", "--pack", pack], capsys)
    assert code == 0, err
    packs = {"3": "; 6 trained as 2 packs of 3 seeds",   # a pack of one seed trains 2 wide, beside a filler copy
             "2": "; 6 trained as 4 packs of 1–2 seeds (2 of 8 slots filler: a pack trains at least 2 wide)",
             "0": ""}[pack]
    assert f"  p        6 runs: 0 already done, 6 ok{packs}\n" in said   # the summary says how they trained
    paths = SweepPaths.of(str(tmp_path / out), "p")
    table = read_table(paths.rows)
    return table, paths


@pytest.mark.slow
def test_a_sweep_packed_3_and_2_wide_gives_the_same_runs_bit_for_bit_and_shares_no_id_with_one_at_a_time(
        tmp_path, capsys):
    wide, wide_paths = _sweep_rows(tmp_path, capsys, "3", "three")
    narrow, narrow_paths = _sweep_rows(tmp_path, capsys, "2", "two")
    alone, _ = _sweep_rows(tmp_path, capsys, "0", "none")
    assert (wide["status"] == "ok").all() and len(wide) == 6 and (wide["packed"] == 1).all()
    assert set(wide["run_id"]) == set(narrow["run_id"]) and not set(wide["run_id"]) & set(alone["run_id"])
    assert (alone["packed"] == 0).all()
    for rid in wide["run_id"]:
        a = torch.load(next(wide_paths.weights.glob(f"{rid}*")))
        b = torch.load(next(narrow_paths.weights.glob(f"{rid}*")))
        assert all(torch.equal(a[k], b[k]) for k in a), rid
        assert next(wide_paths.preds.glob(f"{rid}*")).read_bytes() == next(narrow_paths.preds.glob(f"{rid}*")).read_bytes()
    # what tells the two experiments apart reads as the packing on each side, not as a number against a word
    assert differences(wide.iloc[0], alone.iloc[0], "depth") == "packed stacked vs no"



def test_a_sweep_with_its_pack_width_pinned_says_so_and_its_runs_are_their_own(tmp_path, capsys, monkeypatch):
    """As on CUDA, where `--pack N` pins the width: `--set pack_width=3` on the CPU, 2 seeds a point filled out to
    3; the summary says the width, the rows hold it, and the runs' ids are not the unpinned runs'. Its start names
    what the packs' one-step trials took of it (each made to take 0.2 s longer here)."""
    import ablations.training.packed as packed_module
    real = packed_module.pack_trial

    def slow(*args):
        time.sleep(0.2)
        return real(*args)
    monkeypatch.setattr(packed_module, "pack_trial", slow)
    spec = write_spec(tmp_path / "p.toml", "depth", "[1]")

    def sweep(out, *more):
        code, said, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / out),
                                             "--seeds", "0,1", "--cost-rounds", "0", "--pack", "3", *more], capsys)
        assert code == 0, err
        return said, read_table(SweepPaths.of(str(tmp_path / out), "p").rows)
    said, pinned = sweep("pinned", "--set", "pack_width=3")
    assert "  p        2 runs: 0 already done, 2 ok; 2 trained as 1 pack of 2 seeds, 3 wide (the width is in their " \
           "run ids; 1 of 3 slots filler)\n" in said
    assert (pinned["pack_width"] == 3).all() and (pinned["packed"] == 1).all()
    start, trials = map(float, re.search(r"^Done in [\d.]+ s: start ([\d.]+) s \(the packs' trials ([\d.]+) s\), ",
                                         said, re.M).groups())
    assert 0.2 <= trials <= start, said
    said, free = sweep("free")
    assert "2 trained as 1 pack of 2 seeds\n" in said and (free["pack_width"] == 0).all()
    code, _, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "wide"),
                                      "--seeds", "0,1", "--pack", "8", "--set", "pack_width=8", "--dry-run"], capsys)
    assert code == 0 and ("note: p: every pack trains 8 wide (the width is in the run ids), so with 2 seeds a point "
                          "6 of its 8 slots are filler; PACK=2 would waste none\n") in err, err
    assert "one at a time" not in err   # CPU packs train JOBS at once
    for seeds, note in (("0", True), ("0,1", False)):   # unpinned, a pack of one seed trains beside a filler copy
        code, _, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "one"),
                                          "--seeds", seeds, "--pack", "3", "--dry-run"], capsys)
        assert code == 0 and ("note: p: with 1 seed a point, each pack is its seed beside a filler copy (a pack "
                              "trains at least 2 wide), twice the work of training it alone; PACK=0 trains it alone "
                              "(under other run ids)\n" in err) == note, err
    code, _, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "wide"),
                                      "--seeds", "auto:3,5,8", "--pack", "8", "--set", "pack_width=8", "--dry-run"],
                           capsys)
    assert code == 0 and ("note: p: every pack trains 8 wide (the width is in the run ids), and SEEDS=auto look by "
                          "look trains 2–3 seeds of a setting a look, the rest of each pack filler; AUTO_TRAIN=cap "
                          "trains each setting's 8 seeds at once\n") in err, err
    code, _, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "wide"),
                                      "--seeds", "auto:3,5,8", "--pack", "8", "--set", "pack_width=8", "--dry-run",
                                      "--auto-train", "cap"], capsys)
    assert code == 0 and "filler" not in err, err
    assert not set(pinned["run_id"]) & set(free["run_id"])
    assert sorted(pinned["test_loss"]) == sorted(free["test_loss"])   # on the CPU the width changes no figure


@pytest.mark.parametrize("argv,needle", [
    (["--pack", "two"], "--pack (PACK) must be auto or an integer ≥ 0, got 'two'"),
    (["--pack", "2", "--set", "dropout=0.1"], "packing needs dropout 0"),
    (["--pack", "2", "--set", "compile=1"], "error: sweep p, point depth=1: packing and torch.compile"),
    (["--pack", "2", "--executor", "ray"], "packed runs train on the local executor"),
    (["--pack", "0", "--set", "pack_width=3"], "pack_width must be 0, or an int ≥ 2 for a packed run, got 3 (packed is 0)"),
    (["--pack", "3", "--set", "pack_width=2"], "pack_width=2 is narrower than PACK=3: a pack trains at its pinned width"),
    # a row marked packed whose run trained alone (PACK=0), or the reverse: only PACK says how the runs train
    (["--pack", "0", "--set", "packed=1"], "--set packed=1: whether runs train packed is set by PACK (--pack N)"),
    (["--pack", "2", "--set", "packed=0"], "--set packed=0: whether runs train packed is set by PACK (--pack N)"),
])
def test_packing_refusals_are_one_line_before_any_run(tmp_path, capsys, argv, needle):
    spec = write_spec(tmp_path / "p.toml", "depth", "[1]")
    code, out, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"),
                                        "--seeds", "0,1", "--cost-rounds", "0", *argv], capsys)
    assert code == 2 and needle in err, err


def test_train_s_table_says_a_packed_runs_time_is_its_packs(tmp_path, capsys):
    argv = ["train", "--preset", "vit_digits", "--dataset", "digits", "--epochs", "1", "--seeds", "0,1",
            "--cost-rounds", "0", "--out", str(tmp_path)]
    code, out, err = run_cli(cli.main, [*argv, "--pack", "2"], capsys)
    assert code == 0, err
    assert out.endswith("train s: a packed run's is its whole pack's (its members trained at once)\n"), out
    code, out, err = run_cli(cli.main, [*argv, "--pack", "0"], capsys)
    assert code == 0 and "whole pack's" not in out, err


def test_a_packed_dry_run_says_how_the_runs_left_would_train(tmp_path, capsys):
    """DRY_RUN=1 with PACK: the packs the runs still to train would form, filler slots included; none when all
    are done or nothing packs."""
    spec = write_spec(tmp_path / "p.toml", "depth", "[1, 2]")
    argv = ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"), "--seeds", "0,1,2",
            "--cost-rounds", "0", "--dry-run"]
    code, out, err = run_cli(cli.main, [*argv, "--pack", "2"], capsys)
    assert code == 0, err
    assert ("  PACK=2: 6 runs would train as 4 packs of 1–2 seeds (2 of 8 slots filler: a pack trains at least 2 "
            "wide)\n") in out
    code, out, err = run_cli(cli.main, [*argv, "--pack", "0"], capsys)
    assert code == 0 and "would train" not in out, err


@pytest.mark.parametrize("section", ["[train]\npacked = true", "[tune]\nlr = [0.001, 0.002]\npacked = true"])
def test_a_spec_cannot_mark_its_runs_packed(tmp_path, capsys, section):
    spec = tmp_path / "p.toml"
    spec.write_text(f'[sweep]\nlabel = "p"\nfactor = "depth"\nvalues = [1, 2]\n{section}\n')
    code, _, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"),
                                      "--dry-run"], capsys)
    assert code == 2 and "packed: whether runs train packed is set by PACK (--pack), not by a spec" in err, err
    spec.write_text('[sweep]\nlabel = "p"\nfactor = "packed"\nvalues = [true, false]\n')
    code, _, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"),
                                      "--dry-run"], capsys)
    assert code == 2 and "factor='packed' is not a field a sweep can vary (set by PACK, --pack)" in err, err
    assert not (tmp_path / "o").exists()
    assert not (tmp_path / "o" / "ablations" / "p.csv").exists()


def test_the_packed_benchmark_times_every_width_beside_a_run_alone(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "packed_runs.py"
    spec = importlib.util.spec_from_file_location("packed_runs", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--widths", "2,3", "--steps", "1", "--rounds", "1", "--depth", "1", "--device", "cpu",
                       "--bits", "3", "--ops"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert {line.split()[0] for line in out[2:-2]} == {"alone", "2", "3"}
    assert out[-1].startswith("member bits after 3 steps")
    compared = re.findall(r"(the same pack again|other companions|another slot|another width|a pack of 24) (\d+) of (\d+)",
                          out[-1])
    assert [label for label, _, _ in compared] == [label for label, _ in bench.BITS_PACKS]
    assert {differ for _, differ, _ in compared} == {"0"} and len({total for _, _, total in compared}) == 1
    ops = dict(re.findall(r"(alone|\d+) (\d+) \(", out[-2]))
    assert out[-2].startswith("torch ops a step (per member)") and set(ops) == {"alone", "2", "3"}
    alone, two, three = int(ops["alone"]), int(ops["2"]), int(ops["3"])
    assert two > alone and three / 3 < two / 2   # a pack's step costs more ops, a member fewer the wider


def test_a_pack_that_runs_out_of_memory_trains_in_halves_with_the_same_results_said_once(tmp_path, capsys,
                                                                                      monkeypatch, digits):
    from ablations.running import worker
    from ablations.running.cost import CostPlan
    from ablations.running.tasks import RunOptions, make_tasks, pack_tasks
    from ablations.specs import Point

    point = Point("p", "depth", 1, TINY, TrainConfig(epochs=1, batch_size=64, packed=True))
    options = RunOptions(dataset="digits", seeds=(0, 1, 2, 3), pack=4, progress=False, out=str(tmp_path),
                         cost=CostPlan(rounds=0))
    (pack,) = pack_tasks(make_tasks([point], options))
    assert [t.seed for t in pack.members] == [0, 1, 2, 3]
    whole = worker.execute(pack, digits)
    real, widths = worker.train_pack, []

    def small_device(members, *args, **kw):   # as CUDA does: the wide pack's first step finds no memory
        widths.append(len(members))
        if len(members) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(members, *args, **kw)
    monkeypatch.setattr(worker, "train_pack", small_device)
    monkeypatch.setattr(worker, "_FITS", {})
    capsys.readouterr()
    split = worker.execute(pack, digits)
    again = worker.execute(pack, digits)   # the width that fitted is remembered: no second try, nothing said
    said = "".join(capsys.readouterr())
    assert widths == [4, 2, 2, 2, 2]
    assert said.count("did not fit in device memory") == 1 and "at most 2 wide" in said
    for a, b, c in zip(whole.members, split.members, again.members):
        assert a.row["status"] == b.row["status"] == c.row["status"] == "ok"
        assert a.weights == b.weights == c.weights and a.preds == b.preds



def test_a_pinned_width_fills_a_narrower_pack_out_with_dropped_copies_and_keeps_its_members_bits(digits, tmp_path,
                                                                                                monkeypatch):
    import ablations.training.packed as packed_module
    widths = []

    class Counted(PackedModel):
        def __init__(self, models):
            widths.append(len(models))
            super().__init__(models)
    monkeypatch.setattr(packed_module, "PackedModel", Counted)
    free = _pack([0, 1], digits, recipe=TrainConfig(epochs=2, batch_size=64, packed=True))
    pinned = _pack([0, 1], digits, recipe=TrainConfig(epochs=2, batch_size=64, packed=True, pack_width=4),
                   folder=tmp_path)
    assert widths == [2, 4]
    for seed in (0, 1):   # on the CPU a member's bits do not depend on the width: the copies change nothing
        assert _same(free[seed], pinned[seed]) == []
    assert sorted(f.name for f in tmp_path.iterdir()) == ["0.safetensors", "1.safetensors"]   # the copies write none
    with pytest.raises(ValueError, match="a pack of 3 runs is wider than its recipe's pack_width=2"):
        _pack([0, 1, 2], digits, recipe=TrainConfig(epochs=1, batch_size=64, packed=True, pack_width=2))


def test_on_cuda_packing_pins_the_width_into_the_run_id_and_on_a_cpu_it_does_not(monkeypatch):
    import argparse

    from ablations.cli import prepare
    from ablations.results.identity import task_key
    from ablations.specs import Point
    from bench.env import run_id

    def changes(device, pack):
        monkeypatch.setattr(prepare, "resolve_device", lambda name: torch.device(device))
        return prepare._train_changes(argparse.Namespace(pack=pack, device=device, epochs=None, dtype=None,
                                                         compile=False))
    assert changes("cpu", 3) == {"packed": True}
    assert changes("cuda", 3) == {"packed": True, "pack_width": 3}
    assert changes("cuda", 1) == {"packed": True, "pack_width": 2}   # a pack of one trains beside a copy
    assert changes("cuda", 0) == {}

    def rid(**train):
        return run_id(task_key(Point("p", "depth", 1, TINY, TrainConfig(**train)), "digits", 0))
    # a CPU packed run: no width in its id, and its packing named (a run packed under vmap had `packed: True`)
    assert TrainConfig(packed=True).identity() == {**TrainConfig().identity(), "packed": "stacked"}
    assert len({rid(), rid(packed=True), rid(packed=True, pack_width=2), rid(packed=True, pack_width=3)}) == 4


@pytest.mark.parametrize("train,needle", [
    ({"packed": True, "pack_width": 1}, "pack_width must be 0, or an int ≥ 2 for a packed run, got 1"),
    ({"packed": False, "pack_width": 3}, "got 3 (packed is 0)"),
    ({"packed": True, "pack_width": -2}, "got -2"),
    ({"packed": True, "pack_width": 2.5}, "got 2.5"),
])
def test_a_pack_width_that_is_no_pack_is_refused(train, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        TrainConfig(**train)


def test_a_pinned_pack_that_runs_out_of_memory_is_not_split_and_names_the_pack_that_would_fit(tmp_path, monkeypatch,
                                                                                               digits):
    from ablations.running import worker
    from ablations.running.cost import CostPlan
    from ablations.running.tasks import RunOptions, make_tasks, pack_tasks
    from ablations.specs import Point

    point = Point("p", "depth", 1, TINY, TrainConfig(epochs=1, batch_size=64, packed=True, pack_width=4))
    options = RunOptions(dataset="digits", seeds=(0, 1, 2), pack=4, progress=False, out=str(tmp_path),
                         cost=CostPlan(rounds=0))
    (pack,) = pack_tasks(make_tasks([point], options))
    widths = []

    def small_device(members, *args, **kw):   # as CUDA does: the pack's first step finds no memory
        widths.append(len(members))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(worker, "train_pack", small_device)
    monkeypatch.setattr(worker, "_FITS", {})
    outcome = worker.execute(pack, digits)
    assert widths == [3]   # tried once, as it is: the halves would train at another width
    assert [m.row["status"] for m in outcome.members] == ["oom"] * 3
    assert all("a pack 4 wide did not fit in cpu memory" in m.row["error"] and m.row["error"].endswith("set PACK=2")
               for m in outcome.members), outcome.members[0].row["error"]

@pytest.mark.slow
@pytest.mark.parametrize("pinned,stop", [([], "SIGKILL"), (["--set", "pack_width=3"], "SIGKILL"), ([], "SIGINT")],
                         ids=["free-kill", "pinned-kill", "free-ctrl-c"])
def test_a_pack_killed_mid_run_resumes_from_its_members_checkpoints_to_the_uninterrupted_bits(tmp_path, pinned, stop):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    spec = write_spec(tmp_path / "p.toml", "depth", "[1, 2]", train="epochs = 4")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "VITBENCH_CACHE": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}

    def command(out):
        return [sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--out", str(out),
                "--seeds", "0,1", "--cost-rounds", "0", "--pack", "2", "--jobs", "1", "--checkpoint-every", "1", *pinned]
    checkpoints = tmp_path / "cut" / "ablations" / "checkpoints" / "p"
    proc = subprocess.Popen(command(tmp_path / "cut"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and len(list(checkpoints.glob("*.safetensors"))) < 2:
        time.sleep(0.05)
    proc.send_signal(getattr(signal, stop))   # the first pack is mid-run: its two members' checkpoints stand at an epoch
    assert proc.wait(timeout=120) == (130 if stop == "SIGINT" else -signal.SIGKILL)   # Ctrl-C: 128 + 2, as a run's
    assert len(list(checkpoints.glob("*.safetensors"))) >= 2
    for out in ("cut", "whole"):
        done = subprocess.run(command(tmp_path / out), env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    cut, whole = (read_table(SweepPaths.of(str(tmp_path / o), "p").rows) for o in ("cut", "whole"))
    assert len(cut) == 4 and cut["run_id"].is_unique and (cut["status"] == "ok").all()
    assert (cut["resumed_after"] > 0).sum() >= 2   # the killed pack's members went on from their checkpoints
    for rid in whole["run_id"]:
        a, b = (torch.load(next(SweepPaths.of(str(tmp_path / o), "p").weights.glob(f"{rid}*"))) for o in ("cut", "whole"))
        assert all(torch.equal(a[k], b[k]) for k in a), rid
    assert not list(checkpoints.glob("*.safetensors"))   # deleted once their rows were written


def test_a_pack_of_runs_at_different_epochs_keeps_each_ones_progress_with_the_same_results(tmp_path, monkeypatch,
                                                                                         digits):
    """A pack whose members' checkpoints stand at different epochs (one went on in an earlier pack, the others are
    fresh) trains them as packs of the same epoch: the checkpointed run resumes, and every result is the bits of
    the same runs trained uninterrupted."""
    import ablations.training.packed as packed_module
    from ablations.running import worker
    from ablations.running.cost import CostPlan
    from ablations.running.tasks import RunOptions, make_tasks, pack_tasks
    from ablations.specs import Point

    point = Point("p", "depth", 1, TINY, TrainConfig(epochs=3, batch_size=64, packed=True))

    def pack_of(seeds, out):
        options = RunOptions(dataset="digits", seeds=seeds, pack=3, progress=False, out=str(out),
                             cost=CostPlan(rounds=0), checkpoint_every=1)
        return pack_tasks(make_tasks([point], options))[0]
    epochs = {"n": 0}

    def stop_after_one():
        epochs["n"] += 1
        if epochs["n"] > 1:
            raise Stopped("the executor is stopping")
    monkeypatch.setattr(packed_module, "check_stop", stop_after_one)
    with pytest.raises(Stopped):
        worker.execute(pack_of((1,), tmp_path / "cut"), digits)   # seed 1 stops after epoch 1, its checkpoint kept
    monkeypatch.undo()
    cut = worker.execute(pack_of((0, 1, 2), tmp_path / "cut"), digits)
    whole = worker.execute(pack_of((0, 1, 2), tmp_path / "whole"), digits)
    assert [m.row["resumed_after"] for m in cut.members] == [0, 1, 0]
    assert [m.row["status"] for m in cut.members] == ["ok"] * 3
    assert all(a.weights == b.weights and a.preds == b.preds for a, b in zip(cut.members, whole.members))


@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_a_packed_step_trial_passes_where_packs_train_and_leaves_the_generators_as_they_were(stem):
    cfg = TINY.replace(stem=stem)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    assert pack_trial(cfg, TrainConfig(packed=True), CPU) == ""
    assert torch.equal(torch.get_rng_state(), before)


def test_a_model_whose_packed_step_fails_on_the_device_is_refused_in_one_line_before_any_run(tmp_path, capsys,
                                                                                          monkeypatch):
    """What autocast and a device's kernels make of a stacked model is tried before any run, once per model and
    recipe: a packed step that fails (here as autocast meeting a float32 bias would make it) is refused in one line
    naming the error and the way out, and nothing is written."""
    tried = []

    def fails(self, x, y, cache=True):
        tried.append(x.shape)
        raise RuntimeError("Input type (c10::BFloat16) and bias type (float) should be the same\nmore detail")
    monkeypatch.setattr(PackedStep, "_step", fails)
    spec = write_spec(tmp_path / "p.toml", "depth", "[1, 2]")
    code, _, err = run_cli(cli.main, ["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"),
                                      "--seeds", "0,1", "--cost-rounds", "0", "--pack", "2"], capsys)
    assert code == 2 and len(tried) == 1   # refused at the first model tried
    line = ("error: sweep p, point depth=1: a packed training step of this model failed on cpu (RuntimeError: Input "
            "type (c10::BFloat16) and bias type (float) should be the same); set PACK=0")
    assert line in err and "more detail" not in err, err
    assert not (tmp_path / "o" / "ablations" / "p.csv").exists()



def test_a_pinned_trial_takes_the_packs_width_and_batch_and_says_a_pack_that_does_not_fit(monkeypatch):
    seen = []
    real_step = PackedStep._step

    def watched(self, x, y, cache=True):
        seen.append((self.packed.k, tuple(x.shape[:2])))
        return real_step(self, x, y, cache)
    monkeypatch.setattr(PackedStep, "_step", watched)
    pinned = TrainConfig(batch_size=16, packed=True, pack_width=3)
    assert pack_trial(TINY, TrainConfig(batch_size=16, packed=True), CPU) == ""
    assert pack_trial(TINY, pinned, CPU) == ""
    assert seen == [(2, (2, 2)), (3, (3, 16))]   # unpinned: two models, two images; pinned: the pack as it trains

    def no_memory(self, x, y, cache=True):   # as CUDA does when the pack is too wide
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB")
    monkeypatch.setattr(PackedStep, "_step", no_memory)
    said = pack_trial(TINY, pinned, CPU)
    assert said == ("a pack 3 wide of this model does not fit in cpu memory at batch 16 (OutOfMemoryError: CUDA out "
                    "of memory. Tried to allocate 3.00 GiB); set PACK=1"), said

def test_each_distinct_model_is_tried_packed_once_a_command_before_its_packed_sweeps(tmp_path, capsys, monkeypatch):
    import ablations.training.packed as packed_module
    tried, real = [], packed_module.pack_trial

    def counted(model_cfg, cfg, device):
        tried.append((model_cfg.depth, model_cfg.num_heads))
        return real(model_cfg, cfg, device)
    monkeypatch.setattr(packed_module, "pack_trial", counted)
    depth = write_spec(tmp_path / "depth.toml", "depth", "[1, 2]")
    heads = write_spec(tmp_path / "heads.toml", "num_heads", "[1, 2]")   # heads=2 is depth's depth=2: one model
    code, _, err = run_cli(cli.main, ["sweep", str(depth), str(heads), "--dataset", "digits", "--out",
                                      str(tmp_path / "o"), "--seeds", "0,1", "--cost-rounds", "0", "--pack", "2",
                                      "--dry-run"], capsys)
    assert code == 0 and sorted(tried) == [(1, 2), (2, 1), (2, 2)], err


@pytest.mark.gpu
def test_a_pack_of_conv_stem_models_trains_on_cuda_in_bf16_with_finite_losses(digits):
    """A pack of two conv-stem models trains on CUDA in bf16 (grouped convolutions and BatchNorm over the members'
    channels in one call under autocast), each member's loss finite and its own."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    members = [Member(_model(s, TINY.replace(stem="conv")), s, None) for s in (0, 1)]
    results = train_pack(members, digits, TrainConfig(epochs=1, batch_size=64, dtype="bf16", packed=True),
                         torch.device("cuda"), progress=False)
    assert all(not isinstance(r, Diverged) for r in results), results
    losses = [r.train_loss for r in results]
    assert all(loss == loss and loss < 10 for loss in losses) and losses[0] != losses[1]


@pytest.mark.gpu
def test_a_pack_of_sdpa_models_trains_on_cuda_with_finite_losses(digits):
    """A pack of two `sdpa` models trains on CUDA in bf16 (the members' rows through the fused attention kernels in
    one call), each member's loss finite and its own."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cuda = torch.device("cuda")
    members = [Member(_model(s, TINY.replace(attn="sdpa")), s, None) for s in (0, 1)]
    results = train_pack(members, digits, TrainConfig(epochs=1, batch_size=64, packed=True), cuda, progress=False)
    assert all(not isinstance(r, Diverged) for r in results), results
    losses = [r.train_loss for r in results]
    assert all(loss == loss and loss < 10 for loss in losses) and losses[0] != losses[1]



@pytest.mark.gpu
def test_a_pinned_pack_on_cuda_gives_a_member_the_bits_of_the_full_pack(digits):
    """On CUDA a member's bits depend on its pack's width, not on its companions: a pack of two pinned 3 wide
    (filled out with a copy) gives each member the bits it has in a full pack of three (patch stem, which CUDA
    repeats bit for bit)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cuda = torch.device("cuda")
    recipe = TrainConfig(epochs=1, batch_size=64, packed=True, pack_width=3)

    def trained(seeds):
        members = [Member(_model(s), s, None) for s in seeds]
        train_pack(members, digits, recipe, cuda, progress=False)
        return {s: {k: v.cpu() for k, v in m.model.state_dict().items()} for s, m in zip(seeds, members)}
    full, filled = trained([0, 1, 2]), trained([0, 1])
    assert all(torch.equal(full[s][k], filled[s][k]) for s in (0, 1) for k in full[s])


@pytest.mark.gpu
def test_wide_graphed_packs_of_a_sweep_on_cuda_all_train_to_finite_losses(tmp_path):
    """JOBS=2, the depth sweep's points d=2 and d=4 at 24 seeds each as packs 24 wide, CUDA graphs, bf16, on
    MNIST: every member finishes ok with finite losses (the packs train one at a time: side by side, packs this
    wide gave many members non-finite losses)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from helpers import run_sweep

    from ablations.running.cost import CostPlan
    from ablations.running.executors import ExecutorOptions
    from ablations.running.executors.local import LocalExecutor
    from ablations.running.tasks import RunOptions
    from ablations.specs import find_spec, load_spec

    data = cached_dataset("mnist5k")
    points = [p for p in load_spec(find_spec("depth")).points(data.img_size, data.in_chans, data.num_classes,
                                                            {"epochs": 2}) if p.value in (2, 4)]
    points = [dataclasses.replace(p, train=dataclasses.replace(p.train, packed=True, pack_width=24)) for p in points]
    executor = LocalExecutor(ExecutorOptions(jobs=2, device="cuda"))
    executor.start()
    run_sweep("depth", points, RunOptions(dataset="mnist5k", out=str(tmp_path), seeds=tuple(range(24)), device="cuda",
                                          progress=False, cost=CostPlan(rounds=0), checkpoint_every=0, pack=24),
              executor)
    table = read_table(tmp_path / "ablations" / "depth.csv")
    assert len(table) == 48 and (table["status"] == "ok").all(), table[table["status"] != "ok"][["seed", "error"]]
    assert table["train_loss"].map(math.isfinite).all() and table["test_loss"].map(math.isfinite).all()


def _graphed_and_eager(recipe: TrainConfig, capture: bool, seeds=(0, 1, 2), cfg: ViTConfig = TINY):
    """The same pack twice, one on the graphed step (static buffers, one learning-rate table, capturable AdamW;
    `capture`: under the fake CUDA), one on the eager step."""
    from ablations.training.packed import GraphedPackedStep
    steps = []
    for kind in ("graphed", "eager"):
        packed = PackedModel([_model(s, cfg) for s in seeds])
        if kind == "graphed":
            steps.append(GraphedPackedStep(packed, pack_optimizer(packed, recipe, capturable=True), recipe, CPU,
                                           "fp32", capture=capture, measured=False))
        else:
            steps.append(PackedStep(packed, pack_optimizer(packed, recipe), recipe, CPU, "fp32"))
    return steps


def _close(a: dict, b: dict, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Capturable AdamW computes its bias corrections from tensors: the same update to float rounding. The key
    third of a qkv bias is left out: softmax ignores it, so its gradients are rounding noise, which Adam
    normalises to ±lr whatever their size, so ulps apart the two walk apart by up to 2·lr a step."""
    for name, p in a.items():
        q = b[name]
        if name.endswith("attn.qkv.bias"):
            third = p.shape[-1] // 3
            p, q = (torch.cat([t[..., :third], t[..., 2 * third:]], -1) for t in (p, q))
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


def _members_close(a, b) -> None:
    _close(a.packed.params, b.packed.params)


def _batch(k: int, b: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randn(k, b, TINY.in_chans, TINY.img_size, TINY.img_size, generator=g),
            torch.randint(0, TINY.num_classes, (k, b), generator=g))


def test_the_graphed_packed_step_trains_like_the_eager_one(capturable_on_cpu):
    """Uncaptured (as on the CPU), the graphed packed step is the eager one on static buffers, one per batch size,
    with every group's learning rate a view of one table: the same losses and weights to float rounding,
    layer-wise decay and clipping included."""
    recipe = TrainConfig(grad_clip=1.0, layer_decay=0.75)
    graphed, eager = _graphed_and_eager(recipe, capture=False)
    g = torch.Generator().manual_seed(1)
    for i, b in enumerate((64, 64, 17, 64, 17)):
        x, y = _batch(3, b, g)
        losses = [step(x, y, lr=1e-3 * (i + 1)) for step in (graphed, eager)]
        assert losses[0].shape == (3,)
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert sorted(graphed.buffers) == [17, 64] and not graphed.graphed
    assert len({g["lr"].untyped_storage().data_ptr() for g in graphed.optimizer.param_groups}) == 1
    _members_close(graphed, eager)


@pytest.mark.parametrize("fail_at_end", [False, True])
def test_a_graphed_pack_captures_its_step_once_a_batch_size_or_goes_on_eagerly(fail_at_end, capturable_on_cpu,
                                                                                 monkeypatch, capsys):
    """Under the fake CUDA: the first call of a batch size warms up (undone), captures and replays the packed step,
    so the pack trains on that batch once, as the eager step does; a capture that fails says so in one line and
    the pack goes on eagerly from the same weights."""
    from fake_cuda import FakeCuda
    fake = FakeCuda(monkeypatch, fail_in_block=False, fail_at_end=fail_at_end)
    graphed, eager = _graphed_and_eager(TrainConfig(grad_clip=1.0), capture=True)
    fake.watch = graphed
    x, y = _batch(3, 64, torch.Generator().manual_seed(1))
    losses = [step(x, y, lr=1e-3) for step in (graphed, eager)]
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    _members_close(graphed, eager)
    assert fake.current == ["default"]
    assert [c[0] for c in fake.calls].count("capture_begin") == 1
    if fail_at_end:
        assert "graphs: capturing the batch-64 training step failed" in capsys.readouterr().out
        assert not graphed.graphed and not graphed.graphs
        x, y = _batch(3, 17, torch.Generator().manual_seed(2))   # eager from here: it trains like the eager step
        losses = [step(x, y, lr=2e-3) for step in (graphed, eager)]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
        _members_close(graphed, eager)
    else:
        assert graphed.graphed and sorted(graphed.graphs) == [64] and ("replay",) in fake.calls


@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_a_captured_pack_with_its_fused_kernels_called_once_as_on_cuda_trains_like_the_eager_one(stem,
                                                                                                capturable_on_cpu,
                                                                                                monkeypatch):
    """Under the fake CUDA, with the members' attention and BatchNorm in one call each and the matmul weights in
    matmul order, as on CUDA: the step warms up (undone), captures and replays, and the pack trains on its batch
    once, as the eager step does."""
    from fake_cuda import FakeCuda

    import vit.attention
    import vit.stacked
    monkeypatch.setattr(vit.attention, "ONE_CALL", True)
    monkeypatch.setattr(vit.stacked, "MATMUL_ORDER", True)
    fake = FakeCuda(monkeypatch, fail_in_block=False, fail_at_end=False)
    graphed, eager = _graphed_and_eager(TrainConfig(grad_clip=1.0), capture=True, cfg=TINY.replace(stem=stem))
    fake.watch = graphed
    x, y = _batch(3, 64, torch.Generator().manual_seed(1))
    losses = [step(x, y, lr=1e-3) for step in (graphed, eager)]
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    _members_close(graphed, eager)
    assert graphed.graphed and sorted(graphed.graphs) == [64] and ("replay",) in fake.calls
    _close(graphed.packed.buffers, eager.packed.buffers)   # the conv stem's BatchNorm statistics


@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_weights_in_matmul_order_get_their_gradients_uncopied_and_compute_the_same_function(stem, monkeypatch):
    """The matmul weights laid out as the batched matmul reads them (CUDA's layout): the same shapes and values
    (each member's state as its model holds it, contiguous), the same logits and gradients to rounding, each such
    weight's gradient in the weight's own layout, and not one gradient copied; in the model's layout (the CPU's),
    one copy a matmul weight."""
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    import vit.stacked
    from vit.stacked import matmul_weights

    class Copies(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += func.overloadpacket.__name__ == "copy_"
            return func(*args, **(kwargs or {}))

    cfg = TINY.replace(stem=stem)
    models = [_model(s, cfg) for s in (0, 1, 2)]
    x, y = _batch(3, 29, torch.Generator().manual_seed(1))   # 29 rows: a last, smaller batch's
    found = {}
    for order in (False, True):
        monkeypatch.setattr(vit.stacked, "MATMUL_ORDER", order)
        packed = PackedModel(models)
        packed.template.train()
        for j, model in enumerate(models):
            mine = packed.member_state(j)
            assert all(mine[k].is_contiguous() and torch.equal(mine[k], v) for k, v in model.state_dict().items())
        with Copies() as copies:
            logits = packed.forward(x)
            F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
        found[order] = (logits.detach(), {k: p.grad for k, p in packed.params.items()}, copies.n)
        names = matmul_weights(packed.template)
        assert len(names) == 2 + 4 * cfg.depth   # the stem's projection, the head, and qkv, proj, fc1, fc2 a block
        assert all((packed.params[k].grad.stride() == packed.params[k].stride()) for k in names)
        assert all(packed.params[k].is_contiguous() != order for k in names)
    assert found[False][2] == len(names) and found[True][2] == 0
    torch.testing.assert_close(found[True][0], found[False][0], rtol=1e-5, atol=1e-6)
    _close(found[True][1], found[False][1], rtol=1e-4, atol=1e-6)


def test_the_copies_a_capture_puts_back_carry_no_autograd_graph(capturable_on_cpu):
    """A pack's state tensors are its trainable leaves: the copies a capture saves before its warm-up are plain
    tensors, so they keep no gradient accumulator alive (on CUDA one kept alive from the thread's stream had the
    warm-up's backward accumulate there, not on the capture stream)."""
    graphed, _ = _graphed_and_eager(TrainConfig(grad_clip=1.0), capture=True)
    assert any(t.requires_grad for t in graphed._state_tensors())   # the leaves themselves
    model_state, optim_state = graphed._saved_state()
    assert model_state and not any(t.requires_grad or t.grad_fn is not None for t in model_state)
    assert all(torch.equal(a, b) for a, b in zip(model_state, graphed._state_tensors()))


def test_a_pack_on_the_graphed_step_trains_resumes_and_keeps_its_members_apart(digits, tmp_path, monkeypatch,
                                                                             capturable_on_cpu):
    """`train_pack` with the graphed step (as on CUDA, uncaptured here): its members are the eager pack's to float
    rounding; killed after 2 of 3 epochs it resumes from its members' checkpoints (capturable AdamW's step
    counts on the device) to the uninterrupted pack's bits; a member's bits do not depend on its pack's width."""
    import ablations.training.packed as packed_module
    monkeypatch.setattr(packed_module, "pack_graphed", lambda device, graphs: graphs)
    recipe = TrainConfig(epochs=3, batch_size=64, packed=True)
    graphed = _pack([0, 1], digits, recipe=recipe)
    monkeypatch.setattr(packed_module, "pack_graphed", lambda device, graphs: False)
    eager = _pack([0, 1], digits, recipe=recipe)
    for s in (0, 1):
        _close(graphed[s][0], eager[s][0], rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(packed_module, "pack_graphed", lambda device, graphs: graphs)
    resumed = _resume_after(digits, tmp_path / "cut", recipe, stop_after=2)
    wider = _pack([2, 1, 0], digits, recipe=recipe)
    for s in (0, 1):
        assert resumed[s][1].resumed_after == 2
        assert _same(resumed[s], graphed[s]) == []
        assert _same(wider[s], graphed[s]) == []


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_graphed_pack_trains_like_the_eager_pack_on_cuda(dtype):
    """On CUDA the packed step is captured into one CUDA graph per batch size and replayed: its members' losses
    and weights are the eager pack's to float rounding (bf16: to bf16's)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cuda = torch.device("cuda")
    recipe = TrainConfig(batch_size=64, grad_clip=1.0)
    steps = []
    for graphs in (True, False):
        packed = PackedModel([_model(s).to(cuda) for s in (0, 1, 2)])
        steps.append(packed_step(packed, pack_optimizer(packed, recipe, capturable=graphs), recipe, cuda, dtype))
    assert steps[0].graphed and not steps[1].graphed
    assert all(step.optimizer.defaults["fused"] for step in steps)   # one launch a group on CUDA
    g = torch.Generator().manual_seed(1)
    tol = {"rtol": 2e-2, "atol": 1e-3} if dtype == "bf16" else {"rtol": 1e-4, "atol": 1e-5}
    for i, b in enumerate((64, 64, 17, 64, 17)):
        x, y = (t.to(cuda) for t in _batch(3, b, g))
        losses = [step(x, y, lr=1e-3 * (i + 1)) for step in steps]
        torch.testing.assert_close(losses[0], losses[1], **tol)
    assert sorted(steps[0].graphs) == [17, 64]
    _close(steps[0].packed.params, steps[1].packed.params, **tol)
