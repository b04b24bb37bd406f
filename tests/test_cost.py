"""Side-by-side cost: interleaved order, medians and IQRs recomputed from the rows, ratios suppressed
inside the noise, and a cost phase that is reused when complete and measured again whole when not."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import write_spec
from helpers import run_cost_phase

from ablations.results.schema import read_table, uncontended
from ablations.results.store import model_key, row_figures
from ablations.running.cost import CostPlan
from ablations.specs import Point
from bench.env import cudnn_attention, run_id
from bench.rounds import Spread, interleaved, ratio_or_noise
from bench.timing import TimingConfig
from bench.training.recipe import TrainConfig
from vit import ViTConfig

TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)
PLAN = CostPlan(rounds=3, infer_batch_size=8, timing=TimingConfig(warmup=1, min_repeats=2, min_time_s=0.0),
                measure_mfu=False)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


def test_interleaved_rounds_measure_every_item_once_per_round_with_a_rotating_start():
    order = list(interleaved(["a", "b", "c"], 4))
    assert [item for _, item in order] == list("abc" "bca" "cab" "abc")
    assert [r for r, _ in order] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    with pytest.raises(ValueError, match="rounds"):
        list(interleaved(["a"], 0))


def test_spread_is_median_and_quartiles_and_skips_failed_rounds():
    s = Spread.of([5.0, 1.0, 3.0, float("nan"), 2.0, 4.0])
    assert (s.median, s.q1, s.q3, s.n) == (3.0, 2.0, 4.0, 5)
    assert s.iqr == 2.0 and Spread.of([]).n == 0


def test_throughput_ratio_is_printed_only_where_a_t_test_of_the_rounds_calls_them_different():
    fast, slow = Spread.of([200, 210, 205, 198, 202]), Spread.of([100, 104, 99, 101, 103])
    noisy = Spread.of([150, 260, 180, 210, 120])
    assert ratio_or_noise(slow, fast) == f"×{101 / 202:.2f}"
    assert ratio_or_noise(noisy, fast) == "same within noise"
    assert ratio_or_noise(fast, Spread.of([])) == "not measured"


def test_items_timed_in_the_same_rounds_are_compared_round_by_round_and_else_by_welch():
    """Each round is 2 % faster than the last for both (drift) and b is 3 % faster than a in every round: their
    IQRs are apart, yet over rounds alone the three figures cannot tell a 3 % difference from the drift (Welch's
    p ≈ 0.14); round by round the difference is the same each time, so it is called."""
    from scipy import stats

    a_rates, b_rates = [100.0, 102.0, 104.0], [103.0, 105.0, 107.0]
    a, b = Spread.of(a_rates, rounds=[0, 1, 2]), Spread.of(b_rates, rounds=[0, 1, 2])
    assert b.p_value(a) == pytest.approx(stats.ttest_rel(np.log(b_rates), np.log(a_rates)).pvalue, rel=1e-12)
    assert b.p_value(a) < 1e-3 and ratio_or_noise(b, a) == f"×{105 / 102:.2f}"
    alone_a, alone_b = Spread.of(a_rates), Spread.of(b_rates)   # no rounds named: Welch over the figures
    welch = stats.ttest_ind(np.log(b_rates), np.log(a_rates), equal_var=False).pvalue
    assert alone_b.p_value(alone_a) == pytest.approx(welch, rel=1e-12) and 0.05 < welch < 0.5
    assert alone_b.q1 > alone_a.q3 and ratio_or_noise(alone_b, alone_a) == "same within noise"
    # rounds shared by fewer than MIN_ROUNDS: Welch; rounds dropped with a failed (NaN) figure
    other = Spread.of(b_rates, rounds=[0, 7, 8])
    assert other.p_value(a) == pytest.approx(welch, rel=1e-12)
    assert Spread.of([1.0, float("nan"), 3.0], rounds=["x", "y", "z"]).rounds == ("x", "z")
    with pytest.raises(ValueError, match="3 values but 2 rounds"):
        Spread.of([1.0, 2.0, 3.0], rounds=[0, 1])


def test_a_figure_that_never_varies_is_compared_exactly():
    """A step's peak memory is the same every round: one figure a side is enough (least=1), a difference of any
    size is a ratio, and equal figures are the same."""
    assert ratio_or_noise(Spread.of([20.0]), Spread.of([10.0]), least=1) == "×2.00"
    assert ratio_or_noise(Spread.of([10.0, 10.0, 10.0], rounds=[0, 1, 2]),
                          Spread.of([10.0, 10.0, 10.0], rounds=[0, 1, 2])) == "same within noise"
    assert ratio_or_noise(Spread.of([10.5, 10.5, 10.5], rounds=[0, 1, 2]),
                          Spread.of([10.0, 10.0, 10.0], rounds=[0, 1, 2])) == "×1.05"


def _timings(rng, n, ratio, drift, noise, spike):
    """Two items' figures over n interleaved rounds: a drift shared by the round, each item's own noise, and in a
    share `spike` of its rounds another process's load that makes it 1.5× slower; b is `ratio` × a."""
    shared = rng.normal(0, drift, n)
    one = lambda: shared + rng.normal(0, noise, n) - np.where(rng.random(n) < spike, np.log(1.5), 0)  # noqa: E731
    return Spread.of(np.exp(one()), range(n)), Spread.of(np.exp(one() + np.log(ratio)), range(n))


@pytest.mark.parametrize("drift, noise, spike, power", [(0.0, 0.05, 0.0, 0.85), (0.10, 0.03, 0.0, 0.95),
                                                         (0.02, 0.03, 0.1, 0.3)], ids=["steady", "drifting", "loaded"])
def test_the_speed_test_calls_one_speed_different_at_about_alpha_and_a_real_difference_as_often_as_it_can(
        drift, noise, spike, power):
    """Known answers in the regime the report speaks about (3 to 9 interleaved rounds): two items of one speed
    are called different in at most about α = 5 % of comparisons at every round count (whether two IQRs are apart
    calls them so in a third at 3 rounds and a fifth at 5), and a 10 % difference is called in most comparisons
    at 9 rounds, also where the rounds drift by more than the difference (where disjoint IQRs find it in a third)."""
    rng = np.random.default_rng(7)
    trials = 1000
    for n in (3, 5, 9):
        false = np.mean([a.apart(b) for a, b in (_timings(rng, n, 1.0, drift, noise, spike) for _ in range(trials))])
        assert false <= 0.07, (n, false)
    found = np.mean([a.apart(b) for a, b in (_timings(rng, 9, 1.10, drift, noise, spike) for _ in range(trials))])
    assert found >= power, found


@pytest.fixture
def phase_clock(monkeypatch):
    """The cost phase's budget clock, moved by the test alone: each timed step takes `step_s` seconds of it and
    `advance(s)` adds more, whatever the machine's load. Returns the clock as a dict (`now`, `step_s`)."""
    from ablations.running import cost

    clock = {"now": 1000.0, "step_s": 0.0}
    monkeypatch.setattr(cost._Clock, "now", staticmethod(lambda: clock["now"]))
    real = cost._measure_item

    def timed(*args, **kwargs):
        clock["now"] += clock["step_s"]
        return real(*args, **kwargs)
    monkeypatch.setattr(cost, "_measure_item", timed)
    return clock


