"""Measurement: FLOPs against the closed form, the utilisation sampler, timing, OOM rows, CSV columns."""

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import run_cli
from torch import nn

from bench.flops import closed_form_macs, count_macs, stem_macs
from bench.grid import GridPoint, img_size_for_tokens, run_grid
from bench.io.csvio import read_rows
from bench.measure import MeasureConfig
from bench.memory import peak_mem_mb
from bench.schema import BENCH_COLUMNS, CONFIG, IDENTITY, SIZE, SPEED, names
from bench.timing import TimingConfig, time_steps
from bench.utilisation import UtilSampler
from vit import ATTENTION_BACKENDS, PRESETS, VisionTransformer, ViTConfig

ROOT = Path(__file__).resolve().parents[1]

FAST = TimingConfig(warmup=1, min_repeats=2, min_time_s=0.0)


def random_configs(n, seed=7):
    rng = random.Random(seed)
    for _ in range(n):
        heads = rng.choice([1, 3, 4, 6])
        patch = rng.choice([2, 4, 7])
        yield ViTConfig(img_size=patch * rng.choice([2, 3, 5]), patch_size=patch, in_chans=rng.choice([1, 3]),
                        num_classes=rng.choice([2, 10, 100]), embed_dim=heads * rng.choice([4, 16]),
                        depth=rng.choice([1, 2, 4]), num_heads=heads, mlp_ratio=rng.choice([1.5, 4.0]),
                        pos=rng.choice(["learned", "sinusoidal", "sincos2d", "none"]), norm=rng.choice(["pre", "post"]),
                        pool=rng.choice(["cls", "avg"]), stem=rng.choice(["patch", "conv"]),
                        qkv_bias=rng.choice([True, False]))


@pytest.mark.parametrize("cfg", list(random_configs(8)), ids=lambda c: f"T{c.tokens}D{c.embed_dim}L{c.depth}{c.stem}")
def test_gmacs_identical_across_backends_and_equal_to_closed_form(cfg):
    """fvcore's count of every backend is the closed form to the last MAC, whatever the positions, norm placement,
    pooling, stem and biases."""
    counts = {}
    for backend in ATTENTION_BACKENDS:
        model = VisionTransformer(cfg.replace(attn=backend))
        counts[backend] = count_macs(model, torch.zeros(1, cfg.in_chans, cfg.img_size, cfg.img_size))
    assert len(set(counts.values())) == 1, counts
    assert counts["sdpa"] == closed_form_macs(cfg)


def test_every_model_the_registered_sweeps_train_has_fvcores_macs_in_closed_form():
    """The cost phase and the dry run give the closed form (no tracing): for each model of every sweep in
    ablations/sweeps/ on the default dataset, it is fvcore's count to the last MAC."""
    from ablations.choices import SPEC_DIR
    from ablations.specs import load_spec

    models = {repr(p.model): p.model for f in sorted(SPEC_DIR.glob("*.toml")) for p in load_spec(f).points(28, 1, 10)}
    assert len(models) > 10
    for cfg in models.values():
        assert count_macs(VisionTransformer(cfg), torch.zeros(1, 1, 28, 28)) == closed_form_macs(cfg), cfg


@pytest.mark.parametrize("img,patch,chans,dim", [(28, 7, 1, 64), (28, 14, 1, 64), (32, 4, 3, 48), (8, 1, 1, 16),
                                                 (9, 3, 2, 24), (64, 16, 3, 32)])
def test_conv_stem_macs_equal_closed_form_exactly(img, patch, chans, dim):
    cfg = ViTConfig(img_size=img, patch_size=patch, in_chans=chans, embed_dim=dim, depth=2, num_heads=4,
                    stem="conv", pool="avg")
    counted = count_macs(VisionTransformer(cfg), torch.zeros(1, chans, img, img))
    assert counted == closed_form_macs(cfg)
    # the stem is what differs from the patchify ViT of the same grid
    patchify = count_macs(VisionTransformer(cfg.replace(stem="patch")), torch.zeros(1, chans, img, img))
    assert counted - patchify == stem_macs(cfg) - stem_macs(cfg.replace(stem="patch"))


def test_sdpa_attention_products_are_counted():
    cfg = ViTConfig(img_size=32, patch_size=4, embed_dim=60, depth=2, num_heads=3, attn="sdpa")
    with_products = count_macs(VisionTransformer(cfg), torch.zeros(1, 3, 32, 32))
    attention_products = cfg.depth * 2 * cfg.tokens**2 * cfg.embed_dim
    assert with_products == closed_form_macs(cfg)
    assert attention_products / with_products > 0.1  # a loss fvcore alone would cause is not small


class FakeNvml:
    """pynvml as the driver answers it: a buffer of timestamped samples (µs of the host's wall clock) that
    `nvmlDeviceGetSamples` returns only where newer than the timestamp asked for, refusing with an NVMLError
    (NOT_FOUND) where there is none; a cumulative energy counter (mJ) unless the GPU has none."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy: bool = True) -> None:
        import types

        self.samples: dict[int, list] = {0: [], 1: []}   # power (mW), utilisation (%)
        self.mj, self.energy, self.types = 0.0, energy, types

    def add(self, kind: int, at_s: float, value: float) -> None:
        self.samples[kind].append(self.types.SimpleNamespace(timeStamp=int(at_s * 1e6),
                                                             sampleValue=self.types.SimpleNamespace(uiVal=value)))

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return uuid

    def nvmlDeviceGetSamples(self, handle, kind, since_us):
        new = [x for x in self.samples[kind] if x.timeStamp > since_us]
        if not new:
            raise self.NVMLError("Not Found")
        return 1, new   # NVML_VALUE_TYPE_UNSIGNED_INT

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy:
            raise self.NVMLError("Not Supported")
        return self.mj

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self.types.SimpleNamespace(used=512 * 2**20)


@pytest.mark.parametrize("energy", [True, False])
def test_gpu_utilisation_counts_only_the_driver_samples_wholly_inside_the_region(energy, monkeypatch):
    """The driver samples utilisation every 1/6 s or so, each covering the time since the one before. A
    region gets only the samples whose whole period lies inside it: not the first one after it starts,
    which mostly covers what ran before (the previous item of an interleaved round). Power is the energy
    counter's difference over a region of a second or more, else the mean of the power samples inside it."""
    import types

    from bench import utilisation

    fake = FakeNvml(energy)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(uuid="GPU-1"))
    now = time.time()
    for k in range(6):                       # before the region: another item kept the GPU 90 % busy
        fake.add(1, now - 1.0 + k / 6, 90.0)
        fake.add(0, now - 1.0 + k / 6, 300_000.0)
    reader = utilisation.NvmlReader(torch.device("cuda:0"))
    outer = time.perf_counter()
    with UtilSampler(reader) as sampler:
        t0 = time.time()
        fake.add(1, t0 + 0.05, 90.0)             # straddles the start: mostly the item before
        fake.add(0, t0 + 0.05, 300_000.0)
        for k, value in enumerate([40.0, 40.0, 70.0]):
            fake.add(1, t0 + 0.05 + (k + 1) / 6, value)
            fake.add(0, t0 + 0.05 + (k + 1) / 6, 150_000.0)
        fake.mj += 1234.0                        # 1.234 J while the region ran
    outer = time.perf_counter() - outer
    figures = sampler.summary()
    assert figures["util_pct"] == pytest.approx(50.0) and figures["util_samples"] == 3
    assert figures["util_source"] == "nvml" and figures["gpu_mem_used_mb"] == 512
    # a region under a second: the counter's ~0.1 s ticks would make it 0 or a tick's worth, so the samples
    assert outer < 1.0 and figures["power_w"] == pytest.approx(150.0)
    with UtilSampler(reader) as short:           # shorter than a sample period: no figure rather than a wrong one
        pass
    assert "util_pct" not in short.summary() and short.summary()["util_samples"] == 0
    assert "power_w" not in short.summary()     # not 0 W from a counter that did not move
    if energy:
        with UtilSampler(reader) as long:       # a second or more: the counter over the region's wall time
            time.sleep(1.05)
            fake.mj += 200_000.0
        assert 200.0 / 5.0 < long.summary()["power_w"] <= 200.0 / 1.05   # 200 J over the region's wall time


