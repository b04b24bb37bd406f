"""The commands of `python -m ablations` that read results: report, compare, predict, columns. They load
the results store and the statistics, never the trainer, the runner or the executors."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from bench.io.atomic import write_atomic
from bench.reference import reference_root, refusal
from bench.units import count


def why(err: OSError) -> str:
    """The system's reason for a failed write ("No space left on device"), without the advice a writer added."""
    return os.strerror(err.errno) if err.errno else str(err)


def cmd_report(args: argparse.Namespace) -> int:
    from ablations.analysis.report import REFERENCE, build_report, default_reference
    from ablations.results.store import out_refusal

    out = Path(args.out)
    message = refusal(out, args.into_reference)
    if message:
        print(f"error: {message}", file=sys.stderr)
        return 2
    refused = out_refusal(out)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    if args.reference not in (None, "none") and not (Path(args.reference) / "ablations").is_dir():
        print(f"error: --reference {args.reference}: no ablations/ folder of sweep tables there; pass a results "
              f"folder a sweep wrote (such as results/reference of a checkout), or none", file=sys.stderr)
        return 2
    try:
        reference = (None if args.reference == "none" else Path(args.reference) if args.reference
                     else default_reference(out))
        path = build_report(out, data_root=args.data_root, reference=reference, margin=args.margin)
    except OSError as err:
        print(f"error: --out {out}: cannot write the report there ({why(err)}); choose a writable OUT", file=sys.stderr)
        return 2
    print(f"report → {path}")
    beside = [f"{what} → {out / name}" for what, name in (("every pair", "verdicts.csv"), ("every setting", "settings.csv"))
              if (out / name).exists()]
    drawn = set(re.findall(r"\]\((figures/[^)\s]+\.png)\)", path.read_text()))
    if drawn:
        beside.append(f"{count(len(drawn), 'figure')} → {out / 'figures'}/")
    if beside:
        print("  " + "   ".join(beside))
    if reference is None and args.reference != "none" and Path(out).resolve() != REFERENCE:
        print("note: no reference results here (they come with a checkout, in results/reference): the report has "
              "no section against the reference; --reference DIR compares with a results folder of yours",
              file=sys.stderr)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from ablations.results.migrate import migrate

    out = Path(args.out)
    message = refusal(out, args.into_reference)
    if not message and not (out / "ablations").is_dir():
        message = f"--out {out}: no ablations/ folder of sweep tables there; pass the OUT folder a sweep wrote"
    if message:
        print(f"error: {message}", file=sys.stderr)
        return 2
    from ablations.results.store import SweepError

    try:
        changed = migrate(out)
    except (OSError, ValueError, SweepError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for sweep, rows in changed.items():
        print(f"  {sweep:<12} {count(rows, 'row') + ' rewritten' if rows else 'already current'}")
    rewritten = sum(changed.values())
    where = f"{count(len(changed), 'table')} under {out / 'ablations'}"
    print(f"{count(rewritten, 'row')} rewritten; all {where} are now in the current format, run ids unchanged" if rewritten
          else f"nothing rewritten: all {where} were already in the current format")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ablations.analysis.compare import compare_outs, differing_devices
    from ablations.analysis.wording.verdicts import bound

    message = refusal(Path(args.csv).parent, False) if args.csv else None
    if message:
        print(f"error: --csv {args.csv}: {message}", file=sys.stderr)
        return 2
    for side, folder in (("A", args.a), ("B", args.b)):
        if not folder.strip():
            print(f"error: {side} is empty: pass two OUT folders a sweep wrote (compare A B)", file=sys.stderr)
            return 2
        if not (Path(folder) / "ablations").is_dir():
            print(f"error: {side} {folder}: no ablations/ folder of sweep tables there; pass an OUT folder a sweep "
                  f"wrote", file=sys.stderr)
            return 2
    if Path(args.a).resolve() == Path(args.b).resolve():
        print(f"error: A and B are one folder ({Path(args.a).resolve()}): every point would be identical to itself; "
              f"pass two OUT folders of the same sweeps", file=sys.stderr)
        return 2
    try:
        table = compare_outs(Path(args.a), Path(args.b))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    family = int(table["family"].iloc[0])
    print(f"A = {args.a}   B = {args.b}   (accuracy in %, difference in points"
          + (f" with its interval, 95 % jointly over the {count(family, 'distinct point')} with one: Bonferroni)"
             if family else "; no point has an interval: see each one's verdict)"))
    if models := differing_devices(table):
        print(f"A trained on {models[0]}, B on {models[1]}: on another device model the same seed can train to "
              f"other floats")
    shown = table.drop(columns=["device_a", "device_b"], errors="ignore")
    for column in ("acc_a", "acc_b"):
        shown[column] = 100 * shown[column]
    ends = {column: (lambda v: "—" if v != v else bound(v / 100)) for column in ("low_pts", "high_pts")}
    print(shown.drop(columns="family").to_string(index=False, float_format=lambda v: f"{v:.2f}", na_rep="—",
                                                 formatters=ends))
    print(f"largest |A − B|: {table['diff_pts'].abs().max():.2f} accuracy points over "
          f"{count(len(table), 'point')} of the sweeps; "
          + ", ".join(f"{label} mean train_util_pct {table[column].mean():.1f}" if table[column].notna().any()
                      else f"{label} train_util_pct not measured (runs that shared the device)"
                      for label, column in (("A", "util_a"), ("B", "util_b")) if column in table))
    packed = [f"time_{side}" for side in "ab" if f"packing_{side}" in table and (table[f"packing_{side}"] != "alone").any()]
    if packed:
        print(f"{' and '.join(packed)}: a packed run's train_time_s is its whole pack's (the pack's members trained at "
              f"once)")
    if args.csv:   # in the printed table's units: accuracy in %, as its differences are in points
        write_atomic(args.csv, shown.to_csv(index=False).encode())
        print(f"table → {args.csv}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from ablations.analysis.predict import (
        FIGURE_IMAGES,
        attention_figure,
        image_files,
        image_labels,
        load_run,
        load_weights,
        predict,
        read_images,
        top_table,
    )

    figure = Path(args.figure) if args.figure else Path(args.out) / "figures" / "predict-attention.png"
    if not args.figure and reference_root(figure.parent) is not None:   # a committed run: its figure goes to results/
        figure = Path("results") / "figures" / figure.name
    if reference_root(figure.parent) is not None or reference_root(figure) is not None:   # a link into it too
        print(f"error: --figure {figure} lies in (or links into) the committed reference results, which no command "
              f"writes into; choose another path", file=sys.stderr)
        return 2
    try:
        images = image_files(args.images)
        if bool(args.run) == bool(args.weights):
            raise ValueError("give --run RUN_ID (a run under --out) or --weights FILE --preset NAME, one of them")
        if args.weights and not args.preset:
            raise ValueError("--weights needs --preset: the model the checkpoint belongs to")
        loaded = (load_run(Path(args.out), args.run, args.data_root) if args.run else
                  load_weights(Path(args.weights), args.preset, args.dataset, args.data_root))
        pictures = read_images(images, loaded.model.cfg)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    probs, attns = predict(loaded, pictures)
    if loaded.note:
        print(loaded.note, file=sys.stderr)
    print(f"{loaded.name}: top-{min(5, probs.shape[1])} classes (softmax probability)")
    print(top_table(images, probs, names=loaded.classes).to_string(index=False,
                                                                   formatters={"probability": "{:.4f}".format}))
    try:
        figure.parent.mkdir(parents=True, exist_ok=True)
        attention_figure(loaded, pictures, attns, probs, image_labels(images), figure)
    except OSError as err:
        print(f"error: cannot write {figure} ({why(err)}); pass --figure PATH", file=sys.stderr)
        return 2
    shown = f" (the first {FIGURE_IMAGES} of {len(images)} images)" if len(images) > FIGURE_IMAGES else ""
    print(f"attention → {figure}{shown}")
    return 0


def cmd_columns(args: argparse.Namespace) -> int:
    from ablations.results.schema import columns_markdown

    print(columns_markdown(), end="")
    return 0