def points():
    train = TrainConfig(epochs=1, batch_size=16)
    return [Point("c", "depth", d, TINY.replace(depth=d), train) for d in (1, 2)]


def test_cost_phase_rows_are_per_point_mode_and_round_and_reused_when_complete(tmp_path):
    csv = tmp_path / "c-cost.csv"
    phase = run_cost_phase("c", points(), PLAN, torch.device("cpu"), csv, progress=False)
    table = read_table(csv)
    assert len(table) == len(phase) == 3 * 2 * 2 and (table["status"] == "ok").all()
    assert table["phase_id"].nunique() == 1
    assert sorted(table.groupby(["depth", "mode"]).size().unique()) == [3]  # every point and mode, every round
    assert set(table.loc[table["mode"] == "train", "batch_size"]) == {16}
    assert set(table.loc[table["mode"] == "infer", "batch_size"]) == {8}
    # memory is taken once (round 0), time every round
    assert table.loc[table["round"] == 0, "peak_mem_mb"].notna().all()
    assert table.loc[table["round"] > 0, "peak_mem_mb"].isna().all()
    # the training steps come first (they set an auto budget); round r starts with item r mod 4: the order rotates
    firsts = table.groupby("round").head(1)[["depth", "mode"]].apply(tuple, axis=1).tolist()
    assert firsts == [(1, "train"), (2, "train"), (1, "infer")]

    again = run_cost_phase("c", points(), PLAN, torch.device("cpu"), csv, progress=False)
    assert len(read_table(csv)) == 12 and len(again) == 12  # complete: reused, nothing measured


def test_a_phase_cut_short_is_measured_again_whole(tmp_path):
    csv = tmp_path / "c-cost.csv"
    run_cost_phase("c", points(), PLAN, torch.device("cpu"), csv, progress=False)
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[:-3]))  # killed during the last round
    phase = run_cost_phase("c", points(), PLAN, torch.device("cpu"), csv, progress=False)
    table = read_table(csv)   # the 9 rows of the attempt cut short are gone: no round mixes two sittings
    assert len(phase) == 12 and len(table) == 12 and table["phase_id"].nunique() == 1


def test_one_phase_over_several_sweeps_times_a_shared_model_once_and_writes_each_sweep_its_rows(tmp_path,
                                                                                                monkeypatch):
    import ablations.running.cost as cost_module
    from ablations.results.store import newest_complete_phase
    from ablations.running.cost import run_cost_phases

    measured = []
    real = cost_module._measure_item

    def counting(item, *args):
        measured.append((item.cfg.depth, item.mode))
        return real(item, *args)
    monkeypatch.setattr(cost_module, "_measure_item", counting)
    train = TrainConfig(epochs=1, batch_size=16)
    a = [Point("a", "depth", d, TINY.replace(depth=d), train) for d in (1, 2)]
    b = [Point("b", "depth", d, TINY.replace(depth=d), train) for d in (2, 3)]
    csvs = {s: tmp_path / f"{s}-cost.csv" for s in "ab"}
    phases = run_cost_phases([("a", a, csvs["a"]), ("b", b, csvs["b"])], PLAN, torch.device("cpu"), progress=False)
    assert sorted(measured) == sorted([(d, m) for d in (1, 2, 3) for m in ("infer", "train")] * 3)  # depth 2 once
    tables = {s: read_table(csv) for s, csv in csvs.items()}
    for s, depths in (("a", {1, 2}), ("b", {2, 3})):
        table = tables[s]
        assert len(table) == len(phases[s]) == 3 * 2 * 2 and set(table["depth"]) == depths
        assert (table["sweep"] == s).all() and (table["phase_items"] == 4).all()
        assert len(newest_complete_phase(table)) == 12   # complete by the report's own rule
    assert tables["a"]["phase_id"].iloc[0] == tables["b"]["phase_id"].iloc[0]
    shared = [t[t["depth"] == 2].drop(columns=["sweep"]).reset_index(drop=True) for t in tables.values()]
    pd.testing.assert_frame_equal(*shared)   # the same measurement in both tables
    again = run_cost_phases([("a", a, csvs["a"]), ("b", b, csvs["b"])], PLAN, torch.device("cpu"), progress=False)
    assert len(measured) == 18 and {s: len(t) for s, t in again.items()} == {"a": 12, "b": 12}  # reused
    lines = csvs["b"].read_text().splitlines(keepends=True)
    csvs["b"].write_text("".join(lines[:-1]))   # killed between the two tables' copies of the last row
    run_cost_phases([("a", a, csvs["a"]), ("b", b, csvs["b"])], PLAN, torch.device("cpu"), progress=False)
    assert len(measured) == 36 and [len(read_table(csv)) for csv in csvs.values()] == [12, 12]


def test_row_figures_are_the_medians_over_rounds_of_the_phase_rows(tmp_path):
    csv = tmp_path / "c-cost.csv"
    run_cost_phase("c", points(), PLAN, torch.device("cpu"), csv, progress=False)
    table = read_table(csv)
    figures = row_figures(table)
    for p in points():
        rows = uncontended(table[(table["depth"] == p.model.depth) & (table["mode"] == "infer")])
        got = figures[model_key(p.model)]
        assert got["throughput_img_s"] == pytest.approx(np.median(rows["throughput_img_s"]))
        assert got["step_ms_median"] == pytest.approx(np.median(rows["step_ms_median"]))
        q1, q3 = np.percentile(rows["step_ms_median"], [25, 75])
        assert got["step_ms_iqr"] == pytest.approx(q3 - q1)
        assert got["peak_mem_mb"] == pytest.approx(rows["peak_mem_mb"].dropna().iloc[0])
        assert got["cost_rounds"] == 3 and got["infer_batch_size"] == 8 and "batch_size" not in got and "mode" not in got


def test_the_cost_phase_times_the_training_step_that_training_runs(tmp_path, monkeypatch):
    """The train rows time `bench.training.step.make_step`'s step under each point's own TrainConfig and GRAPHS, not
    a generic step: on CUDA that is the graphed step the runs train with."""
    import bench.training.step as step_module
    from bench.training.step import EagerStep, param_groups

    built = []

    def spy(model, compiled, optimizer, scaler, cfg, device, dtype, graphs, measured=False):
        assert measured   # the cost phase's captures take their own memory
        step = real(model, compiled, optimizer, scaler, cfg, device, dtype, graphs, measured)
        groups = len(param_groups(model, cfg.weight_decay, cfg.layer_decay))  # what `train` builds for this model
        built.append((cfg, graphs, len(optimizer.param_groups) == groups, type(step)))
        return step
    real = step_module.make_step
    monkeypatch.setattr(step_module, "make_step", spy)
    train = TrainConfig(epochs=1, batch_size=16, label_smoothing=0.1, grad_clip=1.0, weight_decay=0.05)
    pts = [Point("c", "depth", d, TINY.replace(depth=d), train) for d in (1, 2)]
    csv = tmp_path / "c-cost.csv"
    for graphs in (True, False):  # a phase measured under the other GRAPHS is not reused
        run_cost_phase("c", pts, PLAN, torch.device("cpu"), csv, progress=False, graphs=graphs)
    table = read_table(csv)
    assert len(built) == 2 * 3 * 2 and table["phase_id"].nunique() == 2 and (table["status"] == "ok").all()
    assert all(cfg == train and step is EagerStep for cfg, _, _, step in built)  # the CPU step is the eager one
    assert [g for _, g, _, _ in built] == [True] * 6 + [False] * 6
    assert all(same_groups for _, _, same_groups, _ in built)  # AdamW over training's parameter groups