def test_a_training_phase_on_the_gpu_gets_the_devices_busy_share_and_power_between_counter_ticks(monkeypatch):
    """The device over a stretch of work several runs share: busy % from the samples wholly inside it, power
    from the energy counter between two of its ticks (12 J every 0.1 s here: 120 W) at least a second apart,
    energy per image from that power over the stretch's wall time; a stretch too short gets neither."""
    import threading
    import types

    from bench import utilisation

    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(uuid="GPU-1"))
    stop = threading.Event()

    def ticking():
        while not stop.wait(0.1):
            fake.mj += 12_000.0

    threading.Thread(target=ticking, daemon=True).start()
    try:
        with utilisation.DeviceRegion(torch.device("cuda:0")) as region:
            t0 = time.time()
            for k in range(1, 7):
                fake.add(1, t0 + 0.05 + k / 6, 80.0)
            time.sleep(1.4)
        with utilisation.DeviceRegion(torch.device("cuda:0")) as short:
            time.sleep(0.3)
    finally:
        stop.set()
    figures = region.figures(images=1000)
    assert figures["util_pct"] == pytest.approx(80.0) and figures["util_samples"] >= 4
    assert figures["power_w"] == pytest.approx(120.0, rel=0.25) and figures["energy_window_s"] >= 1.0
    assert figures["energy_j_per_img"] == pytest.approx(figures["power_w"] * region.wall_s / 1000)
    assert short.figures(images=1000)["energy_j_per_img"] is None and short.figures(1000)["power_w"] is None


def test_sleep_is_timed_from_below_and_tightly():
    # a sleep never ends early; under load it may end late, so the bound above is looser than below
    timing = time_steps(lambda: time.sleep(0.05), "cpu", TimingConfig(warmup=1, min_repeats=10, min_time_s=0))
    assert 50.0 <= timing.median_ms <= 60.0
    assert timing.throughput(10) == pytest.approx(10 / (timing.median_ms / 1e3))
    assert 10 <= len(timing.times_ms) and min(timing.times_ms) >= 50.0
    assert timing.steps == len(timing.times_ms) and timing.latency_ms == ()   # on the CPU each step is its latency


class FakeCudaClock:
    """CUDA events as strict as CUDA's: `elapsed_time` refuses unless both events were recorded and the end
    one has completed (synchronised); the device runs each step for `step_ms` after the host launches it."""

    def __init__(self, monkeypatch, step_ms: float) -> None:
        self.device_ms, self.step_ms, self.syncs = 0.0, step_ms, 0
        clock = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.at, self.done = None, False

            def record(self, stream=None):
                self.at, self.done = clock.device_ms, False

            def synchronize(self):
                clock.syncs += 1
                self.done = True

            def elapsed_time(self, end):
                if self.at is None or end.at is None or not end.done:
                    raise RuntimeError("Both events must be completed before calculating elapsed time.")
                return end.at - self.at
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: setattr(clock, "syncs", clock.syncs + 1))

    def step(self) -> None:
        self.device_ms += self.step_ms


def test_cuda_throughput_is_timed_over_blocks_of_unsynchronised_steps_and_latency_apart(monkeypatch):
    """Training never waits for the device between steps, so neither does the throughput figure: events
    around a block of steps, one synchronisation per block; latency is timed apart, one step at a time."""
    clock = FakeCudaClock(monkeypatch, step_ms=2.5)
    cfg = TimingConfig(warmup=2, min_repeats=20, min_time_s=0.0, block=8, latency_steps=5)
    timing = time_steps(clock.step, "cuda", cfg)
    assert timing.steps == 24 and len(timing.times_ms) == 3             # three blocks of 8 cover 20 steps
    assert timing.times_ms == (2.5, 2.5, 2.5) and timing.median_ms == 2.5
    assert timing.latency_ms == (2.5,) * 5 and timing.latency_percentile_ms(99) == 2.5
    assert clock.syncs == 1 + 3 + 5          # after the warm-up, once per block, once per latency step
    capped = time_steps(clock.step, "cuda", TimingConfig(warmup=0, min_repeats=5, max_repeats=5, block=8,
                                                         min_time_s=1.0, latency_steps=0))
    assert capped.steps == 5 and capped.times_ms == (2.5,)              # max_repeats caps the steps, not blocks


class OOMOnBackend(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.inner = VisionTransformer(cfg)
        self.explode = cfg.attn == "einops"

    def forward(self, x):
        if self.explode:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (injected)")
        return self.inner(x)


def grid(cfg, backends, mode="infer"):
    return [GridPoint(cfg.replace(attn=b), MeasureConfig(mode=mode, batch_size=2, timing=FAST,
                                                          measure_mfu=False)) for b in backends]


def test_injected_oom_gives_oom_row_and_grid_continues(tmp_path):
    cfg = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=8, depth=1, num_heads=2)
    out = tmp_path / "bench" / "grid.csv"
    rows = run_grid(grid(cfg, ["bmm", "einops", "sdpa"]), torch.device("cpu"), out, build=OOMOnBackend)
    table = read_rows(out)
    assert list(table["status"]) == ["ok", "oom", "ok"]
    assert "injected" in table.loc[1, "error"]
    assert table.loc[[0, 2], "throughput_img_s"].gt(0).all() and pd.isna(table.loc[1, "throughput_img_s"])
    assert len(rows) == 3


