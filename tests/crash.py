"""Crash test: a sweep abused as a hostile user and a hostile machine would, then rerun to completion.

    python tests/crash.py --kills 24 [--workdir DIR] [--seed 0]      # make crash-test

On a small digits sweep (3 points × 3 seeds, 3 epochs, a checkpoint every epoch), it
1. runs it once uninterrupted, for reference accuracies and weights;
2. SIGKILLs it at `--kills` random instants (half of them aimed inside a run's save step, which
   `VITBENCH_SAVE_MARKS` widens and marks on stderr), rerunning after each kill; after every kill it
   checks that nothing finished was lost: every run that had an ok row still has it, with its weights
   file byte-identical;
3. tears the result table's last line in half, then appends garbage lines to the result and history
   tables, rerunning after each;
4. fills a small filesystem (a 4 MiB tmpfs; needs root) while a sweep runs on it, checks that the
   sweep stops with a one-line error and leaves no torn row, then frees space and reruns (skipped with a
   reason where tmpfs cannot be mounted);
5. checks the end state: every point × seed has exactly one ok row, every accuracy and weights file
   equals the uninterrupted run's, and `python -m ablations report` succeeds and lists the garbage
   under "Skipped inputs".
It prints the counts and exits 1 on any violation. `tests/test_crash.py` runs a short campaign.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.csvio import SkippedInput, read_rows  # noqa: E402

warnings.simplefilter("ignore", SkippedInput)  # the campaign damages tables on purpose; it checks the report

SPEC = """[sweep]
factor = "depth"
values = [1, 2, 3]

[model]
preset = "vit_digits"
embed_dim = 32
num_heads = 2