def test_cost_items_are_timed_for_their_device_unless_the_plan_says_how():
    from ablations.running.cost import CPU_TIMING, CUDA_TIMING, _items

    for device, timing in ((torch.device("cpu"), CPU_TIMING), (torch.device("cuda"), CUDA_TIMING)):
        items = _items(points(), CostPlan(), device)   # no GPU touched: the plan only
        assert len(items) == 4 and all(item.mcfg.timing == timing for item in items)
        assert all(item.mcfg.timing == PLAN.timing for item in _items(points(), PLAN, device))
    assert CUDA_TIMING.min_time_s < CPU_TIMING.min_time_s and CUDA_TIMING.min_repeats > CPU_TIMING.min_repeats


def test_a_cuda_phase_with_cudnn_attention_off_is_another_sitting_and_one_left_on_keeps_its_id(monkeypatch):
    from ablations.running import cost

    monkeypatch.setattr(cost, "environment", lambda device: {"device_name": "NVIDIA H200", "torch_version": "2.11"})
    items, cuda = cost._items(points(), CostPlan(), torch.device("cuda")), torch.device("cuda")
    with cudnn_attention("auto"):   # torch's flag as it was afterwards
        on = cost.phase_id(["a"], items, CostPlan(), cuda)
        torch.backends.cuda.enable_cudnn_sdp(False)
        off = cost.phase_id(["a"], items, CostPlan(), cuda)
        cpu = cost.phase_id(["a"], cost._items(points(), CostPlan(), torch.device("cpu")), CostPlan(), torch.device("cpu"))
        torch.backends.cuda.enable_cudnn_sdp(True)
        assert cpu == cost.phase_id(["a"], cost._items(points(), CostPlan(), torch.device("cpu")), CostPlan(),
                                    torch.device("cpu"))   # the CPU's kernels do not read the flag
    # the id a CUDA phase had before the setting existed: the same fields, nothing added while cuDNN's kernel is on
    env = {"device_name": "NVIDIA H200", "torch": "2.11"}
    assert on == run_id({"sweep": "a", "items": [(i.cfg.identity(), dataclasses.asdict(i.mcfg)) for i in items],
                         "train": [i.train.identity() for i in items if i.mode == "train"], "graphs": True,
                         "rounds": CostPlan().rounds, **env})
    assert off != on


@pytest.mark.parametrize("kwargs,message", [({"rounds": -1}, "cost rounds"), ({"rounds": 1.5}, "cost rounds"),
                                            ({"infer_batch_size": 0}, "infer batch size"),
                                            ({"budget_s": -1}, "cost budget"), ({"budget_s": "10"}, "cost budget"),
                                            ({"budget_s": float("nan")}, "cost budget")])
def test_bad_cost_plans_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CostPlan(**kwargs)


def test_cli_refuses_bad_cost_rounds_and_repeated_seeds_before_any_work(tmp_path, capsys):
    from ablations.__main__ import main

    for args, message in ((["--cost-rounds", "-2"], "cost rounds"), (["--seeds", "0,1,0"], "seeds name a seed twice"),
                          (["--cost-budget", "-5"], "cost budget must be auto or a number of seconds ≥ 0"),
                          (["--cost-budget", "ten"], "cost budget must be auto")):
        with pytest.raises(SystemExit) as info:
            main(["sweep", "depth", "--dataset", "digits", "--out", str(tmp_path), *args])
        assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "ablations").exists()


@pytest.mark.parametrize("keep", [False, True])
def test_kept_steps_are_built_once_per_phase_and_run_in_their_own_mode(tmp_path, monkeypatch, keep):
    import dataclasses

    import ablations.running.cost as cost

    builds, modes = [], []

    def watched(real, kind):
        def factory(*args, **kwargs):
            build = real(*args, **kwargs)

            def built(model, images, labels):
                step, alive = build(model, images, labels)
                builds.append(model.training)
                return (lambda: (modes.append((kind, model.training)), step())[1]), alive
            return built
        return factory

    monkeypatch.setattr(cost, "training_step", watched(cost.training_step, "train"))
    monkeypatch.setattr(cost, "default_step", watched(cost.default_step, "infer"))
    plan = dataclasses.replace(PLAN, keep_steps=keep)
    rows = run_cost_phase("c", points(), plan, torch.device("cpu"), tmp_path / "c-cost.csv", progress=False)
    assert len(rows) == 12 and (rows["status"] == "ok").all() and rows["step_ms_median"].notna().all()
    assert len(builds) == (4 if keep else 12)      # 2 models × (infer, train), once per phase or every round
    assert sorted(builds) == [False] * (len(builds) // 2) + [True] * (len(builds) // 2)
    # a kept step of a model whose other item ran in between still runs in its own mode
    assert {kind for kind, _ in modes} == {"train", "infer"}
    assert all(training == (kind == "train") for kind, training in modes)
    trained = rows[rows["mode"] == "train"]
    assert trained["peak_mem_mb"].notna().sum() == 2


def test_kept_steps_let_the_least_recently_timed_go_when_the_device_is_crowded(monkeypatch):
    from ablations.running.cost import Steps

    steps = Steps(torch.device("cpu"), keep=True)
    crowded = iter([False, True, True])
    monkeypatch.setattr(steps, "_crowded", lambda: next(crowded))
    made = []

    def build(name):
        return lambda model, x, y: (made.append(name) or (name, []))
    for name in ("a", "b", "c"):
        steps.factory(name, build(name), lambda m: None)(None, None, None)
    assert list(steps.built) == ["c"] and made == ["a", "b", "c"]   # b evicted a; c evicted b
    steps.factory("c", build("c"), lambda m: None)(None, None, None)
    assert made == ["a", "b", "c"]                                  # kept: not built again


def test_a_let_go_step_hands_its_memory_back_so_the_others_stay_kept(monkeypatch):
    from ablations.running.cost import Steps

    # a 100 MB device whose reserved memory falls only when the cache is emptied, as CUDA's does
    device = {"reserved": 0, "live": 0}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("P", (), {"total_memory": 100})())
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: device["reserved"])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: device.update(reserved=device["live"]))

    class Tensors:   # a step's memory: 20 MB while anything holds it
        def __init__(self):
            device["live"] += 20
            device["reserved"] = max(device["reserved"], device["live"])

        def __del__(self):
            device["live"] -= 20

    steps = Steps(torch.device("cuda"), keep=True)
    for name in "abcde":   # a third step passes half the device: the oldest goes, and its memory with it
        steps.factory(name, lambda model, x, y: (None, [Tensors()]), lambda m: None)(None, None, None)
    assert list(steps.built) == ["d", "e"]   # without the cache emptied: only the newest would stay


