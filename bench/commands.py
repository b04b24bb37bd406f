"""The commands behind `python -m bench`: what runs once the arguments are parsed. `bench.__main__`
parses the command line from names alone (`bench.choices`) and imports this module only to run one."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import NoReturn

import pandas as pd
import torch

from bench import choices, units
from bench.env import device_name, environment, resolve_device, run_id
from bench.grid import expand_grid, run_grid
from bench.io.csvio import append_row
from bench.io.overrides import overrides_text, parse_overrides
from bench.measure import add_mfu
from bench.mfu import matmul_peak_flops, peak_size
from bench.reference import refusal
from bench.rounds import ALPHA, MIN_ROUNDS, Spread, ratio_or_noise
from bench.schema import BENCH_COLUMNS
from bench.timing import TimingConfig
from bench.training.precision import DTYPES
from bench.units import count
from vit import ATTENTION_BACKENDS, PRESETS

NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def _fail(message: str) -> NoReturn:
    """A user-caused failure: one line naming the input, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def run(args: argparse.Namespace) -> None:
    message = refusal(args.out, args.into_reference)
    if message:
        _fail(message)
    if not NAME.fullmatch(args.name):
        _fail(f"--name {args.name!r}: a table name is letters, digits, '.', '_' or '-', not starting with '.' "
              f"(it becomes $OUT/bench/<name>.csv)")
    args.attn = args.attn or list(ATTENTION_BACKENDS)  # default: every registered backend
    for name, allowed, values in (("--attn", ATTENTION_BACKENDS, args.attn), ("--dtype", DTYPES, args.dtype),
                                  ("--mode", choices.MODES, args.mode)):
        bad = [v for v in values if v not in allowed]
        if bad:
            _fail(f"{name}: unknown value {bad[0]!r}; choose from {sorted(allowed)}")
    try:
        device = resolve_device(args.device)
        timing = TimingConfig(warmup=args.warmup, min_repeats=args.repeats, min_time_s=args.min_time_s)
        given = parse_overrides(args.set)
        try:
            base = PRESETS[args.preset].replace(**given)
        except ValueError as err:   # the --set named, as the command's one line
            raise ValueError(f"{overrides_text(given)}: {err}") from None
        points = expand_grid(base, args.attn, args.tokens or [0], args.batch_size, args.dtype, args.mode,
                             bool(args.compile), timing, device)
    except ValueError as err:
        _fail(str(err))
    if device.type == "cpu" and any(d != "fp32" for d in args.dtype):
        print("note: bf16/fp16 matmuls on many CPUs are far slower than fp32", file=sys.stderr)
    out_csv = Path(args.out) / "bench" / f"{args.name}.csv"
    try:  # before any measurement: an OUT that is a file or cannot be created fails here
        out_csv.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _fail(f"--out {args.out}: cannot create {out_csv.parent} ({err.strerror}); choose another OUT")
    rows: list[dict] = []
    try:
        run_grid(points, device, out_csv, rounds=args.rounds, rows=rows)
    except KeyboardInterrupt:
        print(f"\ninterrupted (SIGINT): {len(rows)} of {count(len(points) * args.rounds, 'measurement')} appended to "
              f"{out_csv}; no table printed, as its ratios need every round; rerun to measure again", file=sys.stderr)
        raise SystemExit(130) from None
    print(summary(rows).to_string(index=False))
    loaded = sum(int(r.get("contended") or 0) for r in rows)
    ok = sum(r['status'] == 'ok' for r in rows)
    print(f"\n{count(len(rows), 'row')} ({ok} ok; {count(args.rounds, 'interleaved round')} of "
          f"{count(len(points), 'point')}) appended to {out_csv}. img/s: median over rounds [quartiles]; vs fastest: a "
          f"ratio (of the medians) only where each has at least {MIN_ROUNDS} rounds and a t-test of the two, round "
          f"by round, gives p < {ALPHA}, else 'same within noise'"
          + (f"; {loaded} measured while other processes took ≥ 10 % of the CPUs (contended = 1) are left out of "
             f"img/s and of every ratio (rounds counts the others): measure again on an idle machine"
             if loaded else ""))


