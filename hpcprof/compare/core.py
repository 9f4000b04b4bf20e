"""compare(): the runs table, the changes against the baseline, and operator/kernel deltas.

The first run is the baseline. Per run: samples/s and step time (median with the 95% interval of
the median, throughput.median_ci), data-wait share, HTA's GPU shares and overlap, kernel time per
type. Per later run and metric: the change against the baseline with a bootstrap interval and a
verdict (stats.py). The run's verdict is its samples/s verdict, or its step-time verdict when a run
has no step records (a trace folder: no batch size, so no samples/s).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.reduce.throughput import median_ci
from .inputs import Resolved, resolve
from .series import RunSeries, load_series
from .stats import MIN_CHANGE_PCT, compare_metric, simple_change

SIMPLE_FIGURES = ("gpu_idle_pct", "gpu_compute_pct", "gpu_non_compute_pct", "overlap_pct")


def _arrays(s: RunSeries) -> dict[str, np.ndarray]:
    st = s.steps
    out = {"step_ms": st["step_ms"].to_numpy(dtype=float)}
    sps = st["samples_per_s"].to_numpy(dtype=float)
    out["samples_per_s"] = sps[np.isfinite(sps)]
    out["data_wait_pct"] = st[["data_ms", "busy_ms"]].to_numpy(dtype=float)
    return out


def run_row(s: RunSeries) -> dict[str, Any]:
    a = _arrays(s)
    sps = median_ci(a["samples_per_s"])
    ms = median_ci(a["step_ms"])
    den = a["data_wait_pct"][:, 1].sum() if len(a["data_wait_pct"]) else 0
    return {
        "label": s.label,
        "source": s.summary.get("source"),
        "analysis": str(s.analysis_dir),
        "device": s.figures["device"],
        "ranks": s.figures["ranks"],
        "step_source": s.step_source,
        "steps_used": s.figures["steps_used"],
        "samples_per_s": sps[0],
        "samples_per_s_ci95": [sps[1], sps[2]] if sps[0] is not None else None,
        "step_ms": ms[0],
        "step_ms_ci95": [ms[1], ms[2]] if ms[0] is not None else None,
        "data_wait_pct": float(100 * a["data_wait_pct"][:, 0].sum() / den) if den > 0 else None,
        **{k: s.figures[k] for k in SIMPLE_FIGURES},
        "kernel_ms_per_step": s.figures["kernel_ms_per_step"],
        "breakdown_ms": s.breakdown,
        "throughput": s.throughput,
    }


def run_deltas(base: RunSeries, s: RunSeries, brow: dict, row: dict, min_change_pct: float) -> list[dict]:
    ab, at = _arrays(base), _arrays(s)
    out = []
    for metric in ("samples_per_s", "step_ms", "data_wait_pct"):
        out.append(compare_metric(metric, ab[metric], at[metric], min_change_pct).as_dict())
    for metric in SIMPLE_FIGURES:
        out.append(simple_change(metric, brow[metric], row[metric]).as_dict())
    kinds = sorted(set(brow["kernel_ms_per_step"]) | set(row["kernel_ms_per_step"]))
    for k in kinds:
        out.append(simple_change(f"kernel_ms_per_step:{k}", brow["kernel_ms_per_step"].get(k, 0.0), row["kernel_ms_per_step"].get(k, 0.0)).as_dict())
    for d in out:
        d["run"], d["baseline"] = s.label, base.label
    return out


def run_verdict(deltas: list[dict]) -> dict:
    by = {d["metric"]: d for d in deltas}
    key = "samples_per_s" if by["samples_per_s"]["change_pct"] is not None else "step_ms"
    d = by[key]
    return {"by": key, "verdict": d["verdict"], "change_pct": d["change_pct"], "ci_pct": d["ci_pct"]}


def compare(args: list[str], out: str | Path, workers: int | None = None, use_cache: bool = True, min_change_pct: float = MIN_CHANGE_PCT,
            progress: bool = True, op_deltas: bool = True) -> dict[str, Any]:
    """Compare runs (the first is the baseline); write compare.json, tables/, plots/, compare.html
    into `out`; return the result dict."""
    from .deltas import top_changes, trace_diff
    from .outputs import write_outputs

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    resolved: list[Resolved] = resolve(args, out, workers=workers, use_cache=use_cache, progress=progress)
    series = [load_series(r.label, r.analysis_dir) for r in resolved]
    rows = [run_row(s) for s in series]
    deltas: list[dict] = []
    warnings: list[str] = []
    op_tables = {}
    op_summary = []
    for r, s, row in zip(resolved[1:], series[1:], rows[1:]):
        d = run_deltas(series[0], s, rows[0], row, min_change_pct)
        deltas.extend(d)
        row["vs_baseline"] = run_verdict(d)
        if not op_deltas:
            continue
        if resolved[0].trace_file is None or r.trace_file is None:
            warnings.append(f"{r.label}: no trace to compare operators with {resolved[0].label}")
            continue
        if progress:
            print(f"hpcprof: operator and kernel deltas {resolved[0].label} -> {r.label} (HTA TraceDiff)", file=sys.stderr)
        try:
            diff = trace_diff(resolved[0].trace_file, r.trace_file)
        except Exception as exc:  # HTA rejects odd traces in many ways; keep the rest of the comparison
            warnings.append(f"{r.label}: operator/kernel deltas skipped ({type(exc).__name__}: {exc})")
            continue
        op_tables[r.label] = diff
        op_summary.append({"run": r.label, "baseline": resolved[0].label, "base_trace": str(resolved[0].trace_file),
                           "trace": str(r.trace_file), **top_changes(diff)})
    rows[0]["vs_baseline"] = None
    for s in series:
        for w in s.summary.get("warnings") or []:
            if "distributedInfo" in w:
                warnings.append(f"{s.label}: {w}")
    result = {
        "baseline": rows[0]["label"],
        "min_change_pct": min_change_pct,
        "runs": rows,
        "deltas": deltas,
        "op_deltas": op_summary,
        "warnings": warnings,
    }
    return write_outputs(out, result, series, op_tables)
