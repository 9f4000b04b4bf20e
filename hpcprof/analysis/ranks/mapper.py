"""The map step: analyse ONE rank's trace alone and write small per-rank tables.

`analyze_rank` is a plain function so a process pool (hpcprof.analysis.executors.local) or a SLURM
array task (hpcprof.launch.analysis_array) can run it. It never looks at other ranks; the reduce reads only
what it writes (the Parquet tables and meta.json of a parse-cache entry, see ranks.result).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import cache
from ..decode.load import TraceError, content_hasher, file_digest, trace_meta
from ..decode.plausible import drop_impossible, dropped_warning
from ..decode.stream import read_event_table
from .categories import CategoryClock
from .comm_kernels import Names
from .gpu_summary import rank_gpu_summary
from .op_efficiency import rank_efficiency
from .kernel_work import kernel_work_table
from .memory_view import gpu_peak_bytes, memory_view
from .operators import operator_table
from .result import RankResult, write_table
from .timeline import CATEGORIES, Intervals, RankTimeline, build_timeline
from .timeline_piece import PIECE, timeline_piece

TABLES = ("steps", "collectives", "busy", "idle", "kernel_type", "kernel_type_hpcprof", "kernels_top", "kernels_all", "operators",
          "launch_stats", "op_efficiency", "kernel_work", PIECE)


def analyze_rank(
    trace_path: str | os.PathLike, cache_dir: str | os.PathLike, use_cache: bool = True, digest: str | None = None
) -> RankResult:
    """Analyse one trace file; return its :class:`RankResult` (meta, table paths, cached or not).

    Bad input never raises: it comes back as ok=False with an `error` naming the file. `digest`
    (the file's content hash) may be passed when the caller has computed it already; it finds the
    cache entry (with `use_cache`, the file is hashed here where it is not given; without, the file
    is read once, by the decode). A parsed rank's entry is keyed by the hash of the bytes the decode
    read, which is `digest` unless the file changed since it was hashed (replaced while `analyze`
    ran): then the result's meta `digest` differs from its `hashed`, and the parse cache never
    holds, under the old content's key, what another content gave (issue 37, item 10).
    """
    trace_path = Path(trace_path)
    if use_cache:
        try:
            digest = digest or file_digest(trace_path)
        except OSError as exc:
            return RankResult.failed(trace_path, f"{trace_path.name}: cannot read file ({exc})")
        hit = cache.lookup(cache_dir, digest)
        if hit is not None:
            return _result(hit, trace_path, cached=True, hashed=digest)
    hashed = digest
    with _gc_paused():
        hasher = content_hasher()
        try:
            # the event table, decoded as a stream for large files (decode/stream.py)
            meta_keys, table, n_events, skipped = read_event_table(trace_path, hasher=hasher)
        except TraceError as exc:
            return RankResult.failed(trace_path, str(exc))
        digest = hasher.hexdigest()  # what was parsed
        table, dropped = drop_impossible(table)
        box = [table]
        del table  # _analyze_doc drops the event table once it has what it needs from it
        try:
            with cache.EntryWriter(cache_dir, digest) as tmp:
                _analyze_doc(trace_path, meta_keys, box, n_events, skipped, digest, tmp, dropped)
        except Exception as exc:  # odd input we did not foresee: this file only, whatever the executor
            return RankResult.failed(trace_path, f"{trace_path.name}: analysis failed ({type(exc).__name__}: {exc})")
    return _result(cache.entry_dir(cache_dir, digest), trace_path, cached=False, hashed=hashed)


def preload() -> None:
    """Do what analyze_rank does once per process on its first parse: import HTA, pyarrow's Parquet
    writer and the HTA stage (hta/analyzers.py, loaded lazily: a map whose ranks are all cached never needs
    it), and look up the installed HTA release (hta/frame.fast_path_problem: importlib.metadata and
    its path scan). For a parent about to fork map workers (executors.local): done there once,
    before the fork, the worker inherits it instead of doing it again in its first rank (the
    parent would do it in its own first rank anyway)."""
    import pyarrow.parquet  # noqa: F401

    from ..hta import analyzers  # noqa: F401
    from ..hta.frame import preload_hta

    preload_hta()


@contextlib.contextmanager
def _gc_paused():
    """Pause Python's cyclic garbage collector while one rank is decoded and analysed.

    Decoding creates about a million objects; the collector would walk all of them again and again
    as they are allocated (most of the decode's time), although the
    decoded records hold no reference cycles and are freed by reference counting. It is switched
    back on afterwards, as it was, and then collects whatever cycles pandas or HTA left behind.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _result(d: Path, trace_path: Path, cached: bool, hashed: str | None) -> RankResult:
    meta = json.loads((d / cache.META).read_text())
    meta["path"] = str(trace_path)  # the same bytes may live under another name
    tables = {n: str(d / f"{n}.parquet") for n in TABLES if (d / f"{n}.parquet").is_file()}
    return RankResult(path=str(trace_path), ok=True, dir=str(d), meta=meta, tables=tables, cached=cached, hashed=hashed)


def _analyze_doc(trace_path: Path, meta_keys: dict, box: list, n_events: int, skipped: int, digest: str, out: Path,
                 dropped: dict[str, int] | None = None) -> None:
    table = box.pop()
    tm = trace_meta(trace_path, meta_keys)
    piece_problem = None
    # the name and category columns factorized once for the piece, the timeline and its comm
    # kernels (each stage made its own before)
    names, cats = (Names.column(table, c, len(table)) for c in ("name", "cat"))
    try:  # the merged timeline's part of this rank (outputs/timeline/trace.py); never costs the rank
        piece, piece_info = timeline_piece(table, names, cats)
        if piece is not None:
            write_table(piece, out / f"{PIECE}.parquet")
        del piece
    except Exception as exc:
        piece_info = {"main_tid": None, "steps": []}
        piece_problem = f"{trace_path.name}: not on the merged timeline ({type(exc).__name__}: {exc})"
    tl = build_timeline(table, names, cats)
    write_table(operator_table(table, cats=cats), out / "operators.parquet")
    warnings = list(tm.warnings) + ([piece_problem] if piece_problem else [])
    name = trace_path.name
    try:  # identical kernels per rank, the slow-GPU comparison's input (ranks/kernel_work.py)
        write_table(kernel_work_table(table, names, cats, tl.comm_rows), out / "kernel_work.parquet")
    except Exception as exc:
        warnings.append(f"{name} (rank {tm.rank}): no kernel comparison across ranks ({type(exc).__name__}: {exc})")
    try:  # FLOPs, TFLOP/s and share of peak of GEMMs, convolutions, attention (ranks/op_efficiency.py)
        eff_table, eff = rank_efficiency(table, names, cats, tm.device_properties, tl.steps)
        write_table(eff_table, out / "op_efficiency.parquet")
    except Exception as exc:
        eff = None
        warnings.append(f"{name} (rank {tm.rank}): no operator efficiency ({type(exc).__name__}: {exc})")
    if skipped:
        warnings.append(f"{name} (rank {tm.rank}): {skipped} entries of traceEvents are not JSON objects and were skipped")
    if dropped:
        warnings.append(dropped_warning(f"{name} (rank {tm.rank})", dropped))

    try:  # the profiler plugin's GPU summary (ranks/gpu_summary.py); never costs the rank
        gsum = rank_gpu_summary(table, tm.device_properties, names, cats)
    except Exception as exc:
        gsum = None
        warnings.append(f"{name} (rank {tm.rank}): no GPU summary ({type(exc).__name__}: {exc})")
    del names, cats
    try:  # the profiler plugin's memory view (ranks/memory_view.py); never costs the rank
        mview = memory_view(table, tm.device_properties)
    except Exception as exc:
        mview = None
        warnings.append(f"{name} (rank {tm.rank}): no memory view ({type(exc).__name__}: {exc})")
    clock, busy = tl.category_clock(), tl.busy()  # each made once, for both tables
    write_table(_steps_table(tl, clock, busy), out / "steps.parquet")
    write_table(_collectives_table(tl, clock), out / "collectives.parquet")

    bs, be = _coalesce(busy.s, busy.e, BUSY_GAP_US)
    write_table(pd.DataFrame({"start_us": bs, "end_us": be}), out / "busy.parquet")

    gpu: dict[str, Any] = {"temporal": None, "overlap_pct": None}
    loader = None
    if not tl.has_gpu and tl.device_kind == "cuda":
        warnings.append(
            f"{name} (rank {tm.rank}): a GPU run (it launches kernels) whose trace holds no GPU kernel activity (taken with "
            "the CUPTI profiler's counter ranges, or with CUDA activities off), so HTA's GPU analyses (temporal, idle-time, "
            "overlap, kernel breakdown) have nothing to measure: their fields are null"
        )
    elif not tl.has_gpu:
        warnings.append(
            f"{name} (rank {tm.rank}): no GPU kernels or other device-stream activity in the trace (CPU-only run, e.g. gloo backend), so HTA's "
            "GPU analyses (temporal, idle-time, overlap, kernel breakdown) have nothing to measure: their fields are null"
        )
    else:
        try:
            from ..hta.analyzers import run_hta_rank

            box = [table]  # HTA's frame consumes the event table (the last step that reads it)
            del table
            h = run_hta_rank(str(trace_path), tm.rank, box, meta_keys, tl.comm_extra_corr)
            loader = h["loader"]
            row = h["temporal"].iloc[0].to_dict()
            gpu["temporal"] = {k: (None if isinstance(v, float) and math.isnan(v) else float(v)) for k, v in row.items() if k != "rank"}
            gpu["overlap_pct"] = h["overlap_pct"]
            if h["overlap_pct"] is None and h.get("ours") is None:
                warnings.append(f"{name} (rank {tm.rank}): no communication kernels, so comm/comp overlap is null")
            for key in ("idle", "kernel_type", "kernels_top", "kernels_all", "launch_stats"):
                df = h[key].copy()
                df["rank"] = tm.rank
                write_table(df, out / f"{key}.parquet")
            # our classes beside HTA's: communication by what the trace says (ranks/comm_kernels.py)
            ours = h.get("ours")
            if ours is not None:
                row = ours["temporal"].iloc[0].to_dict()
                gpu["hpcprof_temporal"] = {k: (None if isinstance(v, float) and math.isnan(v) else float(v)) for k, v in row.items() if k != "rank"}
                gpu["hpcprof_overlap_pct"] = ours["overlap_pct"]
                write_table(ours["kernel_type"].assign(rank=tm.rank), out / "kernel_type_hpcprof.parquet")
        except Exception as exc:  # HTA rejects odd traces in many ways; report, keep the host-side analysis
            warnings.append(f"{name} (rank {tm.rank}): HTA could not analyse this trace ({type(exc).__name__}: {exc}); GPU fields are null")

    total_mem = None
    for dp in tm.device_properties:
        if isinstance(dp, dict) and isinstance(dp.get("totalGlobalMem"), (int, float)):
            total_mem = float(dp["totalGlobalMem"])
            break
    meta = {
        "analysis_version": cache.ANALYSIS_VERSION,
        "digest": digest,
        "file": name,
        "rank": tm.rank,
        "rank_from_trace": tm.rank_from_trace,
        "world_size": tm.world_size,
        "backend": tm.backend,
        "host": tm.host,
        "device": tl.device_kind,
        "device_name": next((dp.get("name") for dp in tm.device_properties if isinstance(dp, dict)), None),
        "gpu_memory_total_bytes": total_mem,
        "gpu_memory_peak_bytes": gpu_peak_bytes(mview),
        "n_events": n_events,
        "hta_loader": loader,
        "hta": cache.hta_key(),
        "timeline": piece_info,
        "comm_reclassified": [{k: (float(v) if k == "time_us" else int(v) if k == "count" else v) for k, v in r.items()}
                              for r in tl.comm_reclassified],
        # the job's own collectives in this trace (None where the trace cannot show them: a GPU run
        # without device activity), and hpcprof's control collectives, never counted among them
        "job_collectives": len(tl.collectives) if tl.has_gpu or tl.device_kind == "cpu" else None,
        "control_collectives": tl.control_collectives,
        "control_left_out": tl.control_left_out,
        "warnings": warnings,
        "gpu_summary": gsum,
        "op_efficiency": eff,
        "memory_view": mview,
        **gpu,
    }
    (out / cache.META).write_text(json.dumps(meta, indent=1))


BUSY_GAP_US = 20.0  # busy intervals closer than this are joined (launch gaps are not "waiting")


def _coalesce(s: np.ndarray, e: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray]:
    if not len(s):
        return s, e
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] - e[:-1] > gap
    idx = np.flatnonzero(new)
    ends = np.append(e[idx[1:] - 1], e[-1])
    return s[idx], ends


def _steps_table(tl: RankTimeline, clock: CategoryClock, busy: Intervals) -> pd.DataFrame:
    cols = ["step", "ts_us", "end_us", "dur_ms"] + [f"{c}_ms" for c in CATEGORIES] + ["comm_ms", "comm_exposed_ms"]
    if not tl.steps:
        return pd.DataFrame({c: pd.Series(dtype="float") for c in cols})
    st = np.array([s[0] for s in tl.steps])
    a = np.array([s[1] for s in tl.steps])
    b = np.array([s[2] for s in tl.steps])
    # the columns gathered in a dict and made a frame once (not inserted one by one: 80 inserts a rank)
    df = {"step": st, "ts_us": a, "end_us": b, "dur_ms": (b - a) / 1e3}
    for k, v in tl.window(a, b).items():
        df[f"{k}_ms"] = v / 1e3
    # time with a collective in flight (GPU: NCCL kernels; CPU: gloo ops), and the part of it not
    # hidden behind useful work (exposed communication, including waiting for other ranks)
    if tl.has_gpu:
        c = tl.gpu_comm
    else:
        c = Intervals([x["arrival_us"] for x in tl.collectives], [x["end_us"] for x in tl.collectives])
    df["comm_ms"] = c.covered(a, b) / 1e3
    exposed = []
    for lo, hi in zip(a, b):
        s_, e_ = np.clip(c.s, lo, hi), np.clip(c.e, lo, hi)
        keep = e_ > s_
        exposed.append(float((e_[keep] - s_[keep]).sum() - busy.covered(s_[keep], e_[keep]).sum()) / 1e3)
    df["comm_exposed_ms"] = exposed
    # the rank's step ends when its host span ends or the device work launched in it ends, whichever
    # is later (the what-if replay of the reduce and the trace drills use the same step end)
    df["device_end_us"] = tl.device_end_in(a, b)
    _cum_columns(df, clock, {"start": a, "stop": np.fmax(b, df["device_end_us"])})
    return pd.DataFrame(df)


def _cum_columns(df: dict, clock: CategoryClock, at: dict) -> None:
    """Add cum_<category>_<name>_ms: time in each cause category up to each instant of `at` (the
    reduce takes differences of two of them: the time in a window; see ranks.categories)."""
    for name, t in at.items():
        for c, v in clock.at(t).items():
            df[f"cum_{c}_{name}_ms"] = v / 1e3


def _collectives_table(tl: RankTimeline, clock: CategoryClock) -> pd.DataFrame:
    cols = ["group", "kind", "name", "seq", "comms_id", "msg_bytes", "comm_reason", "step", "idx", "arrival_us", "end_us", "launch_us",
            "window_start_us", "source", "waited"]
    cats = [f"win_{c}_ms" for c in CATEGORIES]
    text = ("group", "kind", "name", "source", "comms_id", "comm_reason")
    if not tl.collectives:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in text else "bool" if c == "waited" else "float") for c in cols + cats})
    df = pd.DataFrame(tl.collectives).sort_values("arrival_us", kind="stable").reset_index(drop=True)
    for c in ("comms_id", "msg_bytes", "comm_reason"):
        if c not in df:
            df[c] = None
    df["seq"] = pd.to_numeric(df["seq"], errors="coerce")
    df["msg_bytes"] = pd.to_numeric(df["msg_bytes"], errors="coerce")
    df["comms_id"] = df["comms_id"].map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    if tl.steps:
        s_start = np.array([s[1] for s in tl.steps])
        s_end = np.array([s[2] for s in tl.steps])
        s_num = np.array([s[0] for s in tl.steps])
        # a GPU collective belongs to the step that launched it (the device may run behind the host)
        launch = df["launch_us"].to_numpy(float)
        when = np.where(np.isnan(launch), df["arrival_us"].to_numpy(float), launch)
        i = np.searchsorted(s_start, when, side="right") - 1
        inside = (i >= 0) & (when <= s_end[np.maximum(i, 0)])
        df["step"] = np.where(inside, s_num[np.maximum(i, 0)], -1)
    else:
        df["step"] = -1
    df["idx"] = df.groupby(["group", "step", "kind"]).cumcount()
    # window before arrival: since the previous collective on this rank ended (or the step began)
    prev_end = df["end_us"].shift(1)
    if tl.steps:
        step_start = df["step"].map({s[0]: s[1] for s in tl.steps})
        first = df.groupby("step").cumcount().eq(0)
        ws = np.where(prev_end.isna(), step_start.fillna(df["arrival_us"]), prev_end)
        # the first collective of a step looks back across the step boundary to the previous one
        ws = np.where(first & step_start.notna() & prev_end.isna(), step_start, ws)
    else:
        ws = prev_end.fillna(df["arrival_us"]).to_numpy()
    df["window_start_us"] = np.minimum(ws.astype(float), df["arrival_us"].to_numpy())
    out = {c: df[c] for c in cols}  # the rest gathered in a dict, the frame made once
    win = tl.window(df["window_start_us"].to_numpy(), df["arrival_us"].to_numpy())
    for k in CATEGORIES:
        out[f"win_{k}_ms"] = win[k] / 1e3
    _cum_columns(out, clock, {"arrival": df["arrival_us"].to_numpy(float), "end": df["end_us"].to_numpy(float)})
    return pd.DataFrame(out)
