"""Results survive torn lines, full disks, twin sweeps and bad files, and every user-caused failure is
one line and exit status 2. Each test names the defect it reproduces; each failed before
the fix. The random-kill campaign is `tests/crash.py` (`make crash-test`; a short one in test_crash.py)."""

import dataclasses
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_cli, user_make, write_spec
from helpers import run_sweep

import ablations.__main__ as cli
import ablations.cli.commands as commands
from ablations.analysis.report import build_report
from ablations.results.schema import read_table
from ablations.results.store import SweepError, SweepPaths, record, sweep_lock
from ablations.running.cost import CostPlan
from ablations.running.tasks import RunOptions, RunResult
from ablations.specs import Point
from ablations.training.checkpoints import Checkpointing
from ablations.training.data import load_dataset
from ablations.training.train import train
from bench.io.csvio import SkippedInput, append_row, read_rows
from bench.schema import Column
from bench.training.recipe import TrainConfig
from vit import VisionTransformer, ViTConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=1, num_heads=2,
                 mlp_ratio=1.0)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache"))


def points(sweep, *depths, epochs=1):
    return [Point(sweep, "depth", d, TINY.replace(depth=d), TrainConfig(epochs=epochs, batch_size=128))
            for d in depths]


def options(out, seeds=(0,), **kw):
    return RunOptions(dataset="digits", out=str(out), seeds=seeds, progress=False, cost=CostPlan(rounds=0), **kw)


def tear_last_line(path: Path) -> None:
    data = path.read_bytes()
    last = data[:-1].rfind(b"\n") + 1
    path.write_bytes(data[: last + (len(data) - last) // 2])


# 1. a torn last line poisoned the table for good -------------------------------------------------------

def test_a_torn_last_line_is_cut_and_quarantined_and_the_sweep_and_report_go_on(tmp_path):
    run_sweep("depth", points("depth", 1, 2), options(tmp_path, seeds=(0, 1)))
    csv = tmp_path / "ablations" / "depth.csv"
    tear_last_line(csv)
    with pytest.warns(SkippedInput, match="torn last line"):
        summary = run_sweep("depth", points("depth", 1, 2), options(tmp_path, seeds=(0, 1)))
    assert summary.statuses == {"ok": 1}          # only the torn run is trained again
    table = read_table(csv)
    assert len(table) == 4 and table["run_id"].is_unique and (table["status"] == "ok").all()
    assert (tmp_path / "ablations" / "depth.csv.quarantine").read_bytes().strip()
    run_sweep("depth", points("depth", 1, 2), options(tmp_path, seeds=(0, 1)))   # and stays whole
    assert len(read_table(csv)) == 4
    assert "## depth" in build_report(tmp_path).read_text()


def test_a_reader_skips_a_malformed_line_naming_file_and_line(tmp_path):
    path = tmp_path / "t.csv"
    for i in range(3):
        append_row(path, {"a": i, "b": f"x{i}", "c": i / 2}, ["a", "b", "c"])
    with open(path, "ab") as f:
        f.write(b'garbage\x00\xff\n1,"open quote\nnot,a,number\n')
    append_row(path, {"a": 9, "b": "x9", "c": 4.5}, ["a", "b", "c"])
    schema = {"a": Column("a", "", "", "int"), "c": Column("c", "", "", "number")}
    with pytest.warns(SkippedInput, match=r"t\.csv: skipped 3 malformed lines: 5, 6, 7"):
        table = read_rows(path, schema)
    assert list(table["a"]) == [0, 1, 2, 9] and table["c"].dtype == float


# 2. short writes were ignored ---------------------------------------------------------------------------

def test_a_short_write_is_completed(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:7])))  # 7 bytes per call
    append_row(tmp_path / "t.csv", {"a": 1, "b": "x" * 100}, ["a", "b"])
    monkeypatch.undo()
    assert read_table(tmp_path / "t.csv").loc[0, "b"] == "x" * 100


