"""analyze(): the orchestrator. Each step is one call into the folder that owns it:

  decode.load.discover_traces -> memo.memo_hit (outputs still current? return them)
  -> executors.run_map (ranks.mapper.analyze_rank per trace, local pool or SLURM array)
  -> ranks.select.select_ranks -> reduce.crossrank.reduce_ranks
  -> outputs: charts (drawn in a process while the rest goes on: those of per-rank numbers from
     before the reduce's what-if replay on), tables, summary.json, report.html
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterable

from ..hta_release import require_hta
from ..rundir import RunDir, RunDirError, rank_from_name
from ..rundir import manifest as run_manifest
from ..rundir.flight_recorder import dump_folder, fr_verdict, read_dumps
from ..rundir.state import run_state
from . import cache, memo
from .hta.frame import fast_path_problem
from .decode.load import discover_traces
from .errors import AnalysisError
from .executors import run_map
from .executors.local import default_workers
from .outputs.chart_plan import EARLY, LATE, in_order, nothing_to_show
from .outputs.charts import Charts, draw_charts
from .outputs.console import console_summary
from .outputs.timeline.critical_lane import critical_path_lane
from .layout import TIMELINE_FILE, AnalysisDir
from .outputs.rounding import round_summary
from .outputs.report import write_report
from .outputs.summary import build_summary, clean, write_summary
from .outputs.tables import output_tables, write_tables
from .outputs.timeline.trace import merged_timeline
from .ranks.result import RankResult
from .captures import analyze_captures, checked_captures, manifest_captures, run_series, summarize_captures
from .outputs.run_timeline import run_timeline_chart
from .ranks.select import select_ranks
from .reduce.crossrank import reduce_ranks
from .reduce.per_rank import checked_rank_entries
from .reduce.views import add_launch_recommendation, rank_views

__all__ = ["AnalysisError", "analyze", "console_summary"]


def analyze(
    path: str | os.PathLike,
    out: str | os.PathLike | None = None,
    workers: int | None = None,
    use_cache: bool = True,
    ranks: Iterable[int] | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    console: bool = False,
    executor: str = "local",
    slurm=None,
    timeline_steps: Iterable[int] | None = None,
    timeline_max_events: int | None = None,
    traces: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Analyse a run directory or a folder of Kineto traces; write outputs; return the summary dict.

    `executor`: "local" (`workers` processes here) or "slurm" (a job array; `slurm`: its
    hpcprof.launch.analysis_array.SlurmOptions, whose map() runs it: executors/__init__.py). `timeline_steps`: the profiled steps of the merged timeline
    (default all); `timeline_max_events`: its size budget (outputs/timeline/trace.py). `traces`:
    the folder of traces to analyse when not the run's traces/ (a capture of a triggered run, with
    the run's manifest and step records). A triggered run's captures are analysed apart, each into
    <out>/capture-<k>/, and summarised in `captures` (hpcprof.analysis.captures)."""
    timeline_steps = sorted({int(s) for s in timeline_steps}) if timeline_steps is not None else None
    src = Path(path)
    if not src.exists():
        raise AnalysisError(f"{src}: no such run directory or trace folder")
    if not src.is_dir():
        raise AnalysisError(f"{src}: expected a run directory (runs/<name>) or a folder of *.json / *.json.gz traces")
    try:
        hta = require_hta()  # before anything is written: without HTA there is nothing to analyse
    except RuntimeError as exc:
        raise AnalysisError(str(exc)) from None
    run = RunDir(src)
    is_run = run.manifest_path.is_file() or run.traces_dir.is_dir()
    manifest: dict = {}
    warnings: list[str] = []
    if run.manifest_path.is_file():
        try:
            manifest, problems = run_manifest.checked(run.read_manifest())
            warnings.extend(problems)
        except (RunDirError, OSError) as exc:
            warnings.append(f"manifest.json unreadable ({exc}); node names come from the traces")
        checked_rank_entries(manifest, warnings)
        checked_captures(manifest, warnings)
    _check_options(src, run, out, ranks, timeline_max_events, traces)
    if out is None and not (src.stat().st_mode & 0o222):
        # a read-only folder of traces (shared data sets): never write into it, even as root
        raise AnalysisError(f"{src} is read-only; pass --out DIR for the analysis outputs")
    out_dir = AnalysisDir(Path(out) if out is not None else run.analysis_dir).create()
    cdir = Path(cache_dir) if cache_dir is not None else out_dir.default_cache

    if is_run and not discover_traces(src):
        state = run_state(src)  # a job still running, never started or crashed early: say so, in one line
        if state.partial:
            raise AnalysisError(_no_trace_yet(state, run))
    if traces is not None and not Path(traces).is_dir():
        raise AnalysisError(f"{traces}: no such folder of traces (its ranks wrote none)")
    files = _traces(Path(traces) if traces is not None else src, ranks, is_run)
    n_workers = workers if workers and workers > 0 else default_workers(len(files))
    # outputs made with another HTA release are not reused (its numbers may differ)
    options = f"timeline={timeline_steps}/{timeline_max_events} hta={hta}"
    digests = None  # hashed before the map only where the memo might serve the outputs (memo.py)
    if use_cache and memo.could_hit(out_dir):
        digests = memo.trace_digests(files, progress=progress)
        hit = memo.memo_hit(out_dir, memo.inputs_key(src, files, digests, ranks, options))
        if hit is not None:
            if console:
                print(console_summary(hit))
            return hit
    cache_write = use_cache
    if use_cache and (why := cache.unwritable(cdir)) is not None:
        warnings.append(f"parse cache {cdir}: not writable ({why}); analysed without the parse cache")
        cache_write = False
    with contextlib.ExitStack() as stack:
        # --no-cache, or a cache that cannot be written: nothing is written there (issue 37, item 18)
        map_dir = cdir if cache_write else stack.enter_context(cache.scratch(out_dir.root))
        captured: dict[int, dict] = {}
        if traces is None and any(c["index"] > 0 for c in manifest_captures(manifest)):
            def analyze_one(src_, out, traces):
                return analyze(src_, out=out, workers=workers, use_cache=use_cache, ranks=ranks, cache_dir=cdir,
                               progress=progress, executor=executor, slurm=slurm, timeline_max_events=timeline_max_events,
                               traces=traces)

            captured = analyze_captures(src, out_dir.root, manifest, analyze_one, warnings)
        if cache_write:
            cache.sweep_stale(cdir)  # what a killed analysis left half written
        results = run_map(executor, files, map_dir, cache_write, workers=n_workers, progress=progress, digests=digests,
                          slurm=slurm, log_dir=out_dir.slurm_logs)
        _changed_while_read(results, warnings)
        key = memo.inputs_key(src, files, memo.read_digests(results, digests), ranks, options)
        keep, world_size = select_ranks(results, manifest, ranks, warnings)
        if not keep and ranks is not None and any(r.ok for r in results):
            found = sorted({r.meta["rank"] for r in results if r.ok})
            raise AnalysisError(f"--ranks {' '.join(map(str, sorted(set(ranks))))}: no such rank in the traces of {src} "
                                f"(ranks found: {', '.join(map(str, found))})")
        if not keep:
            raise AnalysisError("nothing could be analysed:\n  " + "\n  ".join(warnings or ["no usable trace"]))
        if any(r.meta.get("hta_loader") == "hta" for r in keep.values()) and (why := fast_path_problem()) is not None:
            warnings.append(why)  # one line for the run: every rank's reason is the same

        summary = _reduce_and_write(src, out_dir, keep, manifest, world_size, warnings, timeline_steps, timeline_max_events,
                                    captured=captured if traces is None else None, progress=progress)
    summary["cache"] = {
        "dir": str(cdir) if cache_write else None,
        "analysis_version": cache.ANALYSIS_VERSION,
        "parsed_ranks": sorted(r for r, v in keep.items() if not v.cached),
        "cached_ranks": sorted(r for r, v in keep.items() if v.cached),
        "workers": n_workers,
        "executor": executor,
        "outputs_reused": False,
    }
    summary["hta"] = str(hta)  # the HTA release whose analyzers gave the per-rank numbers
    summary["inputs_key"] = key
    summary["outputs"]["files"] = _output_files(out_dir)
    summary = round_summary(clean(summary))
    write_summary(out_dir, summary)
    if console:
        print(console_summary(summary))
    return summary


