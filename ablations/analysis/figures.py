"""The report's figures: each sweep's panels, learning curves, the accuracy/GFLOPs Pareto front of the
setting means, backend scaling, position-embedding similarity, and attention rollout."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.ticker
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ablations.results.store import ok_rows
from bench.io.atomic import write_atomic
from bench.units import macs

if TYPE_CHECKING:   # torch loads only with the figures that draw a model's tensors
    import torch

PILE_MOST = 3   # more settings than this at one model's GFLOPs get a panel of their own in the accuracy-compute figure
DPI = 150  # a figure 10 in wide is 1,500 px: sharp where a README or a paper shows it ~800 px wide


def subplots(*args, figsize: tuple[float, float], **kwargs):
    """`pyplot.subplots` without pyplot: a bare Figure needs no GUI backend and no global state."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*args, **kwargs)


def save(fig, path: Path, layout: bool = True, **savefig) -> Path:
    """The figure as a PNG at DPI (`savefig`: more of savefig's options), laid out tight first unless it already is
    (`layout=False`); written whole or not at all (`bench.io.atomic`), so a killed report leaves no torn PNG."""
    if layout:
        fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, **{"dpi": DPI, "format": "png", **savefig})
    write_atomic(path, png.getvalue())
    return path


def log_axis(ax, which: str = "y") -> None:
    """Log scale with 1-2-5 plain-number labels (1-1.5-2-3-5-7 on an axis under a decade, set after the data
    are drawn) and no minor labels (they collide on short axes)."""
    getattr(ax, f"set_{which}scale")("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    low, high = (ax.get_xlim() if which == "x" else ax.get_ylim())
    short = low > 0 and high / low < 10     # under a decade: 1-2-5 would label one or two ticks
    axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if short
                                                        else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _linear_plain(ax) -> None:
    """No offset or scientific notation on a linear axis: 18.897 stays 18.897, not 0.007 + 1.889e1."""
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)


def blank_panel(ax, title: str, xlabel: str = "", why: str = "not measured") -> None:
    """A panel with no data: its title and a word why, no axes that would suggest a scale."""
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_color("0.8")
    ax.set_xlabel(xlabel, fontsize=9)
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4", fontsize=10)


BEST_MARKER = {"marker": "*", "ms": 11, "color": "k"}   # the setting the others are compared with


def _verdict_marks(ax, x: list, centre: np.ndarray, settings: list[dict], whiskers: tuple = ()) -> None:
    """The accuracy panel's paired contrasts: 0 (the best) as a line, the equivalence margin as a band, and
    each setting marked by what the verdict decided (Holm over the pairs), not by its interval."""
    from ablations.analysis.wording import OUTCOME_MARKERS  # the statistics load only where a verdict is drawn

    margin = 100 * settings[0]["margin"]
    ends = np.array([100 * v for d in settings if d.get("vs_best") for v in d["vs_best"][1:]])
    if len(ends) and (np.abs(ends) > margin).any():   # the band informs only where some interval leaves it
        ax.axhspan(-margin, margin, color="0.9", zorder=0, label=f"±{round(margin, 2):g}: equivalence margin")
    ax.axhline(0, color="0.4", lw=0.8, zorder=1, gid="reference")   # the best, not a trend
    for word, style in {"best": BEST_MARKER, **OUTCOME_MARKERS}.items():   # the best apart: 0 by definition
        where = [i for i, d in enumerate(settings) if d.get("decided") == word]
        if where:
            ax.plot([x[i] for i in where], centre[where], linestyle="none", zorder=3,
                    label="highest mean" if word == "best" else word, **style)   # as the verdicts name it
    for end in whiskers:   # the intervals' ends as invisible points, so that the legend's "best" place avoids them
        ax.plot(x, end, linestyle="none", marker="none", label="_whisker")
    # room above the intervals for the legend (a line of it about a tenth of the panel), where wide intervals
    # would leave it none
    ax.autoscale_view()
    bottom, top = ax.get_ylim()
    bottom, top = min(bottom, -margin), max(top, margin)   # at least the margin: every setting identical spans 0
    room = min(0.1 * len(ax.get_legend_handles_labels()[1]) + 0.05, 0.45)
    ax.set_ylim(bottom, top + (top - bottom) * room / (1 - room))
    ax.legend(fontsize=7, loc="best", framealpha=0.8)


