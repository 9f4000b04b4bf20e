"""The captures of a triggered run (profiler mode "triggered", hpcprof.rank.trigger): each window the
run captured when a rank (or the job) turned slow is analysed apart, like any profiled window, and
compared with the baseline window captured early in the same run.

- The baseline (capture 0, ``traces/``) is the run's main analysis; capture k > 0
  (``traces/capture-<k>/``) gets its own analysis in ``<out>/capture-<k>/`` (summary.json, report,
  tables, charts), with the same run directory's manifest and step records.
- The comparison with the baseline is the job's step time over the capture's active steps against
  the baseline's (reduce.bootstrap.compare_metric, which ``hpcprof.compare`` uses too: a
  within-run bootstrap of the median, both windows being of the same run), from the step
  records, or from the traces' ProfilerStep durations where the run has none.
- The whole run's step time, every step, with the captures marked, is :func:`run_series` (the
  report's first chart, outputs/run_timeline.py).

summary.json ``captures``: one entry per capture, the baseline first (docs/summary-json.md, Capture).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..rundir import RunDir
from .reduce.bootstrap import compare_metric
from .reduce.step_stats import read_step_records, step_seconds, step_time_source


def _is_capture(c) -> bool:
    """A capture entry the analysis can use: an index >= 0 and steps [first, last] (rundir Capture)."""
    def whole(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    steps = c.get("steps") if isinstance(c, dict) else None
    return (isinstance(c, dict) and whole(c.get("index")) and c["index"] >= 0 and isinstance(steps, list)
            and len(steps) == 2 and all(whole(x) for x in steps))


def manifest_captures(manifest: dict) -> list[dict]:
    """The captures a triggered run recorded (manifest ``captures``), by index; [] for other runs.
    Entries that are not captures (`checked_captures`) are left out."""
    caps = manifest.get("captures") if isinstance(manifest.get("captures"), list) else []
    return sorted((c for c in caps if _is_capture(c)), key=lambda c: c["index"])


def checked_captures(manifest: dict, warnings: list[str]) -> None:
    """Name in `warnings`, in one line, the manifest's capture entries that are not captures (an
    index that is not a number >= 0, steps that are not [first, last]); the analysis leaves them
    out. Why: a capture numbered -1 made `analyze` fail whole (issue 37, item 14)."""
    caps = manifest.get("captures") if isinstance(manifest.get("captures"), list) else []
    bad = [c for c in caps if not _is_capture(c)]
    if bad:
        shown = "; ".join(repr(c)[:80] for c in bad[:3]) + ("; ..." if len(bad) > 3 else "")
        warnings.append(f"manifest.json: {len(bad)} captures entr{'ies' if len(bad) != 1 else 'y'} without an index >= 0 and "
                        f"steps [first, last] left out: {shown}")


def run_series(run: RunDir) -> pd.DataFrame:
    """Per step of the whole run: the job's step time (the slowest rank's, on the GPU clock where
    recorded) and each rank's lateness (its own time, step minus blocked time, minus the others'
    median), columns step, job_ms, late_ms_r<rank>. Empty without step records."""
    rec = read_step_records(run)
    if rec.empty or "step_s" not in rec:
        return pd.DataFrame()
    rec = rec.assign(_t=step_seconds(rec, step_time_source(rec)) * 1e3)
    own = (pd.to_numeric(rec["step_s"], errors="coerce") - pd.to_numeric(rec.get("blocked_s", 0.0), errors="coerce").fillna(0.0)) * 1e3
    rec = rec.assign(_own=own)
    job = rec.groupby("step")["_t"].max().rename("job_ms")
    wide = rec.pivot_table(index="step", columns="rank", values="_own", aggfunc="last")
    out = pd.DataFrame(job)
    for r in wide.columns:
        others = wide.drop(columns=r).median(axis=1)
        out[f"late_ms_r{int(r)}"] = wide[r] - others
    return out.reset_index()


def _window_ms(run: RunDir, summary: dict, first: int, last: int, series: pd.DataFrame) -> np.ndarray:
    """The job's step times (ms) over steps first..last: from the step records, else from the
    traces' ProfilerStep durations the analysis tabled (tables/steps_trace.parquet)."""
    if not series.empty:
        s = series[(series["step"] >= first) & (series["step"] <= last)]["job_ms"].dropna()
        if len(s):
            return s.to_numpy(dtype=float)
    tables = Path(summary["outputs"]["tables"])
    path = tables / "steps_trace.parquet"
    if path.is_file():
        t = pd.read_parquet(path)
        if {"step", "dur_ms"} <= set(t.columns):
            return t.groupby("step")["dur_ms"].max().to_numpy(dtype=float)
    return np.array([])