def test_bench_csv_has_contract_columns(tmp_path):
    cfg = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=8, depth=1, num_heads=2)
    out = tmp_path / "b.csv"
    run_grid(grid(cfg, ["sdpa"], mode="train"), torch.device("cpu"), out)
    table = read_rows(out)
    assert set(names(IDENTITY + CONFIG + SIZE + SPEED)) <= set(table.columns)
    assert list(table.columns[: len(BENCH_COLUMNS)]) == BENCH_COLUMNS
    row = table.iloc[0]
    assert row["status"] == "ok" and row["gflops"] == pytest.approx(2 * row["gmacs"])
    assert row["util_source"] == "cpu" and 0 < row["util_pct"] <= 100.5 and row["peak_mem_mb"] > 0


def test_tokens_must_be_a_square_grid_plus_cls():
    assert img_size_for_tokens(197, 16) == 224
    with pytest.raises(ValueError, match="tokens=64.*50 or 65"):
        img_size_for_tokens(64, 16)
    with pytest.raises(ValueError, match="tokens=1 is .*nearest valid: 2$"):
        img_size_for_tokens(1, 16)


@pytest.mark.parametrize("argv, said", [(["--tokens", "0"], "got '0'"), (["--tokens", "65,x"], "got '65,x'"),
                                        (["--attn", ","], "got ','"), (["--dtype", ""], "got ''"),
                                        (["--compile", "2"], "invalid choice: 2"),
                                        (["--repeats", "0"], "--repeats must be a positive integer, got '0'"),
                                        (["--warmup", "-1"], "--warmup must be an integer ≥ 0, got '-1'"),
                                        (["--min-time-s", "nan"], "--min-time-s must be a number of seconds ≥ 0")])
def test_bench_run_refuses_a_bad_list_or_flag_in_one_line_before_any_work(tmp_path, capsys, argv, said):
    from bench.__main__ import main

    code, _, err = run_cli(main, ["run", "--preset", "vit_digits", *argv, "--out", str(tmp_path)], capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2 and f"argument {argv[0]}: " in last and said in last, err
    assert not (tmp_path / "bench").exists()


def test_bench_peak_says_what_it_measured_and_what_it_is_for(monkeypatch, capsys):
    """`bench peak` prints the FLOP/s with the device, dtype, threads and matmul size it measured it at, as the
    denominator of MFU (it measures anew: nothing is cached between processes)."""
    import bench.commands
    from bench.__main__ import main
    from bench.mfu import peak_size

    monkeypatch.setattr(bench.commands, "matmul_peak_flops", lambda device, dtype: 1.5e11)
    main(["peak", "--device", "cpu"])
    n, threads = peak_size(torch.device("cpu")), torch.get_num_threads()
    threads = f"{threads} thread{'s' if threads > 1 else ''}"
    assert capsys.readouterr().out == (f"150.0 GFLOP/s (cpu, fp32, {threads}): the best of repeated "
                                       f"{n}×{n} matmuls, the peak that MFU divides by\n")


def test_a_value_named_twice_is_one_point_not_extra_rounds_of_it(tmp_path, monkeypatch):
    import bench.commands
    from bench.__main__ import main

    seen = []

    def no_measuring(points, *args, **kwargs):
        seen.extend(points)
        raise KeyboardInterrupt  # the grid as run_grid got it; nothing measured

    monkeypatch.setattr(bench.commands, "run_grid", no_measuring)
    with pytest.raises(SystemExit):   # the interruption's exit
        main(["run", "--preset", "vit_digits", "--attn", "sdpa,bmm,sdpa", "--dtype", "fp32,fp32",
              "--tokens", "17,17", "--mode", "infer,infer", "--out", str(tmp_path)])
    assert [(p.cfg.attn, p.cfg.tokens, p.mcfg.dtype, p.mcfg.mode) for p in seen] == [("sdpa", 17, "fp32", "infer"),
                                                                          ("bmm", 17, "fp32", "infer")]


def test_bmm_peak_memory_exceeds_sdpa_by_a_score_matrix_at_197_tokens():
    cfg = ViTConfig(img_size=224, patch_size=16, embed_dim=384, depth=1, num_heads=6, num_classes=10)
    batch = 4
    images = torch.randn(batch, 3, 224, 224)
    peaks = {}
    for backend in ("bmm", "sdpa"):
        model = VisionTransformer(cfg.replace(attn=backend)).eval()
        with torch.inference_mode():
            peaks[backend] = peak_mem_mb(lambda: model(images), torch.device("cpu"), [model, images])
    score_matrix_mb = batch * cfg.num_heads * cfg.tokens**2 * 4 / 2**20
    assert peaks["bmm"] - peaks["sdpa"] >= score_matrix_mb


@pytest.mark.parametrize("backend", ["loop", "bmm", "einops"])
def test_explicit_backend_memory_grows_quadratically_with_tokens(backend):
    # activation memory above the parameters, at grids 8 and 16 (65 and 257 tokens); T² dominates
    cfg = ViTConfig(img_size=128, patch_size=16, embed_dim=32, depth=1, num_heads=8, num_classes=10, attn=backend)
    extra = {}
    for img in (128, 256):
        model = VisionTransformer(cfg.replace(img_size=img)).eval()
        images = torch.randn(2, 3, img, img)
        with torch.inference_mode():
            extra[img] = peak_mem_mb(lambda: model(images), torch.device("cpu"), [model, images]) \
                - sum(p.numel() for p in model.parameters()) * 4 / 2**20
    tokens_ratio = 257 / 65
    growth = extra[256] / extra[128]
    assert growth > tokens_ratio * 2, growth  # well above linear; quadratic would be ≈ 15.6


def busy_loop(seconds: float) -> float:
    """Spin for `seconds` of wall time; the share of one core this process got meanwhile (its CPU time over
    wall time), an independent reading of what a CPU meter should report for it, busy machine or not."""
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        pass
    return (time.process_time() - c0) / (time.perf_counter() - t0)


def test_cpu_utilisation_of_a_busy_loop_and_of_sleep():
    from bench.utilisation import CpuReader

    reader = CpuReader()
    with UtilSampler(reader) as busy:
        got = busy_loop(0.3)    # one core while the machine is idle; less beside other work
    with UtilSampler(CpuReader()) as idle:
        time.sleep(0.3)
    one_core = 100.0 / reader.cores
    assert busy.summary()["util_pct"] == pytest.approx(got * one_core, rel=0.2)
    assert idle.summary()["util_pct"] < 0.2 * busy.summary()["util_pct"]
    assert busy.summary()["util_samples"] == 1 and not busy._thread.is_alive()  # exact from its ends: no thread ran
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # a run given one thread (JOBS, THREADS, a one-CPU Ray task): one busy core is all of it
    try:
        with UtilSampler(CpuReader()) as alone:
            got = busy_loop(0.3)
    finally:
        torch.set_num_threads(before)
    assert alone.summary()["util_pct"] == pytest.approx(100.0 * got, rel=0.2)


def test_nvml_reads_the_gpu_torch_trains_on_not_the_one_with_its_index(monkeypatch):
    """A worker pinned by CUDA_VISIBLE_DEVICES=2 trains on cuda:0, which NVML numbers 2: the reader must
    find the GPU by its UUID. A fake NVML with three GPUs stands in for the driver."""
    import types

    from bench import utilisation

    gpus = {"GPU-aaaa": 11, "GPU-bbbb": 22, "GPU-cccc": 33}  # NVML's order: index 0, 1, 2; memory used, MiB
    fake = FakeNvml()
    fake.nvmlDeviceGetHandleByIndex = lambda i: list(gpus)[i]
    fake.nvmlDeviceGetHandleByUUID = lambda uuid: uuid if uuid in gpus else (_ for _ in ()).throw(KeyError(uuid))
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=gpus[h] * 2**20)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(uuid="cccc" if str(device) == "cuda:0" else "bbbb"))
    reader = utilisation.reader_for(torch.device("cuda:0"))
    assert reader.source == "nvml"
    reader.start()
    assert reader.finish()["gpu_mem_used_mb"] == 33.0
    other = utilisation.reader_for(torch.device("cuda:1"))
    other.start()
    assert other.finish()["gpu_mem_used_mb"] == 22.0
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(uuid="dddd"))
    with pytest.warns(UserWarning, match="NVML unavailable"):  # a GPU NVML does not list: said, then CPU figures
        assert utilisation.reader_for(torch.device("cuda:0")).source == "cpu"