def _scales(ax, x: list, numeric: bool, centre: np.ndarray, high: np.ndarray, size: bool) -> None:
    """A panel's axes: a size or a rate (`size`) spanning more than 10× on a log axis, else linear from zero;
    numeric settings spanning 8× or more on a log x axis."""
    finite = centre[np.isfinite(centre)]
    if len(finite) and size and finite.min() > 0 and finite.max() / finite.min() > 10:
        log_axis(ax)
    else:
        _linear_plain(ax)
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
        if size and len(finite):  # a size or a rate: from zero, so 0.1 % looks like 0.1 %
            ax.set_ylim(bottom=0, top=1.08 * np.nanmax(high if np.isfinite(high).any() else centre))
    ax.margins(x=0.12)
    if numeric and len(x) > 1 and min(x) > 0 and max(x) / min(x) >= 8:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _sweep_panels(settings: list[dict]) -> tuple[list[tuple[str, tuple]], list[str], str, bool]:
    """The sweep figure's panels as (title, (centre, low, high)), the titles of those left out because every
    setting has the same figure there (the same model at every learning rate), the accuracy panel's title and
    whether it draws the paired differences from the best."""
    def spread(key):
        got = [d[key] if d[key] is not None else None for d in settings]
        return ([g.median if g else np.nan for g in got], [g.q1 if g else np.nan for g in got],
                [g.q3 if g else np.nan for g in got])

    accs = [d["acc"] for d in settings]
    against = [d.get("vs_best") for d in settings]
    paired = all(v is not None for v in against) and len(settings) > 1
    accuracy = (f"test accuracy − the highest mean's ({settings[0]['best']}), points" if paired
                else "test accuracy (%)")
    panels = [(accuracy, ([100 * v[0] for v in against], [100 * v[1] for v in against], [100 * v[2] for v in against])
               if paired else ([100 * a.mean for a in accs], [100 * a.low for a in accs], [100 * a.high for a in accs])),
              ("GMACs per image", ([d["gmacs"] for d in settings],) * 3),
              ("inference img/s", spread("infer")),
              ("training-step img/s", spread("train")),
              ("training-step peak memory (MB)", spread("mem")),
              ("training run wall time (s)", spread("train_s"))]
    same = [title for title, (centre, _, _) in panels[1:5] if len(settings) > 1 and np.isfinite(centre).all()
            and len(set(np.round(np.asarray(centre, dtype=float), 9))) == 1]
    return [p for p in panels if p[0] not in same], same, accuracy, paired