def _changed_while_read(results: list[RankResult], warnings: list[str]) -> None:
    """Name in one warning the traces whose bytes, as their map task decoded them, differ from those
    hashed before (by the memo, or by the map task to look in the parse cache): replaced or
    rewritten meanwhile. The parse cache and the memo key hold what was decoded, so such a trace put
    back afterwards is never served with the other file's numbers (issue 37, item 10)."""
    changed = sorted(Path(r.path).name for r in results if r.ok and r.hashed not in (None, r.meta.get("digest")))
    if changed:
        warnings.append(f"{', '.join(changed)}: changed while the analysis read {'it' if len(changed) == 1 else 'them'} "
                        "(replaced or rewritten); analysed as read, and these outputs will not be reused for other content")


def _check_options(src: Path, run: RunDir, out, ranks, timeline_max_events, traces=None) -> None:
    """Refuse, before anything is read or written, what would give wrong outputs: negative ranks,
    a timeline budget below 1, and an output folder that is the folder the traces are read from
    (the next analysis took its own merged timeline for a rank's trace)."""
    bad = sorted({int(r) for r in ranks if int(r) < 0}) if ranks is not None else []
    if bad:
        raise AnalysisError(f"--ranks {' '.join(map(str, bad))}: ranks are numbered from 0")
    if timeline_max_events is not None and int(timeline_max_events) < 1:
        raise AnalysisError(f"--timeline-max-events {timeline_max_events}: the merged timeline's budget is a number "
                            "of events >= 1 (default 1000000)")
    if out is not None:
        target = Path(out).resolve()
        inputs = {src.resolve(), run.traces_dir.resolve()} | ({Path(traces).resolve()} if traces is not None else set())
        if target in inputs:
            raise AnalysisError(f"--out {out} is the folder the traces are read from; the outputs would be read as "
                                f"inputs next time: choose another folder (default: {run.analysis_dir})")