# --- the budget ------------------------------------------------------------------------------------

def test_the_budget_is_a_share_of_the_expected_training_within_a_floor_and_a_cap():
    from ablations.running.cost import BUDGET_CAP_S, BUDGET_FLOOR_S, BUDGET_SHARE

    plan = CostPlan()
    assert plan.budget(1000.0) == pytest.approx(BUDGET_SHARE * 1000.0)
    assert plan.budget(1.0) == BUDGET_FLOOR_S and plan.budget(1e6) == BUDGET_CAP_S and plan.budget(None) == BUDGET_CAP_S
    assert CostPlan(budget_s=12.5).budget(1e6) == 12.5


def test_a_small_budget_plans_fewer_rounds_and_the_rows_say_how_many(tmp_path, capsys, phase_clock):
    """Rounds of 4 steps at 0.01 s each (the phase's clock) in a 0.5 s budget: the first takes 0.04 s, so 12 fit
    (1 + 0.46 // 0.04), not the 20 asked for, and every row says 12."""
    plan = dataclasses.replace(PLAN, rounds=20, timing=None, budget_s=0.5)
    phase_clock["step_s"] = 0.01
    rows = run_cost_phase("c", points(), plan, torch.device("cpu"), tmp_path / "c-cost.csv")
    err = capsys.readouterr().err
    taken = int(rows["rounds"].iloc[0])
    assert taken == 12 and len(rows) == taken * 4 and (rows["rounds"] == taken).all()
    assert sorted(set(rows["round"])) == list(range(12))
    assert f"cost c: {taken} rounds of 4 timed steps in " in err and "(budget 0.5 s)" in err
    again = run_cost_phase("c", points(), plan, torch.device("cpu"), tmp_path / "c-cost.csv")
    assert again["run_id"].tolist() == rows["run_id"].tolist()   # complete as it stands: a rerun reuses it


def test_a_busy_cpu_keeps_measuring_and_its_rounds_are_read_by_cpu_time(tmp_path, monkeypatch, capsys):
    """Every timed region sees other processes take the whole machine (a faked /proc/stat, the meter's input): on
    the CPU the phase keeps its planned rounds, each row contended and carrying its CPU time; the spreads the
    report reads are CPU-time figures (the step's CPU milliseconds, the throughput they give), and it says so."""
    from ablations.analysis.findings import _cost_source
    from ablations.results.store import spreads
    from bench import contention

    clock = {"busy": 0.0}

    def busy_cpus() -> float:
        clock["busy"] += 1e6
        return clock["busy"]
    monkeypatch.setattr(contention, "_cpu_busy_s", busy_cpus)
    rows = run_cost_phase("c", points(), dataclasses.replace(PLAN, rounds=3, budget_s=60.0), torch.device("cpu"),
                          tmp_path / "c-cost.csv")
    assert set(rows["round"]) == {0, 1, 2} and rows["contended"].eq(1).all()
    assert rows["cpu_step_ms_median"].gt(0).all()
    phase = read_table(tmp_path / "c-cost.csv")
    figures = spreads(phase[phase["depth"] == 1], ["mode"])[("train",)]
    train = phase[(phase["depth"] == 1) & (phase["mode"] == "train")]
    assert figures["step_ms_median"].median == pytest.approx(train["cpu_step_ms_median"].median())
    assert figures["throughput_img_s"].median == pytest.approx((16 / (train["cpu_step_ms_median"] / 1e3)).median())
    assert all(figures[c].n == 0 for c in ("step_ms_p50", "step_ms_p90", "step_ms_p99", "util_pct") if c in figures)
    source = _cost_source(phase, phase)
    assert source.cpu_time and source.loaded == len(phase)
    from ablations.analysis.wording import cost_source
    assert "CPU-time figures measured under load" in cost_source(source)
    assert "no cost phase" not in capsys.readouterr().err


def test_on_cuda_a_first_round_under_load_stops_the_phase_as_before():
    """On CUDA the host's CPU time says nothing of the device: a first round whose first timed steps all ran under
    load abandons the phase, and one mostly under load stops it after that round."""
    from ablations.running.cost import BUSY_ITEMS, _Clock

    loaded = [("i", None, {"contended": 1, "other_cpu_pct": 80.0}) for _ in range(BUSY_ITEMS)]
    early = _Clock(PLAN, None, [], torch.device("cuda"))
    assert early.busy(loaded, early=True) and early.abandoned and "stopped there and keeps nothing" in early.stopped
    mostly = _Clock(PLAN, None, [], torch.device("cuda"))
    assert mostly.busy(loaded + [("j", None, {"contended": 0})]) and not mostly.abandoned
    cpu = _Clock(PLAN, None, [], torch.device("cpu"))
    assert not cpu.busy(loaded, early=True) and not cpu.stopped


def test_the_cost_budget_is_planned_from_quiet_steps_so_it_does_not_grow_with_the_load():
    from ablations.running.cost import _Clock, _Item

    pts = points()
    item = _Item(pts[0].model, "train", type("M", (), {"batch_size": pts[0].train.batch_size})(), pts[0].train)
    clock = _Clock(dataclasses.replace(PLAN, budget_s=None), (1000, 3), pts[:1], torch.device("cpu"))
    quiet = clock.expected_training_s([("i", item, {"status": "ok", "step_ms_median": 10.0, "contended": 0})])
    loaded = clock.expected_training_s([("i", item, {"status": "ok", "step_ms_median": 100.0, "contended": 1})])
    assert quiet > 0 and loaded == 0      # a step slowed by other work does not stretch the budget
    by_cpu = clock.expected_training_s([("i", item, {"status": "ok", "step_ms_median": 100.0, "contended": 1,
                                                     "cpu_step_ms_median": 10.0})])
    assert by_cpu == pytest.approx(quiet)   # under load on the CPU, its CPU time: what the step costs


def test_a_cost_budget_is_auto_before_training_and_no_limit_for_the_cost_command():
    from ablations.running.cost import BUDGET_CAP_S, BUDGET_FLOOR_S, BUDGET_SHARE

    auto = CostPlan.before_training(3, None)
    assert (auto.rounds, auto.budget_s) == (3, None)
    assert auto.budget(100.0) == max(BUDGET_FLOOR_S, BUDGET_SHARE * 100.0) and auto.budget(None) == BUDGET_CAP_S
    assert auto.budget(1e6) == BUDGET_CAP_S
    assert CostPlan.before_training(3, 0).rounds == 0                   # 0 s: no phase, the runs still train
    assert CostPlan.before_training(3, 7.5).budget(1e6) == 7.5
    assert CostPlan.standalone(3, None).budget(None) == float("inf")    # nothing trains after it
    assert CostPlan.standalone(2, 30).budget(None) == 30
    for rounds, budget in ((0, None), (3, 0)):
        with pytest.raises(ValueError, match="must be above 0 to measure anything"):
            CostPlan.standalone(rounds, budget)