def sweep_figure(settings: list[dict], path: Path, label: str, device: str, note: str = "") -> Path:
    """One panel per figure of a sweep's settings, three to a row: accuracy (where the sweep has a verdict: each
    setting's difference from the best setting with the 95 % interval of the paired comparison the verdict
    tests, the equivalence margin as a band where some interval leaves it; else each setting's accuracy with
    its own interval), GMACs, inference and training-step throughput and training-step peak memory (median and
    IQR over the cost phase's rounds; left out, and named below, where every setting has the same or none has
    one), training wall time (median and IQR over seeds; a setting whose runs were copied from another sweep
    drawn hollow; no trend through runs starved of CPU; left out, and said below, where the runs trained on more than
    one device). Numeric factors are joined by lines; categorical ones are not. `note`:
    said after the title (e.g. "not converged"), not under every axis."""
    values = [d["value"] for d in settings]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    x = values if numeric else list(range(len(values)))
    axis_label = textwrap.fill(label, 30)   # panels side by side: a long factor label on two lines
    panels, same, accuracy, paired = _sweep_panels(settings)
    unmeasured = [title for title, (centre, _, _) in panels if title != accuracy
                  and not np.isfinite(np.asarray(centre, dtype=float)).any()]   # named under the figure, not drawn
    devices = sorted({name for d in settings for name in d.get("devices", ())})
    mixed = [title for title, _ in panels if title.startswith("training run") and title not in unmeasured] \
        if len(devices) > 1 else []   # wall times of runs on other devices: no comparison to draw
    panels = [p for p in panels if p[0] not in unmeasured + mixed]
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    # a title wider than the panels (one panel; several devices) wraps rather than running off the figure
    title = textwrap.fill(f"{label} sweep on {device}" + (f" ({note})" if note else ""), int(9 * 3.5 * columns))
    notes = ([f"The same at every setting, so not drawn: {', '.join(same)}."] if same else []) + \
        ([f"Not measured here, so not drawn: {', '.join(unmeasured)}."] if unmeasured else []) + \
        ([f"Not drawn: {', '.join(mixed)} (the runs trained on {len(devices)} devices)."] if mixed else [])
    said = textwrap.fill(" ".join(notes), int(13 * 3.5 * columns)) if notes else ""
    extra = 0.2 * title.count("\n") + (0.16 * (said.count("\n") + 1) if said else 0.0)   # their lines, in inches
    fig, axes = subplots(rows, columns, figsize=(3.5 * columns, 3.1 * rows + 0.6 + extra), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.remove()
    axes = axes.flat[:len(panels)]
    starved = any(d.get("starved") for d in settings)   # wall times the report does not compare: no trend drawn
    for ax, (ylabel, (centre, low, high)) in zip(axes, panels):
        centre, low, high = (np.asarray(v, dtype=float) for v in (centre, low, high))
        if not np.isfinite(centre).any():
            blank_panel(ax, ylabel, axis_label)
            continue
        wall = ylabel.startswith("training run")
        _draw_panel(ax, x, (centre, low, high), settings, numeric, trend=numeric and not (starved and wall),
                    copied=[i for i, d in enumerate(settings) if d.get("reused")] if wall else [],
                    verdict=ylabel == accuracy and paired)
        _scales(ax, x, numeric, centre, high, size=ylabel != accuracy)
        if ylabel == accuracy and not paired:
            _chance_line(ax, settings)
        # alone in its figure a long title has no neighbour's margin to run into: on two lines
        ax.set_title(textwrap.fill(ylabel, 40) if columns == 1 else ylabel, fontsize=10)
        ax.set_xlabel(axis_label, fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    if said:
        fig.text(0.5, 0.01, said, ha="center", va="bottom", fontsize=8, color="0.3")
    height = fig.get_figheight()   # the note's lines, 0.16 in each, and a margin
    _value_ticks(fig, [ax for ax in axes if ax.has_data()], x, values,
                 bottom=(0.16 * (said.count("\n") + 1) + 0.08) / height if said else 0.0)
    return save(fig, path, layout=False)   # laid out by `_value_ticks`, with every label


def _chance_line(ax, settings: list[dict]) -> None:
    """Where some setting's accuracy is within noise of guessing, guessing's accuracy as a dashed line (what the
    report marks ‡), so that a flat panel of unlearned settings is not read as settings alike."""
    chance = next((d["chance"] for d in settings if d.get("chance")), None)
    if chance is None:
        return
    ax.axhline(100 * chance, color="0.45", lw=1, ls="--", zorder=1, gid="chance",
               label=f"guessing ({100 * chance:.1f} %)")
    bottom, top = ax.get_ylim()
    ax.set_ylim(min(bottom, 100 * chance - 1), top + 0.15 * (top - bottom))   # room for the legend above
    ax.legend(fontsize=7, loc="upper right", framealpha=0.8)


def _draw_panel(ax, x: list, figures: tuple, settings: list[dict], numeric: bool, trend: bool, copied: list[int],
                verdict: bool) -> None:
    """One panel's points with their error bars; a trend line through the settings measured alike (`trend`); a
    run copied from another sweep hollow; on the accuracy panel (`verdict`) each setting marked by its verdict."""
    centre, low, high = figures
    yerr = [np.clip(np.nan_to_num(centre - low), 0, None), np.clip(np.nan_to_num(high - centre), 0, None)]
    ax.errorbar(x, centre, yerr=yerr, fmt="none", capsize=4, color="C0")
    if trend:
        joined = [i for i in range(len(x)) if i not in copied]
        ax.plot([x[i] for i in joined], centre[joined], "-", color="C0")
    marked = {i for i, d in enumerate(settings) if d.get("decided") is not None} if verdict else set()
    own = [i for i in range(len(x)) if i not in copied and i not in marked]
    ax.plot([x[i] for i in own], centre[own], "o", ms=6, color="C0")
    if copied:
        ax.plot([x[i] for i in copied], centre[copied], "o", ms=7, mfc="white", mec="C0",
                label="copied from another sweep")
        ax.legend(fontsize=8, loc="lower right")
    if verdict:   # the verdict's contrasts: 0 is the best, the band its equivalence margin
        _verdict_marks(ax, x, centre, settings, (low, high))


def seed_spread(accuracies: list[float], interval, path: Path, title: str) -> Path:
    """A sweep of one setting: how its runs' test accuracies (fractions, one per seed) spread, as a histogram
    with each run a tick below it, and the mean with its 95 % interval (`interval`, a `stats.Interval`)."""
    acc = 100 * np.asarray(accuracies, dtype=float)
    fig, ax = subplots(figsize=(7.8, 3.6))
    step = 0.1   # 1,000 test images: accuracies fall on 0.1-point steps, one bar per step where they do
    on_steps = len(acc) and np.allclose(np.round(acc / step) * step, acc, atol=1e-6)
    bins = np.arange(acc.min() - step / 2, acc.max() + step, step) if on_steps else "auto"
    counts, _, _ = ax.hist(acc, bins=bins, color="C0", alpha=0.6, label=f"{len(acc)} runs (seeds)")
    ax.set_ylim(0, 1.45 * max(counts.max(), 1))   # room for the legend above the bars
    ax.plot(acc, np.zeros_like(acc), "|", color="C0", ms=12, mew=1)
    ax.axvline(100 * interval.mean, color="k", lw=1.2, label=f"mean {100 * interval.mean:.2f} %")
    ax.axvspan(100 * interval.low, 100 * interval.high, color="0.6", alpha=0.3,
               label=f"95 % interval of the mean [{100 * interval.low:.2f}, {100 * interval.high:.2f}] "
                     f"(seeds and test images)")
    ax.set_xlabel("test accuracy of one run (%)")
    ax.set_ylabel("runs")
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    _linear_plain(ax)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    return save(fig, path)


def _value_ticks(fig, axes, x: list, values: list, bottom: float = 0.0) -> None:
    """A tick at every setting on each panel (floats to 3 significant digits), every one labelled level where
    they fit; where they do not, turned 45° (a grid's cells keep every label); where even turned they would touch,
    every k-th labelled, k the least that keeps them apart. `bottom`: a share of the figure kept free below."""
    text = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in values]
    renderer = FigureCanvasAgg(fig).get_renderer()
    for ax in axes:
        ax.set_xticks(x, labels=text)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    for ax in axes:      # the labels placed where the layout put their axis (measured without drawing)
        ax.xaxis.get_tightbbox(renderer)
    boxes = [sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels()), key=lambda b: b.x0) for ax in axes]
    if all(a.x1 + 2 < b.x0 for row in boxes for a, b in zip(row, row[1:])):
        return
    # turned 45°, neighbours are parallel: they clear each other where their anchors lie √2 text heights apart
    gaps = [b.x0 - a.x0 for row in boxes for a, b in zip(row, row[1:])]
    height = max(b.height for row in boxes for b in row)
    step = next(k for k in range(1, len(text) + 1) if k * min(gaps, default=1e9) >= 1.45 * height)
    for ax in axes:
        ax.set_xticks(x, labels=[t if i % step == 0 else "" for i, t in enumerate(text)])
        ax.tick_params(axis="x", labelrotation=45)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")
    fig.tight_layout(rect=(0, bottom, 1, 1))