def _no_trace_yet(state, run: RunDir) -> str:
    """Why a run directory without a trace cannot be analysed, and whether it ever can."""
    if state.state == "running":
        return (f"{state.describe()}; no trace yet in {run.traces_dir} (each rank writes one after its profiled "
                "steps): analyse again later")
    if state.state == "preempted":
        return (f"{state.describe()}; no trace yet in {run.traces_dir}: analyse once the requeued job has run its "
                "profiled steps")
    if state.state == "no_steps":  # it says why there is nothing, and that nothing will come
        return state.describe()
    # interrupted, failed, stopped, cancelled, never started: its processes are gone, no trace will come
    return (f"{state.describe()}; no trace in {run.traces_dir}: the job ended before its profiled steps, and "
            "nothing of it is running, so none will come (the step records stay in steps/)")


def _dumps_say(src: Path) -> str:
    """What the flight-recorder dumps in `src` (or its nccl-flight-recorder/) say about a hang, as the
    end of the no-trace error: a folder of a hung job's dumps alone still gets the verdict."""
    for folder in (src, dump_folder(src)):
        dumps, _ = read_dumps(folder)
        if dumps:
            found = fr_verdict(dumps)
            said = f"the job hung: {found['text']}" if found else "no process group hung"
            return f"; its flight-recorder dumps ({len(dumps)} rank(s), {folder}) say {said}"
    return ""


