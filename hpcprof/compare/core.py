"""compare(): the arms, the changes against the baseline arm, and operator/kernel deltas.

The first arm is the baseline (arms.py groups replicate runs into arms). Per run: samples/s and step
time (median with the 95% interval of the median, throughput.median_ci), data-wait share, HTA's
GPU shares and overlap, kernel time per type, its run state. Per arm: the level of each metric over
its complete runs (geometric mean of the runs' medians) with a 95% interval that holds the
run-to-run noise (noise.py), and each run as a point. Per later arm and metric: the change against
the baseline arm, its interval, a verdict and the smallest change the arms could detect
(stats.MetricRuns). The arm's verdict is its samples/s verdict, or its step-time verdict when a run
has no step records (a trace folder: no batch size, so no samples/s).

Like with like: when one run has no step records (a folder of traces), every run is measured on
its profiled trace steps, since steady-state steps and profiled steps differ by the profiler's cost.

Time: arms whose runs did not run interleaved get no faster/slower verdict unless a drift of the
machine between the times is known (timing.py has the rule); an arm the user grouped as one
configuration whose runs form blocks run at different times measures that drift (noise.json).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.reduce.bootstrap import MIN_CHANGE_PCT, point
from ..analysis.reduce.throughput import median_ci
from ..rundir.state import describe
from .arms import Arm, hardware_warnings, make_arms, mixed_specs, round_of, set_of, user_grouped
from .inputs import CompareError, Resolved, check_dirs, distinct, resolve
from .noise import CALIBRATED_METRICS
from .series import RunSeries, load_series
from .stats import MetricRuns, simple_change
from .timing import RunTime, blocks, drift_noise, relation, run_time, span_words

SIMPLE_FIGURES = ("gpu_idle_pct", "gpu_compute_pct", "gpu_non_compute_pct", "overlap_pct")
METRICS = ("samples_per_s", "step_ms", "data_wait_pct")


def _arrays(s: RunSeries) -> dict[str, np.ndarray]:
    st = s.steps
    out = {"step_ms": st["step_ms"].to_numpy(dtype=float)}
    sps = st["samples_per_s"].to_numpy(dtype=float)
    out["samples_per_s"] = sps[np.isfinite(sps)]
    out["data_wait_pct"] = st[["data_ms", "busy_ms"]].to_numpy(dtype=float)
    return out


def run_row(s: RunSeries, arm: str, used: bool, when: RunTime) -> dict[str, Any]:
    a = _arrays(s)
    sps = median_ci(a["samples_per_s"])
    ms = median_ci(a["step_ms"])
    den = a["data_wait_pct"][:, 1].sum() if len(a["data_wait_pct"]) else 0
    rep = s.manifest.get("replicate") if isinstance(s.manifest.get("replicate"), dict) else None
    return {
        "label": s.label,
        "arm": arm,
        "used": used,
        "state": (s.run_state or {}).get("state") or "unknown",
        "state_line": describe(s.run_state),
        "replicate": rep,
        "started": when.start.isoformat() if when.start else None,
        "ended": when.end.isoformat() if when.end else None,
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


def _mean(values: list) -> float | None:
    v = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def arm_row(arm: Arm, rows: list[dict], metrics: dict[str, MetricRuns], k: int, times: list[RunTime]) -> dict[str, Any]:
    """One arm: its level per metric over its used runs, the interval, and every run as a point."""
    used = [rows[i] for i in arm.used] or [rows[i] for i in arm.members]
    out: dict[str, Any] = {
        "label": arm.label,
        "grouped_by": arm.how,
        "ran": span_words([times[i] for i in (arm.used or arm.members)]),
        "runs": [rows[i]["label"] for i in arm.members],
        "runs_used": len(arm.used),
        "excluded": {rows[i]["label"]: why for i, why in arm.excluded.items()},
        "device": used[0]["device"],
        "ranks": used[0]["ranks"],
        "step_source": used[0]["step_source"],
        "steps_used": int(sum(r["steps_used"] for r in used)),
    }
    for m in ("samples_per_s", "step_ms"):
        mr = metrics[m]
        out[m] = mr.level(k) if arm.used else None
        ci, basis = mr.level_ci(k) if arm.used else (None, None)
        if ci is None and len(arm.used) == 1:  # one run, no run-to-run level: the median's own interval
            ci, basis = rows[arm.used[0]][f"{m}_ci95"], "within-run"
        out[f"{m}_ci95"], out[f"{m}_ci_basis"] = ci, basis
        out[f"{m}_runs"] = [rows[i][m] for i in arm.members]
    out["data_wait_pct"] = metrics["data_wait_pct"].level(k) if arm.used else None
    out["data_wait_pct_runs"] = [rows[i]["data_wait_pct"] for i in arm.members]
    for f in SIMPLE_FIGURES:
        out[f] = _mean([r[f] for r in used])
    kinds = sorted({k_ for r in used for k_ in r["kernel_ms_per_step"]})
    out["kernel_ms_per_step"] = {k_: _mean([r["kernel_ms_per_step"].get(k_, 0.0) for r in used]) for k_ in kinds}
    parts = list(dict.fromkeys(p for r in used for p in r["breakdown_ms"]))
    out["breakdown_ms"] = {p: _mean([r["breakdown_ms"].get(p, 0.0) for r in used]) for p in parts}
    out["throughput"] = used[0]["throughput"] if len(used) == 1 else None
    return out


def arm_deltas(metrics: dict[str, MetricRuns], arms: list[Arm], arows: list[dict], k: int, min_change_pct: float,
               times: list[RunTime]) -> list[dict]:
    when = relation(arms[0].label, [times[i] for i in arms[0].used], arms[k].label, [times[i] for i in arms[k].used])
    out = []
    for m in METRICS:
        out.append(metrics[m].change(k, 0, min_change_pct, when).as_dict())
    brow, row = arows[0], arows[k]
    for m in SIMPLE_FIGURES:
        out.append(simple_change(m, brow[m], row[m]).as_dict())
    for kind in sorted(set(brow["kernel_ms_per_step"]) | set(row["kernel_ms_per_step"])):
        out.append(simple_change(f"kernel_ms_per_step:{kind}", brow["kernel_ms_per_step"].get(kind, 0.0),
                                 row["kernel_ms_per_step"].get(kind, 0.0)).as_dict())
    blocked = None
    if not arms[0].used:
        blocked = f"no verdict: the baseline {arms[0].label} has no complete run"
    elif not arms[k].used:
        blocked = f"no verdict: {arms[k].label} has no complete run"
    for d in out:
        d["arm"], d["baseline"] = arms[k].label, arms[0].label
        if blocked:
            d["verdict"], d["note"] = blocked, "; ".join(arms[k].excluded.values() or arms[0].excluded.values())
    return out


def arm_verdict(deltas: list[dict]) -> dict:
    by = {d["metric"]: d for d in deltas}
    key = "samples_per_s" if by["samples_per_s"]["change_pct"] is not None else "step_ms"
    d = by[key]
    keep = ("verdict", "change_pct", "ci_pct", "basis", "runs", "detectable_pct", "runs_needed", "within_run_ci_pct",
            "within_run_verdict", "note", "time")
    return {"by": key, **{k: d.get(k) for k in keep}}


def _like_with_like(series: list[RunSeries], resolved: list[Resolved], warnings: list[str]) -> list[RunSeries]:
    """Every run on its trace's profiled steps when one of them has no step records."""
    without = [s.label for s in series if not s.has_step_records]
    if not without or len(without) == len(series):
        return series
    warnings.append(f"{', '.join(without)}: no step records (a folder of traces), so every run is compared on its profiled "
                    "trace steps, not on steady-state steps (the profiler slows the steps it traces)")
    return [load_series(r.label, r.analysis_dir, source="trace") if s.has_step_records else s for s, r in zip(series, resolved)]