def test_a_full_disk_raises_naming_the_file_and_keeps_no_half_row(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    append_row(path, {"a": 1, "b": "x"}, ["a", "b"])
    before = path.read_bytes()
    real = os.write

    def full(fd, data):
        real(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match=r"t\.csv: could not write .*No space left.*nothing of them was kept"):
        append_row(path, {"a": 2, "b": "y" * 50}, ["a", "b"])
    monkeypatch.undo()
    assert path.read_bytes() == before


# 3. nothing stopped duplicate work ----------------------------------------------------------------------

@pytest.mark.parametrize("seeds", ["0", "auto"])
def test_a_command_refused_for_a_sweep_in_use_leaves_its_design_file_as_it_was(tmp_path, capsys, seeds):
    """Another command holds the sweep (an adaptive sweep between its looks, say): a command refused for it
    neither removes its design file (fixed seeds would) nor writes one of its own (SEEDS=auto would)."""
    spec = write_spec(tmp_path / "held.toml", "depth", "[1]")
    paths = SweepPaths.of(tmp_path / "out", "held")
    paths.design.parent.mkdir(parents=True)
    paths.design.write_text('{"looks": [3, 5], "written by": "the command that holds the sweep"}\n')
    before = paths.design.read_bytes()
    with sweep_lock(paths, "held"):
        code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "out"),
                         "--seeds", seeds, "--cost-rounds", "0"])
    assert code == 2 and "is in use by another command" in capsys.readouterr().err
    assert paths.design.read_bytes() == before


def test_a_second_identical_sweep_exits_naming_the_holder(tmp_path, capsys):
    spec = write_spec(tmp_path / "twin.toml", "depth", "[1]")
    paths = SweepPaths.of(tmp_path / "out", "twin")
    with sweep_lock(paths, "twin"):
        code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "out"),
                         "--seeds", "0", "--cost-rounds", "0"])
        with pytest.raises(SweepError, match=f"in use by another command \\(PID {os.getpid()}"):
            run_sweep("twin", points("twin", 1), options(tmp_path / "out"))
    err = capsys.readouterr().err
    assert code == 2 and f"sweep twin under OUT={tmp_path / 'out'} is in use by another command (PID {os.getpid()}" in err
    assert "python -m ablations" in err and "give this one another OUT" in err   # names the holder's command
    assert "trains the same runs" not in err     # it may be another experiment (other EPOCHS) into the same OUT
    assert not (tmp_path / "out" / "ablations" / "twin.csv").exists()
    assert run_sweep("twin", points("twin", 1), options(tmp_path / "out")).statuses == {"ok": 1}  # released


def test_repeated_seeds_and_spec_values_are_refused_before_work(tmp_path, capsys):
    spec = write_spec(tmp_path / "dup.toml", "depth", "[1, 2]")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sweep", str(spec), "--dataset", "digits", "--seeds", "0,0", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "seeds name a seed twice" in capsys.readouterr().err
    spec.write_text(spec.read_text().replace("values = [1, 2]", "values = [1]\nvalues_by_img_size = {8 = [1, 1]}"))
    assert cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path)]) == 2
    assert "duplicates" in capsys.readouterr().err
    assert not (tmp_path / "ablations").exists()


# 4. the report fell over on one bad input ---------------------------------------------------------------

@pytest.mark.slow
def test_the_report_survives_a_bad_row_and_damaged_files_and_lists_them(tmp_path):
    from ablations.analysis.calibrate import MODEL, RECIPE

    recipe = dataclasses.replace(RECIPE, epochs=5, lr=1e-2)   # 23-27 % on digits: above chance, so compared
    run_sweep("depth", [Point("depth", "depth", d, MODEL.replace(depth=d), recipe) for d in (1, 2)],
              options(tmp_path, seeds=(0, 1)))
    run_sweep("pos", [Point("pos", "pos", p, TINY.replace(pos=p), TrainConfig(epochs=1, batch_size=128))
                      for p in ("learned", "sinusoidal")], options(tmp_path))
    csv = tmp_path / "ablations" / "depth.csv"
    table = read_table(csv)
    bad = table.iloc[0].to_dict()
    bad.update(depth="deep", run_id="badbadbadbad")   # a string where the factor's numbers are
    append_row(csv, bad, list(table.columns))
    paths = SweepPaths.of(tmp_path, "depth")
    victim = next(paths.preds.glob("*.npz"))
    victim.write_bytes(victim.read_bytes()[:20])
    weights = next(SweepPaths.of(tmp_path, "pos").weights.glob("*.pt"))
    weights.write_bytes(weights.read_bytes()[:100])
    (tmp_path / "ablations" / "norm.csv").write_bytes(b"\x00\x01garbage\n")
    report = build_report(tmp_path).read_text()
    skipped = report.split("## Skipped inputs", 1)[1]
    assert f"{csv}: skipped 1 malformed line: 6" in skipped
    assert f"{victim}: not a readable predictions file" in skipped
    assert f"{weights}: weights unreadable" in skipped
    assert f"{tmp_path / 'ablations' / 'norm.csv'}: line 1 is not a header" in skipped
    assert "| 1 |" in report and "| 2 |" in report and "deep" not in report.split("## Skipped")[0]


