"""PNG charts (matplotlib, Agg). Every chart has units and rank (node) labels."""

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

FLAG = "#d62728"


def _labels(ranks, nodes: dict) -> list[str]:
    return [f"rank {r}\n{nodes.get(r) or '?'}" for r in ranks]


def _empty(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def straggler_chart(per_step: pd.DataFrame, flagged: set[int], nodes: dict, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [1, 1.4]})
    if per_step.empty:
        for ax in axes:
            _empty(ax, "no collectives matched across ranks (single rank or no collectives in the traces)")
    else:
        m = per_step.groupby("rank")[["wait_inflicted_ms", "wait_suffered_ms"]].mean()
        x = np.arange(len(m))
        ax = axes[0]
        colors = [FLAG if r in flagged else "#1f77b4" for r in m.index]
        ax.bar(x - 0.2, m["wait_inflicted_ms"], 0.4, color=colors, label="inflicted on others (others wait for it)")
        ax.bar(x + 0.2, m["wait_suffered_ms"], 0.4, color="#aaaaaa", label="suffered (it waits for others)")
        ax.set_xticks(x, _labels(m.index, nodes), fontsize=8)
        ax.set_ylabel("blocked waiting per step (ms)")
        ax.set_title("Waiting in collectives per rank (red: flagged straggler)")
        ax.legend(fontsize=8)
        piv = per_step.pivot(index="rank", columns="step", values="wait_inflicted_ms")
        ax = axes[1]
        im = ax.imshow(piv.to_numpy(), aspect="auto", cmap="Reds")
        ax.set_yticks(range(len(piv.index)), _labels(piv.index, nodes), fontsize=7)
        for t, r in zip(ax.get_yticklabels(), piv.index):
            if r in flagged:
                t.set_color(FLAG)
                t.set_fontweight("bold")
        ax.set_xticks(range(len(piv.columns)), [str(c) for c in piv.columns], fontsize=7)
        ax.set_xlabel("profiled step")
        ax.set_title("Waiting inflicted on the others, per step (ms)")
        fig.colorbar(im, ax=ax, label="ms")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def idle_chart(per_rank: pd.DataFrame, idle: pd.DataFrame, steps_trace: pd.DataFrame, nodes: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(per_rank) + 3), 4.5))
    gpu = per_rank[per_rank["idle_pct"].notna()] if "idle_pct" in per_rank else per_rank.iloc[0:0]
    if not gpu.empty:
        ranks = list(gpu["rank"])
        x = np.arange(len(ranks))
        bottom = np.zeros(len(ranks))
        # split each rank's idle % (HTA temporal) by the idle-time breakdown's category shares
        cats = ["host_wait", "kernel_wait", "other"]
        shares = idle.groupby(["rank", "idle_category"])["idle_time"].sum().unstack(fill_value=0.0) if not idle.empty else pd.DataFrame()
        for c, col in zip(cats, ["#ff7f0e", "#ffbb78", "#c7c7c7"]):
            vals = []
            for r, ip in zip(ranks, gpu["idle_pct"]):
                if not shares.empty and r in shares.index and shares.loc[r].sum() > 0:
                    vals.append(ip * shares.loc[r].get(c, 0.0) / shares.loc[r].sum())
                else:
                    vals.append(ip if c == "other" else 0.0)
            ax.bar(x, vals, bottom=bottom, color=col, label=f"idle: {c.replace('_', ' ')}")
            bottom += np.array(vals)
        ax.bar(x, gpu["compute_pct"], bottom=bottom, color="#2ca02c", label="compute")
        bottom += gpu["compute_pct"].to_numpy()
        ax.bar(x, gpu["non_compute_pct"], bottom=bottom, color="#1f77b4", label="non-compute (comm, memcpy)")
        ax.set_xticks(x, _labels(ranks, nodes), fontsize=8)
        ax.set_ylabel("% of GPU time (first to last kernel)")
        ax.set_title("GPU time per rank: idle by cause, compute, non-compute (HTA)")
        ax.legend(fontsize=8, loc="lower right")
    elif not steps_trace.empty:
        m = steps_trace.groupby("rank")[["data_loading_ms", "cpu_work_ms", "host_gap_ms", "dur_ms"]].sum()
        pct = m[["data_loading_ms", "cpu_work_ms", "host_gap_ms"]].div(m["dur_ms"], axis=0) * 100
        x = np.arange(len(pct))
        bottom = np.zeros(len(pct))
        for c, col, lab in [("host_gap_ms", "#ff7f0e", "idle: host gap (un-annotated)"), ("data_loading_ms", "#ffbb78", "data loading"), ("cpu_work_ms", "#2ca02c", "CPU operators")]:
            ax.bar(x, pct[c], bottom=bottom, color=col, label=lab)
            bottom += pct[c].to_numpy()
        ax.set_xticks(x, _labels(pct.index, nodes), fontsize=8)
        ax.set_ylabel("% of profiled step time (main thread)")
        ax.set_title("CPU-only run: no GPU idle time; main-thread time per rank")
        ax.legend(fontsize=8, loc="lower right")
    else:
        _empty(ax, "no data")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def step_heatmap(steps: pd.DataFrame, value: str, source: str, nodes: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(10, max(3, 0.35 * steps["rank"].nunique() + 1.5) if not steps.empty else 3))
    if steps.empty:
        _empty(ax, "no steps")
    else:
        piv = steps.pivot_table(index="rank", columns="step", values=value, aggfunc="first")
        im = ax.imshow(piv.to_numpy(), aspect="auto", cmap="viridis")
        ax.set_yticks(range(len(piv.index)), [f"rank {r} ({nodes.get(r) or '?'})" for r in piv.index], fontsize=7)
        step = max(1, len(piv.columns) // 20)
        ax.set_xticks(range(0, len(piv.columns), step), [str(c) for c in piv.columns[::step]], fontsize=7)
        ax.set_xlabel("step")
        ax.set_title(f"Step time per rank and step ({source})")
        fig.colorbar(im, ax=ax, label="step time (ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def overlap_chart(per_rank: pd.DataFrame, nodes: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(per_rank) + 2), 4))
    d = per_rank[per_rank["comm_comp_overlap_pct"].notna()] if "comm_comp_overlap_pct" in per_rank else per_rank.iloc[0:0]
    if d.empty:
        _empty(ax, "no GPU communication kernels (CPU-only run or no NCCL): overlap not defined")
    else:
        x = np.arange(len(d))
        ax.bar(x, d["comm_comp_overlap_pct"], color="#9467bd")
        ax.set_xticks(x, _labels(d["rank"], nodes), fontsize=8)
        ax.set_ylabel("comm time overlapped by compute (%)")
        ax.set_ylim(0, 100)
        ax.set_title("Communication/computation overlap per rank (HTA)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def kernel_chart(kernel_type: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    if kernel_type.empty:
        _empty(ax, "no GPU kernels (CPU-only run)")
    else:
        d = kernel_type.sort_values("sum")
        ax.barh(d["kernel_type"], d["sum"] / 1e3, color="#17becf")
        for y, (v, p) in enumerate(zip(d["sum"] / 1e3, d["percentage"])):
            ax.text(v, y, f" {p:.1f}%", va="center", fontsize=8)
        ax.set_xlabel("GPU time, all ranks (ms)")
        ax.set_title("Kernel-type breakdown (HTA)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