def test_pytest_benchmark_json_converts_to_contract_rows(tmp_path):
    import json

    from bench.commands import convert_json

    info = {**ViTConfig().to_dict(), "tokens": 65, "params": 10, "gmacs": 0.5, "gflops": 1.0, "mode": "infer",
            "batch_size": 8, "dtype": "fp32", "compile": 0, "device": "cpu", "backend": "sdpa"}
    doc = {"datetime": "2026-01-01T00:00:00", "benchmarks": [
        {"name": "test_step[sdpa]", "fullname": "bench/x.py::test_step[sdpa]", "extra_info": info,
         "stats": {"median": 0.02, "iqr": 0.001, "rounds": 5}}]}
    (tmp_path / "b.json").write_text(json.dumps(doc))
    assert convert_json(tmp_path / "b.json", tmp_path / "b.csv") == 1
    row = read_rows(tmp_path / "b.csv").iloc[0]
    assert row["throughput_img_s"] == pytest.approx(400.0) and row["step_ms_median"] == pytest.approx(20.0)
    assert row["device"] == "cpu" and row["device_name"] and row["attn"] == "sdpa" and row["status"] == "ok"


def test_convert_json_refuses_a_csv_in_the_reference_and_a_bad_json_deletes_nothing(tmp_path, capsys):
    from bench.__main__ import main
    from bench.reference import REFERENCE_MARK

    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / REFERENCE_MARK).write_text("reference\n")
    report = reference / "REPORT.md"
    report.write_text("the committed report\n")
    (tmp_path / "bad.json").write_text("{ not json")
    for target in (report, reference / "bench" / "x.csv"):      # directly in it, or a folder below it
        with pytest.raises(SystemExit) as exit_:
            main(["convert-json", str(tmp_path / "bad.json"), str(target)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "holds the committed reference results" in err and err.count("\n") == 1
    assert report.read_text() == "the committed report\n"
    mine = tmp_path / "out" / "bench" / "b.csv"                   # outside it: a bad JSON leaves the old CSV
    mine.parent.mkdir(parents=True)
    mine.write_text("old,rows\n")
    (tmp_path / "other.json").write_text('{"datetime": "2026-01-01T00:00:00"}')   # JSON, but no benchmarks list
    for bad in ("bad.json", "other.json"):
        with pytest.raises(SystemExit) as exit_:
            main(["convert-json", str(tmp_path / bad), str(mine)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and f"{bad}: not a pytest-benchmark JSON file" in err and err.count("\n") == 1
        assert mine.read_text() == "old,rows\n" and sorted(p.name for p in mine.parent.iterdir()) == ["b.csv"]


def test_compare_csv_refuses_the_reference_before_any_work(tmp_path, capsys):
    from ablations.__main__ import main
    from bench.reference import REFERENCE_MARK

    (tmp_path / REFERENCE_MARK).write_text("reference\n")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--csv", str(tmp_path / "c.csv")]) == 2
    assert "holds the committed reference results" in capsys.readouterr().err
    assert not (tmp_path / "c.csv").exists()


@pytest.mark.slow
def test_bench_cli_set_overrides_the_preset_and_bad_overrides_fail_first(tmp_path, capsys):
    from bench.__main__ import main

    fast = ["--attn", "bmm", "--warmup", "0", "--repeats", "1", "--min-time-s", "0", "--out", str(tmp_path)]
    # vit_mnist's conv stem cannot reach an 8×8 grid of 7 px patches (56 px): the error names stem
    for argv, message in ((["--tokens", "65"], "stem='conv' with patch_size=7.*stem='patch'"),
                          (["--set", "stems=patch"], "^error: --set stems=patch: ViTConfig has no field 'stems'"),
                          (["--set", "depth=x"], "^error: --set depth=x: ViTConfig.depth must be a positive int"),
                          (["--set", "depth"], "'depth' is not key=value")):
        with pytest.raises(SystemExit) as exit_:
            main(["run", "--preset", "vit_mnist", *argv, *fast])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and re.search(message, err) and err.count("\n") == 1, err
    assert not (tmp_path / "bench").exists()  # nothing measured before the grid was valid
    main(["run", "--preset", "vit_mnist", "--set", "stem=patch", "--set", "depth=2", "--tokens", "65", *fast])
    row = read_rows(tmp_path / "bench" / "grid.csv").iloc[0]
    assert (row["stem"], row["depth"], row["tokens"], row["img_size"], row["status"]) == ("patch", 2, 65, 56, "ok")
    cfg = ViTConfig.from_row(row)
    assert row["gmacs"] == pytest.approx(closed_form_macs(cfg) / 1e9)


def test_convert_json_adds_mfu_only_for_a_run_on_this_device(tmp_path, monkeypatch):
    import json

    from bench.commands import convert_json
    from bench.env import device_name

    here = device_name(torch.device("cpu"))
    from bench import mfu

    mfu.matmul_peak.cache_clear()
    monkeypatch.setattr(mfu, "measure_matmul_peak", lambda d, t, n=None: 1e11)  # a known peak: 100 GFLOP/s
    info = {"device": "cpu", "dtype": "fp32", "mode": "train", "batch_size": 8, "gflops": 0.5, "gmacs": 0.25,
            "attn": "sdpa", "tokens": 17}
    stats = {"median": 0.04, "iqr": 0.002, "rounds": 5}
    data = {"datetime": "2026-01-01T00:00:00", "benchmarks": [
        {"name": "here", "stats": stats, "extra_info": {**info, "device_name": here}},
        {"name": "elsewhere", "stats": stats, "extra_info": {**info, "device_name": "Some Other CPU"}}]}
    (tmp_path / "b.json").write_text(json.dumps(data))
    assert convert_json(tmp_path / "b.json", tmp_path / "b.csv") == 2
    rows = read_rows(tmp_path / "b.csv")
    # 0.5 GFLOPs × 3 (a training step) × 200 img/s ÷ 100 GFLOP/s
    assert rows.loc[0, "mfu"] == pytest.approx(0.5e9 * 3 * (8 / 0.04) / 1e11)
    assert rows.loc[0, "throughput_img_s"] == pytest.approx(200.0) and rows.loc[0, "step_ms_iqr"] == pytest.approx(2.0)
    assert pd.isna(rows.loc[1, "mfu"]) and rows.loc[1, "device_name"] == "Some Other CPU"
    mfu.matmul_peak.cache_clear()


def test_the_matmul_peak_is_this_processs_own_measurement_not_the_machines_history(tmp_path, monkeypatch):
    """Measured once per process and dtype, and only then: a process after one that saw a higher peak
    (another sitting, another load) divides by its own, so a row's MFU depends on its sitting alone; no
    file under VITBENCH_CACHE is read or written for it."""
    from bench import mfu

    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path))
    device = torch.device("cpu")
    calls = []
    for measured in (181e9, 150e9):                    # two processes: the second on a slower day
        mfu.matmul_peak.cache_clear()
        monkeypatch.setattr(mfu, "measure_matmul_peak", lambda d, t, n=None: calls.append(t) or measured)
        assert mfu.matmul_peak_flops(device, "fp32") == measured
        assert mfu.matmul_peak_flops(device, "fp32") == measured and mfu.matmul_peak(device, "fp32").measured_at
    mfu.matmul_peak.cache_clear()
    assert calls == ["fp32", "fp32"] and not list(tmp_path.iterdir())


@pytest.mark.load_meter
def test_a_timed_region_beside_a_cpu_burner_is_flagged_as_contended():
    import sys

    from bench.contention import CONTENDED_PCT, LoadMeter

    def work():
        a = torch.randn(256, 256)
        deadline = time.perf_counter() + 1.5
        while time.perf_counter() < deadline:
            a @ a

    with LoadMeter() as quiet:
        work()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        with LoadMeter() as busy:
            work()
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert busy.load.other_cpu_pct >= CONTENDED_PCT and busy.load.contended
    assert busy.load.columns()["contended"] == 1
    assert quiet.load.other_cpu_pct < busy.load.other_cpu_pct


def test_every_mfu_row_stores_the_peak_it_was_divided_by(tmp_path, monkeypatch):
    from bench import mfu
    from bench.measure import MeasureConfig, measure
    from vit import PRESETS, VisionTransformer

    monkeypatch.setattr(mfu, "measure_matmul_peak", lambda d, t, n=None: 2.5e11)
    mfu.matmul_peak.cache_clear()
    try:
        cfg = PRESETS["vit_digits"]
        row = measure(VisionTransformer(cfg), (cfg.in_chans, cfg.img_size, cfg.img_size), cfg.num_classes,
                      MeasureConfig(batch_size=8, timing=TimingConfig(warmup=1, min_repeats=3, min_time_s=0.0)),
                      torch.device("cpu"), gflops=0.01)
    finally:
        mfu.matmul_peak.cache_clear()
    assert row["mfu_peak_gflops"] == 250.0 and row["mfu_peak_at"]
    assert row["mfu"] == pytest.approx(0.01e9 * row["throughput_img_s"] / 2.5e11)
    assert row["contended"] in (0, 1) and row["other_cpu_pct"] is not None


def test_latency_percentiles_are_numpys_of_the_recorded_step_times_and_energy_is_per_timed_image(monkeypatch):
    """p50/p90/p99 of the very step times `measure` timed; energy over the timed steps (not the warm-up)
    from the device's counter, divided by their images; blank without a counter."""
    import bench.measure as measure_module
    from bench.energy import EnergyMeter
    from bench.measure import MeasureConfig, measure
    from bench.timing import TimingConfig
    from vit import VisionTransformer, ViTConfig

    recorded, reads = [], iter(range(1000))

    class Counter:
        source = "rapl"

        def read(self):
            return 100.0 + next(reads)   # moves at every read

    real = measure_module.time_steps

    def spy(*args, **kwargs):
        timing = real(*args, **kwargs)
        recorded.append(timing.times_ms)
        return timing
    monkeypatch.setattr(measure_module, "time_steps", spy)
    monkeypatch.setattr(measure_module, "energy_counter", lambda device: Counter())
    # the steps' window is shorter than the meter's shortest (an hour here, so a busy machine cannot stretch
    # 37 tiny steps past it)
    monkeypatch.setattr(measure_module, "EnergyMeter", lambda counter: EnergyMeter(counter, min_window_s=3600.0))
    cfg = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2)
    mcfg = MeasureConfig(batch_size=4, timing=TimingConfig(warmup=2, min_repeats=37, min_time_s=0.0),
                         measure_memory=False, measure_mfu=False)
    row = measure(VisionTransformer(cfg), (1, 8, 8), 10, mcfg, torch.device("cpu"))
    times = recorded[0]
    assert len(times) == 37 and row["repeats"] == 37
    for q in (50, 90, 99):
        assert row[f"step_ms_p{q}"] == pytest.approx(float(np.percentile(times, q)), rel=0, abs=0)
    assert row["step_ms_p50"] == pytest.approx(row["step_ms_median"])
    # a window shorter than an energy figure needs: blank, not 0 and not one tick
    assert row["energy_j_per_img"] is None and row["energy_window_s"] is None and row["energy_source"] == "rapl"
    monkeypatch.setattr(measure_module, "energy_counter", lambda device: None)
    row = measure(VisionTransformer(cfg), (1, 8, 8), 10, mcfg, torch.device("cpu"))
    assert row["energy_j_per_img"] is None and row["energy_source"] == ""


def test_energy_is_taken_between_counter_ticks_over_a_second_or_left_blank(monkeypatch):
    """A counter that moves in 12 J ticks every 0.1 s (NVML's): the figure is the energy between the first and
    the last tick over the work done between them (0.15 J per unit here, exactly), never 0 and never a whole
    tick over a region too short to hold two ticks a second apart."""
    import bench.energy as energy_module
    from bench.energy import EnergyMeter

    clock = [0.0]
    monkeypatch.setattr(energy_module.time, "perf_counter", lambda: clock[0])

    class Ticking:
        source = "nvml"

        def read(self):
            return 1000.0 + 12.0 * int(round(clock[0] * 1000) // 100)   # +12 J at every 0.1 s

    def region(polls: int) -> EnergyMeter:
        clock[0] = 0.0
        with EnergyMeter(Ticking()) as meter:
            for i in range(1, polls + 1):
                clock[0] = i * 0.01          # a block of 8 units takes 10 ms: 80 units (at 0.15 J) per tick
                meter.poll(8 * i)
        return meter

    long = region(300)
    assert long.window_s == pytest.approx(2.9) and long.joules == pytest.approx(29 * 12.0)
    assert long.per_unit == pytest.approx(12.0 / 80)
    short = region(50)   # 0.5 s: five ticks, none a second apart
    assert short.per_unit is None and short.joules is None and short.window_s is None
    assert region(0).per_unit is None and EnergyMeter(None).__enter__().per_unit is None


def test_rapl_energy_sums_the_packages_and_undoes_the_counters_wrap_around(tmp_path):
    from bench.energy import EnergyMeter, RaplEnergy

    for zone, start in (("intel-rapl:0", 999_000_000), ("intel-rapl:1", 5_000_000)):
        (tmp_path / zone).mkdir()
        (tmp_path / zone / "max_energy_range_uj").write_text("1000000000\n")
        (tmp_path / zone / "energy_uj").write_text(f"{start}\n")
    (tmp_path / "intel-rapl:0:0").mkdir()  # a sub-zone (core): not a package, not summed
    counter = RaplEnergy(tmp_path)
    assert [z.name for z in counter.zones] == ["intel-rapl:0", "intel-rapl:1"]
    before = counter.read()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("2000000\n")   # wrapped: +3 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("6500000\n")   # +1.5 J
    assert counter.read() - before == pytest.approx(4.5) and EnergyMeter(counter).source == "rapl"
    with pytest.raises(OSError, match="no RAPL package zones"):
        RaplEnergy(tmp_path / "nothing")


def test_a_cuda_training_steps_memory_is_taken_on_the_call_that_captures_its_graph():
    """A graphed step allocates its activations in the graph's pool while it captures (its first call);
    replays allocate nothing, so a CUDA training step's memory is taken first. Elsewhere after timing."""
    from bench.measure import MeasureConfig, memory_first

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert memory_first(cuda, MeasureConfig(mode="train"))
    assert not memory_first(cuda, MeasureConfig(mode="infer"))
    assert not memory_first(cuda, MeasureConfig(mode="train", compile=True))  # its first call compiles
    assert not memory_first(cpu, MeasureConfig(mode="train"))


def test_a_frozen_backbones_training_step_has_its_cpu_peak_and_it_is_below_the_full_steps():
    """freeze=all_but_head: no gradients or AdamW state for the backbone, so less memory than training it all."""
    from bench.training.recipe import TrainConfig
    from bench.training.step import training_step

    cpu = torch.device("cpu")
    peaks = {}
    for freeze in ("none", "all_but_head"):
        torch.manual_seed(0)
        model = VisionTransformer(PRESETS["vit_digits"])
        images, labels = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
        step, alive = training_step(TrainConfig(freeze=freeze, batch_size=32), cpu)(model, images, labels)
        peaks[freeze] = peak_mem_mb(step, cpu, alive)
    assert 0 < peaks["all_but_head"] < peaks["none"]


def test_an_inference_steps_peak_leaves_out_the_gradients_a_training_step_left_on_the_model():
    """The cost phase times a model's training step and its inference step on one model: the inference peak is the
    same before and after the training step left its gradients (it counted them after), and the training step's
    own peak still counts them."""
    from bench.measure import measure

    cpu = torch.device("cpu")
    torch.manual_seed(0)
    model = VisionTransformer(PRESETS["vit_digits"])
    timing = TimingConfig(warmup=1, min_repeats=1, min_time_s=0.0)
    infer = MeasureConfig(mode="infer", batch_size=64, timing=timing, measure_mfu=False)
    before = measure(model, (1, 8, 8), 10, infer, cpu)["peak_mem_mb"]
    train = measure(model, (1, 8, 8), 10, MeasureConfig(mode="train", batch_size=64, timing=timing,
                                                        measure_mfu=False), cpu)["peak_mem_mb"]
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None) / 2**20
    assert grads > 0.05       # the training step left them: 0.07 MiB here
    after = measure(model, (1, 8, 8), 10, infer, cpu)["peak_mem_mb"]
    assert after == before < train
    images = torch.randn(64, 1, 8, 8)

    def forward():
        with torch.inference_mode():
            return model(images)
    assert peak_mem_mb(forward, cpu, [model, images]) == pytest.approx(before + grads)     # counted by default


def test_resident_bytes_counts_each_tracked_storage_once_in_allocator_blocks():
    from bench.training.step import ALLOCATOR_BLOCK, resident_bytes

    cpu = torch.device("cpu")
    model = nn.Linear(10, 3)            # 30 + 3 floats: one 512-byte block each
    block = ALLOCATOR_BLOCK
    assert resident_bytes([model], cpu) == 2 * block
    model(torch.randn(4, 10)).sum().backward()
    assert resident_bytes([model], cpu) == 4 * block  # and their gradients
    assert resident_bytes([model], cpu, grads=False) == 2 * block   # but where told not to
    opt = torch.optim.AdamW(model.parameters())
    opt.step()
    big = torch.zeros(1000)             # 4,000 bytes: eight blocks
    # parameters and gradients (4 blocks); AdamW's exp_avg, exp_avg_sq and step tensor per parameter (6)
    got = resident_bytes([model, opt, big, big[:10], model.weight], cpu)  # a view and a repeat count once
    assert got == (4 + 6 + 8) * block
    assert resident_bytes([big], torch.device("cuda:0")) == 0  # on another device: not resident there


def test_a_cuda_peak_leaves_out_what_was_allocated_before_and_is_not_tracked(monkeypatch):
    """The allocator's figures are the device's: another model or a kept step alive before the step is taken off."""
    import bench.memory as memory

    mib = 2**20
    state = {"allocated": 10 * mib, "peak": 0}

    def step():
        state["peak"] = state["allocated"] + 4 * mib   # the step's own 4 MiB on top of everything alive

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    cuda = torch.device("cuda")
    assert peak_mem_mb(step, cuda) == 4.0                    # nothing tracked: the step alone
    monkeypatch.setattr(memory, "resident_bytes", lambda track, device, grads=True: (3 if grads else 2) * mib)
    assert peak_mem_mb(step, cuda, ["model"]) == 7.0          # and the 3 MiB it was given to track
    # an inference step: the model's 1 MiB of gradients (left by a training step) is taken off with the untracked
    assert peak_mem_mb(step, cuda, ["model"], grads=False) == 6.0


def test_bench_run_batches_auto_by_the_models_forward_cost(capsys):
    """`--batch-size auto` (the default): on a CPU the smallest power of two whose forward costs ≥ 32 GFLOPs,
    at most 256; 256 on CUDA. A small model is no longer timed at a batch that leaves the cores idle."""
    from bench.__main__ import main
    from bench.grid import AUTO_BATCH_GFLOP, auto_batch, expand_grid
    from bench.measure import complexity
    from vit import PRESETS

    small = PRESETS["vit_small_patch16_224"]
    gflops = complexity(VisionTransformer(small), (3, 224, 224))["gflops"]
    expected = 1
    while expected * gflops < AUTO_BATCH_GFLOP:
        expected *= 2
    assert auto_batch(small, torch.device("cpu")) == expected == 4
    assert auto_batch(PRESETS["vit_mnist"], torch.device("cpu")) == 256
    assert auto_batch(small, torch.device("cuda")) == 256
    points = expand_grid(small, ["sdpa", "bmm"], [65, 197], [None, 2], ["fp32"], ["infer"], False, FAST)
    assert [p.mcfg.batch_size for p in points] == [16, 2, 4, 2, 16, 2, 4, 2]  # 65 tokens: a quarter of the FLOPs
    with pytest.raises(SystemExit):
        main(["run", "--batch-size", "0"])
    assert "batch sizes are auto or comma-separated positive integers, got '0'" in capsys.readouterr().err


def test_gpu_processes_of_this_command_and_an_mps_server_are_not_other_work(monkeypatch):
    """NVML lists this process, its workers and the MPS server that serves them as compute processes: none
    of them is contention. Another user's process is; host PIDs (a container) cannot be attributed."""
    import types

    from bench import contention

    me, worker, server, stranger = os.getpid(), 424242, 424243, 424244
    listed = [me, worker, server]
    names = {me: "python", worker: "python", server: "nvidia-cuda-mps-server", stranger: "python"}
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid if uuid == "MIG-abcd" else (_ for _ in ()).throw(KeyError(uuid)),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=p) for p in listed],
        nvmlSystemGetProcessName=lambda pid: names[pid].encode())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(uuid="abcd"))  # a MIG slice
    monkeypatch.setattr(contention, "_family", lambda: {me, worker})
    cuda = torch.device("cuda:0")
    assert contention.gpu_processes(cuda) == (0, "ours 2, mps-server 1")          # found by its MIG- UUID too
    listed.append(stranger)
    assert contention.gpu_processes(cuda) == (1, "ours 2, mps-server 1, other 1")
    listed[:] = [10**7 + 1, 10**7 + 2]                                              # host PIDs: none of ours
    others, seen = contention.gpu_processes(cuda)
    assert others is None and "host PIDs: not attributable" in seen
    listed[:] = [me]                                     # runs side by side in this process: it alone is listed
    monkeypatch.setattr(contention, "_family", lambda: pytest.fail("no /proc scan for this process alone"))
    monkeypatch.setattr(fake, "nvmlSystemGetProcessName", lambda pid: pytest.fail("no name asked of our own PID"))
    assert contention.gpu_processes(cuda) == (0, "ours 1")
    load = contention.Load(0.0, 0, None, "ours 2, mps-server 1")
    assert not load.contended and load.columns()["gpu_procs_seen"] == "ours 2, mps-server 1"
    assert contention.Load(0.0, 1, None).contended