def _finding(summary: dict) -> dict[str, Any]:
    strag = summary.get("stragglers") or []
    return {
        "stragglers": [{"rank": s["rank"], "node": s.get("node"), "cost_ms_per_step": s.get("cost_ms_per_step"),
                        "cause": s.get("cause")} for s in strag[:3]],
        "straggler_slowdown": summary.get("straggler_slowdown"),
        "replay_error_pct": summary.get("replay_error_pct"),
    }


def summarize_captures(run: RunDir, baseline: dict, captured: dict[int, dict], manifest: dict,
                       out_root: Path) -> list[dict]:
    """summary.json's ``captures``: every capture with why it was taken, what its analysis found,
    and its step time against the baseline's."""
    series = run_series(run)
    caps = manifest_captures(manifest)
    base_cap = next((c for c in caps if c["index"] == 0), None)
    base_ms = _window_ms(run, baseline, *(_active(base_cap, manifest) if base_cap else (0, -1)), series) \
        if base_cap else np.array([])
    out = []
    for c in caps:
        k = c["index"]
        summary = baseline if k == 0 else captured.get(k)
        first, last = _active(c, manifest)
        entry = {
            "index": k, "kind": c.get("kind"), "rank": c.get("rank"), "score_ms": c.get("score_ms"),
            "threshold_ms": c.get("threshold_ms"), "window": c.get("window"), "steps": c.get("steps"),
            "active_steps": [first, last], "folder": c.get("folder"),
            "report": (str(Path(summary["outputs"]["report"]).relative_to(out_root)) if summary else None),
            "error": None if summary else "not analysed (its traces are missing or unreadable: see warnings)",
        }
        entry.update(_finding(summary) if summary else {"stragglers": [], "straggler_slowdown": None, "replay_error_pct": None})
        ms = _window_ms(run, summary, first, last, series) if summary else np.array([])
        entry["job_step_ms"] = float(np.median(ms)) if len(ms) else None
        if k == 0 or not len(ms) or not len(base_ms):
            entry["vs_baseline"] = None
        else:
            change = compare_metric("step_ms", base_ms, ms).as_dict()  # both windows of one run: within-run is the right interval
            entry["vs_baseline"] = {k: change[k] for k in ("metric", "base", "value", "change_pct", "ci_pct", "verdict")}
        out.append(entry)
    return out


def _active(capture: dict, manifest: dict) -> tuple[int, int]:
    """The active (recorded) steps of a capture: its steps after the warm-up."""
    first, last = capture["steps"]
    warmup = int(((manifest.get("spec") or {}).get("profiler") or {}).get("warmup", 0) or 0)
    return first + warmup, last


def analyze_captures(src: Path, out_root: Path, manifest: dict, analyze_one: Callable[..., dict],
                     warnings: list[str]) -> dict[int, dict]:
    """Analyse every capture k > 0 into out_root/capture-<k>/ (`analyze_one(src, out=..., traces=...)`);
    {k: its summary}. A capture whose analysis fails, whatever the error (its folder missing: a rank
    died during the capture), is named in `warnings` in one line, the others and the baseline go on
    (issue 37, item 14)."""
    from .errors import AnalysisError

    run = RunDir(src)
    done = {}
    for c in manifest_captures(manifest):
        k = c["index"]
        if k == 0:
            continue
        folder = run.capture_dir(k)
        try:
            done[k] = analyze_one(src, out=out_root / f"capture-{k}", traces=folder)
        except AnalysisError as exc:
            warnings.append(f"capture {k} ({folder}): not analysed: {' '.join(str(exc).split())}")
        except Exception as exc:  # what the capture's analysis did not foresee: this capture only
            warnings.append(f"capture {k} ({folder}): not analysed: {type(exc).__name__}: {' '.join(str(exc).split())}")
    return done
