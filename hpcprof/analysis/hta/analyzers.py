"""HTA's own analyses on ONE rank's trace (the per-rank part of the map step).

We give HTA a `Trace` holding only this rank and call the same analyzer class methods that
`hta.trace_analysis.TraceAnalysis` calls, so per-rank numbers are HTA's numbers. The `Trace` is
filled from our one decode of the file (frame.py, same frame as HTA's loader) or, where that
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

import numpy as np
import pandas as pd

from .breakdown import kernel_stats
from .launches import launch_stats

# HTA's default for get_idle_time_breakdown (nanoseconds in its doc, trace units in practice).
CONSECUTIVE_KERNEL_DELAY = 30
TOP_KERNELS = 10
DURATION_RATIO = 0.8
KERNELS_TOP_COLUMNS = ["name", "sum (us)", "max (us)", "min (us)", "mean (us)", "stddev", "kernel_type", "rank"]
"""The top-kernels table's columns in HTA 0.5's order: 0.6 puts stddev before mean; the written
tables keep one layout whichever HTA release ran."""


def _quiet_hta() -> None:
    logging.getLogger("hta").setLevel(logging.ERROR)


def zero_negative_durations(frame: pd.DataFrame) -> int:
    """Give the events of HTA's frame that HTA's rounding left with a negative duration a duration
    of 0 at their rounded start (in place); returns how many there were.

    Why: on a trace of nanosecond resolution (GPU traces of torch >= 2.3) HTA rounds every start up
    and every end down to the microsecond (`round_down_time_stamps`, HolisticTraceAnalysis 0.5.0 and
    traceinsight 0.6.1 alike), so a GPU event shorter than a microsecond that crosses no microsecond
    boundary (a small device-to-device copy, say) gets a duration of -1. HTA's temporal breakdown
    then fails its own assertion (non-compute time < 0) and its kernel sums count -1 us per such
    event. With the duration 0 every HTA figure is defined; on a trace without such events nothing
    changes. tests/analysis/test_h200_traces.py shows the failure with HTA's own parser and analyzer
    on a real H200 trace, and checks the figures against HTA's analyzer on the corrected frame."""
    dur = frame["dur"].to_numpy()
    negative = dur < 0
    count = int(negative.sum())
    if count:
        frame["dur"] = np.where(negative, 0, dur).astype(dur.dtype)
        if "end" in frame.columns:
            frame["end"] = frame["ts"] + frame["dur"]
    return count


def load_hta_trace(trace_path: str, rank: int, table: pd.DataFrame | list | None = None, meta: dict | None = None):
    """HTA's `Trace` for one rank and the loader used: "fast" (HTA's frame built from our event
    table, see frame.py) when `table` is given and the fast path applies, else "hta" (HTA's own
    `Trace.load_traces`, which parses the file again). `table` in a one-element list is consumed
    (frame.hta_frame). Either way, durations HTA's rounding made negative are 0
    (`zero_negative_durations`)."""
    from .frame import ANALYSIS_COLUMNS, fast_path_problem, hta_trace

    _quiet_hta()
    frame = table[0] if isinstance(table, list) else table
    if frame is not None and fast_path_problem(frame) is None:
        del frame
        t = hta_trace(trace_path, rank, table, meta or {}, ANALYSIS_COLUMNS)
        zero_negative_durations(t.get_trace(rank))
        return t, "fast"
    del frame
    if isinstance(table, list):
        table.clear()
    from hta.common.trace import Trace

    path = os.path.abspath(trace_path)
    # HTA prints progress to stdout/stderr in places; keep the worker quiet.
    with contextlib.redirect_stdout(io.StringIO()):
        t = Trace(trace_files={rank: path}, trace_dir=os.path.dirname(path))
        t.load_traces(include_last_profiler_step=False, use_multiprocessing=False)
    zero_negative_durations(t.get_trace(rank))
    return t, "hta"