def test_this_process_and_its_children_are_its_family():

    from bench.contention import _family

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        family = _family()
        assert os.getpid() in family and child.pid in family and 1 not in family
    finally:
        child.kill()
        child.wait()


def test_plain_cuda_means_the_current_device_when_storages_are_counted(monkeypatch):
    """DEVICE=cuda is torch.device("cuda"), while a tensor there says "cuda:0", and torch holds the two
    unequal: counted by plain equality, a step's own parameters and optimizer state would be none of its."""
    from bench.training.step import exact_device

    assert torch.device("cuda:0") != torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert exact_device(torch.device("cuda")) == torch.device("cuda:1")
    assert exact_device(torch.device("cuda:0")) == torch.device("cuda:0")
    assert exact_device(torch.device("cpu")) == torch.device("cpu")


def test_a_ratio_far_below_one_keeps_its_digits():
    """A loop backend 400× slower than sdpa (or a model with 1/250 of the GMACs) is ×0.0025, not ×0.00: a
    stated ratio is never printed as zero; ratios from ×0.1 on keep two decimals."""
    from bench.rounds import Spread, ratio_or_noise

    slow, fast = Spread.of([1.0, 1.1, 0.9]), Spread.of([400.0, 410.0, 390.0])
    assert ratio_or_noise(slow, fast) == "×0.0025" and ratio_or_noise(fast, slow) == "×400.00"
    assert ratio_or_noise(Spread.of([131.0, 130.0, 132.0]), Spread.of([100.0, 99.0, 101.0])) == "×1.31"


