"""summary.json: the analysis in one JSON document (docs/summary-json.md lists its fields).

Built from the reduce's result; written atomically (a temporary file renamed into place), like every
other file of the run directory, so a reader (or the memo, memo.py) never sees half of it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ...rundir import atomic_write_text
from ..reduce.crossrank import Reduced
from ..layout import AnalysisDir

PER_RANK_FIELDS = ("rank", "node", "step_time_ms", "idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct",
                   "trace_step_time_ms", "host_data_loading_pct", "host_gap_pct", "whatif_cost_ms_per_step", "file",
                   "compute_pct_hpcprof", "non_compute_pct_hpcprof", "comm_comp_overlap_pct_hpcprof", "comm_kernel_pct_hta",
                   "comm_kernel_pct", "comm_wait_ms_per_step", "comm_transfer_ms_per_step")
"""The per_rank table's columns that summary.json repeats (the table has more)."""


def clean(o):
    """JSON-ready: string keys, plain ints/floats/bools instead of numpy's, NaN and inf as null."""
    if isinstance(o, dict):
        return {str(k): clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating, float)):
        return None if math.isnan(float(o)) or math.isinf(float(o)) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return o


def build_summary(src: Path, out: AnalysisDir, red: Reduced, manifest: dict, world_size, warnings: list[str],
                  plots: dict[str, Path]) -> dict[str, Any]:
    """The summary without the `cache` and `inputs_key` fields (the orchestrator adds those).
    `warnings` is the list itself: what is appended to it later still shows."""
    kb = red.kernel_breakdown
    summary = {
        "run_name": manifest.get("name") or src.resolve().name,
        "source": str(src),
        "world_size": int(world_size) if world_size else len(red.metas),
        "ranks_analyzed": sorted(red.metas),
        "run_state": red.run_state,
        "hang": (red.run_state or {}).get("hang"),
        "device": red.device,
        "device_name": ", ".join(sorted({str(m["device_name"]) for m in red.metas.values() if m.get("device_name")})) or None,
        "warnings": warnings,
        "per_rank": [{k: row[k] for k in PER_RANK_FIELDS} for row in red.per_rank.to_dict("records")],
        "kernel_breakdown": [
            {"kernel_type": k, "time_us": float(t), "pct": float(p)} for k, t, p in zip(kb["kernel_type"], kb["sum"], kb["percentage"])
        ]
        if red.device != "cpu"
        else None,
        "stragglers": red.stragglers,
        **_whatif_fields(red),
        "communication": red.communication,
        "critical_path": red.critical_path.summary() if red.critical_path is not None else None,
        "gpu_summary": red.gpu_summary,
        "op_efficiency": red.op_efficiency,
        "slow_gpu": red.slow_gpu,
        "memory_view": red.memory_view,
        "recommendations": [{"title": r["title"], "evidence": r["evidence"], "score": r["score"]} for r in red.recommendations],
        "step_time": red.steps.spread,
        "throughput": red.throughput,
        "clock_offsets_us": {str(k): v for k, v in red.clock_offsets_us.items()},
        "collectives_matched": int(len(red.collectives)),
        "job_collectives": red.job_collectives,
        "control_collectives": red.control_collectives,
        "trained_alone": red.trained_alone,
        "workload": red.workload,
        "manifest_drills": manifest.get("drills"),
        "outputs": {
            "report": str(out.report),
            "tables": str(out.tables),
            "plots": {k: str(v) for k, v in plots.items()},
        },
    }
    if red.device == "cpu":
        warnings.append("CPU-only run: GPU fields (idle/compute/non-compute %, overlap, kernel breakdown) are null because the traces hold no GPU kernels")
    return summary


def _whatif_fields(red: Reduced) -> dict[str, Any]:
    """straggler_slowdown, replay_error_pct (largest over the profiled steps, and per step) and how
    collectives were matched (reduce.whatif; docs/analysis.md "Straggler flag")."""
    wi = red.whatif
    if wi is None or wi.matching is None:
        return {"straggler_slowdown": None, "replay_error_pct": None, "replay_error_pct_per_step": {}, "collective_matching": None,
                "cause_excess_ms_per_step_by_rank": {}}
    m = wi.matching
    per_step = {str(int(s)): round(float(e), 4) for s, e in zip(wi.steps.get("step", []), wi.steps.get("replay_error_pct", []))}
    return {
        "straggler_slowdown": None if wi.straggler_slowdown is None else round(wi.straggler_slowdown, 4),
        "replay_error_pct": None if wi.replay_error_pct is None else round(wi.replay_error_pct, 4),
        "replay_error_pct_per_step": per_step,
        "collective_matching": {"instances": m.n_instances, "rematched_by_end_time": m.n_rematched, "dropped": m.n_dropped,
                                "tolerance_ms": round(m.tol_us / 1e3, 4), "keyed_by": dict(m.keyed_by)},
        "cause_excess_ms_per_step_by_rank": {str(r): e for r, e in wi.excess_ms_per_step.items()},
    }


def write_summary(out: AnalysisDir, summary: dict) -> None:
    """summary.json, atomically; `summary` must be clean() already."""
    atomic_write_text(out.summary, json.dumps(summary, indent=2))


def read_summary(path: Path) -> dict:
    """A summary.json as written by :func:`write_summary`; ValueError, naming the file, for one that
    cannot be read, is not JSON, is not a JSON object (``[]`` gave "AttributeError: 'list' object
    has no attribute 'get'" in compare; issue 23 item 16) or whose ``source`` is not a path."""
    kinds = {list: "a JSON array", str: "a JSON string", int: "a JSON number", float: "a JSON number",
             bool: "a JSON boolean", type(None): "JSON null"}
    try:
        s = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    if not isinstance(s, dict):
        raise ValueError(f"{path}: not an hpcprof summary ({kinds.get(type(s), type(s).__name__)}, expected a JSON object)")
    if not isinstance(s.get("source", ""), str):
        raise ValueError(f"{path}: not an hpcprof summary (field source is {s['source']!r}, expected the analysed folder's path)")
    return s
