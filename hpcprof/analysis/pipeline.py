"""analyze(): discover traces, map every rank in worker processes, reduce the small tables, write outputs."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .cache import ANALYSIS_VERSION
from .load import discover_traces
from .mapper import analyze_rank
from .recommend import recommendations
from .report import write_report
from ..run import RunDir, RunDirError, rank_from_name
from .steps import jsonl_stats, read_steps_jsonl, spread
from .stragglers import analyze_collectives
from .timeline import Intervals

DEFAULT_MAX_WORKERS = 8
# bump when the reduce or the outputs change (the per-rank tables have cache.ANALYSIS_VERSION)
REDUCE_VERSION = 3


class AnalysisError(Exception):
    """Nothing could be analysed (bad path, no readable trace); the message says what to do."""


def default_workers(n_traces: int) -> int:
    return max(1, min(os.cpu_count() or 1, n_traces, DEFAULT_MAX_WORKERS))


def _map(files: list[Path], cache_dir: Path, use_cache: bool, workers: int, progress: bool, digests: dict | None = None) -> list[dict]:
    from tqdm import tqdm

    results: list[dict] = []
    bar = tqdm(total=len(files), desc="hpcprof: parsing traces", unit="rank", disable=not progress, file=sys.stderr)
    if workers <= 1 or len(files) <= 1:
        for f in files:
            results.append(analyze_rank(f, cache_dir, use_cache, digest=(digests or {}).get(f)))
            bar.update()
    else:
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
            futs = {ex.submit(analyze_rank, f, cache_dir, use_cache, (digests or {}).get(f)): f for f in files}
            for fut in as_completed(futs):
                try:
                    results.append(fut.result())
                except Exception as exc:  # a worker crash must not lose the other ranks
                    results.append({"ok": False, "path": str(futs[fut]), "error": f"{futs[fut].name}: analysis failed ({type(exc).__name__}: {exc})"})
                bar.update()
    bar.close()
    return sorted(results, key=lambda r: r["path"])


def _select(results: list[dict], manifest: dict, ranks: Iterable[int] | None, warnings: list[str]) -> dict[int, dict]:
    """Bad files, duplicate ranks and traces from another job become warnings; the rest is kept."""
    good = []
    for r in results:
        if r["ok"]:
            good.append(r)
        else:
            warnings.append(f"skipped {r['error']}")
    for r in good:
        warnings.extend(r["meta"].get("warnings", []))
    # world size: the manifest's, else the most common among traces
    ws_counts = Counter(r["meta"]["world_size"] for r in good if r["meta"]["world_size"] is not None)
    world_size = manifest.get("world_size") or (ws_counts.most_common(1)[0][0] if ws_counts else None)
    keep: dict[int, dict] = {}
    for r in good:
        m = r["meta"]
        name = Path(r["path"]).name
        if world_size is not None and m["world_size"] is not None and m["world_size"] != world_size:
            warnings.append(
                f"skipped {name} (rank {m['rank']}): world size {m['world_size']} differs from the job's {world_size}; "
                "trace from a different job? (remove it from the folder)"
            )
            continue
        if m["rank"] in keep:
            warnings.append(
                f"skipped {name}: duplicate rank {m['rank']} (already analysed from {Path(keep[m['rank']]['path']).name}); "
                "keep one trace per rank in the folder"
            )
            continue
        keep[m["rank"]] = r
    if ranks is not None:
        wanted = set(int(x) for x in ranks)
        missing = wanted - set(keep)
        if missing:
            warnings.append(f"requested ranks not found: {sorted(missing)}")
        keep = {k: v for k, v in keep.items() if k in wanted}
    if world_size and keep and len(keep) < world_size and ranks is None:
        warnings.append(f"{len(keep)} of {world_size} ranks analysed; cross-rank results cover only these ranks")
    return dict(sorted(keep.items())), world_size


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
) -> dict[str, Any]:
    """Analyse a run directory or a folder of Kineto traces; write outputs; return the summary dict."""
    src = Path(path)
    if not src.exists():
        raise AnalysisError(f"{src}: no such run directory or trace folder")
    if not src.is_dir():
        raise AnalysisError(f"{src}: expected a run directory (runs/<name>) or a folder of *.json / *.json.gz traces")
    run = RunDir(src)
    is_run = run.manifest_path.is_file() or run.traces_dir.is_dir()
    manifest: dict = {}
    warnings: list[str] = []
    if run.manifest_path.is_file():
        try:
            manifest = run.read_manifest()
        except (RunDirError, OSError) as exc:
            warnings.append(f"manifest.json unreadable ({exc}); node names come from the traces")
    if out is None and not (src.stat().st_mode & 0o222):
        # a read-only folder of traces (shared data sets): never write into it, even as root
        raise AnalysisError(f"{src} is read-only; pass --out DIR for the analysis outputs")
    out_dir = Path(out) if out is not None else src / "analysis"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "tables").mkdir(exist_ok=True)
        (out_dir / "plots").mkdir(exist_ok=True)
    except OSError as exc:
        raise AnalysisError(f"cannot write the analysis to {out_dir} ({exc.strerror}); pass --out DIR") from None
    cdir = Path(cache_dir) if cache_dir is not None else out_dir / ".cache"

    files = discover_traces(src)
    if not files:
        raise AnalysisError(f"{src}: no trace files (*.json, *.json.gz){' in traces/' if is_run else ''}")
    if ranks is not None:
        # run directories name traces rank-<r>.*: skip the others before parsing anything
        wanted = {int(x) for x in ranks}
        named = [rank_from_name(p.name) for p in files]
        if all(r is not None for r in named):
            files = [p for p, r in zip(files, named) if r in wanted] or files
    n_workers = workers if workers and workers > 0 else default_workers(len(files))
    # whole-analysis memo: same trace bytes, steps files, manifest, options and ANALYSIS_VERSION ->
    # the outputs already on disk are current; return them without mapping, reducing or plotting
    digests, key = _inputs_key(src, files, ranks)
    if use_cache:
        hit = _memo_hit(out_dir, key)
        if hit is not None:
            if console:
                print(console_summary(hit))
            return hit
    if executor == "slurm":  # the map as a SLURM job array (hpcprof.analysis.array); slurm: SlurmOptions
        from .array import map_on_slurm

        results = map_on_slurm(files, cdir, use_cache, slurm, log_dir=out_dir / "slurm-logs", progress=progress)
    elif executor == "local":
        results = _map(files, cdir, use_cache, n_workers, progress, digests)
    else:
        raise AnalysisError(f"executor {executor!r}: expected 'local' (worker processes here) or 'slurm' (a job array)")
    keep, world_size = _select(results, manifest, ranks, warnings)
    if not keep:
        raise AnalysisError("nothing could be analysed:\n  " + "\n  ".join(warnings or ["no usable trace"]))

    summary = reduce(src, out_dir, keep, manifest, world_size, warnings)
    summary["cache"] = {
        "dir": str(cdir),
        "analysis_version": ANALYSIS_VERSION,
        "parsed_ranks": sorted(r for r, v in keep.items() if not v["cached"]),
        "cached_ranks": sorted(r for r, v in keep.items() if v["cached"]),
        "workers": n_workers,
        "executor": executor,
        "outputs_reused": False,
    }
    summary["inputs_key"] = key
    (out_dir / "summary.json").write_text(json.dumps(_clean(summary), indent=2))
    if console:
        print(console_summary(summary))
    return _clean(summary)


def _inputs_key(src: Path, files: list[Path], ranks) -> tuple[dict, str]:
    import hashlib

    from .load import file_digest

    def digest(f: Path) -> str:
        try:
            return file_digest(f)
        except OSError:
            return "unreadable"

    # hashlib releases the GIL on large blocks: hash the files on all cores
    with ThreadPoolExecutor(max_workers=max(1, min(len(files), os.cpu_count() or 1))) as pool:
        digests = dict(zip(files, pool.map(digest, files)))
    parts = [f"v{ANALYSIS_VERSION}", f"r{REDUCE_VERSION}", f"ranks={sorted(ranks) if ranks is not None else None}"]
    parts += [f"{f.name}:{digests[f]}" for f in files]
    run = RunDir(src)
    extra = [run.steps_path(r) for r in run.step_ranks()]
    for p in extra + [run.manifest_path]:
        if p.is_file():
            st = p.stat()
            parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    return {f: d for f, d in digests.items() if d != "unreadable"}, hashlib.blake2b("\n".join(parts).encode(), digest_size=20).hexdigest()


def _memo_hit(out_dir: Path, key: str) -> dict | None:
    try:
        s = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if s.get("inputs_key") != key or not (out_dir / "report.html").is_file():
        return None
    c = s.setdefault("cache", {})
    c["cached_ranks"] = sorted(set(c.get("cached_ranks", [])) | set(c.get("parsed_ranks", [])))
    c["parsed_ranks"] = []
    c["outputs_reused"] = True
    return s


def _clean(o):
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating, float)):
        return None if math.isnan(float(o)) or math.isinf(float(o)) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return o


def _read(keep: dict[int, dict], name: str) -> pd.DataFrame:
    frames = []
    for r, v in keep.items():
        p = v["tables"].get(name)
        if p:
            df = pd.read_parquet(p)
            df["rank"] = r
            frames.append(df)
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _write(df: pd.DataFrame, tables: Path, name: str) -> None:
    df.to_csv(tables / f"{name}.csv", index=False)
    d = df.copy()
    for c in d.columns:
        if d[c].dtype == object:
            d[c] = d[c].astype(str)
    d.to_parquet(tables / f"{name}.parquet", index=False)


def node_capacity(manifest: dict, device: str) -> dict:
    """Per node, how many ranks can run at once: one per GPU on GPU runs (left empty: the default);
    on CPU runs min(ranks, cores / threads per rank) from the manifest (node_cpus, cpu_threads).
    Nodes without that information are taken as one runner per rank."""
    if device == "cuda":
        return {}
    per_node: dict = {}
    for e in manifest.get("ranks", []) or []:
        if isinstance(e, dict) and e.get("node_cpus") and e.get("cpu_threads"):
            per_node.setdefault(e.get("node"), []).append((int(e["node_cpus"]), int(e["cpu_threads"])))
    out = {}
    for node, vals in per_node.items():
        cpus = max(c for c, _ in vals)
        threads = sorted(t for _, t in vals)[len(vals) // 2]
        out[node] = max(1.0, cpus / max(threads, 1))
    return out


def _draw(chart: str, *args) -> None:
    from . import plots

    getattr(plots, chart)(*args)


def _import_plots() -> None:
    from . import plots  # noqa: F401  (matplotlib's import is about 1 s)


class _Charts:
    """Draws the PNG charts in forked processes started when the reduce begins, so that importing
    matplotlib and rendering (each about 1 s at 16 ranks) overlap with the reduce's own work and
    with each other. Where processes cannot be started, draws here. `wait()` raises what a chart
    raised."""

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


def reduce(src: Path, out: Path, keep: dict[int, dict], manifest: dict, world_size, warnings: list[str]) -> dict:
    charts = _Charts()
    try:
        return _reduce(src, out, keep, manifest, world_size, warnings, charts)
    finally:
        charts.wait()


def _reduce(src: Path, out: Path, keep: dict[int, dict], manifest: dict, world_size, warnings: list[str], charts: "_Charts") -> dict:
    metas = {r: v["meta"] for r, v in keep.items()}
    nodes = {}
    for e in manifest.get("ranks", []) or []:
        if isinstance(e, dict) and "rank" in e:
            nodes[int(e["rank"])] = e.get("node")
    for r, m in metas.items():
        nodes.setdefault(r, m.get("host"))
    device = "cuda" if any(m["device"] == "cuda" for m in metas.values()) else "cpu"

    steps_trace = _read(keep, "steps")
    colls = _read(keep, "collectives")
    idle = _read(keep, "idle")
    ktype = _read(keep, "kernel_type")
    ktop = _read(keep, "kernels_top")
    kall = _read(keep, "kernels_all")
    busy = {}
    for r, v in keep.items():
        p = v["tables"].get("busy")
        if p:
            b = pd.read_parquet(p)
            busy[r] = Intervals(b["start_us"].to_numpy(), b["end_us"].to_numpy())

    jsonl = read_steps_jsonl(RunDir(src))
    if not jsonl.empty:
        jsonl = jsonl[jsonl["rank"].isin(list(keep))]
    jstats = jsonl_stats(jsonl)
    sp = spread(jstats) if not jstats.empty else {}
    if not sp and not steps_trace.empty:
        tstats = steps_trace.groupby("rank")["dur_ms"].median().rename("step_median_ms").reset_index()
        sp = spread(tstats)
    step_ms = sp.get("median_of_rank_medians_ms")

    # per rank
    rows = []
    for r, m in metas.items():
        t = m.get("temporal") or {}
        st = steps_trace[steps_trace["rank"] == r] if not steps_trace.empty else pd.DataFrame()
        js = jstats[jstats["rank"] == r] if not jstats.empty else pd.DataFrame()
        step_time = float(js["step_median_ms"].iloc[0]) if not js.empty else (float(st["dur_ms"].median()) if not st.empty else None)
        rows.append(
            {
                "rank": r,
                "node": nodes.get(r),
                "file": m["file"],
                "step_time_ms": step_time,
                "trace_step_time_ms": float(st["dur_ms"].median()) if not st.empty else None,
                "profiled_steps": int(len(st)),
                "idle_pct": t.get("idle_time_pctg"),
                "compute_pct": t.get("compute_time_pctg"),
                "non_compute_pct": t.get("non_compute_time_pctg"),
                "comm_comp_overlap_pct": m.get("overlap_pct"),
                "idle_time_us": t.get("idle_time(us)"),
                "compute_time_us": t.get("compute_time(us)"),
                "non_compute_time_us": t.get("non_compute_time(us)"),
                "kernel_time_us": t.get("kernel_time(us)"),
                "host_data_loading_pct": float(100 * st["data_loading_ms"].sum() / st["dur_ms"].sum()) if not st.empty and st["dur_ms"].sum() else None,
                "host_gap_pct": float(100 * st["host_gap_ms"].sum() / st["dur_ms"].sum()) if not st.empty and st["dur_ms"].sum() else None,
            }
        )
    per_rank = pd.DataFrame(rows)

    # kernel-type breakdown across ranks: HTA sums per-rank kernel-type times, then takes shares
    if not ktype.empty:
        kb = ktype.groupby("kernel_type")["sum"].sum().reset_index().sort_values("sum", ascending=False, ignore_index=True)
        kb["percentage"] = (kb["sum"] / kb["sum"].sum() * 100).round(1)
    else:
        kb = pd.DataFrame(columns=["kernel_type", "sum", "percentage"])

    # top kernels across ranks (from the per-rank full kernel tables)
    if not kall.empty:
        kx = kall.groupby(["kernel_type", "name"]).agg(count=("count", "sum"), sum=("sum", "sum"), max=("max", "max"), min=("min", "min"), ranks=("rank", "nunique")).reset_index()
        kx["mean"] = kx["sum"] / kx["count"]
        kx["pct_of_type"] = 100 * kx["sum"] / kx.groupby("kernel_type")["sum"].transform("sum")
        kx = kx.sort_values("sum", ascending=False, ignore_index=True)
    else:
        kx = pd.DataFrame()

    # stragglers
    hosts = {r: nodes.get(r) for r in metas}
    capacity = node_capacity(manifest, device)
    per_coll, per_step, strag, offsets = analyze_collectives(colls, hosts, step_ms, busy, steps_trace, capacity)
    for s in strag:
        s["node"] = nodes.get(s["rank"])
    if len(metas) < 2:
        warnings.append("only one rank analysed: no cross-rank (straggler) analysis")
    elif per_coll.empty:
        warnings.append("no collectives matched across ranks: straggler analysis skipped")

    recs = recommendations(per_rank, steps_trace, jsonl, kall, kb, strag, metas, device, sp)

    # tables
    tdir = out / "tables"
    tables = {
        "per_rank": per_rank,
        "steps_trace": steps_trace,
        "steps_stats": jstats,
        "kernel_breakdown": kb,
        "kernels_top": ktop,
        "kernels_all": kall,
        "kernels_across_ranks": kx,
        "idle_breakdown": idle,
        "collectives": per_coll,
        "waits_per_step": per_step,
    }
    if not jsonl.empty:
        tables["steps_all"] = jsonl

    # plots
    pdir = out / "plots"
    plots = {}
    flagged = {s["rank"] for s in strag}
    plots["stragglers"] = pdir / "stragglers.png"
    charts.draw("straggler_chart", per_step, flagged, nodes, plots["stragglers"])
    plots["idle"] = pdir / "idle_time.png"
    charts.draw("idle_chart", per_rank, idle, steps_trace, nodes, plots["idle"])
    plots["step_heatmap"] = pdir / "step_time_heatmap.png"
    if not jsonl.empty:
        charts.draw("step_heatmap", jsonl.assign(step_ms=jsonl["step_s"] * 1e3), "step_ms", "steps/*.jsonl, every step", nodes, plots["step_heatmap"])
    else:
        charts.draw("step_heatmap", steps_trace, "dur_ms", "trace ProfilerStep durations", nodes, plots["step_heatmap"])
    plots["overlap"] = pdir / "overlap.png"
    charts.draw("overlap_chart", per_rank, nodes, plots["overlap"])
    plots["kernel_types"] = pdir / "kernel_types.png"
    charts.draw("kernel_chart", kb, plots["kernel_types"])
    # tables while the charts are drawn
    for name, df in tables.items():
        _write(df if df is not None else pd.DataFrame(), tdir, name)

    summary = {
        "run_name": manifest.get("name") or src.resolve().name,
        "source": str(src),
        "world_size": int(world_size) if world_size else len(metas),
        "ranks_analyzed": sorted(metas),
        "device": device,
        "warnings": warnings,
        "per_rank": [
            {k: row[k] for k in ("rank", "node", "step_time_ms", "idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct", "trace_step_time_ms", "host_data_loading_pct", "host_gap_pct", "file")}
            for row in per_rank.to_dict("records")
        ],
        "kernel_breakdown": [
            {"kernel_type": k, "time_us": float(t), "pct": float(p)} for k, t, p in zip(kb["kernel_type"], kb["sum"], kb["percentage"])
        ]
        if device == "cuda"
        else None,
        "stragglers": strag,
        "recommendations": [{"title": r["title"], "evidence": r["evidence"], "score": r["score"]} for r in recs],
        "step_time": sp,
        "clock_offsets_us": {str(k): v for k, v in offsets.items()},
        "collectives_matched": int(len(per_coll)),
        "manifest_drills": manifest.get("drills"),
        "outputs": {
            "report": str(out / "report.html"),
            "tables": str(tdir),
            "plots": {k: str(v) for k, v in plots.items()},
        },
    }
    if device == "cpu":
        warnings.append("CPU-only run: GPU fields (idle/compute/non-compute %, overlap, kernel breakdown) are null because the traces hold no GPU kernels")
    charts.wait()  # the report embeds the images
    write_report(out, _clean(summary), tables, plots)
    return summary


def console_summary(summary: dict) -> str:
    lines = []
    lines.append(f"hpcprof analysis of {summary['source']}: {len(summary['ranks_analyzed'])}/{summary['world_size']} ranks, device {summary['device']}")
    hdr = f"{'rank':>4}  {'node':<14} {'step ms':>9} {'idle %':>7} {'comp %':>7} {'overlap %':>9}"
    lines.append(hdr)

    def f(v, w, d=1):
        return f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>{w}}"

    for r in summary["per_rank"]:
        lines.append(f"{r['rank']:>4}  {str(r['node'] or '?')[:14]:<14} {f(r['step_time_ms'], 9)} {f(r['idle_pct'], 7)} {f(r['compute_pct'], 7)} {f(r['comm_comp_overlap_pct'], 9)}")
    if summary["stragglers"]:
        s = summary["stragglers"][0]
        lines.append(f"top straggler: rank {s['rank']} (node {s['node']}): costs {s['cost_ms_per_step']:.1f} ms/step (others blocked {s.get('blocked_wait_ms_per_step', s['cost_ms_per_step']):.1f} ms); cause {s['cause']}; confidence {s['confidence']}")
    else:
        lines.append("stragglers: none")
    if summary["recommendations"]:
        r = summary["recommendations"][0]
        lines.append(f"top recommendation: {r['title']}\n  evidence: {r['evidence']}")
    if summary["warnings"]:
        lines.append(f"{len(summary['warnings'])} warning(s); first: {summary['warnings'][0]}")
    lines.append(f"report: {summary['outputs']['report']}")
    return "\n".join(lines)