def test_bench_run_states_a_backend_ratio_only_where_its_rounds_are_apart_from_the_fastest():
    from bench.commands import summary

    def rows(attn, rates, tokens=65):
        return [{"run_id": f"{attn}{tokens}", "attn": attn, "tokens": tokens, "batch_size": 8, "dtype": "fp32",
                 "mode": "infer", "status": "ok", "throughput_img_s": r, "peak_mem_mb": 10.0, "gmacs": 1.0,
                 "mfu": 0.1, "contended": 0} for r in rates]

    table = summary(rows("sdpa", [100, 101, 102]) + rows("bmm", [90, 91, 92]) + rows("loop", [95, 101, 110])
                    + rows("bmm", [50, 51], tokens=197) + rows("sdpa", [60, 61], tokens=197)
                    + rows("einops", [7.0, 7.5, 8.0], tokens=785)
                    + rows("sdpa", [100, 101, 102], tokens=401) + rows("bmm", [90, 91, 92], tokens=401))
    said = dict(zip(table["attn"] + "@" + table["tokens"].astype(str), table["vs fastest"]))
    assert said["sdpa@401"] == "fastest"                                     # apart from every other
    assert said["sdpa@65"] == "highest median, not apart from loop"          # loop within noise: no winner named
    assert said["sdpa@197"] == "highest median, not apart from bmm"
    assert said["bmm@65"] == f"×{91 / 101:.2f} of sdpa"                       # apart round by round: a ratio
    assert said["loop@65"] == "same within noise of sdpa"      # the test calls them alike: no winner
    assert said["bmm@197"] == "not compared (fewer than 3 measurements on a side) of sdpa"
    assert said["einops@785"] == "—"                                          # nothing to compare with
    assert table.set_index("attn").loc["loop", "img/s"] == "101 [98, 105.5]"
    fast = summary(rows("sdpa", [50620, 44594, 61400]) + rows("bmm", [43862, 42590, 53920]))
    assert fast.set_index("attn").loc["sdpa", "img/s"] == "50,620 [47,607, 56,010]"   # not 5.062e+04


