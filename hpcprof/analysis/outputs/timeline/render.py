"""One rank's part of the merged timeline: from its piece (ranks/timeline_piece.py, cached by the map)
to the rank's events as JSON text on the job's clock.

Three steps, each a function: `window_rows` (the events of the chosen steps, by the selection
rules of ranks/timeline_piece.window_mask), `thread_ids` (the rank's CPU threads and GPU streams as
threads of its process: main thread first, then the other CPU threads, then the GPU streams),
`render_rank` (process and thread names, events, launch flows, as JSON text), never one dict per
event: 1,000,000 events are about 130 MB of JSON.

The text of the events and flows is written column-wise with Arrow's string kernels (`_events_json`,
`_flows_json`): a batch of events is one array of strings, never one dict per event.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...ranks.timeline_piece import is_in, window_mask

ANNOT_TID = 0
GPU_TID_BASE = 1_000_000
COLUMNS = ["is_x", "cat_json", "name_json", "ts", "dur", "pid", "tid", "dev", "gpu", "runtime", "corr", "kind"]
"""The piece's columns (ranks/timeline_piece.py writes them)."""
SELECT_COLUMNS = ["is_x", "ts", "dur", "gpu", "runtime", "corr", "kind"]
"""The columns the selection and the budget read."""
BATCH = 16384
"""Events turned into text at a time (the parent's memory: one batch's strings, not a rank's)."""


def read_piece(path: str, columns: list[str] | None = None) -> pa.Table:
    """A rank's piece (or some of its columns) as an Arrow table, text columns dictionary-encoded."""
    import pyarrow.parquet as pq

    cols = columns or COLUMNS
    dict_cols = [c for c in ("cat_json", "name_json", "pid", "tid", "kind") if c in cols]
    # ParquetFile, not read_table: the same table without the datasets layer (a third of the CPU);
    # on this thread: Arrow's pool cost more CPU than it saved on pieces of a few MB
    return pq.ParquetFile(path, read_dictionary=dict_cols).read(columns=cols, use_threads=False)


def col(t: pa.Table, name: str) -> np.ndarray:
    """A numeric or boolean column as a numpy array."""
    return t.column(name).to_numpy()


def codes(t: pa.Table, name: str) -> tuple[np.ndarray, list[str]]:
    """A text column as (codes, the distinct values they index)."""
    arr = t.column(name).combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    return arr.indices.to_numpy(zero_copy_only=False).astype(np.int64), [str(v) for v in arr.dictionary.to_pylist()]


def window_rows(piece: pa.Table, lo: float, hi: float) -> np.ndarray:
    """The rows of `piece` in the chosen steps' window [lo, hi) of the rank's own clock, as a mask, by
    the rules of ranks/timeline_piece.window_mask (a piece holds complete and instant events only);
    the timeline keeps it from its first pass to its second."""
    is_x, gpu, runtime, ts, dur, corr = (col(piece, c) for c in ("is_x", "gpu", "runtime", "ts", "dur", "corr"))
    return window_mask(is_x, ~is_x, gpu, runtime, ts, dur, corr, lo, hi)


def keep_rows(t: pa.Table, mask: np.ndarray) -> pa.Table:
    """The rows of `t` where `mask` holds: `t` itself where it holds everywhere (the chosen steps
    are all the profiled ones, the budget drops nothing), not a copy of it (a copy would add a
    piece's size to the parent's peak)."""
    return t if mask.all() else t.filter(pa.array(mask))


