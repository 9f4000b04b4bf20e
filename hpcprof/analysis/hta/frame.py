"""Build HTA's per-rank trace frame from our event table, vectorised, and wrap it in HTA's `Trace`.

HTA 0.5's `parse_trace_file` builds the frame with `json.loads`, `pandas.DataFrame(traceEvents)`
and then several per-row `apply` calls (args extraction, stream normalisation, symbol encoding, the
iteration column), which is most of its load time. This module produces the same frame from the
table `decode/columns.py` already decoded for our timeline: the same rows (events with `dur` and
`cat`, without `cat == "Trace"`), the same index labels and columns, the same values. Every step
is named after the HTA function it replaces. `add_fwd_bwd_links` and the alignment of the trace are
HTA's own functions called on our frame; `transform_correlation_to_index` and the filter of
`align_and_filter_trace` are redone as one vectorised pass each (`_correlation_to_index`,
`_traced_events`: most of their time was pandas merges, label lookups and copies),
which hand the frames they do not assume back to HTA's functions. tests/analysis/test_fast_loader.py
checks the frame column by column (values and dtypes) against HTA's own loader on the real traces
of tests/data; tests/analysis/test_hta_frame_steps.py checks each redone step against HTA's on
generated edge cases; tests/analysis/test_hta_equality.py checks the analyses' numbers against
`TraceAnalysis`.

Only symbol ids differ: HTA numbers symbols in `set` iteration order, which changes with Python's
string hashing from one process to the next; we number them in order of first appearance (cat
column, then name). No analysis depends on the ids, only on the names behind them.

Traces the fast path does not mirror (another HTA version or default parser config, hardware
counter ranges `cuda_profiler_range`, no `args` at all) go through HTA's own loader instead:
`fast_path_problem()` says why.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ...hta_release import require_hta
from ..decode.events import HTA_ARGS, OWN_ARGS

MIRRORED_HTA = "0.5."  # the HTA release whose parse_trace_file this module mirrors
_DROP = ("ph", "id", "bp", "s")
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")


def fast_path_problem(table: pd.DataFrame | None = None) -> str | None:
    """Why HTA's own loader must be used instead of this module (None: the fast path applies)."""
    from hta.configs.parser_config import ParserBackend, ParserConfig

    rel = require_hta()
    if not rel.version.startswith(MIRRORED_HTA):
        return f"{rel} is installed; the fast loader mirrors HTA {MIRRORED_HTA}x, so HTA's own parser reads the traces"
    cfg = ParserConfig.get_default_cfg()  # HTA's public copy of the default configuration
    ours = list(HTA_ARGS)
    theirs = [(a.name, a.raw_name, a.default_value) for a in cfg.get_args()]
    if ours != theirs or cfg.parse_all_args or cfg.parser_backend not in (None, ParserBackend.JSON):
        return "HTA's default parser configuration was changed"
    if table is not None:
        if not table["has_args"].any():
            return "no event has args"
        for col in ("ts", "dur", "cat", "name"):
            if col not in table.columns:
                return f"no event has '{col}'"
        if table["cat"].eq("cuda_profiler_range").any():
            return "the trace holds hardware counter ranges (cuda_profiler_range)"
    return None


def _round_down_time_stamps(df: pd.DataFrame) -> None:
    """hta.common.trace_parser.round_down_time_stamps, vectorised (ceil the start, floor the end)."""
    from hta.configs import env_options

    if df["ts"].dtype != np.dtype("float64") or env_options.disable_ns_rounding():
        return

    def exact(values: pd.Series, fn) -> pd.Series:
        out = fn(values.to_numpy(dtype="float64"))
        if values.isna().any():
            return pd.Series(out, index=values.index)
        return pd.Series(out.astype("int64"), index=values.index)

    end = df["ts"] + df["dur"]
    df["end"] = end
    df["ts"] = exact(df["ts"], np.ceil)
    df["end"] = exact(df["end"], np.floor)
    df["dur"] = df["end"] - df["ts"]


def _normalize_stream(col: pd.Series) -> pd.Series:
    """hta.utils.utils.normalize_gpu_stream_numbers: int(x), or -1 where int() raises ValueError."""
    if col.dtype.kind == "i":
        return col.astype("int64")

    def one(x: Any) -> int:
        try:
            return int(x)
        except ValueError:
            return -1

    return pd.Series([one(x) for x in col.to_numpy(dtype=object)], index=col.index, dtype="int64")