def learning_curves(history: pd.DataFrame, rows: pd.DataFrame, factor: str, path: Path,
                    order: list | None = None, sweep: str = "") -> Path:
    """Test accuracy and train loss per epoch, one line per factor value (mean over seeds), with one legend for
    both beside them (inside, it hid the curves of a sweep with many settings); titled with the sweep's name
    (`sweep`, else the factor's)."""
    # a run killed after writing its history and rerun appears twice: keep the last record per epoch
    history = history.drop_duplicates(["run_id", "epoch"], keep="last")
    ok = ok_rows(rows)[["run_id", factor]]
    data = history.drop(columns=[factor], errors="ignore").merge(ok, on="run_id")  # a factor `lr`: the run's, not the epoch's
    data["test accuracy (%)"] = data["test_acc"] * 100
    fig, axes = subplots(1, 2, figsize=(9, 3.4))
    for ax, col in zip(axes, ["test accuracy (%)", "train_loss"]):
        sns.lineplot(data=data, x="epoch", y=col, hue=data[factor].astype(str), ax=ax, errorbar=None,
                     hue_order=[str(v) for v in order] if order else None)
        ax.set_ylabel(col.replace("_", " "))
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))   # whole epochs: no 1.5 ticks
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        ax.grid(alpha=0.3)
    loss = data["train_loss"].to_numpy(dtype=float)
    loss = loss[np.isfinite(loss) & (loss > 0)]
    if len(loss) and loss.max() / loss.min() >= 10:   # a log axis only where it shows more than one label
        log_axis(axes[1])
    finished = ok_rows(rows)
    devices = sorted({f"{d} ({n})" for d, n in zip(finished.get("device", []), finished.get("device_name", []))})
    fig.suptitle(f"learning curves, {sweep or factor} sweep" + (f" ({factor})" if sweep and sweep != factor else "")
                 + (f" on {', '.join(devices)}" if devices else ""))
    handles, labels = axes[0].get_legend_handles_labels()
    legend = fig.legend(handles, labels, title=factor, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    width = legend.get_window_extent(FigureCanvasAgg(fig).get_renderer()).width / fig.dpi + 0.15   # inches, with a margin
    panels = fig.get_figwidth()
    fig.set_figwidth(panels + width)
    fig.tight_layout(rect=(0, 0, panels / (panels + width), 1))
    legend.set_bbox_to_anchor((panels / (panels + width), 0.5))
    return save(fig, path, layout=False)


def pareto_front(points: pd.DataFrame, acc: str = "test_acc") -> pd.DataFrame:
    """Points no other point beats on both fewer GFLOPs and higher accuracy (`acc`), sorted by GFLOPs."""
    ordered = points.reset_index(drop=True).sort_values(["gflops", acc], ascending=[True, False])
    front, best = [], -np.inf
    for idx, row in ordered.iterrows():
        if row[acc] > best:
            front.append(idx)
            best = row[acc]
    return ordered.loc[front]


def accuracy_vs_gflops(settings: pd.DataFrame, path: Path, what: str = "", factors: dict[str, str] | None = None) -> Path:
    """Mean test accuracy over its seeds with its 95 % interval against forward GFLOPs, one point per setting
    (sweep × value) labelled with its value, and the Pareto front of the means as a step line where it has two
    points or more. Settings that share one model's GFLOPs (the base model of many sweeps) would pile up at one
    x: they are drawn once there, and beside it, in a panel of their own, one labelled row each. `what`: the
    dataset and budget all the points share."""
    front = pareto_front(settings, "acc_mean")
    crowded = settings["gflops"].round(12).value_counts()
    largest = crowded.index[0] if len(crowded) and crowded.iloc[0] > PILE_MOST else None
    piled = settings[settings["gflops"].round(12) == largest] if largest is not None else settings.iloc[:0]
    alone = settings.drop(piled.index)
    rows = len(piled)
    fig = Figure(figsize=(10.5 if rows else 7.8, max(4.2, 0.17 * rows + 1.4)))
    grid = fig.add_gridspec(1, 2, width_ratios=(2.2, 1.4)) if rows else fig.add_gridspec(1, 1)
    ax = fig.add_subplot(grid[0, 0])
    sweeps = sorted(settings["sweep"].unique())
    colours = dict(zip(sweeps, sns.color_palette("tab10" if len(sweeps) <= 10 else "tab20", len(sweeps))))
    marks = dict(zip(sweeps, "os^vDP<>" * 4))
    for sweep, group in alone.groupby("sweep", sort=True):
        mean = 100 * group["acc_mean"].to_numpy()
        low, high = 100 * group["acc_low"].to_numpy(), 100 * group["acc_high"].to_numpy()
        label = sweep if not factors or factors[sweep] == sweep else f"{sweep} ({factors[sweep]})"   # not "depth (depth)"
        ax.errorbar(group["gflops"], mean, yerr=[mean - low, high - mean], fmt=marks[sweep], ms=5, capsize=3,
                    ls="none", color=colours[sweep], label=label)
    for i, (x, group) in enumerate(alone.groupby(alone["gflops"].round(12))):   # a few settings of one model: one
        said = " = ".join(str(v) for v in group["value"])                         # label, below and above in turn
        ax.annotate(said, (x, 100 * group["acc_mean"].max()), xytext=(5, 5 if i % 2 == 0 else -13),
                    textcoords="offset points", fontsize=8, color="0.15")
    for x, group in piled.groupby(piled["gflops"].round(12)):
        mean = 100 * group["acc_mean"]
        ax.errorbar([x], [mean.mean()], yerr=[[mean.mean() - mean.min()], [mean.max() - mean.mean()]], fmt="s",
                    color="0.45", ms=6, capsize=4, label=f"{len(group)} settings at one model's GFLOPs: their means' "
                                                         f"range (right)")
    if len(front) >= 2:
        ax.step(front["gflops"], 100 * front["acc_mean"], where="post", color="k", ls="--", lw=1,
                label="Pareto front of the means")
    log_axis(ax, "x")
    ax.set_xlabel("GFLOPs per image (forward)")
    one_seed = bool(len(settings)) and (settings["seeds"] == 1).all() if "seeds" in settings else False
    ax.set_ylabel("test accuracy (%)" + ("" if one_seed else ", mean over seeds"))
    # below the axes: inside, it hid the intervals of whatever sat in its corner
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, frameon=False)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(f"accuracy against compute{f': {what}' if what else ''}\n(each setting with its 95 % interval)",
                 fontsize=10)
    if rows:
        side = fig.add_subplot(grid[0, 1])
        ordered = piled.sort_values(["acc_mean", "sweep"], ascending=[True, True])
        y = np.arange(rows)
        for yi, (_, r) in zip(y, ordered.iterrows()):
            side.errorbar([100 * r["acc_mean"]], [yi], xerr=[[100 * (r["acc_mean"] - r["acc_low"])],
                                                            [100 * (r["acc_high"] - r["acc_mean"])]],
                          fmt=marks[r["sweep"]], color=colours[r["sweep"]], ms=4, capsize=2, lw=1)
        side.set_yticks(y, labels=[f"{r['sweep']}: {r['value']}" for _, r in ordered.iterrows()], fontsize=7)
        side.set_xlabel("test accuracy (%)", fontsize=9)
        side.set_title(f"the {rows} settings at {macs(float(piled['gflops'].iloc[0]))} GFLOPs", fontsize=9)
        side.grid(alpha=0.3, axis="x")
    return save(fig, path)