@pytest.mark.slow
def test_make_cost_measures_an_out_trained_without_a_cost_phase_and_the_report_shows_it(tmp_path, capsys):
    from ablations.__main__ import main
    from ablations.analysis.report import build_report
    from ablations.results.store import SweepPaths

    spec = write_spec(tmp_path / "cz.toml", "depth", "[1, 2]", "embed_dim = 16\nnum_heads = 2", "epochs = 1\nbatch_size = 256")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--dataset", "digits", "--seeds", "0,1", "--out", str(out), "--cost-budget", "0"]) == 0
    rows = read_table(SweepPaths.of(out, "cz").rows)
    assert rows["throughput_img_s"].isna().all() and not SweepPaths.of(out, "cz").cost.exists()
    assert "infer img/s" in build_report(out, reference=None).read_text()
    assert main(["cost", "--out", str(out), "--cost-rounds", "3"]) == 0
    assert "2 points measured, speed written into 4 rows" in capsys.readouterr().out
    rows = read_table(SweepPaths.of(out, "cz").rows)
    assert rows["throughput_img_s"].notna().all() and (rows["cost_rounds"] == 3).all()
    section = build_report(out, reference=None).read_text().split("## cz", 1)[1]
    speed = section.split("| depth | seeds |", 1)[1].split("\n\n", 1)[0]
    assert "| 1 | " in speed and not [line for line in speed.splitlines() if line.endswith("| — | — |")]
    assert main(["cost", "--out", str(tmp_path / "missing")]) == 2
    assert f"--out {tmp_path / 'missing'}: no such folder; pass the OUT folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["cost", "--out", str(tmp_path / "empty")]) == 2
    assert "no finished run under" in capsys.readouterr().err


def test_make_cost_times_only_the_points_of_the_experiment_the_report_shows(tmp_path, capsys):
    """A table holding an older experiment (1 epoch) and the newest (2 epochs): the report shows the newest,
    and `cost` times its points alone."""
    from ablations.__main__ import main

    spec = write_spec(tmp_path / "cs.toml", "depth", "[1, 2]", "embed_dim = 16\nnum_heads = 2",
                      "epochs = 1\nbatch_size = 256")
    out = tmp_path / "out"
    common = [str(spec), "--dataset", "digits", "--seeds", "0", "--out", str(out), "--cost-budget", "0"]
    assert main(["sweep", *common]) == 0
    assert main(["sweep", *common, "--epochs", "2"]) == 0
    capsys.readouterr()
    assert main(["cost", "--out", str(out), "--cost-rounds", "3"]) == 0
    assert "2 points measured, speed written into 4 rows" in capsys.readouterr().out   # a model's speed fills both


def test_make_cost_fills_every_speed_column_a_sweeps_own_phase_fills(tmp_path, capsys):
    from ablations.__main__ import main
    from ablations.results.schema import ABLATION_COLUMNS
    from ablations.results.store import SweepPaths, row_figures

    spec = write_spec(tmp_path / "cf.toml", "depth", "[1]", "embed_dim = 16\nnum_heads = 2", "epochs = 1\nbatch_size = 256")
    common = ["--dataset", "digits", "--seeds", "0", "--cost-rounds", "3"]
    assert main(["sweep", str(spec), *common, "--out", str(tmp_path / "with")]) == 0             # its own phase
    assert main(["sweep", str(spec), *common, "--out", str(tmp_path / "later"), "--cost-budget", "0"]) == 0
    assert main(["cost", "--out", str(tmp_path / "later"), "--cost-rounds", "3"]) == 0            # measured later
    own = read_table(SweepPaths.of(tmp_path / "with", "cf").rows).iloc[0]
    later = read_table(SweepPaths.of(tmp_path / "later", "cf").rows).iloc[0]
    phase = read_table(SweepPaths.of(tmp_path / "later", "cf").cost)
    figures = [k for k in next(iter(row_figures(phase).values())) if k in ABLATION_COLUMNS]
    filled = {k for k in figures if str(own.get(k, "")) not in ("", "nan")}
    assert {"step_ms_p50", "step_ms_p90", "step_ms_p99", "throughput_img_s", "mfu"} <= filled
    assert filled == {k for k in figures if str(later.get(k, "")) not in ("", "nan")}


def test_make_cost_and_migrate_set_a_torn_last_line_aside_and_refuse_a_broken_table_before_measuring(tmp_path, capsys):
    """A table ending in a torn line (an interrupted append): `cost` and `migrate` set it aside as an append
    would and go on. A line inside the table that is not a row: one line naming it, before any measurement."""
    from ablations.__main__ import main
    from ablations.results.store import SweepPaths

    spec = write_spec(tmp_path / "ct.toml", "depth", "[1]", "embed_dim = 16\nnum_heads = 2", "epochs = 1\nbatch_size = 256")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--dataset", "digits", "--seeds", "0", "--out", str(out), "--cost-budget", "0"]) == 0
    paths = SweepPaths.of(out, "ct")
    whole = paths.rows.read_bytes()
    with paths.rows.open("ab") as f:
        f.write(b"0123456789ab,2026-11-25T00:00")          # cut by a kill: no line break
    assert main(["migrate", "--out", str(out)]) == 0
    assert paths.rows.read_bytes() == whole and paths.rows.with_name("ct.csv.quarantine").exists()
    with paths.rows.open("ab") as f:
        f.write(b"0123456789ab,2026-11-25T00:00")
    capsys.readouterr()
    assert main(["cost", "--out", str(out), "--cost-rounds", "1", "--cost-budget", "5"]) == 0
    assert "1 point measured, speed written into 1 row" in capsys.readouterr().out
    assert read_table(paths.rows)["throughput_img_s"].notna().all()
    text = paths.rows.read_text().splitlines()
    paths.rows.write_text("\n".join([*text[:1], "a,b", *text[1:]]) + "\n")   # a broken line inside
    phases = paths.cost.read_bytes()
    assert main(["cost", "--out", str(out), "--cost-rounds", "1", "--cost-budget", "5"]) == 2
    err = capsys.readouterr().err
    assert "ct.csv: line 2 is not a row of its header (2 cells" in err and err.count("\n") == 1
    assert paths.cost.read_bytes() == phases    # nothing measured
    assert main(["migrate", "--out", str(out)]) == 2