def summary(rows: list[dict]) -> pd.DataFrame:
    """One line per point over its rounds taken on a quiet machine (`contended` rounds left out): img/s as median
    [quartiles] and MFU as a percentage (blank where every round was contended), peak memory, GMACs, and its throughput against
    the fastest backend of the points that differ from it in attention alone (`rounds.ratio_or_noise`: "same
    within noise" where a t-test of the two, round by round, does not call them different, none with fewer than
    MIN_ROUNDS quiet rounds on a side); the backend of the highest median is called fastest only where it is apart
    from every other."""
    table = pd.DataFrame(rows)
    keys = ["tokens", "batch_size", "dtype", "mode"]
    lines = []
    for _, runs in table.groupby("run_id", sort=False):
        runs = runs.assign(_round=range(len(runs)))   # a point's rows come one a round, in order
        ok = runs[runs["status"] == "ok"]
        first = runs.iloc[0]
        # rounds taken while other processes held the machine are left out of the figures and the ratios
        quiet = ok[pd.to_numeric(ok["contended"], errors="coerce").fillna(0) != 1] if "contended" in ok else ok
        rate = Spread.of(pd.to_numeric(quiet["throughput_img_s"], errors="coerce").tolist(), quiet["_round"].tolist())
        lines.append({**{k: first[k] for k in ("attn", *keys)},
                      "status": "ok" if len(ok) == len(runs) else str(runs[runs["status"] != "ok"].iloc[0]["status"]),
                      "rounds": len(quiet), "_rate": rate,
                      "img/s": f"{units.rate(rate.median)} [{units.rate(rate.q1)}, {units.rate(rate.q3)}]" if rate.n else "—",
                      "peak_mem_mb": _median(ok, "peak_mem_mb"), "gmacs": _median(ok, "gmacs"),
                      "MFU": _median(quiet, "mfu", percent=True),   # from the throughput: the same quiet rounds
                      "contended": int(pd.to_numeric(runs["contended"], errors="coerce").fillna(0).sum())
                      if "contended" in runs else 0})
    out = pd.DataFrame(lines)
    versus = []
    for line in lines:
        group = [x for x in lines if all(x[k] == line[k] for k in keys) and x["_rate"].n]
        fastest = max(group, key=lambda x: x["_rate"].median, default=None)
        if len(group) < 2 or not line["_rate"].n:
            versus.append("—")
        elif fastest is line:   # named fastest only where every other is apart from it
            close = [x["attn"] for x in group if x is not line and not x["_rate"].apart(line["_rate"])]
            versus.append(f"highest median, not apart from {', '.join(close)}" if close else "fastest")
        else:
            versus.append(f"{ratio_or_noise(line['_rate'], fastest['_rate'])} of {fastest['attn']}")
    return out.assign(**{"vs fastest": versus}).drop(columns="_rate")


def _median(rows: pd.DataFrame, column: str, percent: bool = False) -> str:
    """The column's median to four significant digits (a fraction as a percentage to three), or "—"."""
    values = pd.to_numeric(rows[column], errors="coerce").dropna() if column in rows else pd.Series(dtype=float)
    if not len(values):
        return "—"
    return f"{100 * values.median():.3g} %" if percent else f"{values.median():.4g}"


def convert_json(json_path: Path, csv_path: Path) -> int:
    """pytest-benchmark JSON → measurement rows (one per benchmark), appended to `csv_path`; ValueError
    naming the file for one that is not pytest-benchmark's JSON (nothing written)."""
    try:
        data = json.loads(Path(json_path).read_text())
        benches = [(b, b.get("extra_info", {}), b["stats"]) for b in data["benchmarks"]]
        for _, info, stats in benches:
            float(stats["median"]), float(stats["iqr"]), int(info["batch_size"]), int(stats["rounds"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{json_path}: not a pytest-benchmark JSON file with batch sizes "
                         f"({type(err).__name__}: {str(err)[:120]})") from None
    written = 0
    for bench, _, _ in benches:
        info, stats = bench.get("extra_info", {}), bench["stats"]
        device = torch.device(info.get("device", "cpu"))
        measured_on = info.get("device_name") or data.get("machine_info", {}).get("cpu", {}).get("brand_raw")
        # this machine's environment and matmul peak describe the run only if it ran on this very device
        here = (device.type == "cpu" or torch.cuda.is_available()) and measured_on == device_name(device)
        env = environment(device) if here else {"device": device.type, "device_name": measured_on or ""}
        row = {**env, **info}
        row.update(started_at=data.get("datetime", row.get("started_at")),
                   run_id=run_id({**info, "benchmark": bench["name"]}), status="ok", error="",
                   step_ms_median=stats["median"] * 1e3, step_ms_iqr=stats["iqr"] * 1e3,
                   throughput_img_s=info["batch_size"] / stats["median"], repeats=stats["rounds"])
        if "gflops" in row and here:
            add_mfu(row, device)
        append_row(csv_path, {k: v for k, v in row.items() if k in BENCH_COLUMNS}, BENCH_COLUMNS)
        written += 1
    return written


def peak(args: argparse.Namespace) -> None:
    """The matmul peak that MFU divides by, measured now as a sweep or `bench run` measures it."""
    device = resolve_device(args.device)
    flops, n = matmul_peak_flops(device, args.dtype), peak_size(device)
    threads = f", {count(torch.get_num_threads(), 'thread')}" if device.type == "cpu" else ""
    print(f"{flops / 1e9:.1f} GFLOP/s ({device}, {args.dtype}{threads}): the best of repeated {n}×{n} matmuls, "
          f"the peak that MFU divides by")


def convert(args: argparse.Namespace) -> None:
    """The CSV mirrors the JSON of the last `make bench`: written beside its target and moved over it only
    once the JSON has been read whole, so a bad JSON deletes nothing; refused where the CSV's folder lies
    in the committed reference."""
    message = refusal(args.csv_path.parent, args.into_reference)
    if message:
        _fail(message)
    fresh = args.csv_path.with_name(f".{args.csv_path.name}.converting")
    fresh.unlink(missing_ok=True)
    try:
        rows = convert_json(args.json_path, fresh)
    except ValueError as err:
        fresh.unlink(missing_ok=True)
        _fail(str(err))
    if rows:
        fresh.replace(args.csv_path)
    print(f"{count(rows, 'row')} written to {args.csv_path}")
