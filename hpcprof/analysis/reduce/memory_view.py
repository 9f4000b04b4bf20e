"""The memory view across ranks: each rank's curve, peak and allocating operators as the PyTorch
profiler's TensorBoard plugin defines them (computed in the map, ranks/memory_view.py, kept in
meta.json `memory_view`), and the peaks side by side: the median peak and the ranks whose peak
differs from it by more than PEAK_TOLERANCE, named.

summary.json `memory_view`, tables/memory_view and tables/memory_operators (docs/summary-json.md
"MemoryView"). Where the run directory holds CUDA memory snapshots (profiler.memory_snapshot), what
held the memory at their peak: `snapshots` (hpcprof.rundir.memory_snapshots reads them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ...rundir.memory_snapshots import SnapshotError, peak_blocks, read_snapshot, snapshot_path
from ..ranks.memory_view import thin_curve

PEAK_TOLERANCE = 0.10
"""A rank's peak differs when it is more than 10% above or below the median peak of the ranks
measured on the same basis and device kind (data-parallel ranks hold the same model and batch).
With an even count the lower of the two middle peaks is the median: of two ranks, the one that
holds more is named, not both."""
NO_VIEW = "the map kept no memory view for this rank (see the warnings)"
MANY_RANKS, FEW_POINTS = 64, 100
"""Beyond MANY_RANKS ranks each curve keeps FEW_POINTS points in summary.json (the peak stays): 1,024
ranks of 400 points made the summary 15 MB."""
RANK_FIELDS = ("device", "basis", "events", "peak_allocated_bytes", "peak_reserved_bytes", "peak_time_ms",
               "peak_operator", "peak_step", "device_total_bytes")


def rank_rows(metas: dict[int, dict]) -> list[dict[str, Any]]:
    """One record per rank (rank order): its peak figures, top operators, per-step figures, curve,
    and `reason` where it has no view (no [memory] events: recorded without profile_memory)."""
    rows = []
    points = FEW_POINTS if len(metas) > MANY_RANKS else None
    for rank in sorted(metas):
        v = metas[rank].get("memory_view")
        if not isinstance(v, dict):
            rows.append({"rank": rank, **{f: None for f in RANK_FIELDS}, "reason": NO_VIEW, "null_reasons": {},
                         "top_operators": [], "steps": [], "curve": None})
            continue
        rows.append({"rank": rank, **{f: v.get(f) for f in RANK_FIELDS}, "reason": v.get("reason"),
                     "null_reasons": dict(v.get("null_reasons") or {}), "top_operators": list(v.get("top_operators") or []),
                     "steps": list(v.get("steps") or []),
                     "curve": thin_curve(v.get("curve"), points) if points else v.get("curve")})
    return rows


def across_ranks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The peaks side by side: min, median (the lower one, PEAK_TOLERANCE), max (with the ranks), and
    `differs`: the ranks whose peak is more than PEAK_TOLERANCE from the median, each with its
    deviation; `reason` when no rank has a peak (the first rank's reason)."""
    have = [r for r in rows if r["peak_allocated_bytes"] is not None]
    out: dict[str, Any] = {"ranks": len(have), "tolerance_pct": 100 * PEAK_TOLERANCE, "min": None, "min_rank": None,
                           "median": None, "max": None, "max_rank": None, "differs": [], "reason": None, "mixed_basis": False,
                           "basis": None}
    if not have:
        out["reason"] = next((r["reason"] for r in rows if r["reason"]), "no rank has a memory view")
        return out
    # compare like with like: the most common (basis, device kind)
    kind = pd.Series([(r["basis"], (r["device"] or "")[:3]) for r in have]).value_counts().index[0]
    same = [r for r in have if (r["basis"], (r["device"] or "")[:3]) == kind]
    out["mixed_basis"] = len(same) < len(have)
    peaks = np.sort(np.array([r["peak_allocated_bytes"] for r in same], dtype=np.float64))
    med = float(peaks[(len(peaks) - 1) // 2])  # the lower median (PEAK_TOLERANCE)
    lo = min(same, key=lambda r: (r["peak_allocated_bytes"], r["rank"]))
    hi = max(same, key=lambda r: (r["peak_allocated_bytes"], -r["rank"]))
    out.update(min=lo["peak_allocated_bytes"], min_rank=lo["rank"], median=med, max=hi["peak_allocated_bytes"],
               max_rank=hi["rank"], basis=kind[0])
    if len(same) >= 2 and med > 0:
        for r in same:
            dev = r["peak_allocated_bytes"] / med - 1.0
            if abs(dev) > PEAK_TOLERANCE:
                out["differs"].append({"rank": r["rank"], "peak_allocated_bytes": r["peak_allocated_bytes"],
                                       "vs_median_pct": 100 * dev, "peak_operator": r["peak_operator"], "peak_step": r["peak_step"]})
    return out


def snapshot_views(root: Path, ranks: Iterable[int], warnings: list[str]) -> list[dict[str, Any]]:
    """Per snapshot file of the analysed ranks (memory/rank-<r>.oom.pickle first, then
    memory/rank-<r>.pickle) and device: what held the memory at its peak (peak_blocks), with the
    rank, the file (relative to the run directory) and when it was written (`at`: "oom" or
    "first_trace"). A file that is not a snapshot is named in `warnings` and left out."""
    out = []
    for rank in sorted(ranks):
        for oom in (True, False):
            path = snapshot_path(root, rank, oom)
            if not path.is_file():
                continue
            try:
                views = peak_blocks(read_snapshot(path))
            except SnapshotError as exc:
                warnings.append(f"memory snapshot of rank {rank} left out: {exc}")
                continue
            out += [{"rank": rank, "file": path.relative_to(root).as_posix(), "at": "oom" if oom else "first_trace", **v}
                    for v in views]
    return out


def memory_view(metas: dict[int, dict], snapshots: list[dict] | None = None) -> dict[str, Any]:
    """summary.json `memory_view`: {"per_rank": [...], "across_ranks": {...}, "snapshots": [...]}."""
    rows = rank_rows(metas)
    return {"per_rank": rows, "across_ranks": across_ranks(rows), "snapshots": snapshots or []}


def memory_table(summary: dict[str, Any]) -> pd.DataFrame:
    """tables/memory_view: one row per rank: device, basis, peak allocated and reserved (MiB), when
    (ms from the trace's start), the peak's operator and step, the top allocating operator, the
    peak's deviation from the median (percent), and why a rank has no view or a field is empty."""
    med = summary["across_ranks"].get("median")
    differs = {d["rank"] for d in summary["across_ranks"]["differs"]}
    rows = []
    for r in summary["per_rank"]:
        peak = r["peak_allocated_bytes"]
        top = r["top_operators"][0] if r["top_operators"] else {}
        rows.append({"rank": r["rank"], "device": r["device"], "basis": r["basis"], "events": r["events"],
                     "peak_allocated_mib": None if peak is None else peak / 2**20,
                     "peak_reserved_mib": None if r["peak_reserved_bytes"] is None else r["peak_reserved_bytes"] / 2**20,
                     "device_total_mib": None if r["device_total_bytes"] is None else r["device_total_bytes"] / 2**20,
                     "peak_time_ms": r["peak_time_ms"], "peak_operator": r["peak_operator"], "peak_step": r["peak_step"],
                     "top_operator": top.get("operator"),
                     "top_operator_self_allocation_mib": top["self_allocation_bytes"] / 2**20 if top else None,
                     "peak_vs_median_pct": None if peak is None or not med else 100 * (peak / med - 1.0),
                     "peak_differs": r["rank"] in differs,
                     "reason": r["reason"] or "; ".join(f"{k}: {v}" for k, v in r["null_reasons"].items())})
    df = pd.DataFrame(rows)
    if not df.empty:
        for c in ("events", "peak_step"):
            df[c] = df[c].astype("Int64")
    return df


def operators_table(summary: dict[str, Any]) -> pd.DataFrame:
    """tables/memory_operators: per rank, the operators that allocate most on its device (the
    plugin's Memory View columns, bytes), largest self allocation first."""
    rows = [{"rank": r["rank"], "device": r["device"], **o} for r in summary["per_rank"] for o in r["top_operators"]]
    return pd.DataFrame(rows)


def memory_reasons(metas: dict[int, dict]) -> dict[str, str]:
    """Chart key ("memory", "memory_ranks") -> why it is not drawn (absent: draw it)."""
    rows = [r for r in rank_rows(metas) if r["curve"] and r["curve"].get("time_ms")]
    why = {}
    if not rows:
        first = next((r["reason"] for r in rank_rows(metas) if r["reason"]), "no rank has [memory] events")
        why["memory"] = why["memory_ranks"] = first
    elif len(rows) < 2:
        why["memory_ranks"] = "one rank has a memory curve; the chart of all ranks needs two or more"
    return why
