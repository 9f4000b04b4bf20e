"""PNG charts (matplotlib, Agg). Every chart has units and rank (node) labels.

Rules every chart follows (issue 12): legends sit outside the data (right of or below the axes) and
do not depend on the data (proxy artists: the colours mean the same in every report); colour
scales are centred on the median or on the shown threshold, so noise stays pale; profiled steps
and steps excluded from the statistics are marked; a chart is only drawn when it has something to
show (chart_plan.py decides, and says why when not).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# host names, kernel names and file names are data, never TeX: a host called "$\frac{a}{$" made
# matplotlib parse mathtext and the whole analysis fail (issue 13)
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap, TwoSlopeNorm, to_rgba_array  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .efficiency_section import efficiency_chart  # noqa: E402,F401  (drawn by name: charts._draw)
from .rank_axis import axis_inches, rank_ticks, visible_width  # noqa: E402
from .rank_axis import labels as _labels  # noqa: E402
from .memory_plots import memory_chart, memory_ranks_chart  # noqa: E402,F401  (drawn by name: charts._draw)

FLAG = "#d62728"
NORMAL = "#1f77b4"
SUFFERED = "#aaaaaa"
# white up to the threshold's pale pink, then deepening red: below-threshold noise stays pale
WAIT_CMAP = LinearSegmentedColormap.from_list("wait", ["#ffffff", "#fde0dd", "#a50f15"])
DPI = 90
BAR_AXES_IN = 3.9
"""The width of the straggler chart's bar panel, in inches (its figure is 14 inches wide)."""


def _legend_right(ax, handles=None, **kw) -> None:
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False, **kw)