[train]
epochs = 3
"""
SEEDS = "0,1,2"
RUNS = 9


@dataclass
class Tally:
    kills: int = 0
    kills_in_save: int = 0
    kills_in_startup: int = 0
    finished_before_kill: int = 0
    reruns: int = 0
    resumed_runs: int = 0
    torn_cut: int = 0
    garbage_skipped: int = 0
    disk_full: str = ""
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.problems.append(what)
            print(f"  VIOLATION: {what}", flush=True)


def sweep_cmd(spec: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "ablations", "sweep", str(spec), "--dataset", "digits", "--seeds", SEEDS,
            "--cost-rounds", "1", "--checkpoint-every", "1", "--device", "cpu", "--out", str(out)]


def env(work: Path, marks: float = 0.0) -> dict[str, str]:
    e = {**os.environ, "VITBENCH_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    if marks:
        e["VITBENCH_SAVE_MARKS"] = str(marks)
    else:
        e.pop("VITBENCH_SAVE_MARKS", None)
    return e


def run(spec: Path, out: Path, work: Path) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_cmd(spec, out), env=env(work), cwd=ROOT, capture_output=True, text=True, timeout=900)


def finished(out: Path, sweep: str) -> dict[str, str]:
    """{run_id: sha256 of its weights} for every ok row."""
    csv = out / "ablations" / f"{sweep}.csv"
    if not csv.exists():
        return {}
    table = read_rows(csv)
    if table.empty or "status" not in table:
        return {}
    done = {}
    for rid in table.loc[table["status"] == "ok", "run_id"].astype(str):
        weights = out / "ablations" / "weights" / sweep / f"{rid}.pt"
        done[rid] = hashlib.sha256(weights.read_bytes()).hexdigest() if weights.exists() else "missing"
    return done


def kill_once(spec: Path, out: Path, work: Path, rng: random.Random, in_save: bool, tally: Tally) -> None:
    """Start the sweep, SIGKILL it at a random instant (inside a save step when `in_save`), check that
    nothing finished was lost."""
    before = finished(out, spec.stem)
    log = work / "kill.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(sweep_cmd(spec, out), env=env(work, marks=0.3 if in_save else 0.0), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err)
        if in_save:  # wait for a save step to begin, then kill somewhere inside it
            deadline = time.time() + 120
            while time.time() < deadline and proc.poll() is None and "save begin" not in log.read_text():
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 1.0))
        else:
            time.sleep(rng.uniform(0.5, 8.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            tally.kills += 1
        else:
            tally.finished_before_kill += 1
        proc.wait()
    text = log.read_text()
    begins, ends = text.count("save begin"), text.count("save end")
    tally.kills_in_save += in_save and begins > ends
    tally.kills_in_startup += "local: this process" not in text
    after = finished(out, spec.stem)
    lost = [rid for rid, digest in before.items() if after.get(rid) != digest]
    tally.check(not lost, f"kill {tally.kills}: finished runs lost or changed: {lost}")


def tear_last_line(csv: Path) -> None:
    data = csv.read_bytes()
    last = data[:-1].rfind(b"\n") + 1
    with open(csv, "r+b") as f:
        f.truncate(last + (len(data) - last) // 2)


def fill_small_filesystem(spec: Path, work: Path, tally: Tally) -> None:
    mount = work / "small"
    mount.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        tally.disk_full = "skipped: mounting a tmpfs needs root"
        return
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True)
    if got.returncode:
        tally.disk_full = f"skipped: cannot mount a tmpfs here ({got.stderr.strip()[:100]})"
        return
    try:
        out = mount / "out"
        proc = subprocess.Popen(sweep_cmd(spec, out), env=env(work), cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and len(finished(out, spec.stem)) < 2:
            time.sleep(0.05)
        with open(mount / "filler", "wb") as f:  # take every free byte
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        err = proc.communicate(timeout=600)[1]
        kept = finished(out, spec.stem)
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        tally.check(proc.returncode == 2, f"full disk: exit status {proc.returncode}, not 2")
        tally.check(bool(lines) and "No space left" in lines[0] and str(out) in lines[0],
                    f"full disk: no one-line error naming the file: {lines[:1] or err[-300:]}")
        tally.check("Traceback" not in err, "full disk: a traceback was printed")
        raw = (out / "ablations" / f"{spec.stem}.csv").read_bytes()
        tally.check(raw.endswith(b"\n"), "full disk: the result table ends in a torn line")
        (mount / "filler").unlink()
        done = run(spec, out, work)
        tally.check(done.returncode == 0, f"full disk: the rerun failed: {done.stderr[-300:]}")
        final = finished(out, spec.stem)
        tally.check(len(final) == RUNS and all(final.get(r) == d for r, d in kept.items()),
                    "full disk: the rerun did not finish every run keeping those done before")
        tally.disk_full = (f"4 MiB tmpfs filled after {len(kept)} runs: exit 2 with "
                           f"'{lines[0][:90] if lines else '?'}…'; rerun finished all {len(final)}")
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def campaign(work: Path, kills: int, seed: int = 0) -> Tally:
    rng, tally = random.Random(seed), Tally()
    spec = work / "depth.toml"  # named as the registered depth sweep, so that the report covers it
    spec.write_text(SPEC)
    t0 = time.perf_counter()
    print(f"crash test in {work}: {RUNS} runs, {kills} kills (seed {seed})", flush=True)

    reference = work / "reference"
    ref = run(spec, reference, work)
    tally.check(ref.returncode == 0, f"the uninterrupted sweep failed: {ref.stderr[-500:]}")
    ref_rows = read_rows(reference / "ablations" / "depth.csv").set_index("run_id")
    print(f"  reference sweep: {len(ref_rows)} runs in {time.perf_counter() - t0:.0f} s", flush=True)

    out = work / "out"
    while tally.kills < kills:
        kill_once(spec, out, work, rng, in_save=tally.kills % 2 == 1, tally=tally)
        if len(finished(out, spec.stem)) == RUNS:  # done: start over so every kill lands in real work
            shutil.rmtree(out / "ablations" / "weights", ignore_errors=True)
            for f in (out / "ablations").glob("depth*.csv"):
                f.rename(f.with_name(f"done-{tally.kills}-{f.name}"))
    print(f"  {tally.kills} kills ({tally.kills_in_save} inside a save step, {tally.kills_in_startup} during "
          f"start-up); {tally.finished_before_kill} sweeps finished before their kill", flush=True)

    csv, history = out / "ablations" / "depth.csv", out / "ablations" / "depth-history.csv"
    done = run(spec, out, work)
    tally.reruns += 1
    tally.check(done.returncode == 0, f"rerun after the kills failed: {done.stderr[-500:]}")
    tear_last_line(csv)
    kept = finished(out, spec.stem)
    again = run(spec, out, work)
    tally.torn_cut = int("torn last line" in again.stderr)
    tally.check(again.returncode == 0, f"rerun after tearing the last line failed: {again.stderr[-500:]}")
    tally.check(all(finished(out, spec.stem).get(r) == d for r, d in kept.items()), "tearing lost a finished run")
    for path in (csv, history):
        with open(path, "ab") as f:
            f.write(b"\x00\xffgarbage,,\n" + os.urandom(40).replace(b"\n", b"") + b"\n1,2,3\n")
    again = run(spec, out, work)
    tally.check(again.returncode == 0, f"rerun after appending garbage failed: {again.stderr[-500:]}")

    fill_small_filesystem(spec, work, tally)

    table = read_rows(csv)
    ok = table[table["status"] == "ok"]
    tally.check(len(ok) == RUNS and ok["run_id"].is_unique, f"{len(ok)} ok rows for {RUNS} runs")
    tally.check(set(ok["run_id"]) == set(ref_rows.index), "the run ids differ from the uninterrupted sweep's")
    same = [rid for rid in ok["run_id"] if ok.set_index("run_id").loc[rid, "test_acc"] == ref_rows.loc[rid, "test_acc"]]
    tally.check(len(same) == RUNS, f"only {len(same)} of {RUNS} accuracies equal the uninterrupted sweep's")
    ref_weights = finished(reference, spec.stem)
    tally.check(finished(out, spec.stem) == ref_weights, "weights differ from the uninterrupted sweep's")
    tally.resumed_runs = int((ok["resumed_after"].fillna(0) > 0).sum()) if "resumed_after" in ok else 0
    hist = read_rows(history)
    per_run = hist.groupby("run_id").size()
    tally.check(bool((per_run.reindex(ok["run_id"]) == 3).all()), "a run's history has missing or repeated epochs")

    report = subprocess.run([sys.executable, "-m", "ablations", "report", "--out", str(out)], env=env(work), cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    tally.check(report.returncode == 0, f"make report failed: {report.stderr[-500:]}")
    text = (out / "REPORT.md").read_text() if report.returncode == 0 else ""
    tally.garbage_skipped = text.count("malformed line")
    print(f"  end state: {len(ok)} ok rows for {RUNS} runs, {len(same)} accuracies and weights equal to the "
          f"uninterrupted sweep's; {tally.resumed_runs} runs resumed from a checkpoint; torn line cut: "
          f"{bool(tally.torn_cut)}; report lists {tally.garbage_skipped} tables with skipped lines", flush=True)
    print(f"  small filesystem: {tally.disk_full}", flush=True)
    print(f"crash test: {'PASS' if not tally.problems else 'FAIL: ' + '; '.join(tally.problems)} "
          f"in {time.perf_counter() - t0:.0f} s", flush=True)
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder, removed afterwards")
    args = parser.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return 1 if campaign(args.workdir, args.kills, args.seed).problems else 0
    with tempfile.TemporaryDirectory(prefix="vitbench-crash-") as work:
        return 1 if campaign(Path(work), args.kills, args.seed).problems else 0


if __name__ == "__main__":
    sys.exit(main())