def _compress(df: pd.DataFrame):
    """hta.common.trace_parser._compress_df for HTA's default parser config. The kept rows' cat and
    name become symbol ids before the rows are taken (`_coded_symbols`: no take of the text
    columns), and the integer columns are downcast by their range (`_downcast`)."""
    from hta.common.trace_symbol_table import TraceSymbolTable

    keep = df["dur"].notna() & df["cat"].notna()
    keep &= df["cat"].ne("Trace").fillna(True)
    table = TraceSymbolTable()
    coded = _coded_symbols(df, keep.to_numpy(), table)
    df = df.drop(columns=[c for c in [*_DROP, *(n for n, _ in OWN_ARGS), "has_args"] if c in df.columns])
    df = df.loc[keep]
    # HTA builds each args column with Series.apply over the kept rows; rebuild them from the kept
    # values so that pandas infers the column type from exactly those rows.
    for name, _raw, _default in HTA_ARGS:
        if name not in df.columns:  # a frame of ANALYSIS_COLUMNS only
            continue
        col = df[name]
        if col.dtype == object:
            df[name] = pd.Series(col.tolist(), index=col.index)
    df["stream"] = _normalize_stream(df["stream"])

    if not coded:
        table.add_symbols(pd.unique(pd.concat([df["cat"], df["name"]], ignore_index=True)))
        ids = table.get_sym_id_map()
        for col in ("cat", "name"):
            df[col] = _symbol_ids(df[col], ids)
    for col in df.columns:
        if df[col].dtype.kind == "i":
            df[col] = _downcast(df[col])
    return df, table


def _symbol_ids(col: pd.Series, ids: dict) -> pd.Series:
    """col.map(ids).astype("int64") (HTA's symbol encoding), looked up once per distinct value."""
    if col.isna().any():
        return col.map(ids).astype("int64")
    codes, uniq = pd.factorize(col)
    lut = np.array([ids[u] for u in uniq], dtype=np.int64)
    return pd.Series(lut[codes], index=col.index)


def _coded_symbols(df: pd.DataFrame, keep: np.ndarray, table) -> bool:
    """HTA's symbols (the distinct values of the kept rows' cat, then name, in order of first
    appearance) added to `table`, and cat and name replaced by their ids in every row (those of
    rows not kept are meaningless), from one factorize of each text column; False (nothing done)
    where cat or name is not a text column or a kept row has no name (HTA's NaN symbol)."""
    if not all(isinstance(df[c].dtype, pd.StringDtype) for c in ("cat", "name")):
        return False
    codes, uniq = zip(*(pd.factorize(df[c]) for c in ("cat", "name")))
    kept = [c[keep] for c in codes]
    if (kept[1] < 0).any():
        return False
    table.add_symbols([u for c, us in zip(kept, uniq) for u in us[pd.unique(c)]])
    ids = table.get_sym_id_map()
    for col, c, us in zip(("cat", "name"), codes, uniq):
        lut = np.array([ids.get(u, -1) for u in us] + [-1], dtype=np.int64)  # code -1 (missing): the last
        df[col] = lut[c]
    return True


def _downcast(col: pd.Series) -> pd.Series:
    """pd.to_numeric(col, downcast="integer") of an integer column: the smallest of int8, int16,
    int32 (narrower than col's) that holds its range, else col; what to_numeric's trial casts and
    np.allclose checks decide, from the minimum and maximum."""
    v = col.to_numpy()
    if not v.size:
        return col.astype(np.int8)
    lo, hi = v.min(), v.max()
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if np.dtype(t).itemsize >= v.dtype.itemsize:
            break
        if info.min <= lo and hi <= info.max:
            return pd.Series(v.astype(t), index=col.index, name=col.name)
    return col