def backend_scaling(bench: pd.DataFrame, path: Path) -> Path:
    ok = ok_rows(bench)
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
    import torch

    patches = torch.nn.functional.normalize(pos[1:].double(), dim=-1)  # drop CLS: (N, D)
    return (patches @ patches.T).reshape(grid, grid, grid, grid).numpy()


def position_similarity(tables: dict[str, torch.Tensor], grid: int, path: Path) -> Path:
    """ViT paper Fig. 7: for each patch, cosine similarity of its position vector with every other."""
    fig, axes = subplots(1, len(tables), figsize=(3.6 * len(tables), 3.8))
    for ax, (name, pos) in zip(np.atleast_1d(axes), tables.items()):
        sims = _cosine_grid(pos, grid)
        mosaic = sims.transpose(0, 2, 1, 3).reshape(grid * grid, grid * grid)  # row-major tiles
        low = float(np.percentile(mosaic, 1))  # each encoding on its own scale: sincos2d spans a narrow range
        im = ax.imshow(mosaic, cmap="viridis", vmin=low, vmax=1)
        fig.colorbar(im, ax=ax, shrink=0.8, label="cosine similarity")
        for k in range(1, grid):
            ax.axhline(k * grid - 0.5, color="white", lw=0.5)
            ax.axvline(k * grid - 0.5, color="white", lw=0.5)
        ax.set_title(f"pos={name!r}")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("position-embedding similarity: tile (i, j) = patch (i, j) against every patch "
                 "(each encoding on its own colour scale)")
    return save(fig, path, layout=False, bbox_inches="tight")


