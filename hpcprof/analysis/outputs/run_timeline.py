"""The whole run at a glance for a triggered run (profiler mode "triggered"): the job's step time at
every step of the run (not only the profiled ones), each rank's lateness under it, and the
captures as shaded spans labelled with why they were taken. A reader sees the slowdown and the
capture that caught it on one chart (the report's first chart)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

CAPTURE = "#d62728"
BASELINE = "#7f7f7f"


def run_timeline_chart(series: pd.DataFrame, captures: list[dict], path: Path) -> Path | None:
    """Draw plots/run_timeline.png; None when the run has no step records to draw."""
    if series is None or series.empty or "job_ms" not in series:
        return None
    from .plots import _legend_right, _save, plt  # matplotlib set up there (Agg, no mathtext)
    from matplotlib.patches import Patch

    late_cols = [c for c in series.columns if c.startswith("late_ms_r")]
    fig, axes = plt.subplots(2, 1, figsize=(11, 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    top, bottom = axes
    top.plot(series["step"], series["job_ms"], color="#1f77b4", lw=1.0, label="job step time")
    top.set_ylabel("step time, ms\n(slowest rank)")
    for c in late_cols:
        bottom.plot(series["step"], series[c], lw=0.9, label=f"rank {c[len('late_ms_r'):]}")
    bottom.axhline(0, color="#999999", lw=0.6)
    bottom.set_ylabel("lateness, ms\n(own time - others')")
    bottom.set_xlabel("step")
    ymax = float(series["job_ms"].max()) if series["job_ms"].notna().any() else 1.0
    for c in captures or []:
        first, last = c.get("steps") or (None, None)
        if first is None:
            continue
        colour = BASELINE if c.get("kind") == "baseline" else CAPTURE
        for ax in axes:
            ax.axvspan(first - 0.5, last + 0.5, color=colour, alpha=0.18, lw=0)
        why = "baseline" if c.get("kind") == "baseline" else (
            f"rank {c.get('rank')} late {c.get('score_ms')} ms" if c.get("kind") == "rank" else "job slower")
        top.annotate(f"capture {c['index']}: {why}", xy=((first + last) / 2, ymax), xytext=(0, 4),
                     textcoords="offset points", ha="center", va="bottom", fontsize=8, color=colour)
        if c.get("window"):
            a, b = c["window"]
            bottom.axvspan(a - 0.5, b + 0.5, color="#ff7f0e", alpha=0.12, lw=0)
    top.set_ylim(0, ymax * 1.15)
    handles = [Patch(color=BASELINE, alpha=0.3, label="baseline capture"), Patch(color=CAPTURE, alpha=0.3, label="capture"),
               Patch(color="#ff7f0e", alpha=0.25, label="window that decided it")]
    _legend_right(top, handles=handles)
    if late_cols:
        _legend_right(bottom)
    top.set_title("The whole run: step time at every step, and what was captured")
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(fig, path)
    return path