# 5. an unwritable OUT was found only after training; orphan tmp files; repeated history ------------------

def test_an_out_that_is_a_file_fails_before_any_work_naming_it(tmp_path, capsys):
    spec = write_spec(tmp_path / "d.toml", "depth", "[1]")
    (tmp_path / "file").write_text("not a folder")
    code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "file"), "--seeds", "0"])
    err = capsys.readouterr().err
    assert code == 2 and f"OUT={tmp_path / 'file'}: cannot create" in err and "Traceback" not in err


def test_preflight_refuses_an_out_without_room_and_prints_the_estimate(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(SweepError, match=r"MiB free, but the 2 runs to do need about [\d.]+ MiB"):
        run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    assert not (tmp_path / "ablations" / "depth.csv").exists()


def test_stale_tmp_files_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    paths = SweepPaths.of(tmp_path, "depth")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = [paths.weights / f"abc.pt.{dead.stdout.strip()}.tmp", paths.preds / f"abc.npz.{dead.stdout.strip()}.tmp"]
    live = paths.weights / f"def.pt.{os.getppid()}.tmp"
    for f in (*stale, live):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"partial")
    summary = run_sweep("depth", points("depth", 1), options(tmp_path))
    assert summary.stale_tmp == 2 and not any(f.exists() for f in stale) and live.exists()


def test_a_run_recorded_again_after_a_kill_does_not_repeat_its_history(tmp_path):
    paths = SweepPaths.of(tmp_path, "depth")
    r0, r1 = "0000000000a0", "0000000000a1"
    history = [{"run_id": r1, "epoch": e, "lr": 0.1, "train_loss": 1.0, "test_loss": 1.0, "test_acc": 0.5,
                "elapsed_s": e} for e in (1, 2)]
    row = {"run_id": r1, "status": "ok", "sweep": "depth"}
    record(RunResult({"run_id": r0, "status": "ok"}, [{**history[0], "run_id": r0}]), paths)
    append_row(paths.history, history[0], list(history[0]))   # a killed attempt: history, no row
    record(RunResult(row, history), paths)
    table = read_table(paths.history)
    assert sorted(zip(table["run_id"], table["epoch"])) == [(r0, 1), (r1, 1), (r1, 2)]


# 6. tracebacks instead of messages ---------------------------------------------------------------------

@pytest.mark.parametrize("content,suffix", [(b"", ".pth"), (b"\x80\x04garbage", ".pth"), (b"PK\x03\x04bad", ".bin"),
                                            (b"{}", ".safetensors"), (b"\x00" * 64, ".safetensors")])
def test_a_corrupt_init_file_is_one_line_naming_it(tmp_path, capsys, content, suffix):
    init = tmp_path / f"ckpt{suffix}"
    init.write_bytes(content)
    spec = write_spec(tmp_path / "d.toml", "depth", "[1]")
    code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path), "--init", str(init)])
    err = capsys.readouterr().err
    assert code == 2 and f"checkpoint {init}: not a readable {suffix} file" in err and "Traceback" not in err


def test_empty_mnist_raw_files_name_the_folder_and_the_fix(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (raw / name).write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"cannot be read .*empty, truncated.*--download"):
        load_dataset("mnist", tmp_path)


