"""plots/: which charts are drawn from the reduce, and the processes that draw them.

The drawing itself is in plots.py (matplotlib, charts saved with `savefig`). This module does not
import it: importing matplotlib and drawing the charts run in ONE forked process started when the
reduce begins; it imports matplotlib while the reduce runs, draws the charts of per-rank numbers as
soon as the reduce has them (chart_plan.EARLY), and the others while the parent writes the merged
timeline and the tables. One process, not two: a second one would import matplotlib and warm its
font caches again, while on two cores the parent's writing already fills the other core
(benchmarks/README.md).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
from pathlib import Path

from ..pool import WorkerPool, stop_pool
from ..reduce.crossrank import Reduced
from ..reduce.memory_view import memory_view
from ..reduce.whatif import NOISE_FLOOR_MS, REL_THRESHOLD
from .chart_plan import ORDER
from ..layout import AnalysisDir


def _draw(chart: str, *args) -> None:
    from . import plots

    getattr(plots, chart)(*args)


def _chart_worker_init() -> None:
    """The executors' worker_init (dies with its parent, ignores SIGINT), and the objects inherited
    from the parent left out of the garbage collector's passes: collecting them would touch (and so
    copy) the parent's pages in the chart process."""
    import gc

    from ..pool import worker_init

    gc.freeze()
    worker_init()


def _import_plots() -> None:
    """Import matplotlib and the drawing module in the chart process (started early, so that the
    import runs while the parent reduces)."""
    importlib.import_module(f"{__package__}.plots")


class Charts:
    """Draws the PNG charts in a forked process started when the reduce begins (see the module
    docstring). With one core, or where a process cannot be started, draws here. `wait()` raises
    what a chart raised."""

    def __init__(self) -> None:
        self.pool = None
        self.futs: list = []
        if (os.cpu_count() or 1) > 1 and "fork" in mp.get_all_start_methods():
            try:
                self.pool = WorkerPool(max_workers=1, mp_context=mp.get_context("fork"),
                                       initializer=_chart_worker_init)
                self.futs = [self.pool.submit(_import_plots)]  # start it now
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
        except BaseException:
            if pool is not None:
                stop_pool(pool)
            raise
        if pool is not None:
            pool.shutdown()

    def stop(self) -> None:
        """Stop drawing now (the analysis failed or was interrupted)."""
        pool, self.pool, self.futs = self.pool, None, []
        if pool is not None:
            stop_pool(pool)


def draw_charts(charts: Charts, red: Reduced, out: AnalysisDir, views: dict, omitted: dict[str, str],
                keys=ORDER) -> dict[str, Path]:
    """Start drawing every chart of `keys` that has something to show (`omitted`: chart_plan.nothing_to_show);
    return chart key -> PNG path (drawn once charts.wait() returns). `views`: the operator and
    launch tables (reduce/views.py). `red`: the reduce's result, or for chart_plan.EARLY charts only
    its RankNumbers (reduce/crossrank.py)."""
    plots: dict[str, Path] = {}
    nodes = red.nodes

    def want(key: str) -> bool:
        if key in omitted or key not in keys:
            return False
        plots[key] = out.plot(key)
        return True

    if want("stragglers"):
        threshold = red.stragglers[0]["threshold_ms"] if red.stragglers and "threshold_ms" in red.stragglers[0] else \
            max(NOISE_FLOOR_MS, REL_THRESHOLD * (red.steps.median_ms or 0.0))
        charts.draw("straggler_chart", red.waits_per_step, red.stragglers, threshold, nodes, plots["stragglers"])
    if want("idle"):
        charts.draw("idle_chart", red.per_rank, red.idle, red.steps_trace, nodes, plots["idle"])
    if want("step_heatmap"):
        records = red.throughput_steps if red.throughput_steps is not None and not red.throughput_steps.empty else red.steps.records
        if not records.empty:
            charts.draw("step_heatmap", records.assign(step_ms=records["step_s"] * 1e3), "step_ms", "steps/*.jsonl, every step", nodes, plots["step_heatmap"])
        else:
            charts.draw("step_heatmap", red.steps_trace.assign(profiled=True), "dur_ms", "trace ProfilerStep durations", nodes, plots["step_heatmap"])
    if want("overlap"):
        charts.draw("overlap_chart", red.per_rank, nodes, plots["overlap"])
    if want("kernel_types"):
        charts.draw("kernel_chart", red.kernel_breakdown, plots["kernel_types"])
    if want("operators"):
        charts.draw("operators_chart", views["operators"], plots["operators"])
    if want("launches"):
        charts.draw("launch_chart", views["launch_summary"], nodes, plots["launches"])
    if want("critical_path"):
        charts.draw("critical_path_chart", red.critical_path.links, nodes, plots["critical_path"])
    if want("efficiency"):
        charts.draw("efficiency_chart", red.op_efficiency_table, plots["efficiency"])
    if "memory" in keys or "memory_ranks" in keys:
        mem = memory_view(red.metas)
        differs = [d["rank"] for d in mem["across_ranks"]["differs"]]
        for key, chart in (("memory", "memory_chart"), ("memory_ranks", "memory_ranks_chart")):
            if want(key):
                charts.draw(chart, mem["per_rank"], differs, plots[key])
    return plots