def test_bench_run_states_no_ratio_from_rounds_taken_under_load():
    """einops and bmm compute the same thing; rounds of einops taken while other processes held the machine
    (contended) are ten times slower. They are left out: einops rests on its 2 quiet rounds, too few for a
    ratio, and never reads "×0.10 of bmm"."""
    from bench.commands import summary

    def rows(attn, rates, contended):   # MFU in proportion to throughput, as measured
        return [{"run_id": attn, "attn": attn, "tokens": 65, "batch_size": 8, "dtype": "fp32", "mode": "infer",
                 "status": "ok", "throughput_img_s": r, "peak_mem_mb": 10.0, "gmacs": 1.0, "mfu": r / 1000,
                 "contended": c} for r, c in zip(rates, contended)]

    table = summary(rows("bmm", [100, 101, 102, 100, 99], [0] * 5)
                    + rows("einops", [10, 10.5, 98, 9.8, 99], [1, 1, 0, 1, 0])
                    + rows("loop", [9, 9.5, 9.2], [1, 1, 1])).set_index("attn")
    assert table.loc["einops", "rounds"] == 2 and table.loc["einops", "img/s"] == "98.5 [98.25, 98.75]"
    assert table.loc["einops", "vs fastest"] == "not compared (fewer than 3 measurements on a side) of bmm"
    assert table.loc["einops", "contended"] == 3
    assert table.loc["einops", "MFU"] == "9.85 %"   # from the quiet rounds, as its img/s (not 1.05 % of them all)
    assert table.loc["loop", "img/s"] == "—" and table.loc["loop", "MFU"] == "—"   # every round under load: blank


