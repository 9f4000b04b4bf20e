"""The memory view's charts (matplotlib, saved with `savefig` as plots.py saves its own): the
allocated (and reserved) memory curve of each rank in its own panel with its peak marked, and the
allocated curves of all ranks on one chart, the ranks whose peak differs from the median drawn in
red. Data: reduce/memory_view.rank_rows (meta.json `memory_view` of each rank)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False  # operator names are data, never TeX (as in plots.py)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..reduce.memory_view import PEAK_TOLERANCE  # noqa: E402

DPI = 90
MAX_PANELS = 16
"""The most ranks given a panel of their own: the first ranks, and always those whose peak differs."""
FLAG = "#d62728"
NORMAL = "#1f77b4"


def _unit(rows: list[dict]) -> tuple[float, str]:
    top = max((r["peak_allocated_bytes"] or 0.0) for r in rows)
    return (2**30, "GiB") if top >= 4 * 2**30 else (2**20, "MiB")


def _with_curves(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("curve") and r["curve"]["time_ms"]]


def _basis_label(rows: list[dict]) -> str:
    return ("allocated since the first [memory] event (no Total Allocated in the trace)"
            if any(r.get("basis") == "bytes_since_start" for r in rows) else "allocated")


def memory_chart(rows: list[dict], differs: list[int], path: Path) -> None:
    """One panel per rank (at most MAX_PANELS): allocated memory over time, reserved where the trace
    has it (dashed), the peak marked with its operator and step."""
    have = _with_curves(rows)
    shown = [r for r in have if r["rank"] in differs]
    shown += [r for r in have if r["rank"] not in differs][: max(0, MAX_PANELS - len(shown))]
    shown.sort(key=lambda r: r["rank"])
    div, unit = _unit(shown)
    cols = min(4, len(shown))
    nrows = -(-len(shown) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 2.4 * nrows), squeeze=False, sharey=True)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax, r in zip(axes.flat, shown):
        c = r["curve"]
        t = np.asarray(c["time_ms"], dtype=float)
        a = np.asarray(c["allocated_bytes"], dtype=float) / div
        color = FLAG if r["rank"] in differs else NORMAL
        ax.step(t, a, where="post", color=color, lw=1.0, label="allocated")
        res = np.asarray([np.nan if v is None else v for v in c["reserved_bytes"]], dtype=float) / div
        if np.isfinite(res).any():
            ax.step(t, res, where="post", color="#7f7f7f", lw=0.8, ls="--", label="reserved")
        ax.plot([r["peak_time_ms"]], [r["peak_allocated_bytes"] / div], "o", color=color, ms=4)
        where = f"{r['peak_operator'] or 'no operator'}, step {r['peak_step'] if r['peak_step'] is not None else '-'}"
        ax.set_title(f"rank {r['rank']} ({r['device']}): peak {r['peak_allocated_bytes'] / div:,.1f} {unit}\n{where}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("ms since the trace's start", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{unit}", fontsize=8)
    handles = [plt.Line2D([], [], color=NORMAL, lw=1.0, label=_basis_label(shown))]
    if any(v is not None for r in shown for v in r["curve"]["reserved_bytes"]):
        handles.append(plt.Line2D([], [], color="#7f7f7f", lw=0.8, ls="--", label="reserved (caching allocator)"))
    if differs:
        handles.append(plt.Line2D([], [], color=FLAG, lw=1.0, label=f"peak over {100 * PEAK_TOLERANCE:.0f}% from the median rank's"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def memory_ranks_chart(rows: list[dict], differs: list[int], path: Path) -> None:
    """The allocated curves of all ranks on one chart (ranks whose peak differs in red, labelled)."""
    have = _with_curves(rows)
    div, unit = _unit(have)
    fig, ax = plt.subplots(figsize=(10, 4))
    for r in have:
        c = r["curve"]
        flag = r["rank"] in differs
        ax.step(c["time_ms"], np.asarray(c["allocated_bytes"], dtype=float) / div, where="post",
                color=FLAG if flag else NORMAL, lw=1.2 if flag else 0.7, alpha=1.0 if flag else 0.5,
                label=f"rank {r['rank']} (peak differs)" if flag else None, zorder=3 if flag else 2)
    ax.plot([], [], color=NORMAL, lw=0.7, alpha=0.5, label="other ranks")
    ax.set_xlabel("ms since each rank's trace start")
    ax.set_ylabel(f"{_basis_label(have)} ({unit})", fontsize=8)
    ax.set_title(f"Allocated memory of {len(have)} ranks")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
