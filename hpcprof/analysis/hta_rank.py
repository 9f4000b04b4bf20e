"""HTA's own analyses on ONE rank's trace (the per-rank part of the map step).

We give HTA a `Trace` holding only this rank and call the same analyzer class methods that
`hta.trace_analysis.TraceAnalysis` calls, so per-rank numbers are HTA's numbers. The `Trace` is
filled from our one decode of the file (hta_frame.py, same frame as HTA's loader) or, where that
fast path does not apply, loaded by HTA itself. The cross-rank kernel-type breakdown is reproduced
in the reduce by summing the per-rank kernel-type times, exactly as
`BreakdownAnalysis.get_gpu_kernel_breakdown` does across ranks.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
from typing import Any

import pandas as pd

# HTA's default for get_idle_time_breakdown (nanoseconds in its doc, trace units in practice).
CONSECUTIVE_KERNEL_DELAY = 30
TOP_KERNELS = 10
DURATION_RATIO = 0.8


def _quiet_hta() -> None:
    logging.getLogger("hta").setLevel(logging.ERROR)


def load_hta_trace(trace_path: str, rank: int, table: pd.DataFrame | None = None, meta: dict | None = None):
    """HTA's `Trace` for one rank and the loader used: "fast" (HTA's frame built from our event
    table, see hta_frame.py) when `table` is given and the fast path applies, else "hta" (HTA's own
    `Trace.load_traces`, which parses the file again)."""
    from .hta_frame import fast_path_problem, hta_trace

    _quiet_hta()
    if table is not None and fast_path_problem(table) is None:
        return hta_trace(trace_path, rank, table, meta or {}), "fast"
    from hta.common.trace import Trace

    path = os.path.abspath(trace_path)
    # HTA prints progress to stdout/stderr in places; keep the worker quiet.
    with contextlib.redirect_stdout(io.StringIO()):
        t = Trace(trace_files={rank: path}, trace_dir=os.path.dirname(path))
        t.load_traces(include_last_profiler_step=False, use_multiprocessing=False)
    return t, "hta"


def run_hta_rank(trace_path: str, rank: int, table: pd.DataFrame | None = None, meta: dict | None = None) -> dict[str, Any]:
    """Run HTA's temporal, idle-time, overlap and kernel breakdowns on one rank.

    Returns a dict of small DataFrames / floats, and "loader" (see load_hta_trace). Raises on a
    trace HTA cannot handle; the caller turns that into a warning.
    """
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis

    t, loader = load_hta_trace(trace_path, rank, table, meta)
    out: dict[str, Any] = {"loader": loader}
    temporal = BreakdownAnalysis.get_temporal_breakdown(t, visualize=False)
    out["temporal"] = temporal.reset_index(drop=True)

    overlap = CommunicationAnalysis.get_comm_comp_overlap(t, visualize=False)
    ov = float(overlap["comp_comm_overlap_pctg"].iloc[0])
    out["overlap_pct"] = None if math.isnan(ov) else ov

    idle, _ = BreakdownAnalysis.get_idle_time_breakdown(
        t,
        CONSECUTIVE_KERNEL_DELAY,
        rank,
        None,
        visualize=False,
        visualize_pctg=False,
        show_idle_interval_stats=False,
    )
    out["idle"] = idle.reset_index(drop=True)

    kernel_type, kernels_top = BreakdownAnalysis.get_gpu_kernel_breakdown(
        t,
        visualize=False,
        duration_ratio=DURATION_RATIO,
        num_kernels=TOP_KERNELS,
        include_memory_kernels=True,
        image_renderer="",
    )
    out["kernel_type"] = kernel_type[["kernel_type", "sum"]].reset_index(drop=True)
    out["kernels_top"] = kernels_top.reset_index(drop=True)
    out["kernels_all"] = _all_kernels(t, rank)
    return out


def _all_kernels(t, rank: int) -> pd.DataFrame:
    """Every GPU kernel name on this rank with count/sum/max/min/mean/std of durations (us)."""
    from hta.utils.utils import get_kernel_type

    sym = t.symbol_table.get_sym_table()
    df = t.get_trace(rank)
    k = df[df["stream"].ne(-1)]
    names = k["name"].map(lambda i: sym[i])
    g = pd.DataFrame({"name": names.values, "dur": k["dur"].values}).groupby("name")["dur"]
    agg = g.agg(["count", "sum", "max", "min", "mean", "std"]).reset_index().fillna({"std": 0.0})
    agg["kernel_type"] = agg["name"].map(get_kernel_type)
    agg["rank"] = rank
    return agg.sort_values("sum", ascending=False, ignore_index=True)