def _correlation_to_index(df: pd.DataFrame, symbols) -> pd.DataFrame:
    """hta.common.trace.transform_correlation_to_index, without its merge and label lookups:
    index_correlation is min(correlation, 0), except that each CPU event (HTA's
    CPUOperatorFilter) whose correlation (not -1) some GPU kernel (GPUKernelFilter) has takes the
    index of the last such kernel, and each such kernel the index of the last such CPU event (the
    last of the merge's assignments wins). HTA's own function where the frame's labels are not its
    `index` column, or index and correlation are not integer columns with index no wider, or a
    result does not fit correlation's dtype (pandas refuses or casts HTA's assignment there)."""
    from hta.common.trace import transform_correlation_to_index

    if "correlation" not in df.columns:
        return df
    corr, idx = df["correlation"].to_numpy(), df["index"].to_numpy()
    if corr.dtype.kind != "i" or idx.dtype.kind != "i" or idx.dtype.itemsize > corr.dtype.itemsize \
            or not np.array_equal(idx, df.index.to_numpy()):
        return transform_correlation_to_index(df, symbols)
    linked = corr != -1
    on_gpu = _gpu_rows(df, corr, symbols.get_sym_id_map())
    out = np.minimum(corr, 0).astype(np.int64)
    gpu, cpu = np.flatnonzero(linked & on_gpu), np.flatnonzero(linked & ~on_gpu)
    for dst, src in ((cpu, gpu), (gpu, cpu)):
        pos = _last_with(corr[src], corr[dst])
        hit = pos >= 0
        out[dst[hit]] = idx[src[pos[hit]]]
    info = np.iinfo(corr.dtype)
    if out.size and (out.min() < info.min or out.max() > info.max):
        return transform_correlation_to_index(df, symbols)
    df["index_correlation"] = _downcast(pd.Series(out, index=df.index))
    return df


def _gpu_rows(df: pd.DataFrame, corr: np.ndarray, ids: dict) -> np.ndarray:
    """HTA's GPUKernelFilter on the frame's columns: a kernel (a device stream and a correlation id)
    or a sync event (Event Sync, Context Sync by symbol id; `ids`: the symbol table's id map)."""
    sync = [ids.get("Event Sync", -1), ids.get("Context Sync", -1)]
    return ((df["stream"].to_numpy() >= 0) & (corr >= 0)) | np.isin(df["name"].to_numpy(), sync)