def rollout(attns: list[torch.Tensor]) -> torch.Tensor:
    """Abnar & Zuidema: product over layers of (mean-over-heads attention + I), rows renormalised."""
    import torch

    result = None
    for a in attns:                                   # (B, H, T, T)
        a = a.mean(1)
        a = a + torch.eye(a.shape[-1])
        a = a / a.sum(-1, keepdim=True)
        result = a if result is None else a @ result
    return result                                     # (B, T, T)


def attention_grid(images: torch.Tensor, maps: list[torch.Tensor], titles: list[str], probs: torch.Tensor,
                   labels: list[str], title: str, path: Path, class_name=str) -> Path:
    """One row per image: the image with its label and predicted class, then the image under each map
    ((n, g, g) each, one column per title), all on one colour scale with one colour bar."""
    n, img_size = len(images), images.shape[-1]
    top = max(float(m.max()) for m in maps)
    cols = len(maps) + 1
    fig, axes = subplots(n, cols, figsize=(1.9 * cols + 0.8, 2.1 * n + 0.6), squeeze=False)
    extent = (0, img_size, img_size, 0)
    shown = None
    for i in range(n):
        picture = images[i].permute(1, 2, 0).numpy()
        picture = picture[..., 0] if picture.shape[-1] == 1 else picture
        cls, p = int(probs[i].argmax()), float(probs[i].max())
        axes[i, 0].imshow(picture, cmap="gray", extent=extent)
        axes[i, 0].set_xlabel(f"{labels[i]}\nclass {class_name(cls)} ({100 * p:.1f} %)", fontsize=9)
        for j, m in enumerate(maps):
            ax = axes[i, j + 1]
            ax.imshow(picture, cmap="gray", extent=extent)
            shown = ax.imshow(m[i].numpy(), cmap="magma", alpha=0.65, vmin=0.0, vmax=top, extent=extent,
                              interpolation="nearest")
            if i == 0:
                ax.set_title(titles[j], fontsize=10)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.subplots_adjust(top=1 - 0.55 / fig.get_figheight())   # the column titles just under the figure's title
    fig.colorbar(shown, ax=axes, fraction=0.025, pad=0.02, label="attention (share of the row)")
    fig.suptitle(title, fontsize=10, y=1 - 0.1 / fig.get_figheight(), va="top")
    return save(fig, path, layout=False, dpi=110, bbox_inches="tight")