def thread_ids(f: pa.Table, main_tid: str) -> tuple[dict[tuple[bool, str, str], tuple[int, str]], np.ndarray]:
    """((gpu, pid, tid) -> (thread id on the timeline, its name), each event's thread id): the main
    thread first, then the other CPU threads, then the GPU streams, each group by tid."""
    pc_, pids = codes(f, "pid")
    tc, tids = codes(f, "tid")
    gpu = col(f, "gpu")
    key = (gpu.astype(np.int64) * (len(pids) + 1) + pc_) * (len(tids) + 1) + tc
    uniq, inv = np.unique(key, return_inverse=True)
    found = [(bool(k // ((len(pids) + 1) * (len(tids) + 1))), pids[(k // (len(tids) + 1)) % (len(pids) + 1)], tids[k % (len(tids) + 1)])
             for k in uniq.tolist()]
    out: dict = {}
    n_gpu = n_cpu = 0
    for g, pid_, tid_ in sorted(set(found), key=lambda k: (k[0], k[2] != main_tid, k[2], k[1])):
        if g:
            n_gpu += 1
            out[(g, pid_, tid_)] = (GPU_TID_BASE + n_gpu, f"GPU {pid_} stream {tid_}")
        else:
            n_cpu += 1
            out[(g, pid_, tid_)] = (n_cpu, f"main thread ({tid_})" if tid_ == main_tid else f"thread {tid_}")
    per_key = np.array([out[k][0] for k in found], dtype=np.int64)
    return out, per_key[inv] if len(inv) else np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class RankLabel:
    rank: int
    node: str | None
    device: str | None  # "cpu", "cuda", or a device name


def _meta(pid: int, tid: int, name: str, args: dict) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _text(values) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _joined(arr: pa.Array) -> memoryview | bytes:
    """The strings of `arr` back to back (each already ends with its separator): a view of the
    array's data buffer, not a copy (a batch is megabytes; the gzip stream copies it once)."""
    arr = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    if len(arr) == 0:
        return b""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset: arr.offset + len(arr) + 1]
    return memoryview(arr.buffers()[2])[int(offsets[0]): int(offsets[-1])]


def _events_json(f: pa.Table, r: int, shift: float, tids: np.ndarray) -> memoryview | bytes:
    """The events of `f` as JSON objects, each followed by a comma."""
    is_x = f.column("is_x")
    corr = col(f, "corr")
    has_args = (corr >= 0) & (col(f, "gpu") | col(f, "runtime"))
    text = pc.binary_join_element_wise(
        pc.if_else(is_x, '{"ph":"X","cat":', '{"ph":"i","cat":'),
        f.column("cat_json").cast(pa.string()), ',"name":', f.column("name_json").cast(pa.string()), f',"pid":{r},"tid":',
        _text(tids), ',"ts":', _text(np.round(col(f, "ts") - shift, 3)),
        pc.if_else(is_x, pc.binary_join_element_wise(',"dur":', _text(col(f, "dur")), ""), ',"s":"t"'),
        pc.if_else(pa.array(has_args), pc.binary_join_element_wise(',"args":{"correlation":', _text(np.where(has_args, corr, 0).astype(np.int64)), "}", ""), ""),
        "},", "")
    return _joined(text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text)


def event_batches(f: pa.Table, r: int, shift: float, tids: np.ndarray):
    """The events of `f` as JSON text, BATCH events at a time (runs of objects each followed by a
    comma), so that the text of one batch at a time is in memory."""
    for lo in range(0, len(f), BATCH):
        yield _events_json(f.slice(lo, BATCH), r, shift, tids[lo: lo + BATCH])


def _flows_json(f: pa.Table, r: int, shift: float, threads: dict, tids: np.ndarray) -> tuple[memoryview | bytes, int]:
    """Launch flows: from each runtime call to the device event it launched (same correlation id;
    the last runtime call of an id wins), each arrow a pair of 's' and 'f' events; and their count."""
    corr = col(f, "corr")
    ts = col(f, "ts")
    rt = col(f, "runtime") & (corr >= 0)
    if not rt.any():
        return b"", 0
    rt_corr = corr[rt].astype(np.int64)
    order = np.arange(rt_corr.size)
    last = pd.Series(order, index=rt_corr).groupby(level=0).last()
    on_gpu_thread = tids > GPU_TID_BASE  # a device stream of this rank (threads: GPU ids above the base)
    cand = (corr >= 0) & on_gpu_thread & is_in(corr, rt_corr)
    if not cand.any():
        return b"", 0
    c = corr[cand].astype(np.int64)
    src = last.reindex(c).to_numpy()
    fid, s_tid, s_ts, f_tid, f_ts = c * 100_000 + r, tids[rt][src], ts[rt][src], tids[cand], ts[cand]
    fid = _text(fid)
    s = pc.binary_join_element_wise('{"ph":"s","cat":"launch","name":"launch","id":', fid, f',"pid":{r},"tid":', _text(s_tid),
                                    ',"ts":', _text(s_ts - shift), '},', "")
    e = pc.binary_join_element_wise('{"ph":"f","bp":"e","cat":"launch","name":"launch","id":', fid, f',"pid":{r},"tid":', _text(f_tid),
                                    ',"ts":', _text(f_ts - shift), '},', "")
    return _joined(pc.binary_join_element_wise(s, e, "")), 2 * int(cand.sum())


def render_rank(f: pa.Table, label: RankLabel, main_tid: str, shift: float, keep_flows: bool, write) -> int:
    """The rank's process: its name, its threads' names, its events (shifted by -shift: onto the
    job's clock, time 0 at the start of the first chosen step), and its launch flows, handed to
    `write` as runs of JSON objects each followed by a comma; returns the number of events that are
    not metadata."""
    r = label.rank
    gpu = col(f, "gpu")
    dev = col(f, "dev")[gpu]
    gpu_ids = sorted({int(x) for x in np.unique(dev[np.isfinite(dev)])})  # the distinct values first
    device = label.device or ("cuda" if len(gpu_ids) else "cpu")
    if gpu_ids and device in ("cuda", "gpu"):
        device = "GPU " + ",".join(map(str, gpu_ids))
    elif gpu_ids:
        device = f"{device} (GPU {','.join(map(str, gpu_ids))})"
    threads, tids = thread_ids(f, main_tid)
    meta = [_meta(r, 0, "process_name", {"name": f"rank {r} · {label.node or 'unknown'} · {device}"}),
            _meta(r, 0, "process_sort_index", {"sort_index": r})]
    for new, name in threads.values():
        meta += [_meta(r, new, "thread_name", {"name": name}), _meta(r, new, "thread_sort_index", {"sort_index": new})]
    write(b"".join(msgspec.json.encode(m) + b"," for m in meta))
    for text in event_batches(f, r, shift, tids):  # in batches: the text of a batch is made and handed on
        write(text)
    n = len(f)
    if keep_flows and len(f):
        flows, n_flows = _flows_json(f, r, shift, threads, tids)
        write(flows)
        n += n_flows
    pa.default_memory_pool().release_unused()
    return n