def test_a_budget_that_fits_fewer_than_three_rounds_is_no_phase_said_in_one_line(phase_clock):
    """Fewer than MIN_ROUNDS rounds compare nothing: a budget that fits fewer keeps no phase and says why, rather
    than one round that leaves every cell 'not compared'."""
    from ablations.running.cost import _Clock

    clock = _Clock(CostPlan(rounds=5, budget_s=10.0), None, [], torch.device("cpu"))
    clock.start = phase_clock["now"] - 18.0      # the first round took 18 s
    assert clock.plan_rounds([], items=4) == 1
    assert clock.stopped.startswith("no cost phase: its first round took 18.0 s, so its 10 s budget (COST_BUDGET) fits "
                                    "1 of the 3 rounds")
    slow = _Clock(CostPlan(rounds=5, budget_s=10.0), None, [], torch.device("cpu"))
    slow.start = phase_clock["now"] - 4.0
    assert slow.plan_rounds([], items=4) == 2 and "no cost phase" in slow.stopped
    quick = _Clock(CostPlan(rounds=5, budget_s=10.0), None, [], torch.device("cpu"))
    quick.start = phase_clock["now"] - 3.0
    assert quick.plan_rounds([], items=4) == 3 and quick.stopped.startswith("its 10 s budget")


def test_an_auto_budget_short_of_three_rounds_is_raised_to_them_only_where_they_are_a_small_share_of_the_training(
        phase_clock):
    """A GPU's main job: rounds of ~1.8 s against ~45 s of training, whose 10 % (4.5 s) fits two. Three rounds are
    12 % of the training: the auto budget is raised to them, and the line says so. Where three rounds would be more
    than RAISED_SHARE_MAX of the training, or the budget was given, there is no phase."""
    from ablations.running.cost import RAISED_SHARE_MAX, _Clock

    def clock(expected, budget=None):
        c = _Clock(CostPlan(rounds=5, budget_s=budget), (1000, 3), [], torch.device("cpu"))
        c.expected_training_s = lambda first_round: expected
        c.start = phase_clock["now"] - 1.8          # the first (warmed) round took 1.8 s
        return c

    raised = clock(45.0)
    assert raised.plan_rounds([], items=18) == 3 and raised.budget_s == pytest.approx(5.4, rel=0.05)
    assert "raised from 4.5 s (10 % of the runs' expected training) to the 3 rounds a comparison needs, 12 % of it" \
        in raised.stopped and "no cost phase" not in raised.stopped
    dear = clock(3 * 1.8 / RAISED_SHARE_MAX / 1.5)   # three rounds would be 1.5 × the share allowed
    assert dear.plan_rounds([], items=18) < 3 and "no cost phase" in dear.stopped and "raised" not in dear.stopped
    given = clock(45.0, budget=4.5)
    assert given.plan_rounds([], items=18) == 2 and "no cost phase" in given.stopped


def test_a_first_round_stops_once_its_training_steps_show_the_auto_budget_cannot_fit_three_rounds(
        tmp_path, monkeypatch, capsys, phase_clock):
    """A quick pass whose runs train for less than the first round lasts (an image folder at 1 epoch: 4.9 s of
    training, first round 13 s): once the training steps, timed first, put the auto budget at its 2 s floor and the
    round has passed a third of it, the inference steps are not timed; where three rounds could still be raised to
    (a small share of a long training) the round goes on."""
    import dataclasses

    from ablations.running import cost

    timed = []
    real = cost._measure_item

    def counted(item, *args, **kwargs):
        timed.append(item.mode)
        return real(item, *args, **kwargs)
    monkeypatch.setattr(cost, "_measure_item", counted)
    phase_clock["step_s"] = 1.0     # each step of the first round: 1 s on the budget's clock
    auto = dataclasses.replace(PLAN, budget_s=None, timing=None)
    csv = tmp_path / "c-cost.csv"
    kept = cost.run_cost_phases([("c", points(), csv)], auto, torch.device("cpu"), workload=(32, 1))
    said = capsys.readouterr().err
    assert kept["c"].empty and timed == ["train", "train"], timed
    assert "no cost phase: its first round passed 2.0 s after 2 of its 4 timed steps, so its 2 s budget (COST_BUDGET, " \
        "10 % of the runs' expected training) fits fewer than the 3 rounds" in said
    timed.clear()
    cost.GIVEN_UP.clear()
    one = cost.run_cost_phases([("c", points(), tmp_path / "e-cost.csv")], dataclasses.replace(auto, rounds=1),
                               torch.device("cpu"), workload=(32, 1), progress=False)
    assert timed == ["train", "train", "infer", "infer"] and len(one["c"]) == 4   # one round asked for: kept
    timed.clear()
    long = cost.run_cost_phases([("c", points(), tmp_path / "d-cost.csv")], auto, torch.device("cpu"),
                                workload=(10 ** 7, 100), progress=False)
    assert timed[:4] == ["train", "train", "infer", "infer"] and len(long["c"]) == 3 * 4


def test_kept_steps_are_set_up_outside_the_budget_and_a_phase_short_of_three_rounds_keeps_nothing(tmp_path, monkeypatch,
                                                                                                   capsys, phase_clock):
    """Steps kept across rounds (CUDA's captured graphs; here asked for on the CPU) are built and warmed up before
    the clock starts: a set-up of 50 s against a 1.5 s budget still leaves the 3 rounds of 0.4 s it plans
    (1 + 1.1 // 0.4). A budget too short for three rounds writes no row and says so in one line."""
    from ablations.running import cost

    real = cost._Sitting.set_up

    def slow(self, item_id, item):
        real(self, item_id, item)
        phase_clock["now"] += 50.0

    monkeypatch.setattr(cost._Sitting, "set_up", slow)
    phase_clock["step_s"] = 0.1
    points = [Point("c", "depth", d, TINY.replace(depth=d), TrainConfig(epochs=1, batch_size=16)) for d in (1, 2)]
    phase = run_cost_phase("c", points, CostPlan(rounds=3, budget_s=1.5, keep_steps=True), torch.device("cpu"),
                           tmp_path / "c-cost.csv")
    assert sorted(set(phase["round"])) == [0, 1, 2] and (phase["status"] == "ok").all()
    assert phase.groupby(["mode", "depth"])["peak_mem_mb"].count().eq(1).all()   # taken once, at the set-up
    err = capsys.readouterr().err
    assert "3 rounds of 4 timed steps" in err and "of set-up (build, capture, warm-up; outside the budget)" in err
    empty = run_cost_phase("d", points, CostPlan(rounds=3, budget_s=1e-4), torch.device("cpu"), tmp_path / "d-cost.csv")
    assert empty.empty and (not (tmp_path / "d-cost.csv").exists() or read_table(tmp_path / "d-cost.csv").empty)
    err = capsys.readouterr().err
    assert "cost d: no round of 4 timed steps kept in " in err
    lines = [line for line in err.splitlines() if "no cost phase" in line]
    assert len(lines) == 1, lines
    assert "fits fewer than the 3 rounds a speed comparison needs; the report states no speed ratio. To " \
           "compare speed, measure with more rounds or a larger budget: make cost OUT=" in lines[0], lines
    assert lines[0].endswith(" (3 or more rounds, no time limit unless COST_BUDGET / --cost-budget). COST_BUDGET=0 "
                             "skips this phase without measuring."), lines