def test_bench_run_stopped_by_ctrl_c_keeps_its_rows_and_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    """Ctrl-C at the third of 6 measurements: the two taken are in the CSV, the command exits 130 with one line
    saying so, and no traceback."""
    import bench.grid
    from bench.__main__ import main

    real, calls = bench.grid.measure_point, []

    def interrupted_at_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(bench.grid, "measure_point", interrupted_at_the_third)
    with pytest.raises(SystemExit) as stop:
        main(["run", "--preset", "vit_digits", "--attn", "sdpa,bmm", "--batch-size", "8", "--repeats", "1",
              "--warmup", "0", "--min-time-s", "0", "--rounds", "3", "--name", "x", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert stop.value.code == 130 and "Traceback" not in err
    csv = tmp_path / "bench" / "x.csv"
    assert err.splitlines()[-1] == (f"interrupted (SIGINT): 2 of 6 measurements appended to {csv}; no table printed, "
                                    f"as its ratios need every round; rerun to measure again")
    assert len(pd.read_csv(csv)) == 2


def test_bench_run_refuses_rounds_below_one_in_one_line(tmp_path, capsys):
    from bench.__main__ import main

    code, _, err = run_cli(main, ["run", "--rounds", "0", "--out", str(tmp_path)], capsys)
    assert code == 2 and "--rounds must be a positive integer, got '0'" in err
    assert not (tmp_path / "bench").exists()


def test_make_bench_into_the_reference_is_refused_before_the_benchmark_writes_its_json(tmp_path):
    """`make bench OUT=<reference>` stops at the guard, in one line, before pytest-benchmark writes the JSON
    (it used to overwrite the committed one and only then be refused)."""
    import sys

    from conftest import user_make

    from bench.reference import REFERENCE_MARK

    reference = tmp_path / "reference"
    (reference / "bench").mkdir(parents=True)
    (reference / REFERENCE_MARK).write_text("reference\n")
    committed = reference / "bench" / "pytest-benchmark.json"
    committed.write_text('{"benchmarks": []}\n')
    done = user_make("bench", f"OUT={reference}", "INSTALL=0", f"PY={sys.executable}")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "holds the committed reference results" in errors[0], done.stderr
    assert committed.read_text() == '{"benchmarks": []}\n' and "test_bench_backends.py" not in done.stdout


def test_a_report_whose_report_file_links_into_the_reference_is_refused_and_writes_nothing_there(tmp_path, capsys):
    """An OUT whose REPORT.md is a link into the committed reference: `report --out OUT` would write through it;
    it is refused in one line and the reference's report is as it was."""
    from ablations.cli.parser import main
    from bench.reference import REFERENCE_MARK

    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / REFERENCE_MARK).write_text("reference\n")
    (reference / "REPORT.md").write_text("# the committed report\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "REPORT.md").symlink_to(reference / "REPORT.md")
    assert main(["report", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"its REPORT.md leads into {reference}" in err and len(err.strip().splitlines()) == 1
    assert (reference / "REPORT.md").read_text() == "# the committed report\n"


def test_vs_timm_states_each_backend_against_timm_and_a_ctrl_c_writes_nothing(tmp_path, capsys, monkeypatch):
    """`make bench-speed`'s table from its rounds (the models and their timing replaced): a ratio where the
    quartiles are apart, the CSV written; Ctrl-C during the rounds exits 130 in one line and writes no table."""
    import bench.vs_timm as vs
    from bench.rounds import Spread

    monkeypatch.setattr(vs, "_models", lambda preset, backends: {})
    rates = {"timm": Spread.of([100.0, 101.0, 102.0]), "sdpa": Spread.of([120.0, 121.0, 122.0]),
             "loop": Spread.of([99.0, 101.0, 103.0])}
    monkeypatch.setattr(vs, "_rounds", lambda models, x, rounds: (rates, dict.fromkeys(rates, 0)))
    medians = vs.main(["--rounds", "3", "--backends", "sdpa,loop", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert medians == {"timm": 101.0, "sdpa": 121.0, "loop": 101.0}
    assert f"×{121 / 101:.3f}" in out and "same within noise" in out
    assert len(pd.read_csv(tmp_path / "bench" / "vs-timm.csv")) == 3

    def interrupted(models, x, rounds):
        raise KeyboardInterrupt
    monkeypatch.setattr(vs, "_rounds", interrupted)
    with pytest.raises(SystemExit) as stop:
        vs.main(["--out", str(tmp_path / "stopped")])
    err = capsys.readouterr().err
    assert stop.value.code == 130 and err.strip() == "interrupted (SIGINT): nothing written (the table needs every round)"
    assert not (tmp_path / "stopped" / "bench").exists()
