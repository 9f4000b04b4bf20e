"""plots/: which charts are drawn from the reduce, and the processes that draw them.

The drawing itself is in plots.py (matplotlib). This module does not import it: importing
matplotlib and rendering take about 1 s each at 16 ranks, so :class:`Charts` starts forked
processes that import it while the reduce runs, and draws there, overlapping the reduce's own work
and each other.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..reduce.crossrank import Reduced
from .layout import AnalysisDir


def _draw(chart: str, *args) -> None:
    from . import plots

    getattr(plots, chart)(*args)


def _import_plots() -> None:
    from . import plots  # noqa: F401  (matplotlib's import is about 1 s)


class Charts:
    """Draws the PNG charts in forked processes started when the reduce begins (see the module
    docstring). Where processes cannot be started, draws here. `wait()` raises what a chart raised."""

    def __init__(self) -> None:
        self.pool = None
        self.futs: list = []
        n = min(2, os.cpu_count() or 1)
        if n > 1 and "fork" in mp.get_all_start_methods():
            try:
                self.pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork"))
                self.futs = [self.pool.submit(_import_plots) for _ in range(n)]  # start them now
            except OSError:
                self.pool = None

    def draw(self, chart: str, *args) -> None:
        if self.pool is not None:
            self.futs.append(self.pool.submit(_draw, chart, *args))
        else:
            _draw(chart, *args)

    def wait(self) -> None:
        futs, self.futs = self.futs, []
        pool, self.pool = self.pool, None
        try:
            for f in futs:
                f.result()
        finally:
            if pool is not None:
                pool.shutdown()


def draw_charts(charts: Charts, red: Reduced, out: AnalysisDir) -> dict[str, Path]:
    """Start drawing every chart of the reduce; return chart key -> PNG path (drawn once charts.wait() returns)."""
    plots = {}
    nodes = red.nodes
    flagged = {s["rank"] for s in red.stragglers}
    plots["stragglers"] = out.plot("stragglers")
    charts.draw("straggler_chart", red.waits_per_step, flagged, nodes, plots["stragglers"])
    plots["idle"] = out.plot("idle")
    charts.draw("idle_chart", red.per_rank, red.idle, red.steps_trace, nodes, plots["idle"])
    plots["step_heatmap"] = out.plot("step_heatmap")
    records = red.steps.records
    if not records.empty:
        charts.draw("step_heatmap", records.assign(step_ms=records["step_s"] * 1e3), "step_ms", "steps/*.jsonl, every step", nodes, plots["step_heatmap"])
    else:
        charts.draw("step_heatmap", red.steps_trace, "dur_ms", "trace ProfilerStep durations", nodes, plots["step_heatmap"])
    plots["overlap"] = out.plot("overlap")
    charts.draw("overlap_chart", red.per_rank, nodes, plots["overlap"])
    plots["kernel_types"] = out.plot("kernel_types")
    charts.draw("kernel_chart", red.kernel_breakdown, plots["kernel_types"])
    return plots