def _bars(ax, at, length, width=0.8, *, color, base=0.0, label=None, horizontal=False, **edge) -> None:
    """The bars ax.bar draws (ax.barh when horizontal: `at` on the y axis, `length` along x), as one
    collection of rectangles: the same pixels, limits (each bar's base a sticky edge) and legend entry,
    without ax.bar's Rectangle artist, limits update and layout pass per bar (charts of many ranks
    hold many bars). `color`: one colour, or one a bar. A bar of NaN length is not drawn, as with
    ax.bar. `edge`: the collection's edgecolors and linewidths (default: none, as ax.bar's)."""
    at = np.asarray(at, dtype=float)
    length, base, width = (np.broadcast_to(np.asarray(v, dtype=float), at.shape) for v in (length, base, width))
    lo, end = at - width / 2, base + length
    across = np.stack([lo, lo + width, lo + width, lo], 1)
    along = np.stack([base, base, end, end], 1)
    drawn = np.isfinite(across).all(1) & np.isfinite(along).all(1)
    verts = np.stack([along, across] if horizontal else [across, along], 2)[drawn]
    faces = to_rgba_array(color)
    coll = PolyCollection(verts, facecolors=faces[drawn] if len(faces) == len(drawn) > 1 else faces,
                          **{"edgecolors": "none", "linewidths": 0, **edge}, **({"label": label} if label else {}))
    (coll.sticky_edges.x if horizontal else coll.sticky_edges.y).extend(base)
    ax.add_collection(coll)
    ax.autoscale_view()  # what add_collection does itself from matplotlib 3.11 on


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def straggler_chart(per_step: pd.DataFrame, stragglers: list[dict], threshold_ms: float, nodes: dict, path: Path) -> None:
    """Left: per rank, what it costs the job per profiled step (red when flagged) and how long it
    waited itself. Right: the cost per rank and profiled step, white up to the threshold (noise
    stays pale). `per_step`: tables/waits_per_step (the what-if costs `whatif_cost_ms` and `wait_ms`,
    or the older `wait_inflicted_ms` / `wait_suffered_ms`)."""
    flagged = {int(s["rank"]) for s in stragglers}
    cost_col = "whatif_cost_ms" if "whatif_cost_ms" in per_step else "wait_inflicted_ms"
    wait_col = "wait_ms" if "wait_ms" in per_step else "wait_suffered_ms"
    m = per_step.groupby("rank")[[cost_col, wait_col]].mean()
    # taller with many ranks, up to 9 in (the heat map's rows: 0.6 pixels each at 1,024 ranks, a flagged
    # rank's row still coloured through the averaging, and its name in red)
    height = axis_inches(len(m), 0.12, 2.5, least=4.8, most=9.0)
    fig, axes = plt.subplots(1, 2, figsize=(14, height), gridspec_kw={"width_ratios": [1.1, 1.3], "wspace": 0.55})
    x = np.arange(len(m))
    ax = axes[0]
    is_flag = np.array([r in flagged for r in m.index], dtype=bool)
    _bars(ax, x - 0.2, m[cost_col], 0.4, color=[FLAG if f else NORMAL for f in is_flag])
    _bars(ax, x + 0.2, m[wait_col], 0.4, color=SUFFERED)
    if is_flag.any() and len(m) > 100:  # a slot is under a pixel: the flagged ranks' cost drawn wide enough to see, on top
        _bars(ax, x[is_flag] - 0.2, m[cost_col].to_numpy()[is_flag], visible_width(len(m), BAR_AXES_IN, 0.4, DPI), color=FLAG)
    for xi, r, c in zip(x, m.index, m[cost_col]):
        if r in flagged:
            ax.annotate(f"{c:.1f} ms", (xi - 0.2, c), ha="center", va="bottom", fontsize=8, color=FLAG)
    ax.axhline(threshold_ms, color="#555", ls="--", lw=1)
    rank_ticks(ax, "x", m.index, _labels(m.index, nodes), BAR_AXES_IN, 8, always=flagged)
    ax.set_ylabel("ms per profiled step")
    ax.set_title("Per rank: cost to the job, and its own waiting")
    # below the axes: on the right it would run into the heat map's rank labels
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False, handles=[
        Patch(color=FLAG, label="cost to the job (flagged straggler)"), Patch(color=NORMAL, label="cost to the job"),
        Patch(color=SUFFERED, label="it waits for others"),
        plt.Line2D([], [], color="#555", ls="--", label=f"threshold {threshold_ms:.1f} ms")])
    piv = per_step.pivot(index="rank", columns="step", values=cost_col)
    ax = axes[1]
    vals = piv.to_numpy(dtype=float)
    vmax = max(2 * threshold_ms, float(np.nanmax(vals)) if vals.size else 0.0, 1e-6)
    im = ax.imshow(np.clip(vals, 0, None), aspect="auto", cmap=WAIT_CMAP, norm=TwoSlopeNorm(vmin=0.0, vcenter=threshold_ms, vmax=vmax))
    named = rank_ticks(ax, "y", piv.index, _labels(piv.index, nodes), 0.77 * height, 7, always=flagged)
    for t, r in zip(ax.get_yticklabels(), piv.index[named]):
        if r in flagged:
            t.set_color(FLAG)
            t.set_fontweight("bold")
    every = max(1, len(piv.columns) // 25)
    ax.set_xticks(range(0, len(piv.columns), every), [str(c) for c in piv.columns[::every]], fontsize=7)
    ax.set_xlabel("profiled step")
    ax.set_title("Cost to the job per rank and step (ms)")
    cb = fig.colorbar(im, ax=ax, label="ms (white: below the threshold)")
    cb.ax.axhline(threshold_ms, color="#555", ls="--", lw=1)
    _save(fig, path)


def idle_chart(per_rank: pd.DataFrame, idle: pd.DataFrame, steps_trace: pd.DataFrame, nodes: dict, path: Path) -> None:
    width = axis_inches(len(per_rank), 0.9, 3)
    fig, ax = plt.subplots(figsize=(width, 4.5))
    gpu = per_rank[per_rank["idle_pct"].notna()] if "idle_pct" in per_rank else per_rank.iloc[0:0]
    if not gpu.empty:
        ranks = list(gpu["rank"])
        x = np.arange(len(ranks))
        bottom = np.zeros(len(ranks))
        # split each rank's idle % (HTA temporal) by the idle-time breakdown's category shares
        cats = ["host_wait", "kernel_wait", "other"]
        shares = idle.groupby(["rank", "idle_category"])["idle_time"].sum().unstack(fill_value=0.0) if not idle.empty else pd.DataFrame()
        ip = gpu["idle_pct"].to_numpy(dtype=float)
        if shares.empty:
            shares = pd.DataFrame(index=pd.Index([], dtype="int64"))
        by_rank = shares.reindex(index=ranks, columns=cats, fill_value=0.0)
        total = shares.sum(axis=1).reindex(ranks).fillna(0.0).to_numpy(dtype=float)
        split = total > 0  # a rank without an idle breakdown: all of its idle time is "other"
        for c, col in zip(cats, ["#ff7f0e", "#ffbb78", "#c7c7c7"]):
            part = by_rank[c].to_numpy(dtype=float)
            with np.errstate(invalid="ignore", divide="ignore"):
                vals = np.where(split, ip * part / np.where(split, total, 1.0), ip if c == "other" else 0.0)
            _bars(ax, x, vals, base=bottom, color=col, label=f"idle: {c.replace('_', ' ')}")
            bottom += vals
        _bars(ax, x, gpu["compute_pct"], base=bottom, color="#2ca02c", label="compute")
        bottom += gpu["compute_pct"].to_numpy()
        _bars(ax, x, gpu["non_compute_pct"], base=bottom, color="#1f77b4", label="non-compute (comm, memcpy)")
        rank_ticks(ax, "x", ranks, _labels(ranks, nodes), width - 3, 8)
        ax.set_ylabel("% of GPU time (first to last kernel)")
        ax.set_title("GPU time per rank: idle by cause, compute, non-compute (HTA)")
    else:
        m = steps_trace.groupby("rank")[["data_loading_ms", "cpu_work_ms", "host_gap_ms", "dur_ms"]].sum()
        pct = m[["data_loading_ms", "cpu_work_ms", "host_gap_ms"]].div(m["dur_ms"], axis=0) * 100
        x = np.arange(len(pct))
        bottom = np.zeros(len(pct))
        for c, col, lab in [("host_gap_ms", "#ff7f0e", "idle: host gap (un-annotated)"), ("data_loading_ms", "#ffbb78", "data loading"), ("cpu_work_ms", "#2ca02c", "CPU operators")]:
            _bars(ax, x, pct[c], base=bottom, color=col, label=lab)
            bottom += pct[c].to_numpy()
        rank_ticks(ax, "x", pct.index, _labels(pct.index, nodes), width - 3, 8)
        ax.set_ylabel("% of profiled step time (main thread)")
        ax.set_title("CPU-only run: main-thread time per rank")
    ax.set_ylim(0, 100)
    _legend_right(ax)
    _save(fig, path)


def _strip(ax, marked: list[tuple[int, str]]) -> None:
    """A strip above the axes: for each (column, colour) of `marked`, a rectangle of that colour
    over the column (x: data, -0.5 to +0.5 around it; y: 1.01 to 1.045 of the axes' height). One
    collection, with the pixels of a Rectangle patch a column (edges of the face colour, 1 point
    wide, mitred; the limits left alone), not one patch artist per column."""
    from matplotlib.transforms import blended_transform_factory

    if marked:
        low, top = 1.01, 1.01 + 0.035
        colors = [c for _, c in marked]
        ax.add_collection(PolyCollection([[(i - 0.5, low), (i + 0.5, low), (i + 0.5, top), (i - 0.5, top)] for i, _ in marked],
                                         facecolors=colors, edgecolors=colors, joinstyle="miter", clip_on=False,
                                         transform=blended_transform_factory(ax.transData, ax.transAxes)), autolim=False)


def step_heatmap(steps: pd.DataFrame, value: str, source: str, nodes: dict, path: Path) -> None:
    """Rank x step; colours centred on the median step time of the steps in the statistics (white),
    the range at least +-25% of it, so a 2% wobble stays pale. Above the map, a strip marks the
    profiled steps (black) and the steps excluded from the statistics (grey: column `phase` warmup,
    epoch_boundary or profiler_warmup; without `phase`, each rank's first step)."""
    piv = steps.pivot_table(index="rank", columns="step", values=value, aggfunc="first")
    first = steps.sort_values(["step", "rank"]).drop_duplicates("step").set_index("step")
    if "phase" in steps:
        excl = steps.groupby("step")["phase"].agg(lambda p: p.isin(["warmup", "epoch_boundary", "profiler_warmup"]).any())
        prof = steps.groupby("step")["phase"].agg(lambda p: (p == "profiled").any())
    else:
        excl = pd.Series(first.index == first.index.min(), index=first.index)
        prof = first["profiled"].fillna(False).astype(bool) if "profiled" in first else pd.Series(False, index=first.index)
    kept = [c for c in piv.columns if not bool(excl.get(c, False))] or list(piv.columns)
    med = float(np.nanmedian(piv[kept].to_numpy()))
    dev = float(np.nanmax(np.abs(piv[kept].to_numpy() - med))) if piv.size else 0.0
    span = max(0.25 * med, dev, 1e-6)
    height = axis_inches(len(piv.index), 0.35, 2, least=3)
    fig, ax = plt.subplots(figsize=(11, height))
    im = ax.imshow(piv.to_numpy(), aspect="auto", cmap="RdBu_r",
                   norm=TwoSlopeNorm(vmin=max(0.0, med - span) if med - span < med else med - 1e-6, vcenter=med, vmax=med + span))
    rank_ticks(ax, "y", piv.index, [f"rank {r} ({nodes[r]})" if nodes.get(r) else f"rank {r}" for r in piv.index], height - 2, 7)
    every = max(1, len(piv.columns) // 25)
    ax.set_xticks(range(0, len(piv.columns), every), [str(c) for c in piv.columns[::every]], fontsize=7)
    ax.set_xlabel("step")
    ax.set_title(f"Step time per rank and step ({source}); white = median {med:,.1f} ms", pad=16)
    _strip(ax, [(i, color) for i, c in enumerate(piv.columns)
                if (color := "black" if bool(prof.get(c, False)) else ("#999999" if bool(excl.get(c, False)) else None))])
    fig.colorbar(im, ax=ax, label="step time (ms)", pad=0.02)
    handles = [Patch(color="black", label="profiled step"), Patch(color="#999999", label="excluded from the statistics (warm-up, epoch start)")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.14), ncol=2, frameon=False)
    _save(fig, path)


def overlap_chart(per_rank: pd.DataFrame, nodes: dict, path: Path) -> None:
    d = per_rank[per_rank["comm_comp_overlap_pct"].notna()]
    width = axis_inches(len(d), 0.8, 2)
    fig, ax = plt.subplots(figsize=(width, 4))
    x = np.arange(len(d))
    _bars(ax, x, d["comm_comp_overlap_pct"], color="#9467bd")
    rank_ticks(ax, "x", d["rank"], _labels(d["rank"], nodes), width - 1, 8)
    ax.set_ylabel("comm time overlapped by compute (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Communication/computation overlap per rank (HTA)")
    _save(fig, path)


def kernel_chart(kernel_type: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    d = kernel_type.sort_values("sum")
    _bars(ax, np.arange(len(d)), d["sum"] / 1e3, color="#17becf", horizontal=True)
    ax.set_yticks(range(len(d)), d["kernel_type"])
    for y, (v, p) in enumerate(zip(d["sum"] / 1e3, d["percentage"])):
        ax.text(v, y, f" {p:.1f}%", va="center", fontsize=8)
    ax.set_xlabel("GPU time, all ranks (ms)")
    ax.set_title("Kernel-type breakdown (HTA)")
    ax.margins(x=0.15)
    _save(fig, path)


def operators_chart(ops: pd.DataFrame, path: Path, top: int = 12) -> None:
    """The operators with the most device time (host time when no GPU), summed over ranks."""
    g = ops.groupby("name")[["host_total_us", "device_total_us", "host_self_us"]].sum()
    key = "device_total_us" if g["device_total_us"].sum() > 0 else "host_total_us"
    d = g.nlargest(top, key).iloc[::-1]
    fig, ax = plt.subplots(figsize=(10, 0.38 * len(d) + 1.5))
    y = np.arange(len(d))
    _bars(ax, y + 0.2, d["host_total_us"] / 1e3, 0.4, color="#ff7f0e", label="host time (incl. children)", horizontal=True)
    _bars(ax, y - 0.2, d["device_total_us"] / 1e3, 0.4, color="#2ca02c", label="device time it launched", horizontal=True)
    names = [n if len(n) <= 48 else n[:47] + "…" for n in d.index]
    ax.set_yticks(y, names, fontsize=8)
    ax.set_xlabel("ms, all ranks, profiled steps")
    ax.set_title(f"Top operators by {'device' if key == 'device_total_us' else 'host'} time")
    _legend_right(ax)
    _save(fig, path)


def launch_chart(summary: pd.DataFrame, nodes: dict, path: Path) -> None:
    """Per rank: median and p95 launch delay (us) and the share of kernels shorter than their launch."""
    d = summary.sort_values("rank")
    x = np.arange(len(d))
    width = axis_inches(len(d), 0.9, 3)
    fig, ax = plt.subplots(figsize=(width, 4))
    _bars(ax, x - 0.2, d["launch_delay_median_us"], 0.4, color="#1f77b4", label="launch delay, median")
    _bars(ax, x + 0.2, d["launch_delay_p95_us"], 0.4, color="#aec7e8", label="launch delay, p95")
    named = rank_ticks(ax, "x", d["rank"], _labels(d["rank"], nodes), width - 3, 8)
    if len(named) == len(d):  # each rank has room for its share (else: tables/launch_summary)
        for xi, s, top in zip(x, d["short_kernel_share"], d["launch_delay_p95_us"]):
            ax.annotate(f"{100 * s:.0f}% short", (xi, top), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("µs from launch call end to GPU start")
    ax.set_title("Kernel launches (HTA): delay, and % of kernels shorter than their launch call")
    ax.margins(y=0.15)
    _legend_right(ax)
    _save(fig, path)


# what a link of the critical path spent its time on (reduce/critical_path.PATH_CATEGORIES)
PATH_COLOURS = {
    "start_skew": "#bdbdbd", "data_loading": "#ff7f0e", "host_gap": "#e7ba52", "cpu_work": "#9467bd",
    "gpu_compute": "#1f77b4", "memcpy": "#17becf", "comm": "#f4a6a6", "transfer": "#d62728", "uncategorised": "#e0e0e0",
}
PATH_MAX_STEPS = 12


def critical_path_chart(links: pd.DataFrame, nodes: dict, path: Path) -> None:
    """Left: each profiled step's critical path as a chain of bars along the step (ms from its
    earliest rank start), coloured by what the link spent most of its time on and labelled with
    its rank where it is wide enough. Right: time on the path per rank (ms per step), by category;
    the transfers belong to no rank. `links`: tables/critical_path (reduce/critical_path)."""
    cats = [c for c in PATH_COLOURS if f"{c}_ms" in links]
    steps = sorted(links["step"].unique())[:PATH_MAX_STEPS]
    fig, axes = plt.subplots(1, 2, figsize=(15, max(3.2, 0.55 * len(steps) + 2.2)),
                             gridspec_kw={"width_ratios": [2.2, 1.0], "wspace": 0.35})
    ax = axes[0]
    # the links as one collection of rectangles (_bars; height 0.7, white edges): one barh per link was 60% of
    # this chart's time (270 links, 12 steps)
    bars: dict[str, list] = {"y": [], "width": [], "left": [], "color": []}
    for y, step in enumerate(steps):
        mine = links[links["step"] == step]
        total = float(mine["dur_ms"].sum()) or 1.0
        for row in mine.itertuples(index=False):
            parts = {c: float(getattr(row, f"{c}_ms")) for c in cats}
            main = max(parts, key=parts.get) if parts else "uncategorised"
            for k, v in zip(bars, (y, row.dur_ms, row.start_ms, PATH_COLOURS[main])):
                bars[k].append(v)
            if not pd.isna(row.rank) and row.dur_ms > 0.06 * total:
                ax.text(row.start_ms + row.dur_ms / 2, y, f"r{int(row.rank)}", ha="center", va="center", fontsize=7, color="black")
    if bars["y"]:
        _bars(ax, bars["y"], bars["width"], 0.7, base=bars["left"], color=bars["color"], horizontal=True,
              edgecolors="white", linewidths=0.5)
    ax.set_yticks(range(len(steps)), [f"step {s}" for s in steps], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the step's earliest rank start")
    ax.set_title("Critical path per profiled step (rank of each link)")
    ax = axes[1]
    sub = links[links["step"].isin(steps) & links["rank"].notna()]
    per = sub.groupby("rank")[[f"{c}_ms" for c in cats]].sum() / max(1, len(steps))
    per = per.loc[per.sum(axis=1).sort_values(ascending=False).index]
    x = np.arange(len(per))
    bottom = np.zeros(len(per))
    for c in cats:
        v = per[f"{c}_ms"].to_numpy(float)
        if v.any():
            _bars(ax, x, v, base=bottom, color=PATH_COLOURS[c])
            bottom += v
    on_path = [int(r) for r in per.index]
    rank_ticks(ax, "x", on_path, _labels(on_path, nodes), 3.5, 8)
    ax.set_ylabel("ms per profiled step on the path")
    transfer = float(links.loc[links["step"].isin(steps), "transfer_ms"].sum()) / max(1, len(steps)) if "transfer_ms" in links else 0.0
    ax.set_title(f"Time on the path per rank (transfers: {transfer:.2f} ms/step)")
    _legend_right(ax, handles=[Patch(color=PATH_COLOURS[c], label=c.replace("_", " ")) for c in PATH_COLOURS])
    _save(fig, path)
