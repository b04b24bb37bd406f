"""`make report`: figures and REPORT.md from whatever CSVs exist under the results root. Never trains.

Every sentence with a number in it is computed from the tables; the same CSVs give the same report.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from bench.csvio import read_rows  # noqa: E402

import torch  # noqa: E402

from vit import ViTConfig, VisionTransformer  # noqa: E402

from . import figures as figs  # noqa: E402
from .data import load_dataset  # noqa: E402
from .specs import SPEC_DIR, load_spec  # noqa: E402

SWEEPS = ("patch", "heads", "depth", "pos", "norm", "pool", "stem", "attn")
FACTOR_LABEL = {"patch_size": "patch size (px)", "num_heads": "attention heads", "depth": "depth (blocks)",
                "pos": "position encoding", "norm": "norm placement", "pool": "head input (pooling)",
                "stem": "stem (image → tokens)", "attn": "attention backend"}


def _factor_and_order(sweep: str, rows: pd.DataFrame) -> tuple[str, list]:
    """The sweep's factor, and its values in the spec's order (values the spec lacks go last, sorted)."""
    spec = load_spec(SPEC_DIR / f"{sweep}.toml")
    present = list(rows.loc[rows["status"] == "ok", spec.factor].unique())
    listed = [v for vals in (spec.values, *spec.values_by_img_size.values()) for v in vals]
    order = [v for v in dict.fromkeys(listed) if v in present]
    return spec.factor, order + sorted(v for v in present if v not in order)


def sweep_table(rows: pd.DataFrame, factor: str, order: list | None = None) -> pd.DataFrame:
    """One line per factor value over ok runs: accuracy mean ± std over seeds and the cost columns."""
    ok = rows[rows["status"] == "ok"]
    grouped = ok.groupby(factor, sort=True)
    table = pd.DataFrame({
        "seeds": grouped["seed"].nunique(),
        "acc_mean": grouped["test_acc"].mean() * 100,
        "acc_std": grouped["test_acc"].std(ddof=1).fillna(0.0) * 100,
        "params": grouped["params"].first(),
        "gmacs": grouped["gmacs"].first(),
        "img_s": grouped["throughput_img_s"].median(),
        "peak_mb": grouped["peak_mem_mb"].median(),
        "mfu": grouped["mfu"].median(),
        "train_s": grouped["train_time_s"].mean(),
    })
    return table.reindex(order) if order else table


def _markdown(table: pd.DataFrame, factor: str) -> str:
    head = f"| {factor} | seeds | test acc % (mean ± std) | params | GMACs | img/s | peak MB | MFU | train s |"
    lines = [head, "|" + "---|" * 9]
    for value, r in table.iterrows():
        lines.append(f"| {value} | {int(r.seeds)} | {r.acc_mean:.2f} ± {r.acc_std:.2f} | {int(r.params):,} | "
                     f"{r.gmacs:.4f} | {r.img_s:,.0f} | {r.peak_mb:.1f} | {r.mfu:.3f} | {r.train_s:.1f} |")
    return "\n".join(lines)


def _finding(table: pd.DataFrame, factor: str) -> str:
    top = table["acc_mean"].max()
    best = [str(v) for v in table.index[table["acc_mean"].round(6) == round(top, 6)]]
    first, last = table.index[0], table.index[-1]
    ratio = lambda col: table.loc[last, col] / table.loc[first, col]  # noqa: E731
    tie = f" (tied: {len(best)} values)" if len(best) > 1 else ""
    return (f"Best: {factor}={', '.join(best)} at {top:.2f}% test accuracy{tie}. "
            f"From {factor}={first} to {factor}={last}: GMACs ×{ratio('gmacs'):.2f}, inference img/s "
            f"×{ratio('img_s'):.2f}, train time ×{ratio('train_s'):.2f}, accuracy "
            f"{table.loc[last, 'acc_mean'] - table.loc[first, 'acc_mean']:+.2f} points.")


def _base_line(rows: pd.DataFrame, factor: str) -> str:
    """What the sweep held fixed: every model field and training column with one value across its ok runs."""
    ok = rows[rows["status"] == "ok"]
    fields = [f.name for f in dataclasses.fields(ViTConfig)] + ["dataset", "epochs", "lr"]
    fixed = [f"{name}={ok[name].iloc[0]}" for name in fields
             if name != factor and name in ok and ok[name].nunique(dropna=False) == 1]
    return "Held fixed: " + ", ".join(fixed) + "."


def sweep_figure(rows: pd.DataFrame, factor: str, path: Path, order: list | None = None) -> None:
    ok = rows[rows["status"] == "ok"].copy()
    ok["test accuracy (%)"] = ok["test_acc"] * 100
    panels = [("test accuracy (%)", False), ("gmacs", True), ("throughput_img_s", True),
              ("peak_mem_mb", False), ("train_time_s", False)]
    labels = {"gmacs": "GMACs / image", "throughput_img_s": "inference img/s", "peak_mem_mb": "peak memory (MB)",
              "train_time_s": "train time (s)"}
    numeric = pd.api.types.is_numeric_dtype(ok[factor])
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4), sharex=True)
    for ax, (col, log) in zip(axes, panels):
        sns.pointplot(data=ok, x=factor, y=col, errorbar=("ci", 95), ax=ax, native_scale=numeric, marker="o",
                      order=None if numeric else order)
        ax.set_ylabel(labels.get(col, col))
        ax.set_xlabel(FACTOR_LABEL.get(factor, factor))
        if log:
            figs.log_axis(ax)
        if numeric:
            ax.set_xticks(sorted(ok[factor].unique()))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{FACTOR_LABEL.get(factor, factor)} sweep (mean and 95% interval over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _inside_the_model(out: Path, tables: dict[str, pd.DataFrame], figures: Path) -> list[str]:
    """Position-embedding similarity and attention maps from saved weights of the pos sweep."""
    lines = ["## inside the model", ""]
    rows = tables.get("pos")
    if rows is None or not (rows["status"] == "ok").any():
        return lines + ["_Needs `results/ablations/pos.csv` and its weights: `make ablate-pos` produces them._", ""]
    ok = rows[rows["status"] == "ok"]
    weights = {r.pos: out / "ablations" / "weights" / "pos" / f"{r.run_id}.pt" for _, r in ok.iterrows()}
    weights = {k: v for k, v in weights.items() if v.exists()}
    encodings = {}
    for name in ("learned", "sinusoidal", "sincos2d"):
        match = ok[ok["pos"] == name]
        if len(match) and name in weights:
            cfg = ViTConfig.from_row(match.iloc[0])
            model = VisionTransformer(cfg)
            model.load_state_dict(torch.load(weights[name], weights_only=True))
            encodings[name] = model.pos_embed.weight[0].detach()
    if encodings:
        grid = ViTConfig.from_row(ok.iloc[0]).grid_size
        sim = figs.position_similarity(encodings, grid, figures / "position-similarity.png")
        lines += [f"![position similarity](figures/{sim.name})", ""]
    if "learned" in weights:
        row = ok[ok["pos"] == "learned"].iloc[0]
        data = load_dataset(str(row["dataset"]))
        images = data.normalize(data.test_x[:4])
        maps = figs.attention_maps(ViTConfig.from_row(row), weights["learned"], images, figures / "attention.png")
        lines += [f"![attention maps](figures/{maps.name})", ""]
    return lines


def build_report(out: Path) -> Path:
    out = Path(out)
    ablations, figures = out / "ablations", out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    tables = {s: read_rows(ablations / f"{s}.csv") for s in SWEEPS if (ablations / f"{s}.csv").exists()}
    all_rows = pd.concat(tables.values(), ignore_index=True) if tables else pd.DataFrame()
    lines = ["# vitbench report", ""]
    if all_rows.empty:
        lines += ["No ablation results yet: run `make ablations` (patch, heads, depth) or a `make ablate-*` target.", ""]
    else:
        newest = all_rows.sort_values("started_at").iloc[-1]
        lines += [f"- device: {newest.device} ({newest.device_name}); torch {newest.torch_version}; "
                  f"git {newest.git_sha}",
                  f"- data: {', '.join(sorted(all_rows['dataset'].astype(str).unique()))}; runs from "
                  f"{all_rows['started_at'].min()} to {all_rows['started_at'].max()}", ""]
    factors: dict[str, str] = {}
    for sweep in SWEEPS:
        lines.append(f"## {sweep}")
        if sweep not in tables:
            lines += [f"_Missing: `{ablations / (sweep + '.csv')}` does not exist; `make ablate-{sweep}` produces it._", ""]
            continue
        rows = tables[sweep]
        factor, order = _factor_and_order(sweep, rows)
        factors[sweep] = factor
        failed = rows[rows["status"] != "ok"]
        if (rows["status"] == "ok").any():
            table = sweep_table(rows, factor, order)
            fig = figures / f"{sweep}.png"
            sweep_figure(rows, factor, fig, order)
            lines += [_finding(table, factor), "", _base_line(rows, factor), "", _markdown(table, factor), "",
                      f"![{sweep}](figures/{fig.name})", ""]
            history_csv = ablations / f"{sweep}-history.csv"
            if history_csv.exists():
                curves = figs.learning_curves(read_rows(history_csv), rows, factor,
                                              figures / f"{sweep}-curves.png", order)
                lines += [f"![{sweep} learning curves](figures/{curves.name})", ""]
        if len(failed):
            lines.append(f"Failed runs ({len(failed)}), not counted above:")
            for _, r in failed.iterrows():
                lines.append(f"- {factor}={r[factor]} seed {r['seed']}: **{r['status']}** {r['error']}")
            lines.append("")
    if not all_rows.empty and (all_rows["status"] == "ok").any():
        lines += ["## accuracy against compute", ""]
        ok = all_rows[all_rows["status"] == "ok"]
        front = figs.pareto_front(ok)
        pareto = figs.accuracy_vs_gflops(all_rows, figures / "pareto.png")
        lines += ["Pareto front (no run is both cheaper and more accurate): " + ", ".join(
            f"{r.sweep} {factors.get(r.sweep, 'run')}={r[factors[r.sweep]] if r.sweep in factors else r.run_id} "
            f"({r.gflops:.5f} GFLOPs, {r.test_acc * 100:.1f}%)" for _, r in front.iterrows()) + ".", "",
            f"![pareto](figures/{pareto.name})", ""]
        lines += _inside_the_model(out, tables, figures)
    bench_csv = out / "bench" / "backends.csv"
    lines.append("## attention backends (bench)")
    if bench_csv.exists():
        bench = read_rows(bench_csv)
        ok = bench[bench["status"] == "ok"]
        tokens = sorted(ok["tokens"].unique())
        lines += ["", "| attn | " + " | ".join(f"img/s @ {t} tok" for t in tokens) + " | "
                  + " | ".join(f"peak MB @ {t} tok" for t in tokens) + " |", "|" + "---|" * (1 + 2 * len(tokens))]
        for attn, g in ok.groupby("attn"):
            by_t = g.groupby("tokens")
            rate, mem = by_t["throughput_img_s"].median(), by_t["peak_mem_mb"].median()
            lines.append(f"| {attn} | " + " | ".join(f"{rate.get(t, float('nan')):.2f}" for t in tokens) + " | "
                         + " | ".join(f"{mem.get(t, float('nan')):.1f}" for t in tokens) + " |")
        scaling = figs.backend_scaling(bench, figures / "backends.png")
        lines += ["", f"![backends](figures/{scaling.name})", ""]
    else:
        lines += [f"_Missing: `{bench_csv}`; `python -m bench run --tokens 65,197,785 --name backends` produces it._", ""]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path