def test_ctrl_c_exits_130_saying_what_was_kept(tmp_path, capsys, monkeypatch):
    spec = write_spec(tmp_path / "d.toml", "depth", "[1, 2]")
    real = commands.run_sweeps

    def interrupted(plans, executor, recorded, locked=False, spent=None):   # one finishes, then Ctrl-C
        real([(name, pts[:1], opts) for name, pts, opts in plans], executor, recorded=recorded, locked=locked,
             spent=spent)
        raise KeyboardInterrupt
    monkeypatch.setattr(commands, "run_sweeps", interrupted)
    code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path), "--seeds", "0",
                     "--cost-rounds", "0"])
    assert code == 130
    assert ("interrupted (SIGINT): 1 run finished and kept; the 1 run left starts from epoch 1; rerun the same "
            "command to resume") in capsys.readouterr().err


@pytest.mark.parametrize("seeds", ["0", "auto"])
def test_an_out_that_is_a_file_is_one_line_and_exit_2_at_fixed_and_adaptive_seeds(tmp_path, capsys, seeds):
    spec = write_spec(tmp_path / "d.toml", "depth", "[1]")
    (tmp_path / "afile").write_text("not a folder\n")
    code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "afile"), "--seeds", seeds,
                     "--cost-rounds", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: OUT={tmp_path / 'afile'}: cannot create {tmp_path / 'afile' / 'ablations' / 'd.lock'} (Not a directory); "
        f"choose another OUT (--out) or fix its permissions"]


def test_an_adaptive_design_whose_runs_keep_failing_exits_1_and_says_it_is_unfinished(tmp_path, capsys, monkeypatch):
    """A setting whose runs fail every time (out of memory, say) leaves the design's look unanswered: the
    command says so and exits 1, not 0 after an 'error' line."""
    from ablations.running.tasks import base_row
    from ablations.running.worker import execute

    spec = write_spec(tmp_path / "f.toml", "depth", "[1, 2]")
    real = commands.run_sweeps

    def failing(task, data):
        if task.point.value == 2:
            row = base_row(task, torch.device("cpu"))
            row.update(status="oom", error="OutOfMemoryError: simulated")
            return RunResult(row)
        return execute(task, data)

    def with_failures(plans, executor, recorded, locked=False, spent=None):
        return real(plans, executor, fn=failing, recorded=recorded, locked=locked, spent=spent)

    monkeypatch.setattr(commands, "run_sweeps", with_failures)
    code = cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path / "o"), "--seeds", "auto:3,5",
                     "--epochs", "1", "--cost-rounds", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "error: SEEDS=auto: runs the design needs did not finish" in err


@pytest.mark.slow
def test_seeds_auto_trained_to_the_cap_and_killed_resumes_training_only_what_is_missing(tmp_path, capsys):
    """AUTO_TRAIN=cap SIGKILLed after its first finished run: the same command again keeps what the killed one
    finished and trains every other run of the cap once, in one training phase."""
    from conftest import kill_after_first_row

    spec = write_spec(tmp_path / "k.toml", "depth", "[1, 2]", "embed_dim = 16\nnum_heads = 2\nmlp_ratio = 1.0",
                      "epochs = 1\nbatch_size = 128")
    out = tmp_path / "out"
    argv = ["sweep", str(spec), "--dataset", "digits", "--seeds", "auto:3,5", "--auto-train", "cap",
            "--cost-rounds", "0", "--jobs", "1", "--out", str(out)]
    first = kill_after_first_row([sys.executable, "-m", "ablations", *argv], dict(os.environ, CUDA_VISIBLE_DEVICES=""),
                                 out / "ablations" / "k.csv")
    assert 1 <= len(first) < 10 and (first["status"] == "ok").all()
    assert cli.main(argv) == 0
    said = capsys.readouterr().out
    rows = read_table(out / "ablations" / "k.csv")
    assert sorted(rows["seed"]) == sorted([*range(5)] * 2) and rows["run_id"].is_unique
    assert (rows["status"] == "ok").all() and set(first["run_id"]) <= set(rows["run_id"])
    assert f"{10 - len(first)} runs: 0 already done, {10 - len(first)} ok" in said   # the looks ask for what is missing
    assert "AUTO_TRAIN=cap: every open setting trained to the cap (5 seeds) at once, in 1 training phase" in said


