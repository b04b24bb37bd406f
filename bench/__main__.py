"""python -m bench: measure a config or a grid and append rows (docs/columns.md) to $OUT/bench/<name>.csv.

    python -m bench run --preset vit_small_patch16_224 --attn loop,bmm,einops,sdpa --tokens 65,197,785
    python -m bench run --preset vit_mnist --set stem=patch --set depth=6 --mode infer,train
    python -m bench convert-json results/bench/pytest-benchmark.json results/bench/pytest-benchmark.csv
    python -m bench peak --dtype fp32
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import NoReturn

import pandas as pd
import torch

from vit import ATTENTION_BACKENDS, PRESETS

from .csvio import append_row
from .env import environment, resolve_device, run_id
from .grid import expand_grid, parse_overrides, run_grid
from .measure import MODES, add_mfu
from .mfu import DTYPES, device_name, matmul_peak_flops
from .schema import BENCH_COLUMNS
from .timing import TimingConfig


NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def _list(kind):
    return lambda text: [kind(v) for v in text.split(",") if v.strip()]


def _fail(message: str) -> NoReturn:
    """A user-caused failure: one line naming the input, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _run(args: argparse.Namespace) -> None:
    if not NAME.fullmatch(args.name):
        _fail(f"--name {args.name!r}: a table name is letters, digits, '.', '_' or '-', not starting with '.' "
              f"(it becomes $OUT/bench/<name>.csv)")
    for name, allowed, values in (("--attn", ATTENTION_BACKENDS, args.attn), ("--dtype", DTYPES, args.dtype),
                                  ("--mode", MODES, args.mode)):
        bad = [v for v in values if v not in allowed]
        if bad:
            _fail(f"{name}: unknown value {bad[0]!r}; choose from {sorted(allowed)}")
    try:
        device = resolve_device(args.device)
        timing = TimingConfig(warmup=args.warmup, min_repeats=args.repeats, min_time_s=args.min_time_s)
        base = PRESETS[args.preset].replace(**parse_overrides(args.set))
        points = expand_grid(base, args.attn, args.tokens or [0], args.batch_size, args.dtype, args.mode,
                             bool(args.compile), timing)
    except ValueError as err:
        _fail(str(err))
    if device.type == "cpu" and any(d != "fp32" for d in args.dtype):
        print("note: bf16/fp16 matmuls on many CPUs are far slower than fp32", file=sys.stderr)
    out_csv = Path(args.out) / "bench" / f"{args.name}.csv"
    rows = run_grid(points, device, out_csv)
    table = pd.DataFrame(rows)[["attn", "tokens", "batch_size", "dtype", "mode", "status", "throughput_img_s",
                                "peak_mem_mb", "gmacs", "mfu", "util_pct"]]
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\n{len(rows)} rows ({sum(r['status'] == 'ok' for r in rows)} ok) appended to {out_csv}")


def convert_json(json_path: Path, csv_path: Path) -> int:
    """pytest-benchmark JSON → measurement rows (one per benchmark)."""
    data = json.loads(Path(json_path).read_text())
    written = 0
    for bench in data.get("benchmarks", []):
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure a config or a grid")
    run.add_argument("--preset", default="vit_small_patch16_224", choices=sorted(PRESETS))
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a ViTConfig field of the preset, e.g. --set stem=patch (repeatable)")
    run.add_argument("--attn", type=_list(str), default=list(ATTENTION_BACKENDS))
    run.add_argument("--tokens", type=_list(int), default=[], help="e.g. 65,197,785 (patches + 1); default: the preset's")
    run.add_argument("--batch-size", type=_list(int), default=[8])
    run.add_argument("--dtype", type=_list(str), default=["fp32"])
    run.add_argument("--mode", type=_list(str), default=["infer"])
    run.add_argument("--compile", type=int, default=0)
    run.add_argument("--device", default="auto")
    run.add_argument("--warmup", type=int, default=3)
    run.add_argument("--repeats", type=int, default=10)
    run.add_argument("--min-time-s", type=float, default=1.0)
    run.add_argument("--out", default="results")
    run.add_argument("--name", default="grid", help="the CSV's name under $OUT/bench/")
    conv = sub.add_parser("convert-json", help="pytest-benchmark JSON to a CSV of measurement rows")
    conv.add_argument("json_path", type=Path)
    conv.add_argument("csv_path", type=Path)
    peak = sub.add_parser("peak", help="measure (or read the cached) matmul peak")
    peak.add_argument("--device", default="auto")
    peak.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    args = parser.parse_args(argv)
    if args.command == "run":
        _run(args)
    elif args.command == "convert-json":
        if args.csv_path.exists():
            args.csv_path.unlink()  # the CSV mirrors the JSON of the last `make bench`
        print(f"{convert_json(args.json_path, args.csv_path)} rows written to {args.csv_path}")
    else:
        device = resolve_device(args.device)
        print(f"{matmul_peak_flops(device, args.dtype) / 1e9:.1f} GFLOP/s ({device}, {args.dtype})")


if __name__ == "__main__":
    main()
