"""Which charts have something to show, and why the others are left out.

Why apart from plots.py: the decision is cheap and needed in the main process (the report says
"left out: <reason>"), while plots.py imports matplotlib (about 1 s) and runs in forked workers.
A chart is left out rather than drawn empty: a framed placeholder with text spilling out of it
(single-rank and CPU runs) or an all-zero bar chart tells the reader less than one line does.
"""

from __future__ import annotations

import pandas as pd

from ..reduce.memory_view import memory_reasons


def _col(df: pd.DataFrame | None, c: str) -> pd.Series:
    return df[c].dropna() if df is not None and not df.empty and c in df else pd.Series(dtype=float)


ORDER = ("stragglers", "idle", "step_heatmap", "overlap", "kernel_types", "operators", "launches", "critical_path",
         "efficiency", "memory", "memory_ranks")
"""The charts, in the order the summary and the report list them."""
EARLY = ("idle", "step_heatmap", "overlap", "kernel_types", "operators", "launches", "memory", "memory_ranks")
"""Charts of per-rank numbers only (reduce.crossrank.RankNumbers and reduce.views.rank_views): the
pipeline starts drawing them before the what-if replay ends."""
LATE = ("stragglers", "critical_path", "efficiency")
"""Charts of the what-if replay, the critical path and operator efficiency: drawn once the reduce has ended."""


def in_order(d: dict) -> dict:
    """`d` (chart key -> anything) with its keys in ORDER."""
    return {k: d[k] for k in sorted(d, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))}


def nothing_to_show(red, views: dict[str, pd.DataFrame], keys=ORDER) -> dict[str, str]:
    """Chart key -> the one line saying why it is left out (keys absent: draw it), for the charts
    `keys`. `red`: the reduce's result (reduce/crossrank.Reduced), or for EARLY charts only its
    RankNumbers; `views`: reduce/views.rank_views."""
    why: dict[str, str] = {}
    n_ranks = len(red.metas)
    if "stragglers" in keys:
        if n_ranks < 2:
            why["stragglers"] = "one rank analysed; stragglers need two ranks or more"
        elif red.waits_per_step is None or red.waits_per_step.empty:
            why["stragglers"] = "no collective could be matched across ranks"
    if "critical_path" in keys:
        cp = getattr(red, "critical_path", None)
        if cp is None or cp.links.empty:
            why["critical_path"] = ("one rank analysed; the cross-rank critical path needs two ranks or more" if n_ranks < 2
                                    else "no profiled step could be replayed (no collective matched across ranks)")
    if "efficiency" in keys:
        ops = getattr(red, "op_efficiency_table", None)
        if ops is None or ops.empty or ops["tflops_median"].isna().all():
            e = getattr(red, "op_efficiency", None) or {}
            tf = (e.get("across_ranks") or {}).get("tflops") or {}
            why["efficiency"] = tf.get("null_reason") or e.get("null_reason") or "no operator with FLOPs and device time"
    early = [k for k in keys if k in EARLY]
    if early:
        why.update({k: v for k, v in _per_rank_reasons(red, views).items() if k in early})
        why.update({k: v for k, v in memory_reasons(red.metas).items() if k in early})
    return why


def _per_rank_reasons(red, views: dict[str, pd.DataFrame]) -> dict[str, str]:
    """nothing_to_show for the EARLY charts."""
    per_rank, steps_trace, device = red.per_rank, red.steps_trace, red.device
    step_rows = red.steps.records if not red.steps.records.empty else steps_trace
    kernel_breakdown = red.kernel_breakdown
    operators, launches = views.get("operators"), views.get("launch_summary")
    why: dict[str, str] = {}
    if _col(per_rank, "idle_pct").empty and (steps_trace is None or steps_trace.empty):
        why["idle"] = "no GPU kernels and no profiled steps in the traces"
    if step_rows is None or step_rows.empty:
        why["step_heatmap"] = "no step records and no profiled steps"
    ov = _col(per_rank, "comm_comp_overlap_pct")
    if device != "cuda":
        why["overlap"] = "CPU-only run: no GPU communication kernels, overlap is not defined"
    elif ov.empty:
        why["overlap"] = "no communication kernels on any rank"
    elif (ov == 0).all():
        why["overlap"] = "communication never runs alongside compute on any rank (0% on every rank)"
    if device != "cuda":
        why["kernel_types"] = "CPU-only run: no GPU kernels"
    elif kernel_breakdown is None or kernel_breakdown.empty:
        why["kernel_types"] = "no GPU kernel activity in the traces"
    if operators is None or operators.empty:
        why["operators"] = "no PyTorch operators (cpu_op events) in the traces"
    if device != "cuda":
        why["launches"] = "CPU-only run: no kernel launches"
    elif launches is None or launches.empty or "launches" not in launches or launches["launches"].fillna(0).sum() == 0:
        why["launches"] = "no kernel launch could be matched to its GPU kernel (no correlation ids)"
    return why