def tuning_curves(curves: dict[str, dict[tuple, float]], chosen: dict[str, tuple], field: str, path: Path,
                  title: str) -> Path:
    """Validation accuracy (mean over seeds) against the tuned value, one line per setting, its pick ringed.
    `curves[setting][values]`: one tuned field gives a numeric axis (log where the grid spans ×4 or more);
    several are drawn against their combinations in grid order."""
    keys = list(dict.fromkeys(k for curve in curves.values() for k in curve))
    single = all(len(k) == 1 and isinstance(k[0], (int, float)) and not isinstance(k[0], bool) for k in keys)
    position = {k: (k[0] if single else i) for i, k in enumerate(keys)}
    fig, ax = subplots(figsize=(6.4, 3.8))
    for i, (setting, curve) in enumerate(curves.items()):
        xs = [position[k] for k in curve]
        ax.plot(xs, [100 * v for v in curve.values()], marker="os^vD"[i % 5], color=f"C{i % 10}", label=str(setting))
        pick = chosen[setting]
        ax.plot([position[pick]], [100 * curve[pick]], marker="o", ms=14, mfc="none", mec=f"C{i % 10}", ls="none")
    if single and min(position.values()) > 0 and max(position.values()) >= 4 * min(position.values()):
        log_axis(ax, "x")
        ax.set_xticks(sorted(position.values()))
    elif not single:
        ax.set_xticks(list(position.values()), [", ".join(str(v) for v in k) for k in keys], rotation=20)
    ax.set_xlabel(field)
    ax.set_ylabel("validation accuracy (%), mean over seeds")
    _linear_plain(ax)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    return save(fig, path)


