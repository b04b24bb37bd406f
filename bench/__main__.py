"""python -m bench: measure a config or a grid and append rows (docs/columns.md) to $OUT/bench/<name>.csv.

    python -m bench run --preset vit_small_patch16_224 --attn loop,bmm,einops,sdpa --tokens 65,197,785
    python -m bench run --preset vit_mnist --set stem=patch --set depth=6 --mode infer,train
    python -m bench convert-json results/bench/pytest-benchmark.json results/bench/pytest-benchmark.csv
    python -m bench peak --dtype fp32
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.choices import DTYPES, PRESETS, Parser, integer, non_negative


def _names(text: str) -> list[str]:
    """Comma-separated names, each once, in the order given (a name twice would be measured twice and its rows read
    as extra rounds)."""
    values = list(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if not values:
        raise argparse.ArgumentTypeError(f"give at least one comma-separated value, got {text!r}")
    return values


def _tokens(text: str) -> list[int]:
    """Comma-separated token counts of at least 2 (one patch and the class token), each once."""
    try:
        values = list(dict.fromkeys(int(v) for v in _names(text)))
    except (ValueError, argparse.ArgumentTypeError):
        values = []
    if not values or min(values) < 2:
        raise argparse.ArgumentTypeError(f"token counts are comma-separated integers (patches per side)² + 1, "
                                         f"e.g. 65,197,785, got {text!r}")
    return values


def _batches(text: str) -> list[int | None]:
    """`auto` (None) or comma-separated positive integers."""
    if text.strip() == "auto":
        return [None]
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes are auto or comma-separated positive integers, got {text!r}")
    return values


def _add_run(run: argparse.ArgumentParser) -> None:
    """`bench run`'s options."""
    run.add_argument("--preset", default="vit_small_patch16_224", choices=sorted(PRESETS),
                     help="the model to measure (default vit_small_patch16_224)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a ViTConfig field of the preset, e.g. --set stem=patch (repeatable)")
    run.add_argument("--attn", type=_names, default=[],
                     help="attention backends, comma-separated (default: every registered one: loop, bmm, einops, sdpa)")
    run.add_argument("--tokens", type=_tokens, default=[], help="e.g. 65,197,785 (patches + 1); default: the preset's")
    run.add_argument("--batch-size", type=_batches, default=[None], metavar="auto|N,…",
                     help="images per step, comma-separated, or auto (default): 256 on CUDA (as timm's benchmark); "
                          "on a CPU the smallest power of two whose forward is at least 32 GFLOPs, at most 256 "
                          "(vit_mnist: 256, ViT-S/16: 4)")
    run.add_argument("--dtype", type=_names, default=["fp32"], help="fp32, bf16, fp16 (autocast), comma-separated")
    run.add_argument("--mode", type=_names, default=["infer"],
                     help="infer (eval, inference_mode) and/or train (forward, backward, AdamW step)")
    run.add_argument("--compile", type=int, choices=(0, 1), default=0,
                     help="1: torch.compile the model first (compile time is warm-up)")
    run.add_argument("--device", default="auto", help="auto (cuda if there is one), cpu, cuda or cuda:N")
    run.add_argument("--warmup", type=integer(0, "--warmup must be an integer ≥ 0"), default=3,
                     help="untimed steps before timing (default 3)")
    run.add_argument("--repeats", type=integer(1, "--repeats must be a positive integer"), default=10,
                     help="at least this many timed steps (default 10)")
    run.add_argument("--min-time-s", type=non_negative("--min-time-s must be a number of seconds ≥ 0"), default=1.0,
                     help="and at least this many seconds of them (default 1)")
    run.add_argument("--rounds", type=integer(1, "--rounds must be a positive integer"), default=3,
                     help="interleaved rounds: every point measured once a round, so drift of the machine lands on "
                          "all alike; a ratio between backends is stated only from 3 rounds on (default 3)")
    run.add_argument("--out", default="results", help="appends to <out>/bench/<name>.csv (default results)")
    run.add_argument("--into-reference", action="store_true",
                     help="allow appending to a folder of committed reference results (results/reference)")
    run.add_argument("--name", default="grid", help="the CSV's name under $OUT/bench/ (default grid; the report "
                                                    "reads backends.csv, what make bench-tokens writes)")


def main(argv: list[str] | None = None, prog: str = "python -m bench") -> None:
    parser = Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub.add_parser("run", help="measure a config or a grid"))
    conv = sub.add_parser("convert-json", help="pytest-benchmark JSON to a CSV of measurement rows")
    conv.add_argument("json_path", type=Path, help="the pytest-benchmark JSON to read")
    conv.add_argument("csv_path", type=Path, help="the CSV of measurement rows to write from it (replaced whole)")
    conv.add_argument("--into-reference", action="store_true",
                      help="allow writing into a folder of committed reference results")
    conv.add_argument("--check", action="store_true",
                      help="only check that the JSON and the CSV may be written there (before a benchmark writes "
                           "the JSON): exit 2 with one line where they lie in the committed reference")
    peak = sub.add_parser("peak", help="measure this machine's matmul peak, the FLOP/s that MFU divides by")
    peak.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    peak.add_argument("--dtype", default="fp32", choices=sorted(DTYPES), help="the matmuls' precision (default fp32)")
    args = parser.parse_args(argv)
    if args.command == "convert-json" and args.check:   # the guard alone, before anything is written or imported
        from bench.reference import refusal

        message = next((m for m in (refusal(p.parent, args.into_reference) for p in (args.json_path, args.csv_path))
                        if m), None)
        if message:
            print(f"error: {message}", file=sys.stderr)
            raise SystemExit(2)
        return
    from bench.loading import without_gc

    with without_gc():   # torch and the rest load here, once the command line is known to be sound
        from bench import commands

    {"run": commands.run, "convert-json": commands.convert, "peak": commands.peak}[args.command](args)


if __name__ == "__main__":
    from bench.loading import end_process

    main()
    end_process(0)
