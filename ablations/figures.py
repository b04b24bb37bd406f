"""Figures of the report beyond the per-sweep panels: learning curves, the accuracy/GFLOPs Pareto
front, backend scaling, position-embedding similarity, CLS attention maps and attention rollout."""

from __future__ import annotations

from pathlib import Path

import matplotlib.ticker
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from matplotlib.figure import Figure

from vit import POOLINGS, VisionTransformer

DPI = 80


def subplots(*args, figsize: tuple[float, float], **kwargs):
    """`pyplot.subplots` without pyplot: a bare Figure needs no GUI backend and no global state."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*args, **kwargs)


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def log_axis(ax, which: str = "y") -> None:
    """Log scale with 1-2-5 plain-number labels and no minor labels (they collide on short axes)."""
    getattr(ax, f"set_{which}scale")("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def learning_curves(history: pd.DataFrame, rows: pd.DataFrame, factor: str, path: Path,
                    order: list | None = None) -> Path:
    """Test accuracy and train loss per epoch, one line per factor value (mean over seeds)."""
    # a run killed after writing its history and rerun appears twice: keep the last record per epoch
    history = history.drop_duplicates(["run_id", "epoch"], keep="last")
    ok = rows.loc[rows["status"] == "ok", ["run_id", factor]]
    data = history.merge(ok, on="run_id")
    data["test accuracy (%)"] = data["test_acc"] * 100
    fig, axes = subplots(1, 2, figsize=(9, 3.4))
    for ax, col in zip(axes, ["test accuracy (%)", "train_loss"]):
        sns.lineplot(data=data, x="epoch", y=col, hue=data[factor].astype(str), ax=ax, errorbar=None,
                     hue_order=[str(v) for v in order] if order else None)
        ax.set_ylabel(col.replace("_", " "))
        ax.legend(title=factor, fontsize=8)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    fig.suptitle(f"learning curves, {factor} sweep")
    return save(fig, path)


def pareto_front(points: pd.DataFrame, acc: str = "test_acc") -> pd.DataFrame:
    """Points no other point beats on both fewer GFLOPs and higher accuracy (`acc`), sorted by GFLOPs."""
    ordered = points.reset_index(drop=True).sort_values(["gflops", acc], ascending=[True, False])
    front, best = [], -np.inf
    for idx, row in ordered.iterrows():
        if row[acc] > best:
            front.append(idx)
            best = row[acc]
    return ordered.loc[front]


def accuracy_vs_gflops(settings: pd.DataFrame, path: Path) -> Path:
    """One point per setting (sweep × value): mean test accuracy over its seeds with its 95 % interval,
    against forward GFLOPs; the Pareto front of the means drawn as a step line."""
    front = pareto_front(settings, "acc_mean")
    fig, ax = subplots(figsize=(6.4, 4.2))
    for i, (sweep, group) in enumerate(settings.groupby("sweep", sort=True)):
        mean = 100 * group["acc_mean"].to_numpy()
        low, high = 100 * group["acc_low"].to_numpy(), 100 * group["acc_high"].to_numpy()
        ax.errorbar(group["gflops"], mean, yerr=[mean - low, high - mean], fmt="os^vDP<>"[i % 8], ms=5, capsize=3,
                    ls="none", label=sweep, color=f"C{i % 10}")
    ax.step(front["gflops"], 100 * front["acc_mean"], where="post", color="k", ls="--", lw=1,
            label="Pareto front of the means")
    log_axis(ax, "x")
    ax.set_xlabel("GFLOPs per image (forward)")
    ax.set_ylabel("test accuracy (%), mean over seeds")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax.set_title("accuracy against compute: each setting's mean with its 95 % interval")
    return save(fig, path)


def backend_scaling(bench: pd.DataFrame, path: Path) -> Path:
    ok = bench[bench["status"] == "ok"]
    cols = [("throughput_img_s", "throughput (img/s)"), ("peak_mem_mb", "peak memory (MB)")]
    if ok["util_source"].eq("nvml").any():
        cols.append(("util_pct", "GPU utilisation (%)"))
    fig, axes = subplots(1, len(cols), figsize=(4.5 * len(cols), 3.6))
    for ax, (col, label) in zip(axes, cols):
        sns.lineplot(data=ok, x="tokens", y=col, hue="attn", style="attn", markers=True, ax=ax, errorbar=None)
        log_axis(ax, "x")
        ax.set_xticks(sorted(ok["tokens"].unique()), labels=[str(t) for t in sorted(ok["tokens"].unique())])
        if col != "util_pct":
            log_axis(ax)
        ax.set_xlabel("tokens (patches + 1)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    names = sorted(ok["device_name"].astype(str).unique())
    fig.suptitle(f"attention backends: {', '.join(names)}, {', '.join(sorted(ok['dtype'].unique()))}")
    return save(fig, path)


def _cosine_grid(pos: torch.Tensor, grid: int) -> np.ndarray:
    patches = torch.nn.functional.normalize(pos[1:].double(), dim=-1)  # drop CLS: (N, D)
    return (patches @ patches.T).reshape(grid, grid, grid, grid).numpy()


def position_similarity(tables: dict[str, torch.Tensor], grid: int, path: Path) -> Path:
    """ViT paper Fig. 7: for each patch, cosine similarity of its position vector with every other."""
    fig, axes = subplots(1, len(tables), figsize=(3.6 * len(tables), 3.8))
    for ax, (name, pos) in zip(np.atleast_1d(axes), tables.items()):
        sims = _cosine_grid(pos, grid)
        mosaic = sims.transpose(0, 2, 1, 3).reshape(grid * grid, grid * grid)  # row-major tiles
        im = ax.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1)
        for k in range(1, grid):
            ax.axhline(k * grid - 0.5, color="white", lw=0.5)
            ax.axvline(k * grid - 0.5, color="white", lw=0.5)
        ax.set_title(f"pos={name!r}")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(im, ax=axes, shrink=0.8, label="cosine similarity")
    fig.suptitle("position-embedding similarity: tile (i, j) = patch (i, j) against every patch")
    fig.savefig(path, dpi=DPI)
    return path


def rollout(attns: list[torch.Tensor]) -> torch.Tensor:
    """Abnar & Zuidema: product over layers of (mean-over-heads attention + I), rows renormalised."""
    result = None
    for a in attns:                                   # (B, H, T, T)
        a = a.mean(1)
        a = a + torch.eye(a.shape[-1])
        a = a / a.sum(-1, keepdim=True)
        result = a if result is None else a @ result
    return result                                     # (B, T, T)


def attention_maps(model: VisionTransformer, images: torch.Tensor, path: Path) -> Path:
    """Per head, the last block's attention over the patch grid from what the head reads (the CLS token,
    or with pool="avg" the mean over the patch tokens' rows), and the rollout, for a few images."""
    cfg = model.cfg
    model.eval()
    with torch.no_grad():
        _, attns = model(images, return_attn=True)
    g, heads, n = cfg.grid_size, cfg.num_heads, len(images)

    query = POOLINGS[cfg.pool].query  # (..., T, T) -> (..., N): attention paid to the patches

    roll = query(rollout(attns)).reshape(n, g, g)
    last = query(attns[-1]).reshape(n, heads, g, g)
    fig, axes = subplots(n, heads + 2, figsize=(1.6 * (heads + 2), 1.7 * n), squeeze=False)
    for i in range(n):
        axes[i, 0].imshow(images[i].mean(0), cmap="gray")
        for h in range(heads):
            axes[i, h + 1].imshow(last[i, h], cmap="magma")
        axes[i, -1].imshow(roll[i], cmap="magma")
    for h, title in enumerate(["input", *[f"head {h}" for h in range(heads)], "rollout"]):
        axes[0, h].set_title(title, fontsize=9)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    who = POOLINGS[cfg.pool].reader
    stem = "" if cfg.stem == "patch" else f", {cfg.stem} stem"
    fig.suptitle(f"{who} attention, last block (patch {cfg.patch_size}{stem}, {cfg.grid_size}×{cfg.grid_size} grid)")
    return save(fig, path)