def grid_heatmaps(cells: pd.DataFrame, a: str, b: str, path: Path, title: str, throughput_from: str = "") -> Path:
    """A two-factor grid as three heat maps over (a, b): test accuracy (mean over seeds, its 95 % interval
    printed beneath, the colours spanning the intervals), GMACs, and training throughput, titled with where it
    was measured (`throughput_from`: the host and the sitting). `cells`: one row per cell with columns a, b,
    acc_mean, acc_low, acc_high, gmacs, train_img_s."""
    panels = [("test accuracy (%)", "acc_mean", "viridis"), ("GMACs per image", "gmacs", "mako"),
              ("training throughput (img/s)" + (f": {throughput_from}" if throughput_from else ""), "train_img_s",
               "rocket")]
    fig, axes = subplots(3, 1, figsize=(6.5, 3 * (0.75 * cells[a].nunique() + 1.4) + 0.6))   # stacked: the
    for ax, (label, column, cmap) in zip(axes, panels):                                        # cells' text stays legible
        table = cells.pivot(index=a, columns=b, values=column)
        values = table.to_numpy(dtype=float) * (100 if column == "acc_mean" else 1)
        if not np.isfinite(values).any():
            blank_panel(ax, label, b)
            continue
        if column == "acc_mean":
            low = cells.pivot(index=a, columns=b, values="acc_low").to_numpy(dtype=float) * 100
            high = cells.pivot(index=a, columns=b, values="acc_high").to_numpy(dtype=float) * 100
            notes = np.array([[f"{m:.2f}\n[{lo:.2f}, {hi:.2f}]" for m, lo, hi in zip(*r)] for r in zip(values, low, high)])
        else:
            fmt = macs if column == "gmacs" else "{:,.0f}".format
            notes = np.array([[fmt(v) if v == v else "—" for v in r] for r in values])
        span = {}
        if column == "acc_mean":  # colours over the intervals' whole span: a gap inside the noise looks small
            span = {"vmin": float(np.nanmin(low)), "vmax": float(np.nanmax(high))}
        sns.heatmap(pd.DataFrame(values, index=table.index, columns=table.columns), annot=notes, fmt="", cmap=cmap,
                    ax=ax, cbar=True, annot_kws={"fontsize": 9}, **span)
        ax.set_title(textwrap.fill(label, 80), fontsize=10)
        ax.set_xlabel(b)
        ax.set_ylabel(a)
    fig.suptitle(textwrap.fill(title, 75), fontsize=11)
    return save(fig, path)
