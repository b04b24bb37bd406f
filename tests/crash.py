"""Crash test: a sweep abused as a hostile user and a hostile machine would, then rerun to completion.

    python tests/crash.py --kills 24 [--workdir DIR] [--seed 0] [--pack N]     # make crash-test [PACK=N]

On a small digits sweep (3 points × 3 seeds, 3 epochs, a checkpoint every epoch), it
1. runs it once uninterrupted, for reference accuracies and weights;
2. SIGKILLs it at `--kills` random instants (half of them aimed inside a run's save step, which
   tests/marked_sweep.py widens and marks on stderr), rerunning after each kill; after every kill it
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
Then, with `--jobs-kills N` (default as many as `--kills`), the same sweep with JOBS=2: at random
instants, in turn, it SIGKILLs one of the two workers (the sweep goes on: a new worker resumes that run),
SIGKILLs the driver (the workers must die with it), sends the driver SIGTERM (it must exit 143 within 10 s
with no worker left), and SIGKILLs a worker again (so any three kills hit all three ways); after each,
nothing finished may be lost, and the end state must equal an uninterrupted JOBS=2 sweep's, run for run
and byte for byte.
It prints the counts and exits 1 on any violation. `tests/test_crash.py` runs a short campaign.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
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

from ablations.results.schema import read_table as read_rows  # noqa: E402
from bench.io.csvio import SkippedInput  # noqa: E402
from bench.units import count  # noqa: E402

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
PACK = "0"   # --pack: the sweep's seeds trained as packs of at most this many (0: one run at a time)


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
    worker_kills: int = 0
    driver_kills: int = 0
    term_stops: int = 0
    slowest_stop_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.problems.append(what)
            print(f"  VIOLATION: {what}", flush=True)


def sweep_cmd(spec: Path, out: Path, jobs: int = 1, marks: float = 0.0, cost_rounds: int = 1) -> list[str]:
    """The sweep command; `marks`: through tests/marked_sweep.py, its save steps marked and widened by that.
    `cost_rounds`: 0 where the phase is not what is tested (the uninterrupted references, the full disk): the
    runs' ids, accuracies and weights do not depend on it."""
    program = [str(ROOT / "tests" / "marked_sweep.py"), str(marks)] if marks else ["-m", "ablations"]
    return [sys.executable, *program, "sweep", str(spec), "--dataset", "digits", "--seeds", SEEDS,
            "--cost-rounds", str(cost_rounds), "--checkpoint-every", "1", "--device", "cpu", "--out", str(out),
            "--jobs", str(jobs), "--max-retries", "20", "--pack", PACK]


def _packs() -> str:
    return "" if PACK in ("0", "auto") else f" in packs of at most {PACK} seeds (PACK={PACK})"