def run_hta_rank(trace_path: str, rank: int, table: pd.DataFrame | list | None = None, meta: dict | None = None,
                 extra_comm: frozenset = frozenset()) -> dict[str, Any]:
    """Run HTA's temporal, idle-time, overlap and kernel breakdowns on one rank.

    Returns a dict of small DataFrames / floats, and "loader" (see load_hta_trace). Raises on a
    trace HTA cannot handle; the caller turns that into a warning. On the fast path the GPU events
    are classified once (`classified_analyses`); otherwise HTA's public analyzer methods run.

    `extra_comm`: correlation ids of the kernels that are communication by what the trace says but
    not by HTA's name rule (ranks/comm_kernels.py). HTA's numbers stay HTA's; where there are such
    kernels, "ours" holds the same temporal breakdown, overlap and kernel-type times with them
    classified as COMMUNICATION (the same computation, `classified_analyses`, on our classes), and
    kernels_all gets our class per kernel name in `kernel_type_hpcprof`.
    """
    t, loader = load_hta_trace(trace_path, rank, table, meta)
    gpu = gpu_events(t, rank)
    stats = _typed_stats(gpu)
    out: dict[str, Any] = {"loader": loader}
    out.update(classified_analyses(t, rank, gpu, stats=stats) if loader == "fast" else hta_analyses(t, rank))
    out["kernels_all"] = _all_kernels(stats, rank)
    out["launch_stats"] = launch_stats(t, rank)  # HTA's kernel-launch statistics (launches.py)
    kall = out["kernels_all"]
    kall["kernel_type_hpcprof"] = kall["kernel_type"]
    if extra_comm:
        from hta.utils.utils import KernelType

        ours = gpu.copy()
        ours.loc[ours["correlation"].isin(extra_comm), "kernel_type"] = KernelType.COMMUNICATION.name
        try:
            out["ours"] = classified_analyses(t, rank, ours, idle=False, tops=False)
        except ValueError:  # hostile times: HTA's own figures stand alone for this rank
            pass
        by_name = ours.groupby("kernel_name")["kernel_type"].agg(lambda s: s.mode().iloc[0])
        kall["kernel_type_hpcprof"] = kall["name"].map(by_name)
    return out


def gpu_events(t, rank: int) -> pd.DataFrame:
    """The rank's GPU events (HTA's rule: stream != -1) with `kernel_name` and HTA's `kernel_type`,
    each looked up once per distinct name: the rows taken once (not selected, then copied), the
    two columns made from the distinct names' values and each row's code (the dtype Series.map
    infers from the same values) where the names are int symbol ids."""
    from hta.utils.utils import get_kernel_type

    sym = t.symbol_table.get_sym_table()
    df = t.get_trace(rank)
    gpu = df.take(np.flatnonzero(df["stream"].to_numpy() != -1))
    ids = gpu["name"].to_numpy()
    if not len(ids) or ids.dtype.kind not in "iu":
        u = gpu["name"].unique()
        gpu["kernel_name"] = gpu["name"].map({i: sym[i] for i in u})
        gpu["kernel_type"] = gpu["name"].map({i: get_kernel_type(sym[i]) for i in u})
        return gpu
    u, inv = np.unique(ids, return_inverse=True)
    names = [sym[i] for i in u.tolist()]
    gpu["kernel_name"] = pd.Series(pd.Series(names).array.take(inv), index=gpu.index)
    gpu["kernel_type"] = pd.Series(pd.Series([get_kernel_type(n) for n in names]).array.take(inv), index=gpu.index)
    return gpu


