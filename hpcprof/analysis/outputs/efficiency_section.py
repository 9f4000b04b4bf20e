"""The report's operator efficiency section (summary.json `op_efficiency`, tables/op_efficiency) and
its chart: GEMMs, convolutions and attention with their FLOPs by formula, achieved TFLOP/s and TB/s,
share of the device's dense peak, and MFU per rank. A run without these figures says why in one
line. Everything from the trace is escaped (htmlparts.esc and table)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .htmlparts import esc, num, table

CHART_ROWS = 15
"""Operator rows the chart shows (the most device time first)."""


def efficiency_section(s: dict, tables: dict, chart_html: str) -> str:
    e = s.get("op_efficiency") or {}
    per = e.get("per_rank") or []
    if not per:
        return f"<p class='none'>No operator efficiency: {esc(e.get('null_reason') or 'no rank was analysed')}.</p>"
    across = e.get("across_ranks") or {}
    tf = across.get("tflops") or {}
    if not tf.get("ranks"):
        return f"<p class='none'>No operator efficiency: {esc(tf.get('null_reason') or 'no device time')}.</p>"
    body = ("<p>FLOPs and bytes per call by formula from the recorded shapes (GEMM 2&middot;M&middot;N&middot;K per batch; "
            "convolution 2&middot;N&middot;Cout&middot;Hout&middot;Wout&middot;Cin/groups&middot;Kh&middot;Kw; attention "
            "4&middot;B&middot;H&middot;Lq&middot;Lk&middot;D, halved when causal), device time from the kernels each call "
            "launched (correlation ids), share of the device's dense datasheet peak for the dtype. MFU: the counted forward "
            "and backward operators' FLOPs at peak over the profiled steps' time (a lower bound: other operators are not "
            "counted). docs/analysis.md, &ldquo;Operator efficiency&rdquo;.</p>")
    rows = []
    for r in per:
        why = r.get("null_reasons") or {}
        rows.append({"rank": r["rank"], "device": r.get("device_name"), "calls": r.get("calls"),
                     "GFLOP": None if r.get("flops") is None else r["flops"] / 1e9,
                     "device_ms": None if r.get("device_us") is None else r["device_us"] / 1e3,
                     "TFLOP/s": r.get("tflops"), "MFU %": r.get("mfu_pct"),
                     "MFU null because": why.get("mfu_pct")})
    df = pd.DataFrame(rows)
    if df["MFU null because"].isna().all():
        df = df.drop(columns="MFU null because")
    mfu = across.get("mfu_pct") or {}
    if mfu.get("ranks"):
        body += (f"<p>MFU over the profiled steps: median {num(mfu['median'], 'x_pct')}% (lowest {num(mfu['min'], 'x_pct')}% "
                 f"on rank {esc(mfu['min_rank'])}, highest {num(mfu['max'], 'x_pct')}% on rank {esc(mfu['max_rank'])}).</p>")
    else:
        body += f"<p>No MFU: {esc(mfu.get('null_reason'))}.</p>"
    body += "<h3>Per rank</h3>" + table(df, max_rows=64)
    ops = tables.get("op_efficiency")
    if isinstance(ops, pd.DataFrame) and not ops.empty:
        body += "<h3>Per operator and shape</h3>" + table(ops, max_rows=30, note="tables/op_efficiency.csv")
    return body + chart_html


def efficiency_chart(ops: pd.DataFrame, path: Path) -> None:
    """Achieved TFLOP/s (median over ranks) of the operators with the most device time, one bar per
    operator, shape and dtype, with the share of peak written beside the bar where known."""
    import matplotlib.pyplot as plt

    d = ops.dropna(subset=["tflops_median"]).head(CHART_ROWS).iloc[::-1]
    labels = [f"{o.replace('aten::', '')} {s} {t}"[:70] for o, s, t in zip(d["op"], d["shape"], d["dtype"].fillna(""))]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(d) + 1.2))
    y = range(len(d))
    ax.barh(list(y), d["tflops_median"], color="#4c72b0")
    for i, (v, p) in enumerate(zip(d["tflops_median"], d["peak_pct_median"])):
        if pd.notna(p):
            ax.text(v, i, f" {p:.1f}% of peak", va="center", fontsize=7)
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.set_xlabel("achieved TFLOP/s (median over ranks)")
    ax.set_title("Operator efficiency: GEMM, convolution, attention", fontsize=9)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