def env(work: Path) -> dict[str, str]:
    return {**os.environ, "VITBENCH_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def run(spec: Path, out: Path, work: Path, jobs: int = 1, cost_rounds: int = 1) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_cmd(spec, out, jobs, cost_rounds=cost_rounds), env=env(work), cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def workers_of(pid: int) -> list[int]:
    """The spawned worker processes of `pid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def gone(pids: list[int], within_s: float = 5.0) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline:
        if not any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


ACTIONS = ("worker", "driver", "term", "worker")  # the JOBS=2 campaign's kills, in turn


def jobs_sweep_once(spec: Path, out: Path, work: Path, rng: random.Random, tally: Tally, kills: int) -> None:
    """One JOBS=2 sweep process, hit at random instants until it ends: worker SIGKILLs (it goes on), then a
    driver SIGKILL or SIGTERM (it ends), as `ACTIONS` takes turns, or it finishes first."""
    before = finished(out, spec.stem)
    log = work / "jobs.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(sweep_cmd(spec, out, jobs=2), env=env(work), cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=stderr)
    ended = False
    while not ended and tally.kills < kills:
        deadline = time.time() + 180  # the hits land in training: wait for the workers (after start-up and costs)
        while time.time() < deadline and proc.poll() is None and len(workers_of(proc.pid)) < 2:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.2, 3.0))
        if proc.poll() is not None:
            tally.finished_before_kill += 1
            break
        workers = workers_of(proc.pid)
        action = ACTIONS[tally.kills % len(ACTIONS)]
        if action == "worker" and not workers:
            action = "driver"
        tally.kills += 1
        if action == "worker":
            os.kill(rng.choice(workers), signal.SIGKILL)
            tally.worker_kills += 1
            continue
        ended = True
        if action == "driver":
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            tally.driver_kills += 1
            tally.check(gone(workers), f"kill {tally.kills}: workers outlived a SIGKILLed driver")
            continue
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        took = time.perf_counter() - t0
        tally.term_stops += 1
        tally.slowest_stop_s = max(tally.slowest_stop_s, took)
        tally.check(proc.returncode == 143, f"kill {tally.kills}: SIGTERM gave exit status {proc.returncode}, not 143")
        tally.check(took < 10, f"kill {tally.kills}: SIGTERM took {took:.1f} s to stop the sweep")
        tally.check(gone(workers, 1.0), f"kill {tally.kills}: a worker outlived the driver's SIGTERM")
    if not ended:
        proc.wait(timeout=900)
    err = log.read_text()
    tally.check("Traceback" not in err, f"a traceback after kill {tally.kills}: {err[-400:]}")
    after = finished(out, spec.stem)
    lost = [rid for rid, digest in before.items() if after.get(rid) != digest]
    tally.check(not lost, f"kill {tally.kills}: finished runs lost or changed: {lost}")


def jobs_campaign(work: Path, kills: int, seed: int = 0) -> Tally:
    """The JOBS=2 campaign (see the module docstring)."""
    work.mkdir(parents=True, exist_ok=True)
    rng, tally = random.Random(seed), Tally()
    spec = work / "depth.toml"
    spec.write_text(SPEC)
    t0 = time.perf_counter()
    print(f"JOBS=2 crash test in {work}: {RUNS} runs{_packs()}, {count(kills, 'kill')} (seed {seed})", flush=True)
    reference = work / "reference-jobs2"
    ref = run(spec, reference, work, jobs=2, cost_rounds=0)
    tally.check(ref.returncode == 0, f"the uninterrupted JOBS=2 sweep failed: {ref.stderr[-500:]}")
    print(f"  reference JOBS=2 sweep: {count(len(finished(reference, spec.stem)), 'run')} in {time.perf_counter() - t0:.0f} s",
          flush=True)
    out = work / "out-jobs2"
    while tally.kills < kills:
        jobs_sweep_once(spec, out, work, rng, tally, kills)
        if len(finished(out, spec.stem)) == RUNS and tally.kills < kills:  # done: start over
            shutil.rmtree(out / "ablations" / "weights", ignore_errors=True)
            for f in (out / "ablations").glob("depth*.csv"):
                f.rename(f.with_name(f"done-{tally.kills}-{f.name}"))
    done = run(spec, out, work, jobs=2)
    tally.check(done.returncode == 0, f"rerun after the kills failed: {done.stderr[-500:]}")
    table = read_rows(out / "ablations" / "depth.csv")
    ok = table[table["status"] == "ok"]
    ref_rows = read_rows(reference / "ablations" / "depth.csv").set_index("run_id")
    tally.check(len(ok) == RUNS and ok["run_id"].is_unique, f"{len(ok)} ok rows for {RUNS} runs")
    same = [rid for rid in ok["run_id"] if rid in ref_rows.index
            and ok.set_index("run_id").loc[rid, "test_acc"] == ref_rows.loc[rid, "test_acc"]]
    tally.check(len(same) == RUNS, f"only {len(same)} of {RUNS} accuracies equal the uninterrupted sweep's")
    tally.check(finished(out, spec.stem) == finished(reference, spec.stem),
                "weights differ from the uninterrupted JOBS=2 sweep's")
    tally.resumed_runs = int((ok["resumed_after"].fillna(0) > 0).sum())
    print(f"  {count(tally.kills, 'kill')}: {count(tally.worker_kills, 'worker')} SIGKILLed, "
          f"{count(tally.driver_kills, 'driver')} SIGKILLed, {count(tally.term_stops, 'SIGTERM')} (slowest stop "
          f"{tally.slowest_stop_s:.1f} s); {count(tally.finished_before_kill, 'sweep')} finished before their next "
          f"kill", flush=True)
    print(f"  end state: {count(len(ok), 'ok row')} for {count(RUNS, 'run')}, {len(same)} accuracies and weights equal "
          f"to the uninterrupted JOBS=2 sweep's; {count(tally.resumed_runs, 'run')} resumed from a checkpoint",
          flush=True)
    print(f"JOBS=2 crash test: {'PASS' if not tally.problems else 'FAIL: ' + '; '.join(tally.problems)} "
          f"in {time.perf_counter() - t0:.0f} s", flush=True)
    return tally


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
        proc = subprocess.Popen(sweep_cmd(spec, out, marks=0.3 if in_save else 0.0), env=env(work), cwd=ROOT,
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
        proc = subprocess.Popen(sweep_cmd(spec, out, cost_rounds=0), env=env(work), cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and len(finished(out, spec.stem)) < 2:
            time.sleep(0.05)
        filler = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)   # unbuffered: nothing left to flush at close
        try:   # take every free byte
            while True:
                os.write(filler, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(filler)
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
        done = run(spec, out, work, cost_rounds=0)
        tally.check(done.returncode == 0, f"full disk: the rerun failed: {done.stderr[-300:]}")
        final = finished(out, spec.stem)
        tally.check(len(final) == RUNS and all(final.get(r) == d for r, d in kept.items()),
                    "full disk: the rerun did not finish every run keeping those done before")
        said = lines[0].replace(str(out), "OUT") if lines else "?"   # the whole line, its folder shortened
        tally.disk_full = (f"4 MiB tmpfs filled after {count(len(kept), 'run')}: exit {proc.returncode} with "
                           f"'{said}'; rerun finished all {len(final)}")
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def campaign(work: Path, kills: int, seed: int = 0) -> Tally:
    work.mkdir(parents=True, exist_ok=True)
    rng, tally = random.Random(seed), Tally()
    spec = work / "depth.toml"  # named as the registered depth sweep, so that the report covers it
    spec.write_text(SPEC)
    t0 = time.perf_counter()
    print(f"crash test in {work}: {RUNS} runs{_packs()}, {count(kills, 'kill')} (seed {seed})", flush=True)

    reference = work / "reference"
    ref = run(spec, reference, work, cost_rounds=0)
    tally.check(ref.returncode == 0, f"the uninterrupted sweep failed: {ref.stderr[-500:]}")
    ref_rows = read_rows(reference / "ablations" / "depth.csv").set_index("run_id")
    print(f"  reference sweep: {count(len(ref_rows), 'run')} in {time.perf_counter() - t0:.0f} s", flush=True)

    out = work / "out"
    while tally.kills < kills:
        kill_once(spec, out, work, rng, in_save=tally.kills % 2 == 1, tally=tally)
        if len(finished(out, spec.stem)) == RUNS:  # done: start over so every kill lands in real work
            shutil.rmtree(out / "ablations" / "weights", ignore_errors=True)
            for f in (out / "ablations").glob("depth*.csv"):
                f.rename(f.with_name(f"done-{tally.kills}-{f.name}"))
    print(f"  {count(tally.kills, 'kill')} ({tally.kills_in_save} inside a save step, {tally.kills_in_startup} during "
          f"start-up); {count(tally.finished_before_kill, 'sweep')} finished before their kill", flush=True)

    csv, history = out / "ablations" / "depth.csv", out / "ablations" / "depth-history.csv"
    before = finished(out, spec.stem)
    done = run(spec, out, work)
    tally.reruns += 1
    tally.check(done.returncode == 0, f"rerun after the kills failed: {done.stderr[-500:]}")
    tally.check(f"{len(before)} already done" in done.stdout, f"the rerun after the kills did not skip the "
                f"{len(before)} finished runs: {done.stdout[-300:]}")
    tally.check(all(finished(out, spec.stem).get(r) == d for r, d in before.items()), "the rerun changed a finished run")
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

    from ablations.__main__ import main as ablations_main  # the report command, in this process

    with contextlib.redirect_stdout(io.StringIO()):
        status = ablations_main(["report", "--out", str(out)])
    tally.check(status == 0, f"the report command exited {status}")
    text = (out / "REPORT.md").read_text() if status == 0 else ""
    tally.garbage_skipped = text.count("malformed line")
    print(f"  end state: {count(len(ok), 'ok row')} for {count(RUNS, 'run')}, {len(same)} accuracies and weights "
          f"equal to the uninterrupted sweep's; {count(tally.resumed_runs, 'run')} resumed from a checkpoint; torn line "
          f"cut: {bool(tally.torn_cut)}; report lists {count(tally.garbage_skipped, 'table')} with skipped lines",
          flush=True)
    print(f"  small filesystem: {tally.disk_full}", flush=True)
    print(f"crash test: {'PASS' if not tally.problems else 'FAIL: ' + '; '.join(tally.problems)} "
          f"in {time.perf_counter() - t0:.0f} s", flush=True)
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=24, help="kills of the one-job campaign")
    parser.add_argument("--jobs-kills", type=int, help="kills of the JOBS=2 campaign (default: --kills; 0 skips it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder, removed afterwards")
    parser.add_argument("--pack", default="0", help="the sweep's PACK (--pack): N trains each point's seeds as packs "
                                                     "of at most N; default 0, one run at a time")
    args = parser.parse_args()
    global PACK
    PACK = args.pack
    jobs_kills = args.kills if args.jobs_kills is None else args.jobs_kills

    def both(work: Path) -> int:
        problems = campaign(work / "one-job", args.kills, args.seed).problems if args.kills else []
        if jobs_kills:
            problems += jobs_campaign(work / "two-jobs", jobs_kills, args.seed).problems
        return 1 if problems else 0
    if args.workdir:
        return both(args.workdir)
    with tempfile.TemporaryDirectory(prefix="vitbench-crash-") as work:
        return both(Path(work))


if __name__ == "__main__":
    sys.exit(main())
