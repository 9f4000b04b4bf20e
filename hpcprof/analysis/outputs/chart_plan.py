"""Which charts have something to show, and why the others are left out.

Why apart from plots.py: the decision is cheap and needed in the main process (the report says
"left out: <reason>"), while plots.py imports matplotlib (about 1 s) and runs in forked workers.
A chart is left out rather than drawn empty: a framed placeholder with text spilling out of it
(single-rank and CPU runs) or an all-zero bar chart tells the reader less than one line does.
"""

from __future__ import annotations

import pandas as pd


def _col(df: pd.DataFrame | None, c: str) -> pd.Series:
    return df[c].dropna() if df is not None and not df.empty and c in df else pd.Series(dtype=float)


def nothing_to_show(red, views: dict[str, pd.DataFrame]) -> dict[str, str]:
    """Chart key -> the one line saying why it is left out (keys absent: draw it). `red`: the
    reduce's result (reduce/crossrank.Reduced); `views`: reduce/views.rank_views."""
    per_rank, per_step, steps_trace = red.per_rank, red.waits_per_step, red.steps_trace
    step_rows = red.steps.records if not red.steps.records.empty else steps_trace
    kernel_breakdown, device, n_ranks = red.kernel_breakdown, red.device, len(red.metas)
    operators, launches = views.get("operators"), views.get("launch_summary")
    why: dict[str, str] = {}
    if n_ranks < 2:
        why["stragglers"] = "one rank analysed; stragglers need two ranks or more"
    elif per_step is None or per_step.empty:
        why["stragglers"] = "no collective could be matched across ranks"
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
    cp = getattr(red, "critical_path", None)
    if cp is None or cp.links.empty:
        why["critical_path"] = ("one rank analysed; the cross-rank critical path needs two ranks or more" if n_ranks < 2
                                else "no profiled step could be replayed (no collective matched across ranks)")
    return why