@pytest.mark.parametrize("field,values,items", [("grad_clip", (0.0, 1.0, 2.0), 2), ("label_smoothing", (0.0, 0.1), 2),
                                                ("layer_decay", (1.0, 0.75), 2), ("lr", (1e-3, 2e-3), 1)])
def test_a_sweep_over_what_the_training_step_does_times_each_step(field, values, items):
    """Clipping or not, a smoothed loss or not, a group per layer or not: each its own training item; the
    clipping threshold or the learning rate change no step's work and share one."""
    from ablations.running.cost import _items
    from vit import PRESETS

    cfg = PRESETS["vit_digits"]
    points = [Point("s", field, v, cfg, TrainConfig(**{field: v})) for v in values]
    found = _items(points, CostPlan(rounds=1), torch.device("cpu"))
    assert sum(i.mode == "train" for i in found) == items and sum(i.mode == "infer" for i in found) == 1


def test_make_cost_on_another_device_keeps_the_rows_of_the_device_they_trained_on(tmp_path, capsys):
    """Runs trained on a GPU, measured later on this CPU: the phase goes to the cost table under the CPU's
    name and the report's speed line names it; the rows keep the (empty) speed columns of their own device."""
    from ablations.__main__ import main
    from ablations.analysis.report import build_report
    from ablations.results.store import SweepPaths

    spec = write_spec(tmp_path / "cg.toml", "depth", "[1]", "embed_dim = 16\nnum_heads = 2", "epochs = 1\nbatch_size = 256")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--dataset", "digits", "--seeds", "0,1", "--out", str(out), "--cost-budget", "0"]) == 0
    paths = SweepPaths.of(out, "cg")
    rows = read_table(paths.rows)
    here = rows["device_name"].iloc[0]
    paths.rows.write_text(paths.rows.read_text().replace(f",{here},", ",NVIDIA H100 80GB HBM3,"))
    capsys.readouterr()
    assert main(["cost", "--out", str(out), "--cost-rounds", "1", "--cost-budget", "5"]) == 0
    said = capsys.readouterr().out
    assert "speed written into 0 rows; 2 rows trained on another device left as they were" in said
    assert read_table(paths.rows)["throughput_img_s"].isna().all()
    assert (read_table(paths.cost)["device_name"] == here).all()
    assert f"Speed: cost phase on {here}, 1 interleaved rounds" in build_report(out, reference=None).read_text()


def test_a_later_call_with_some_sweeps_done_reuses_the_first_sitting_and_its_rows_carry_its_figures(tmp_path):
    """A command's sweeps share one cost phase, whose id names them. A later call of the same command in which
    some sweeps have nothing left to train (a later look of SEEDS=auto, a rerun) is the same sitting: found
    and reused, not measured again under another id, and the rows it trains carry that sitting's figures."""
    from ablations.results.store import SweepPaths
    from ablations.running.runner import run_sweeps
    from ablations.running.tasks import RunOptions

    train = TrainConfig(epochs=1, batch_size=64)
    plans = {s: [Point(s, "depth", d, TINY.replace(depth=d), train) for d in depths] for s, depths in
             (("a", (1, 2)), ("b", (1, 3)))}

    def options(seeds):
        return RunOptions(dataset="digits", out=str(tmp_path), seeds=seeds, progress=False,
                          cost=dataclasses.replace(PLAN, budget_s=60.0))   # 3 rounds fit on a busy machine too

    run_sweeps([("a", plans["a"], options((0,))), ("b", plans["b"], options((0,)))])
    later = run_sweeps([("a", plans["a"], options((0,))), ("b", plans["b"], options((0, 1)))])
    assert [s.statuses for s in later] == [{}, {"ok": 2}]
    for sweep in "ab":
        assert read_table(SweepPaths.of(tmp_path, sweep).cost)["phase_id"].nunique() == 1
    rows = read_table(SweepPaths.of(tmp_path, "b").rows)
    assert rows["throughput_img_s"].notna().all() and rows["cost_rounds"].eq(3).all()
    by_depth = rows.groupby("depth")["throughput_img_s"].nunique()
    assert by_depth.eq(1).all()   # seed 1, trained in the later call, has seed 0's figures: one sitting


def test_a_fresh_processs_one_off_costs_land_in_no_round_so_a_short_budget_still_fits_its_rounds(tmp_path, capsys,
                                                                                                    monkeypatch,
                                                                                                    phase_clock):
    """What a process pays once whatever it measures (the matmul peak the MFU is taken against, the first
    optimizer, which loads torch's compiler modules) is paid before the phase's clock: made slow here (3 s
    each on the phase's clock; about 1.5 s each in a fresh process on a 2-core machine), they would fill the
    first round and leave a 4 s budget room for 1 of the 3 rounds a comparison needs. Without them a round
    of 0.1 s steps fits 3."""
    from ablations.__main__ import main
    from bench import mfu

    real_idle, real_adamw, first = mfu._measure_idle, torch.optim.AdamW, []
    phase_clock["step_s"] = 0.1

    def slow_peak(*args):
        phase_clock["now"] += 3.0
        return real_idle(*args)

    def slow_first_optimizer(*args, **kwargs):
        if not first:
            phase_clock["now"] += 3.0
            first.append(True)
        return real_adamw(*args, **kwargs)

    monkeypatch.setattr(mfu, "_measure_idle", slow_peak)
    monkeypatch.setattr(torch.optim, "AdamW", slow_first_optimizer)
    mfu.matmul_peak.cache_clear()
    spec = write_spec(tmp_path / "fresh.toml", "depth", "[1]", "embed_dim = 16\nnum_heads = 2",
                      "epochs = 1\nbatch_size = 256")
    try:
        assert main(["sweep", str(spec), "--dataset", "digits", "--seeds", "0", "--cost-rounds", "3",
                     "--cost-budget", "4", "--out", str(tmp_path / "o")]) == 0
    finally:
        mfu.matmul_peak.cache_clear()   # no peak of this test's making stays for the next
    err = capsys.readouterr().err
    assert first, "the sweep built an optimizer"
    phase = read_table(tmp_path / "o" / "ablations" / "fresh-cost.csv")
    assert sorted(set(phase["round"])) == [0, 1, 2] and set(phase["rounds"]) == {3}, err[-800:]
    assert "no cost phase" not in err


def test_a_ratio_read_by_cpu_time_under_load_is_said_as_approximate():
    """Where the figures are CPU time under load, the cost sentence gives the ratio as approximate and says why; a
    quiet machine's is given as it is."""
    from ablations.analysis.findings import CostSource, Setting, SweepFindings
    from ablations.analysis.stats import accuracy_interval
    from ablations.analysis.wording import cost_sentence
    from bench.rounds import Spread

    def setting(value, img_s):
        speed = {"throughput_img_s": Spread.of([img_s, img_s * 1.01, img_s * 0.99])}
        return Setting(value, [0], accuracy_interval([0.9], 1000), 10, 0.1, Spread.of([5.0]), infer=speed,
                       train=speed)
    settings = [setting(1, 200.0), setting(2, 100.0)]
    loaded = cost_sentence(SweepFindings("depth", settings, 1000, CostSource(3, loaded=6, steps=6, cpu_time=True),
                                         None, None))
    quiet = cost_sentence(SweepFindings("depth", settings, 1000, CostSource(3), None, None))
    assert "inference img/s ≈×0.50 (CPU time under load)" in loaded and "inference img/s ×0.50;" in quiet