def _last_with(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of `wanted`, the position in `keys` of the last key equal to it, -1 if none."""
    if not keys.size:
        return np.full(wanted.size, -1, dtype=np.intp)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    last = np.append(sk[1:] != sk[:-1], True)  # the last of each run of equal keys
    uk, upos = sk[last], order[last]
    at = np.minimum(np.searchsorted(uk, wanted), uk.size - 1)
    return np.where(uk[at] == wanted, upos[at], -1)


def _traced_events(df: pd.DataFrame, symbols) -> pd.DataFrame | None:
    """The frame that Trace._filter_irrelevant_gpu_kernels(include_last_profiler_step=False) leaves
    of one rank's aligned frame, as one take of rows (HTA takes the CPU
    events and the kernels apart, merges and concatenates them; the labels differ, and hta_trace
    sets them from `index` as after HTA's): the kernels (and sync events) whose correlation some
    CPU event that starts before the last ProfilerStep has, each once per such CPU event and in
    frame order, then those CPU events. None where HTA's own method must run: fewer than two
    ProfilerStep symbols (it keeps the frame and logs why), no kernel or no CPU event kept (its
    concatenation of an empty part), correlation not an integer column."""
    ids = symbols.get_sym_id_map()
    steps = [v for k, v in ids.items() if "ProfilerStep" in k]
    corr = df["correlation"].to_numpy()
    if len(steps) < 2 or corr.dtype.kind != "i":
        return None
    name, ts = df["name"].to_numpy(), df["ts"].to_numpy()
    gpu = _gpu_rows(df, corr, ids)
    step = ~gpu & np.isin(name, steps)
    if not step.any():
        return None
    cpu = np.flatnonzero(~gpu & (ts < ts[step].max()))
    if not cpu.size:
        return None
    keys, count = np.unique(corr[cpu], return_counts=True)
    kernels = np.flatnonzero(gpu)
    at = np.minimum(np.searchsorted(keys, corr[kernels]), keys.size - 1)
    times = np.where(keys[at] == corr[kernels], count[at], 0)
    if not times.any():
        return None
    return df.take(np.concatenate([np.repeat(kernels, times), cpu]))


def _add_iteration(df: pd.DataFrame, table) -> None:
    """hta.common.trace.add_iteration, vectorised with the same rules: a CPU event (stream < 0) takes
    the number of the last ProfilerStep (in trace order) whose [ts, ts + dur) holds its start; a GPU
    event (stream > 0) takes the iteration of the CPU event it is correlated with, -1 if none."""
    sym = table.get_sym_table()
    step_ids = [i for i, s in enumerate(sym) if s.startswith("ProfilerStep")]
    steps = df.loc[df["name"].isin(step_ids), ["ts", "dur", "name"]]
    ts = df["ts"].to_numpy()
    cpu_iter = np.full(len(df), -1.0)
    for s0, d, n in zip(steps["ts"].to_numpy(), steps["dur"].to_numpy(), steps["name"].to_numpy()):
        cpu_iter[(ts >= s0) & (ts < s0 + d)] = int(_STEP.match(sym[n]).group(1))
    stream = df["stream"].to_numpy()
    it = np.where(stream < 0, cpu_iter, np.nan)
    gpu = stream > 0
    if gpu.any():
        corr = df["index_correlation"].to_numpy()
        linked = gpu & (corr > 0)
        pos = df.index.get_indexer(corr[linked])
        if (pos < 0).any():
            raise KeyError("index_correlation points to an event that is not in the frame")
        gpu_iter = np.full(len(df), -1.0)
        gpu_iter[linked] = it[pos]
        it = np.where(gpu, gpu_iter, it)
    df["iteration"] = pd.to_numeric(pd.Series(it, index=df.index), downcast="integer")


ANALYSIS_COLUMNS = ("index", "cat", "name", "ts", "dur", "stream", "correlation", "index_correlation", "end")
"""The columns of HTA's frame that the per-rank analyses read (hta/analyzers.py, hta/breakdown.py,
and HTA's analyzers where those hand a case to them: its idle-time, kernel-type and launch
breakdowns, and the filter of `align_and_filter_trace`)."""


def hta_frame(table: pd.DataFrame | list, columns: tuple[str, ...] | None = None):
    """HTA's per-rank frame and symbol table, as `parse_trace_file` returns them (before the Trace
    aligns and filters it). `table` is not modified; passed as a one-element list, it is taken out
    of the list and consumed (changed in place and freed as the frame is built: no copy of a 1 GB
    rank's table beside it). `columns` (ANALYSIS_COLUMNS): only those columns of HTA's frame, with
    the same rows, index and values (each column is built from the event table's own columns,
    whatever the others are); without `iteration`, which no analysis of ours reads."""
    from hta.common.trace import add_fwd_bwd_links

    box = table if isinstance(table, list) else [table.copy()]
    df = box.pop()
    if columns is not None:
        df = df[[c for c in df.columns if c in columns]]
    _round_down_time_stamps(df)
    df.insert(0, "index", _downcast(pd.Series(np.arange(len(df), dtype=np.int64), index=df.index)))
    box = [df]
    del df
    df, symbols = _compress(box.pop())
    add_fwd_bwd_links(df)
    df = _correlation_to_index(df, symbols)
    if columns is None or "iteration" in columns:
        _add_iteration(df, symbols)
    df["end"] = df["ts"] + df["dur"]
    return df, symbols


def hta_trace(trace_path: str, rank: int, table: pd.DataFrame | list, meta: dict[str, Any],
              columns: tuple[str, ...] | None = None):
    """A `hta.common.trace.Trace` holding this one rank, loaded as `Trace.load_traces(
    include_last_profiler_step=False)` would load it, ready for HTA's analyzers (`table`,
    `columns`: as for hta_frame)."""
    import os

    from hta.common.trace import Trace

    df, symbols = hta_frame(table, columns)
    t = Trace(trace_files={rank: os.path.abspath(trace_path)}, trace_dir=os.path.dirname(os.path.abspath(trace_path)))
    t.traces = {rank: df}
    t.meta_data = {rank: dict(meta)}
    t.symbol_table = symbols
    t._align_all_ranks()  # align_and_filter_trace(include_last_profiler_step=False), with _traced_events
    kept = _traced_events(t.traces[rank], symbols)
    if kept is None:
        t._filter_irrelevant_gpu_kernels(include_last_profiler_step=False)
    else:
        t.traces[rank] = kept
    for r, frame in t.traces.items():
        frame = frame.set_index("index", drop=False)
        frame.index.names = [None]
        t.traces[r] = frame
    t.is_parsed = True
    return t


def preload_hta() -> None:
    """Import HTA's `Trace` (which the functions here import when first called) and look up the
    installed release (`fast_path_problem`), once, in a process about to fork map workers."""
    from hta.common.trace import Trace  # noqa: F401

    fast_path_problem()


__all__ = ["ANALYSIS_COLUMNS", "MIRRORED_HTA", "fast_path_problem", "hta_frame", "hta_trace", "preload_hta"]