@pytest.mark.parametrize("argv,message", [(["--seeds", "-1"], "seed -1 is out of range"),
                                          (["--seeds", str(2**40)], "out of range"),
                                          (["--epochs", "0"], "--epochs (EPOCHS) must be a positive integer"),
                                          (["--checkpoint-every", "-2"], "checkpoint-every must be auto")])
def test_bad_run_options_fail_before_work_naming_the_option(tmp_path, capsys, argv, message):
    spec = write_spec(tmp_path / "d.toml", "depth", "[1]")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sweep", str(spec), "--dataset", "digits", "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "d.toml" not in err
    assert not (tmp_path / "ablations").exists()


# 7. bench run wrote outside OUT; --repeats 0 was accepted -----------------------------------------------

@pytest.mark.parametrize("argv,message", [(["--name", "../../x"], "--name '../../x'"),
                                          (["--name", ".hidden"], "--name '.hidden'"),
                                          (["--repeats", "0"], "--repeats must be a positive integer")])
def test_bench_run_refuses_a_bad_name_or_repeats(tmp_path, capsys, argv, message):
    from bench.__main__ import main

    code, _, err = run_cli(main, ["run", "--preset", "vit_mnist", "--out", str(tmp_path), *argv], capsys)
    assert code == 2 and message in err and "Traceback" not in err
    assert not any(tmp_path.parent.glob("x.csv")) and not (tmp_path / "bench").exists()


# mid-run checkpoints -------------------------------------------------------------------------------------

class Killed(Exception):
    pass