def hta_analyses(t, rank: int) -> dict[str, Any]:
    """HTA's public analyzer methods on a one-rank Trace, as TraceAnalysis calls them."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis

    out: dict[str, Any] = {}
    out["temporal"] = BreakdownAnalysis.get_temporal_breakdown(t, visualize=False).reset_index(drop=True)
    overlap = CommunicationAnalysis.get_comm_comp_overlap(t, visualize=False)
    ov = float(overlap["comp_comm_overlap_pctg"].iloc[0])
    out["overlap_pct"] = None if math.isnan(ov) else ov
    out["idle"] = _idle(t, rank)
    kernel_type, kernels_top = BreakdownAnalysis.get_gpu_kernel_breakdown(
        t,
        visualize=False,
        duration_ratio=DURATION_RATIO,
        num_kernels=TOP_KERNELS,
        include_memory_kernels=True,
        image_renderer="",
    )
    out["kernel_type"] = kernel_type[["kernel_type", "sum"]].reset_index(drop=True)
    out["kernels_top"] = kernels_top[KERNELS_TOP_COLUMNS].reset_index(drop=True)
    return out


def _idle(t, rank: int) -> pd.DataFrame:
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis

    idle, _ = BreakdownAnalysis.get_idle_time_breakdown(
        t, CONSECUTIVE_KERNEL_DELAY, rank, None, visualize=False, visualize_pctg=False, show_idle_interval_stats=False
    )
    return idle.reset_index(drop=True)


def classified_analyses(t, rank: int, gpu: pd.DataFrame | None = None, idle: bool = True, stats: pd.DataFrame | None = None,
                        tops: bool = True) -> dict[str, Any]:
    """The same four results as `hta_analyses`, with every GPU event classified ONCE and the
    breakdowns computed on numpy (breakdown.py, HTA's exact numbers).

    HTA's temporal breakdown, overlap and kernel breakdown each classify every GPU event again with
    a row-wise `apply(get_kernel_type, axis=1)`, and each is a chain of pandas copies, sorts and
    groupbys. Here the kernel type is looked up once per distinct kernel name (HTA's
    `get_kernel_type`, `gpu_events`) and the results are computed from that one classified frame
    with HTA's definitions:
    - temporal: kernel time = last kernel end - first kernel start; idle = kernel time - merged
      busy time of all GPU events; compute = merged time of COMPUTATION kernels; non-compute = the
      rest; percentages of kernel time rounded to 2 decimals;
    - overlap: time during which merged COMPUTATION and merged COMMUNICATION kernels both run,
      over the merged COMMUNICATION time (NaN without communication), in % rounded to 2 decimals;
    - kernel breakdown: time per kernel type (COMPUTATION, COMMUNICATION, MEMORY and their
      overlaps), and per type the top kernels by total duration (DURATION_RATIO, TOP_KERNELS), from
      the per-name statistics `stats` (`_typed_stats`; computed here when not given);
    - idle-time breakdown per stream (`idle=False`: left out).
    Where breakdown.py declines a case (a time that makes its exact replay unsure), HTA's public
    analyzers compute every figure (`hta_analyses`); for our own classes ("ours") it raises
    ValueError instead, and HTA's figures stand alone. `gpu` may carry other kernel types than HTA's (run_hta_rank's
    "ours", with `tops=False`: the top kernels assume one type per name). Equality with
    `hta_analyses` is tested on every real trace of tests/data (tests/analysis/test_fast_loader.py).
    """
    from hta.utils.utils import KernelType

    from ..intervals import Intervals
    from . import breakdown as gb

    if gpu is None:
        gpu = gpu_events(t, rank)
    comp_name, comm_name = KernelType.COMPUTATION.name, KernelType.COMMUNICATION.name
    kinds = [comp_name, comm_name, KernelType.MEMORY.name]
    ts, dur, types = gpu["ts"].to_numpy(), gpu["dur"].to_numpy(), gpu["kernel_type"].to_numpy()

    cs, ce = gb.merge_intervals(ts[types == comp_name], dur[types == comp_name])
    temporal = gb.temporal(ts, dur, (cs, ce), rank)
    ms, me = gb.merge_intervals(ts[types == comm_name], dur[types == comm_name])
    comm_us = float(np.add.reduce(me - ms))
    both_us = float(Intervals(cs, ce).covered(ms, me).sum())
    overlap_pct = round(100 * (both_us / comm_us), 2) if comm_us > 0 else None

    ktime = gb.kernel_type_time(ts, dur, types, kinds)
    if ktime is None:  # a time breakdown.py cannot replay exactly (NaN, or sums past 2**53)
        if tops:  # HTA's own classes: HTA's public analyzers give every figure
            return hta_analyses(t, rank)
        raise ValueError(f"rank {rank}: GPU event times (NaN or beyond 2**53 us) that only HTA's own "
                         "classification can break down")
    ktime = gb.kernel_type_order(ktime)
    out = {"temporal": temporal, "overlap_pct": overlap_pct, "kernel_type": ktime[["kernel_type", "sum"]]}
    if tops:
        if stats is None:
            stats = _typed_stats(gpu)
        out["kernels_top"] = gb.kernels_top(stats, kinds, TOP_KERNELS, DURATION_RATIO, rank).rename(
            columns={"sum": "sum (us)", "mean": "mean (us)", "max": "max (us)", "min": "min (us)", "std": "stddev"})
    if idle:
        df = t.get_trace(rank)
        res = gb.idle_breakdown(df, t.symbol_table.get_sym_id_map(), CONSECUTIVE_KERNEL_DELAY, rank)
        out["idle"] = res if res is not None else _idle(t, rank)
    else:
        out["idle"] = None
    return out


def _typed_stats(gpu: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name of `gpu_events`: its statistics (breakdown.kernel_stats, grouped on
    HTA's int symbol ids where the frame has them) and its kernel_type (a function of the name:
    gpu_events), taken from the last row of each name, not from a dict built over every kernel (a
    Python object per kernel). Made once per rank, for the top kernels and the table of all kernels
    alike."""
    ids = gpu["name"].to_numpy()
    if ids.dtype.kind not in "iu":
        stats = kernel_stats(gpu["kernel_name"], gpu["dur"])
        one = gpu[["kernel_name", "kernel_type"]].drop_duplicates("kernel_name", keep="last")
        stats["kernel_type"] = stats["name"].map(dict(zip(one["kernel_name"], one["kernel_type"])))
        return stats
    _, last, inv = np.unique(ids[::-1], return_index=True, return_inverse=True)
    last = len(ids) - 1 - last  # each id's last row
    names = gpu["kernel_name"].array.take(last)
    stats = kernel_stats(gpu["kernel_name"], gpu["dur"], (inv[::-1], names))
    later = np.argsort(last)  # a name's type from its last row of all (ids sharing a text: the later one)
    type_of = dict(zip(names.take(later), gpu["kernel_type"].array.take(last[later])))
    stats["kernel_type"] = pd.Series([type_of[n] for n in stats["name"].tolist()])  # the dtype Series.map infers
    return stats


def _all_kernels(stats: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Every GPU kernel name on this rank with count/sum/max/min/mean/std of durations (us) and its
    kernel type, from `gpu_events`' per-name statistics (`_typed_stats`)."""
    agg = stats.copy()
    agg["rank"] = rank
    return agg.sort_values("sum", ascending=False, ignore_index=True)
