"""Operator efficiency across ranks: each rank's figures (computed in the map, ranks/op_efficiency.py,
kept in meta.json `op_efficiency` and the per-rank table `op_efficiency`), the rank figures' smallest,
median and largest value with the ranks named, and per operator, input shapes and dtype the spread
of achieved TFLOP/s over the ranks.

summary.json `op_efficiency` and tables/op_efficiency (docs/analysis.md, "Operator efficiency").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

RANK_FIELDS = ("device_name", "peak_label", "calls", "calls_with_flops", "flops", "device_us", "tflops", "steps",
               "step_time_us", "step_flops", "mfu_pct")
ACROSS = ("tflops", "mfu_pct")
NO_OPS = ("no GEMM, convolution or attention operator with recorded shapes on any rank (record_shapes off, or "
          "the model has none)")
TABLE_COLUMNS = ["kind", "op", "shape", "dtype", "ranks", "calls", "flops_per_call", "bytes_per_call", "device_us_per_call",
                 "tflops_median", "tflops_min", "tflops_min_rank", "tflops_max", "tflops_max_rank", "tbps_median",
                 "peak_tflops", "peak_pct_median", "bw_peak_pct_median", "reason"]


def op_efficiency(metas: dict[int, dict], table: pd.DataFrame) -> dict[str, Any]:
    """summary.json `op_efficiency`: {"per_rank": [...], "across_ranks": {field: {...}}, "null_reason"}
    (null_reason: one line when no rank has a counted operator, else None). `table`: the ranks'
    `op_efficiency` tables with a rank column."""
    rows = []
    for rank in sorted(metas):
        e = metas[rank].get("op_efficiency")
        if not isinstance(e, dict):
            continue
        rows.append({"rank": rank, **{f: e.get(f) for f in RANK_FIELDS}, "peak_source": e.get("peak_source"),
                     "mfu_counts": e.get("mfu_counts"), "by_kind": e.get("by_kind") or {},
                     "calls_without_flops": e.get("calls_without_flops") or {}, "null_reasons": e.get("null_reasons") or {}})
    across: dict[str, Any] = {}
    for f in ACROSS:
        have = [(r[f], r["rank"]) for r in rows if r[f] is not None]
        if not have:
            reason = next((r["null_reasons"].get(f) for r in rows if r["null_reasons"].get(f)), _no_ops(metas))
            across[f] = {"min": None, "min_rank": None, "median": None, "max": None, "max_rank": None, "ranks": 0,
                         "null_reason": reason}
            continue
        lo, hi = min(have), max(have, key=lambda x: (x[0], -x[1]))
        across[f] = {"min": lo[0], "min_rank": lo[1], "median": float(np.median([v for v, _ in have])), "max": hi[0],
                     "max_rank": hi[1], "ranks": len(have), "null_reason": None}
    return {"per_rank": rows, "across_ranks": across, "null_reason": None if rows else _no_ops(metas)}


def _no_ops(metas: dict[int, dict]) -> str:
    """Why no rank has a counted operator: a CPU run first (no kernels: nothing to measure even with shapes)."""
    if metas and all(m.get("device") == "cpu" for m in metas.values()):
        return f"CPU run: no GPU kernels, so no device time, TFLOP/s or share of peak; and {NO_OPS}"
    return NO_OPS


def op_efficiency_table(table: pd.DataFrame) -> pd.DataFrame:
    """tables/op_efficiency: per operator, input shapes and dtype: ranks and calls, FLOPs and bytes
    per call, median device time per call, achieved TFLOP/s median/min/max over ranks (ranks named),
    TB/s and share of peak (median over ranks); `reason` where a figure is null. Ordered by the
    total device time."""
    if table is None or table.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    t = table.copy()
    for c in ("shape", "dtype", "reason"):
        t[c] = t[c].astype(object).where(t[c].notna(), "")
    rows = []
    for (kind, op, shape, dtype), g in t.groupby(["kind", "op", "shape", "dtype"], sort=False):
        tf = g[["tflops", "rank"]].dropna()
        lo = tf.sort_values(["tflops", "rank"]).iloc[0] if len(tf) else None
        hi = tf.sort_values(["tflops", "rank"], ascending=[False, True]).iloc[0] if len(tf) else None
        dev = pd.to_numeric(g["device_us"], errors="coerce")
        rows.append({
            "kind": kind, "op": op, "shape": shape, "dtype": dtype or None, "ranks": int(g["rank"].nunique()),
            "calls": int(g["calls"].sum()), "flops_per_call": g["flops_per_call"].iloc[0],
            "bytes_per_call": g["bytes_per_call"].iloc[0],
            "device_us_per_call": float((dev / g["calls"]).median()) if dev.notna().any() else None,
            "tflops_median": float(tf["tflops"].median()) if len(tf) else None,
            "tflops_min": float(lo["tflops"]) if lo is not None else None,
            "tflops_min_rank": int(lo["rank"]) if lo is not None else None,
            "tflops_max": float(hi["tflops"]) if hi is not None else None,
            "tflops_max_rank": int(hi["rank"]) if hi is not None else None,
            "tbps_median": _median(g["tbps"]), "peak_tflops": _median(g["peak_tflops"]),
            "peak_pct_median": _median(g["peak_pct"]), "bw_peak_pct_median": _median(g["bw_peak_pct"]),
            "reason": next((r for r in g["reason"] if r), None), "_dev": float(dev.sum()) if dev.notna().any() else -1.0,
        })
    df = pd.DataFrame(rows).sort_values("_dev", ascending=False, kind="stable", ignore_index=True)
    df["tflops_min_rank"] = df["tflops_min_rank"].astype("Int64")
    df["tflops_max_rank"] = df["tflops_max_rank"].astype("Int64")
    return df[TABLE_COLUMNS]


def _median(s: pd.Series) -> float | None:
    v = pd.to_numeric(s, errors="coerce").dropna()
    return float(v.median()) if len(v) else None