def test_a_run_killed_after_an_epoch_resumes_there_with_the_same_final_weights(tmp_path, monkeypatch):
    import ablations.training.evaluation as evaluation  # where a run's epoch-end evaluation is looked up

    data = load_dataset("digits")
    cfg = TrainConfig(epochs=5, batch_size=128)
    cfg_model = TINY.replace(dropout=0.1, attn_dropout=0.1)   # the global RNG matters too

    def fresh():
        torch.manual_seed(3)
        return VisionTransformer(cfg_model)
    straight = fresh()
    reference = train(straight, data, cfg, 3, torch.device("cpu"), progress=False)

    ckpt = Checkpointing(tmp_path / "run.safetensors", every=1)
    real_evaluate, calls = evaluation.evaluate, []

    def dies_in_epoch_4(*args, **kw):
        calls.append(1)
        if len(calls) == 4:
            raise Killed
        return real_evaluate(*args, **kw)
    monkeypatch.setattr(evaluation, "evaluate", dies_in_epoch_4)
    with pytest.raises(Killed):
        train(fresh(), data, cfg, 3, torch.device("cpu"), progress=False, checkpoint=ckpt)
    monkeypatch.setattr(evaluation, "evaluate", real_evaluate)
    assert ckpt.path.exists()
    resumed_model = fresh()
    resumed = train(resumed_model, data, cfg, 3, torch.device("cpu"), progress=False, checkpoint=ckpt)
    assert resumed.resumed_after == 3 and [h["epoch"] for h in resumed.history] == [1, 2, 3, 4, 5]
    for (name, a), b in zip(straight.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name
    for key in ("train_loss", "test_loss", "test_acc", "lr"):
        assert [h[key] for h in resumed.history] == [h[key] for h in reference.history], key


def test_auto_checkpoints_only_runs_projected_past_a_minute():
    auto = Checkpointing(Path("x"))
    assert not auto.due(1, 20, seconds_per_epoch=2.9) and auto.due(1, 20, seconds_per_epoch=3.1)
    assert not auto.due(20, 20, seconds_per_epoch=100)   # a finished run is recorded, not checkpointed
    assert Checkpointing(Path("x"), every=2).due(4, 20, 0.1) and not Checkpointing(Path("x"), every=2).due(3, 20, 99)
    assert not Checkpointing(Path("x"), every=0).due(1, 20, 99)


def test_a_sweep_run_resumes_from_its_checkpoint_and_says_so(tmp_path):
    opts = options(tmp_path, checkpoint_every=1)
    pts = points("depth", 1, epochs=3)
    paths = SweepPaths.of(tmp_path, "depth")
    # a first attempt that wrote its epoch-2 checkpoint and was killed before its row
    from ablations.running.tasks import make_tasks
    task = make_tasks(pts, opts)[0]
    data = load_dataset("digits")
    torch.manual_seed(0)
    model = VisionTransformer(task.point.model)
    short = Checkpointing(paths.checkpoint(task.run_id), every=1)
    import ablations.training.evaluation as evaluation  # where a run's epoch-end evaluation is looked up
    real = evaluation.evaluate
    calls = []

    def dies(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise Killed
        return real(*a, **k)
    evaluation.evaluate = dies
    try:
        with pytest.raises(Killed):
            train(model, data, task.point.train, 0, torch.device("cpu"), progress=False, checkpoint=short)
    finally:
        evaluation.evaluate = real
    summary = run_sweep("depth", pts, opts)
    row = read_table(paths.rows).iloc[0]
    assert summary.resumable == 1 and row["resumed_after"] == 2 and row["status"] == "ok"
    assert not paths.checkpoint(task.run_id).exists()     # removed once the row is written


# 6. garbage outvoted real rows; two settings were pooled as seeds; superseded failures were listed ------

def test_garbage_lines_cannot_outvote_the_real_rows(tmp_path):
    run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    csv = tmp_path / "ablations" / "depth.csv"
    real = read_table(csv)
    width = len(real.columns)
    with open(csv, "a") as f:   # more garbage than real rows, each with the header's field count, all numbers
        for i in range(5):
            f.write(",".join(str(i + k) for k in range(width)) + "\n")
    with pytest.warns(SkippedInput, match=r"skipped 5 malformed lines: 4, 5, 6, 7, 8"):
        table = read_table(csv)
    assert list(table["run_id"]) == list(real["run_id"])
    summary = run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    assert summary.skipped == 2 and summary.statuses == {}   # nothing is trained again


@pytest.mark.parametrize("change,differs", [(dict(epochs=2), "epochs 1 vs 2"),
                                            (dict(weight_decay=0.0), "weight_decay 0.05 vs 0.0")])
def test_a_table_with_two_experiments_is_reported_as_the_newest_one_naming_the_other(tmp_path, capsys, change,
                                                                                     differs):
    run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    newer = [dataclasses.replace(p, train=dataclasses.replace(p.train, **change)) for p in points("depth", 1, 2)]
    capsys.readouterr()
    run_sweep("depth", newer, options(tmp_path))
    assert f"holds 2 runs of another experiment ({differs}" in capsys.readouterr().err   # said before training
    report = build_report(tmp_path).read_text()
    section = report.split("## depth", 1)[1].split("\n## ", 1)[0]
    assert "Seed 0;" in section and "| 1 | 1 |" in section and "| 2 | 1 |" in section   # one seed each, not two
    assert f"2 runs of another experiment ({differs}" in report.split("## Skipped inputs", 1)[1]
    if "epochs" in change:
        assert "epochs=2" in section


def test_a_failure_superseded_by_an_ok_row_is_not_listed_as_failed(tmp_path):
    run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    csv = tmp_path / "ablations" / "depth.csv"
    table = read_table(csv)
    failed = table.iloc[0].to_dict()
    failed.update(status="error", error="RuntimeError: boom", started_at="2020-01-01T00:00:00+00:00")
    text = csv.read_text().splitlines()
    append_row(csv, failed, list(table.columns))
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join([text[0], lines[-1], *text[1:]]) + "\n")   # the failure came first, then the ok row
    assert "Failed runs" not in build_report(tmp_path).read_text()


def test_a_run_whose_predictions_were_deleted_is_trained_again_and_reported(tmp_path):
    run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    victim = next(SweepPaths.of(tmp_path, "depth").preds.glob("*.npz"))
    victim.unlink()
    summary = run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    assert summary.statuses == {"ok": 1} and victim.exists()
    report = build_report(tmp_path).read_text()
    assert "no saved test predictions" not in report and "Pairwise comparisons" not in report.split("## depth")[0]


# 7. the smaller ones: a cache that cannot be written, an older table, tracebacks, a foreign checkpoint ------

def test_an_unwritable_cache_costs_only_the_cache(tmp_path, monkeypatch):
    (tmp_path / "cache-file").write_text("a file where the cache folder should be")
    monkeypatch.setenv("VITBENCH_CACHE", str(tmp_path / "cache-file"))
    summary = run_sweep("depth", points("depth", 1), dataclasses.replace(options(tmp_path / "o"),
                                                                         cost=CostPlan(rounds=1)))
    assert summary.statuses == {"ok": 1}
    cost = read_table(tmp_path / "o" / "ablations" / "depth-cost.csv")
    assert (cost["status"] == "ok").all() and cost["mfu"].notna().all()


def test_a_table_from_before_a_column_existed_is_appended_to_with_blank_cells(tmp_path):
    run_sweep("depth", points("depth", 1), options(tmp_path))
    csv = tmp_path / "ablations" / "depth.csv"
    old = read_table(csv).drop(columns=["jobs", "experiment_id"])   # as an older version wrote it
    old.to_csv(csv, index=False)
    summary = run_sweep("depth", points("depth", 1, 2), options(tmp_path))
    assert summary.statuses == {"ok": 1}
    table = read_table(csv)
    assert list(table.columns[-2:]) == ["jobs", "experiment_id"] and len(table) == 2
    assert table["jobs"].isna().tolist() == [True, False]
    assert "## depth" in build_report(tmp_path).read_text()


def test_report_bench_and_compare_on_bad_inputs_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    empty = tmp_path / "empty" / "ablations"
    empty.mkdir(parents=True)
    (empty / "depth.csv").write_text("")
    nostatus = tmp_path / "nostatus" / "ablations"
    nostatus.mkdir(parents=True)
    (nostatus / "depth.csv").write_text("run_id,seed\nabcdefabcdef,0\n")
    from bench.__main__ import main as bench_main

    mains = {"ablations": cli.main, "bench": bench_main}
    for argv, message in [(["ablations", "report", "--out", str(tmp_path / "file")], "not a folder"),
                          (["ablations", "report", "--out", str(tmp_path / "typo")], "typo: no such folder"),
                          (["ablations", "compare", str(tmp_path / "typo"), str(tmp_path / "empty")],
                           "A " + str(tmp_path / "typo") + ": no ablations/ folder"),
                          (["ablations", "compare", str(tmp_path / "empty"), str(tmp_path)],
                           "B " + str(tmp_path) + ": no ablations/ folder"),
                          (["bench", "run", "--preset", "vit_digits", "--out", str(tmp_path / "file"), "--tokens", "5"],
                           "cannot create"),
                          (["ablations", "compare", str(tmp_path / "empty"), str(tmp_path / "nostatus")],
                           "no finished run in common")]:
        try:
            status = mains[argv[0]](argv[1:])
        except SystemExit as stop:
            status = stop.code
        err = capsys.readouterr().err
        assert status == 2, (argv, err[-1500:])
        assert message in err and "Traceback" not in err and err.count("\n") == 1, (argv, err[-1500:])
    assert not (tmp_path / "typo").exists()   # a mistyped OUT is not created with an empty report in it


def test_a_checkpoint_of_another_model_is_ignored_with_a_line_and_the_run_starts_from_epoch_1(tmp_path, capsys):
    data = load_dataset("digits")
    cfg = TrainConfig(epochs=2, batch_size=128)
    ckpt = Checkpointing(tmp_path / "run.safetensors", every=1)
    torch.manual_seed(0)
    train(VisionTransformer(TINY.replace(embed_dim=32)), data, cfg, 0, torch.device("cpu"), progress=False,
          checkpoint=ckpt)
    assert ckpt.path.exists()   # epoch 1 of the same recipe, but a model of another width
    torch.manual_seed(0)
    fresh = train(VisionTransformer(TINY), data, cfg, 0, torch.device("cpu"), progress=False)
    torch.manual_seed(0)
    result = train(VisionTransformer(TINY), data, cfg, 0, torch.device("cpu"), progress=False, checkpoint=ckpt)
    assert "is not this run's" in capsys.readouterr().err
    assert result.resumed_after == 0 and len(result.history) == cfg.epochs
    assert [h["test_acc"] for h in result.history] == [h["test_acc"] for h in fresh.history]


def test_a_checkpoint_whose_optimizer_is_grouped_otherwise_is_not_restored_and_the_run_starts_from_epoch_1(
        tmp_path, monkeypatch, capsys):
    """A checkpoint written with other parameter groups (an older layout: one group a layer) would put each
    optimizer state on another parameter: it is refused in one line and the run starts from epoch 1, to the bits
    of a run without it."""
    import bench.training.step as step_module
    real = step_module.param_groups

    def one_group_a_layer(model, weight_decay, layer_decay=1.0, stacked=None):
        groups = real(model, weight_decay, 0.5, stacked)
        for group in groups:
            group["lr_scale"] = 1.0
        return groups
    data = load_dataset("digits")
    cfg = TrainConfig(epochs=2, batch_size=128)
    ckpt = Checkpointing(tmp_path / "run.safetensors", every=1)
    with monkeypatch.context() as m:
        m.setattr(step_module, "param_groups", one_group_a_layer)
        torch.manual_seed(0)
        train(VisionTransformer(TINY), data, cfg, 0, torch.device("cpu"), progress=False, checkpoint=ckpt)
    assert ckpt.path.exists()
    torch.manual_seed(0)
    fresh = train(VisionTransformer(TINY), data, cfg, 0, torch.device("cpu"), progress=False)
    torch.manual_seed(0)
    result = train(VisionTransformer(TINY), data, cfg, 0, torch.device("cpu"), progress=False, checkpoint=ckpt)
    assert f"checkpoint {ckpt.path} could not be restored (ValueError); the run starts from epoch 1" in \
        capsys.readouterr().err
    assert result.resumed_after == 0
    assert [h["test_acc"] for h in result.history] == [h["test_acc"] for h in fresh.history]
    assert torch.equal(result.test_preds, fresh.test_preds)


def test_the_makefile_passes_paths_with_spaces_as_one_argument(tmp_path):
    import shlex

    done = user_make("-n", "-o", ".venv/.installed-test", "ablations", "OUT=my results", "DATA_ROOT=/data dir",
                     "INIT=/w s.pth")
    sweep = next(line for line in done.stdout.splitlines() if "ablations sweep" in line)
    args = shlex.split(sweep)
    assert args[args.index("--out") + 1] == "my results"
    assert args[args.index("--data-root") + 1] == "/data dir" and args[args.index("--init") + 1] == "/w s.pth"
    compare = user_make("-n", "-o", ".venv/.installed-test", "compare", "A=x y", "B=z w").stdout
    line = next(line for line in compare.splitlines() if "ablations compare" in line)
    assert shlex.split(line)[-2:] == ["x y", "z w"]


@pytest.mark.slow
def test_a_sweep_from_a_spec_elsewhere_killed_after_its_first_run_keeps_its_section_in_the_report(tmp_path):
    """A spec outside ablations/sweeps/ is copied beside its table before the first run: a SIGKILL after that run
    (or a report read while the sweep runs) still finds the sweep, which gets its section instead of 'Skipped
    inputs'. The copy's name may have a space in it: the report's figure link is quoted so that it renders."""
    import sys

    from conftest import kill_after_first_row, write_spec

    from ablations.analysis.report import build_report

    spec = write_spec(tmp_path / "my sweep.toml", "depth", "[1, 2]", "embed_dim = 16\nnum_heads = 2")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--seeds", "0,1",
           "--cost-budget", "0", "--jobs", "1", "--out", str(out)]
    rows = kill_after_first_row(cmd, dict(os.environ, CUDA_VISIBLE_DEVICES=""), out / "ablations" / "my sweep.csv")
    assert len(rows) >= 1 and (out / "ablations" / "my sweep.toml").read_text() == spec.read_text()
    text = build_report(out, reference=None).read_text()
    assert "## my sweep" in text and "no spec for the my sweep sweep" not in text
    assert "(figures/my%20sweep.png)" in text and "(figures/my sweep.png)" not in text