def measured_drift(arms: list[Arm], series: list[RunSeries], arrays: list[dict], skip: set[int], times: list[RunTime],
                   metrics: dict[str, MetricRuns]) -> dict[str, Any]:
    """metric -> the drift between blocks of runs launched apart (timing.drift_noise), measured on
    the arms the user grouped as one configuration (not those of mixed specs)."""
    sets, rounds = set_of(series), round_of(series)
    found = []
    for k, a in enumerate(arms):
        if k in skip or not user_grouped(a):
            continue
        b = blocks(a.used, sets, rounds, times)
        if b is not None:
            groups, what = b
            names = ", ".join("+".join(series[i].label for i in g) for g in groups)
            found.append((f"{a.label}: {what} ({names})", groups))
    out = {}
    for m in CALIBRATED_METRICS:
        if metrics[m].scale != "log" or not found:
            continue
        # a run's statistic as MetricRuns has it: the median (samples/s and step time alike)
        arms_blocks = [(what, [[v for v in (point(arrays[i][m], "median") for i in g) if v is not None and v > 0] for g in groups])
                       for what, groups in found]
        d = drift_noise(arms_blocks, "log")
        if d is not None:
            out[m] = d
    return out


def compare(args: list[str], out: str | Path, workers: int | None = None, use_cache: bool = True, min_change_pct: float = MIN_CHANGE_PCT,
            progress: bool = True, op_deltas: bool = True, group_by: str = "replicate",
            groups: list[tuple[str, list[str]]] | None = None, noise: str | None = None) -> dict[str, Any]:
    """Compare runs (the first arm is the baseline); write compare.json, noise.json (with replicates),
    tables/, plots/, compare.html into `out`; return the result dict.

    `groups`: explicit arms [(label, [run, ...]), ...] instead of `args`; `noise`: a calibration
    (noise.load_noise) for arms of one run each."""
    from ..analysis.hta.diff import trace_diff
    from .deltas import top_changes
    from .noise import NoiseError, load_noise, write_noise
    from .outputs import write_outputs

    if not (isinstance(min_change_pct, (int, float)) and math.isfinite(min_change_pct) and min_change_pct >= 0):
        raise CompareError(f"--min-change-pct {min_change_pct}: must be a finite percentage of 0 or more (default {MIN_CHANGE_PCT})")
    try:
        calibration = load_noise(noise) if noise is not None else None
    except NoiseError as exc:
        raise CompareError(str(exc)) from None
    explicit = None
    if groups and args:
        raise CompareError("give the runs either as arguments or in --group LABEL=RUN,RUN..., not both")
    given = [(label, list(paths)) for label, paths in groups] if groups else [(None, list(args))]
    if sum(len(p) for _, p in given) < 2:
        raise CompareError("compare needs at least two runs: a baseline, then one or more runs to compare with it "
                           "(or two or more replicates of one arm, to measure the run-to-run noise)")
    check_dirs([a for _, paths in given for a in paths])
    given, warnings = distinct(given)  # one run given twice is one run
    if groups:
        args, explicit, start = [], [], 0
        for label, paths in given:
            explicit.append((label, list(range(start, start + len(paths)))))
            args += paths
            start += len(paths)
    else:
        args = given[0][1]
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CompareError(f"cannot create the output folder {out} ({exc.strerror or exc})") from None
    resolved: list[Resolved] = resolve(args, out, workers=workers, use_cache=use_cache, progress=progress)
    series = [load_series(r.label, r.analysis_dir) for r in resolved]
    arms = make_arms(series, resolved, group_by, explicit)
    if len(arms) == 1 and len(arms[0].members) < 2:
        raise CompareError("compare needs at least two arms, or one arm of two or more replicates")
    series = _like_with_like(series, resolved, warnings)
    arrays = [_arrays(s) for s in series]
    labels = [a.label for a in arms]
    mixed_warnings, mixed = mixed_specs(arms, series)
    warnings += mixed_warnings
    pool = [k for k in range(len(arms)) if k not in mixed]
    metrics = {m: MetricRuns(m, [[arrays[i][m] for i in a.used] for a in arms], labels, calibration, pool) for m in METRICS}
    times = [run_time(s.manifest) for s in series]
    drift = measured_drift(arms, series, arrays, mixed, times, metrics)
    for m, d in drift.items():
        metrics[m].drift = d  # this comparison's own measure of the drift comes before a calibration's
    member_arm = {i: a for a in arms for i in a.members}
    rows = [run_row(s, member_arm[i].label, i in member_arm[i].used, times[i]) for i, s in enumerate(series)]
    arows = [arm_row(a, rows, metrics, k, times) for k, a in enumerate(arms)]
    for a in arms:
        for i, why in a.excluded.items():
            warnings.append(f"{rows[i]['label']}: not used in the comparison: {why}")
    warnings += hardware_warnings(arms, series)
    deltas: list[dict] = []
    op_tables = {}
    op_summary = []
    first = [a.used[0] if a.used else a.members[0] for a in arms]
    for k in range(1, len(arms)):
        d = arm_deltas(metrics, arms, arows, k, min_change_pct, times)
        deltas.extend(d)
        arows[k]["vs_baseline"] = arm_verdict(d)
        if not op_deltas:
            continue
        rb, rt = resolved[first[0]], resolved[first[k]]
        if rb.trace_file is None or rt.trace_file is None:
            warnings.append(f"{arms[k].label}: no trace to compare operators with {arms[0].label}")
            continue
        if progress:
            print(f"hpcprof: operator and kernel deltas {rb.label} -> {rt.label} (HTA TraceDiff)", file=sys.stderr)
        try:
            diff = trace_diff(rb.trace_file, rt.trace_file)
        except Exception as exc:  # HTA rejects odd traces in many ways; keep the rest of the comparison
            warnings.append(f"{arms[k].label}: operator/kernel deltas skipped ({type(exc).__name__}: {exc})")
            continue
        op_tables[arms[k].label] = diff
        op_summary.append({"arm": arms[k].label, "baseline": arms[0].label, "run": rt.label, "base_run": rb.label,
                           "base_trace": str(rb.trace_file), "trace": str(rt.trace_file), **top_changes(diff)})
    arows[0]["vs_baseline"] = None
    for s in series:
        for w in s.summary.get("warnings") or []:
            if "distributedInfo" in w:
                warnings.append(f"{s.label}: {w}")
    noise_used = {m: dataclasses.replace(mr.noise, drift=mr.drift).as_dict() for m, mr in metrics.items() if mr.noise is not None}
    result: dict[str, Any] = {
        "baseline": arows[0]["label"],
        "min_change_pct": min_change_pct,
        "group_by": "--group" if explicit else group_by,
        "noise": noise_used or None,
        "arms": arows,
        "runs": rows,
        "deltas": deltas,
        "op_deltas": op_summary,
        "warnings": warnings,
    }
    measured = {m: dataclasses.replace(mr.noise, drift=drift.get(m)) for m, mr in metrics.items()
                if mr.noise is not None and mr.noise.origin == "replicates"}
    if measured:
        measured_arms = [{"label": a.label, "runs": [rows[i]["label"] for i in a.used]} for k, a in enumerate(arms)
                         if k in pool and len(a.used) >= 2]  # the runs the spread was measured on
        result["noise_file"] = str(write_noise(out, measured, measured_arms,
                                               {"device": arows[0]["device"], "ranks": arows[0]["ranks"],
                                                "hosts": sorted({h for s in series for h in s.manifest.get("nodes") or []})}))
    else:
        (out / "noise.json").unlink(missing_ok=True)  # from an earlier comparison into this folder: not this one's
    return write_outputs(out, result, series, op_tables)
