"""The GPU summary across ranks: each rank's figures as the PyTorch profiler's TensorBoard plugin
defines them (computed in the map, ranks/gpu_summary.py, kept in meta.json `gpu_summary`), and per
figure the smallest, median and largest value over the ranks that have it, with the ranks named.

summary.json `gpu_summary` and tables/gpu_summary (docs/summary-json.md "GpuSummary").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..ranks.gpu_summary import BREAKDOWN, FIGURES

ACROSS = (*FIGURES, *BREAKDOWN, "step_time_ms")
"""The fields summarised across ranks."""
NO_SUMMARY = "the map kept no GPU summary for this rank (see the warnings)"


def rank_rows(metas: dict[int, dict]) -> list[dict[str, Any]]:
    """One record per rank (rank order): its figures, breakdown, average step in ms and the reason
    for each null field."""
    rows = []
    for rank in sorted(metas):
        g = metas[rank].get("gpu_summary")
        if not isinstance(g, dict):
            rows.append({"rank": rank, "gpu_name": None, "profiled_steps": None, **{f: None for f in ACROSS},
                         "null_reasons": {f: NO_SUMMARY for f in ("gpu_name", "profiled_steps", *ACROSS)}})
            continue
        why = dict(g.get("null_reasons") or {})
        step_us = g.get("step_time_us")
        if "step_time_us" in why:
            why["step_time_ms"] = why.pop("step_time_us")
        rows.append({"rank": rank, "gpu_name": g.get("gpu_name"), "profiled_steps": g.get("profiled_steps"),
                     **{f: g.get(f) for f in (*FIGURES, *BREAKDOWN)},
                     "step_time_ms": None if step_us is None else step_us / 1e3, "null_reasons": why})
    return rows


def across_ranks(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per field of ACROSS: min, median and max over the ranks that have it, the ranks holding the
    min and the max (the lowest such rank), how many ranks have it, and, where none does, the
    first rank's reason."""
    out = {}
    for f in ACROSS:
        have = [(r[f], r["rank"]) for r in rows if r[f] is not None]
        if not have:
            reason = next((r["null_reasons"].get(f) for r in rows if r["null_reasons"].get(f)), "no rank has it")
            out[f] = {"min": None, "min_rank": None, "median": None, "max": None, "max_rank": None, "ranks": 0,
                      "null_reason": reason}
            continue
        vals = np.array([v for v, _ in have], dtype=np.float64)
        lo, hi = min(have), max(have, key=lambda x: (x[0], -x[1]))
        out[f] = {"min": lo[0], "min_rank": lo[1], "median": float(np.median(vals)), "max": hi[0], "max_rank": hi[1],
                  "ranks": len(have), "null_reason": None}
    return out


def gpu_summary(metas: dict[int, dict]) -> dict[str, Any]:
    """summary.json `gpu_summary`: {"per_rank": [...], "across_ranks": {field: {...}}}."""
    rows = rank_rows(metas)
    return {"per_rank": rows, "across_ranks": across_ranks(rows)}


def gpu_summary_table(summary: dict[str, Any]) -> pd.DataFrame:
    """tables/gpu_summary: one row per rank (the figures and the breakdown, a null field's reason in
    `null_reasons` as "field: reason; ..."), then the rows "min", "median" and "max" across ranks."""
    cols = ["rank", "gpu_name", "profiled_steps", *ACROSS]
    rows = [{**{c: r[c] for c in cols}, "null_reasons": "; ".join(f"{k}: {v}" for k, v in r["null_reasons"].items())}
            for r in summary["per_rank"]]
    for stat in ("min", "median", "max"):
        row = {"rank": stat, "gpu_name": None, "profiled_steps": None, "null_reasons": ""}
        for f in ACROSS:
            a = summary["across_ranks"][f]
            row[f] = a[stat]
        rows.append(row)
    df = pd.DataFrame(rows, columns=[*cols, "null_reasons"])
    df["rank"] = df["rank"].astype(str)
    df["profiled_steps"] = df["profiled_steps"].astype("Int64")  # whole numbers, empty on the min/median/max rows
    return df