def _output_files(out: AnalysisDir) -> list[str]:
    """Every output file written (relative to the output folder); the memo serves the outputs again
    only while all of them are still there."""
    files = [out.report] + sorted(p for d in (out.tables, out.plots) if d.is_dir() for p in d.iterdir() if p.is_file())
    return [str(p.relative_to(out.root)) for p in files if p.is_file()]


def _traces(src: Path, ranks: Iterable[int] | None, is_run: bool) -> list[Path]:
    files = discover_traces(src)
    if not files:
        raise AnalysisError(f"{src}: no trace files (*.json, *.json.gz){' in traces/' if is_run else ''}"
                            + _dumps_say(src))
    if ranks is not None:
        # run directories name traces rank-<r>.*: skip the others before parsing anything
        wanted = {int(x) for x in ranks}
        named = [rank_from_name(p.name) for p in files]
        if all(r is not None for r in named):
            files = [p for p, r in zip(files, named) if r in wanted] or files
    return files


def _reduce_and_write(src: Path, out: AnalysisDir, keep: dict[int, RankResult], manifest: dict, world_size,
                      warnings: list[str], timeline_steps: list[int] | None = None,
                      timeline_max_events: int | None = None, captured: dict[int, dict] | None = None,
                      progress: bool = False) -> dict[str, Any]:
    """Reduce, then write tables, charts and report.html; return the summary (not yet written)."""
    charts = Charts()  # forks now: matplotlib loads while the reduce runs
    try:
        views: dict = {}
        omitted: dict[str, str] = {}
        plots: dict[str, Path] = {}

        def per_rank_charts(numbers) -> None:  # drawn while the what-if replay runs
            views.update(rank_views(keep))
            omitted.update(nothing_to_show(numbers, views, EARLY))
            plots.update(draw_charts(charts, numbers, out, views, omitted, EARLY))

        red = reduce_ranks(src, keep, manifest, warnings, progress=progress, on_ranks=per_rank_charts)
        add_launch_recommendation(views, red.idle, red.per_rank, red.recommendations)
        matching = red.whatif.matching if getattr(red, "whatif", None) is not None else None
        omitted = in_order({**omitted, **nothing_to_show(red, views, LATE)})
        # drawn while the timeline and the tables are written
        plots = in_order({**plots, **draw_charts(charts, red, out, views, omitted, LATE)})
        lanes = [critical_path_lane(red.critical_path.links if red.critical_path is not None else None)]
        clocks, timeline = merged_timeline(out.root, keep, red.nodes, matching, warnings, timeline_steps, timeline_max_events,
                                           progress=progress, lanes=lanes)
        if not timeline.get("path"):  # none written this time: an older one would pass for this analysis'
            (out.root / TIMELINE_FILE).unlink(missing_ok=True)
        tables = {**output_tables(red), **views}
        write_tables(tables, out.tables)  # while the charts are drawn
        summary = build_summary(src, out, red, manifest, world_size, warnings, plots)
        summary.update(clock_alignment=clocks.to_dict(), timeline=timeline, charts_left_out=omitted)
        summary["captures"] = None
        if captured is not None and manifest_captures(manifest):
            summary["captures"] = summarize_captures(RunDir(src), summary, captured, manifest, out.root)
            chart = run_timeline_chart(run_series(RunDir(src)), summary["captures"], out.plots / "run_timeline.png")
            if chart is not None:
                plots["run_timeline"] = chart
                summary["outputs"]["plots"]["run_timeline"] = str(chart)
        charts.wait()  # the report embeds the images
        write_report(out.root, clean(summary), tables, plots, omitted, manifest)
        return summary
    except BaseException:
        charts.stop()  # failed or interrupted: do not wait for the drawings
        raise
    finally:
        charts.wait()