def test_a_factor_that_leaves_the_model_and_step_alone_is_not_said_to_be_the_same_speed_within_noise():
    """lr changes neither the model nor its step: every setting reads the same cost-phase rows, and comparing them
    with themselves ("same within noise") would claim a measurement that was never made."""
    from ablations.analysis.findings import CostSource, Setting, SweepFindings
    from ablations.analysis.stats import accuracy_interval
    from ablations.analysis.wording import cost_sentence
    from bench.rounds import Spread

    def setting(value, img_s):
        speed = {"throughput_img_s": Spread.of([img_s, img_s * 1.01, img_s * 0.99]), "power_w": Spread.of([])}
        return Setting(value, [0], accuracy_interval([0.9], 1000), 10, 0.1, Spread.of([5.0, 5.1]), infer=speed,
                       train=dict(speed))
    one = [setting(v, 200.0) for v in (0.001, 0.002, 0.004)]
    sentence = cost_sentence(SweepFindings("lr", one, 1000, CostSource(3), None, None))
    assert sentence.startswith("lr changes neither the model nor its training step: GMACs, speed and memory are one "
                               "measurement for every setting; wall time of a training run from lr=0.001 to "
                               "lr=0.004 not compared (fewer than 3 measurements on a side)."), sentence
    assert "within noise" not in sentence.split("wall time")[0]
    differs = cost_sentence(SweepFindings("lr", [one[0], setting(0.002, 100.0), one[2]], 1000, CostSource(3), None,
                                          None))
    assert "one measurement for lr=0.001 and lr=0.004;" in differs
    other = cost_sentence(SweepFindings("depth", [one[0], setting(2, 100.0)], 1000, CostSource(3), None, None))
    assert other.startswith("From depth=0.001 to depth=2: GMACs ×1.00; inference img/s ×0.50;"), other


def test_a_phase_abandoned_on_a_busy_machine_is_not_set_up_again_by_the_commands_next_look(tmp_path, monkeypatch,
                                                                                         capsys):
    """On CUDA a phase whose first timed steps all ran under load keeps nothing; SEEDS=auto asks for the same
    phase at every look, which then gets none at once: no set-up again, and its one line is said once."""
    from ablations.running import cost

    calls = {"set_up": 0, "rounds": 0}
    real_once = cost._once_per_process

    def once(*args, **kwargs):
        calls["set_up"] += 1
        return real_once(*args, **kwargs)

    def busy_rounds(sitting, clock, *args):   # as `_rounds` ends when `_Clock.busy(early=True)` finds the load
        calls["rounds"] += 1
        clock.abandoned, clock.stopped = True, "the machine was busy: 2 of 2 first timed steps ran under load"
        return []
    monkeypatch.setattr(cost, "_once_per_process", once)
    monkeypatch.setattr(cost, "_rounds", busy_rounds)
    csv = tmp_path / "c-cost.csv"
    first = cost.run_cost_phases([("c", points(), csv)], PLAN, torch.device("cpu"), progress=False)
    said = capsys.readouterr().err
    again = cost.run_cost_phases([("c", points(), csv)], PLAN, torch.device("cpu"), progress=False)
    assert first["c"].empty and again["c"].empty and list(again["c"].columns) == list(first["c"].columns)
    assert calls == {"set_up": 1, "rounds": 1}
    assert "busy" in said and capsys.readouterr().err == ""
    other = [("c", points()[:1], tmp_path / "d-cost.csv")]   # another phase is measured as ever
    cost.run_cost_phases(other, PLAN, torch.device("cpu"), progress=False)
    assert calls == {"set_up": 2, "rounds": 2}


def test_a_phase_too_long_for_its_budget_is_not_measured_again_by_the_commands_next_look(tmp_path, monkeypatch,
                                                                                        capsys):
    """A budget that fits one round of the three a comparison needs: no phase, said once; SEEDS=auto's next look asks
    for the same phase and gets none at once (its first round again took 13 s a look, six times, on an image
    folder), while another phase is measured as ever."""
    import dataclasses

    from ablations.running import cost

    calls = {"set_up": 0}
    real_once = cost._once_per_process

    def once(*args, **kwargs):
        calls["set_up"] += 1
        return real_once(*args, **kwargs)
    monkeypatch.setattr(cost, "_once_per_process", once)
    tight = dataclasses.replace(PLAN, budget_s=1e-6)
    csv = tmp_path / "c-cost.csv"
    first = cost.run_cost_phases([("c", points(), csv)], tight, torch.device("cpu"), progress=True)
    said = capsys.readouterr().err
    again = cost.run_cost_phases([("c", points(), csv)], tight, torch.device("cpu"), progress=True)
    assert first["c"].empty and again["c"].empty and calls == {"set_up": 1}
    # a given budget that one step already outlasts: the round stops there
    assert "no cost phase: its first round passed" in said and "after 1 of its 4 timed steps" in said
    assert capsys.readouterr().err == ""
    other = [("c", points()[:1], tmp_path / "d-cost.csv")]   # another phase is measured as ever
    cost.run_cost_phases(other, PLAN, torch.device("cpu"), progress=False)
    assert calls == {"set_up": 2}


def test_a_row_read_by_cpu_time_gives_the_mfu_of_its_cpu_time_throughput_and_no_wall_clock_latency():
    """A training step of 2 GFLOPs an image, batch 16, timed at 40 ms of wall time under load but 10 ms of CPU
    time, on a 10 TFLOP/s peak: read by CPU time its throughput is 1,600 img/s and its MFU 3 × 2e9 × 1,600 /
    1e13 = 96 %, recomputed here from those, not the wall time's 24 %; its wall-clock percentiles and busy share
    are blank."""
    from ablations.results.store import by_cpu_time
    from bench.mfu import mfu

    row = {"mode": "train", "batch_size": 16, "gflops": 2.0, "step_ms_median": 40.0, "cpu_step_ms_median": 10.0,
           "throughput_img_s": 16 / 0.040, "mfu": mfu(2.0, 16 / 0.040, "train", 1e13), "step_ms_p50": 40.0,
           "step_ms_p90": 55.0, "step_ms_p99": 80.0, "util_pct": 30.0, "peak_mem_mb": 12.0}
    read = by_cpu_time(pd.DataFrame([row])).iloc[0]
    assert read["throughput_img_s"] == pytest.approx(1600.0) and read["step_ms_median"] == 10.0
    assert read["mfu"] == pytest.approx(3 * 2e9 * 1600 / 1e13) and row["mfu"] == pytest.approx(0.24)
    assert read[["step_ms_p50", "step_ms_p90", "step_ms_p99", "util_pct"]].isna().all()
    assert read["peak_mem_mb"] == 12.0
