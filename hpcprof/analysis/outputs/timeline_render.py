"""One rank's part of the merged timeline: from its piece (ranks/timeline_piece.py, cached by the map)
to the rank's events as JSON text on the job's clock.

Three steps, each a function: `select_events` (the events of the chosen steps: the selection rules,
written down once), `thread_ids` (the rank's CPU threads and GPU streams as threads of its process:
main thread first, then the other CPU threads, then the GPU streams), `render_rank` (process and
thread names, events, launch flows, as JSON text). The text is built column-wise with Arrow's string
kernels, not one dict per event: 1,000,000 events are about 130 MB of JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

ANNOT_TID = 0
GPU_TID_BASE = 1_000_000
COLUMNS = ["is_x", "cat_json", "name_json", "ts", "dur", "pid", "tid", "dev", "gpu", "runtime", "corr", "kind"]
"""The piece's columns (ranks/timeline_piece.py writes them)."""
SELECT_COLUMNS = ["is_x", "ts", "dur", "gpu", "runtime", "corr", "kind"]
"""The columns the selection and the budget read."""


def read_piece(path: str, columns: list[str] | None = None) -> pd.DataFrame:
    import pyarrow.parquet as pq

    cols = columns or COLUMNS
    dict_cols = [c for c in ("cat_json", "name_json", "pid", "tid", "kind") if c in cols]
    t = pq.read_table(path, columns=cols, read_dictionary=dict_cols)
    return t.to_pandas()


def select_events(piece: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    """The events of the chosen steps' window [lo, hi) of the rank's own clock, in trace order: host
    events overlapping it; GPU events launched in it (their runtime call, matched by correlation id,
    overlaps it) or, without a launch record there, starting in it; instant events inside it."""
    is_x = piece["is_x"].to_numpy()
    gpu = piece["gpu"].to_numpy()
    ts = piece["ts"].to_numpy()
    dur = piece["dur"].to_numpy()
    corr = piece["corr"].to_numpy()
    inside = (ts >= lo) & (ts < hi)
    host = is_x & ~gpu & (ts < hi) & (ts + dur > lo)
    launched = corr[host & piece["runtime"].to_numpy() & (corr >= 0)]
    gpu_keep = is_x & gpu & ((np.isin(corr, launched) & (corr >= 0)) | inside)
    inst = ~is_x & inside
    return piece[host | gpu_keep | inst]


def thread_ids(f: pd.DataFrame, main_tid: str) -> dict[tuple[bool, str, str], tuple[int, str]]:
    """(gpu, pid, tid) -> (thread id on the timeline, its name): the main thread first, then the
    other CPU threads, then the GPU streams, each group by tid."""
    found = f[["gpu", "pid", "tid"]].astype({"pid": str, "tid": str}).drop_duplicates()
    keys = sorted(zip(found["gpu"].astype(bool), found["pid"], found["tid"]), key=lambda k: (k[0], k[2] != main_tid, k[2]))
    out: dict = {}
    n_gpu = n_cpu = 0
    for gpu, pid_, tid_ in keys:
        key = (bool(gpu), pid_, tid_)
        if key in out:
            continue
        if gpu:
            n_gpu += 1
            out[key] = (GPU_TID_BASE + n_gpu, f"GPU {pid_} stream {tid_}")
        else:
            n_cpu += 1
            out[key] = (n_cpu, f"main thread ({tid_})" if tid_ == main_tid else f"thread {tid_}")
    return out


@dataclass(frozen=True)
class RankLabel:
    rank: int
    node: str | None
    device: str | None  # "cpu", "cuda", or a device name


def _meta(pid: int, tid: int, name: str, args: dict) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _text(values) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _joined(arr: pa.Array) -> bytes:
    """The strings of `arr` back to back (each already ends with its separator)."""
    arr = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    if len(arr) == 0:
        return b""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset: arr.offset + len(arr) + 1]
    return arr.buffers()[2].to_pybytes()[offsets[0]: offsets[-1]]


def _events_json(f: pd.DataFrame, r: int, shift: float, tids: np.ndarray) -> bytes:
    """The events of `f` as JSON objects, each followed by a comma."""
    is_x = pa.array(f["is_x"].to_numpy())
    corr = f["corr"].to_numpy()
    has_args = (corr >= 0) & (f["gpu"].to_numpy() | f["runtime"].to_numpy())
    head = pc.binary_join_element_wise(
        pc.if_else(is_x, '{"ph":"X","cat":', '{"ph":"i","cat":'),
        pa.array(f["cat_json"].astype(str).to_numpy(), pa.string()), ',"name":',
        pa.array(f["name_json"].astype(str).to_numpy(), pa.string()), f',"pid":{r},"tid":',
        _text(tids), ',"ts":', _text(np.round(f["ts"].to_numpy() - shift, 3)),
        pc.if_else(is_x, pc.binary_join_element_wise(',"dur":', _text(f["dur"].to_numpy()), ""), ',"s":"t"'),
        pc.if_else(pa.array(has_args), pc.binary_join_element_wise(',"args":{"correlation":', _text(np.where(has_args, corr, 0).astype(np.int64)), "}", ""), ""),
        "},", "")
    return _joined(head)


def _flows_json(f: pd.DataFrame, r: int, shift: float, threads: dict, tids: np.ndarray) -> tuple[bytes, int]:
    """Launch flows: from each runtime call to the device event it launched (same correlation id;
    the last runtime call of an id wins), each arrow a pair of 's' and 'f' events."""
    corr = f["corr"].to_numpy()
    rt = f["runtime"].to_numpy() & (corr >= 0)
    if not rt.any():
        return b"", 0
    rt_corr = corr[rt].astype(np.int64)
    rt_ts = f["ts"].to_numpy()[rt] - shift
    rt_tid = tids[rt]
    last = pd.Series(np.arange(rt_corr.size), index=rt_corr).groupby(level=0).last()
    gpu_threads = {f"{p}\x1f{t}" for (g, p, t) in threads if g}
    keys = f["pid"].astype(str) + "\x1f" + f["tid"].astype(str)
    on_gpu_thread = keys.isin(gpu_threads).to_numpy()
    cand = (corr >= 0) & on_gpu_thread & np.isin(corr, rt_corr)
    if not cand.any():
        return b"", 0
    c = corr[cand].astype(np.int64)
    src = last.reindex(c).to_numpy()
    fid = _text(c * 100_000 + r)
    gpu_tids = np.array([threads[(True, p, t)][0] for p, t in zip(f["pid"].astype(str).to_numpy()[cand], f["tid"].astype(str).to_numpy()[cand])], dtype=np.int64)
    s = pc.binary_join_element_wise('{"ph":"s","cat":"launch","name":"launch","id":', fid, f',"pid":{r},"tid":', _text(rt_tid[src]),
                                    ',"ts":', _text(rt_ts[src]), '},', "")
    e = pc.binary_join_element_wise('{"ph":"f","bp":"e","cat":"launch","name":"launch","id":', fid, f',"pid":{r},"tid":', _text(gpu_tids),
                                    ',"ts":', _text(f["ts"].to_numpy()[cand] - shift), '},', "")
    return _joined(pc.binary_join_element_wise(s, e, "")), 2 * int(cand.sum())


def render_rank(f: pd.DataFrame, label: RankLabel, main_tid: str, shift: float, keep_flows: bool) -> tuple[bytes, int]:
    """The rank's process: its name, its threads' names, its events (shifted by -shift: onto the
    job's clock, time 0 at the start of the first chosen step), and its launch flows, as JSON
    objects each followed by a comma; and the number of events that are not metadata."""
    r = label.rank
    gpu = f["gpu"].to_numpy()
    dev = f["dev"].to_numpy()[gpu]
    gpu_ids = sorted({int(x) for x in dev[np.isfinite(dev)]})
    device = label.device or ("cuda" if len(gpu_ids) else "cpu")
    if gpu_ids and device in ("cuda", "gpu"):
        device = "GPU " + ",".join(map(str, gpu_ids))
    elif gpu_ids:
        device = f"{device} (GPU {','.join(map(str, gpu_ids))})"
    threads = thread_ids(f, main_tid)
    meta = [_meta(r, 0, "process_name", {"name": f"rank {r} · {label.node or 'unknown'} · {device}"}),
            _meta(r, 0, "process_sort_index", {"sort_index": r})]
    for new, name in threads.values():
        meta += [_meta(r, new, "thread_name", {"name": name}), _meta(r, new, "thread_sort_index", {"sort_index": new})]
    key_tid = {f"{int(g)}\x1f{p}\x1f{t}": v[0] for (g, p, t), v in threads.items()}
    keys = pd.Series(gpu.astype(int).astype(str), index=f.index) + "\x1f" + f["pid"].astype(str) + "\x1f" + f["tid"].astype(str)
    tids = keys.map(key_tid).to_numpy(dtype=np.int64)
    out = [b"".join(msgspec.json.encode(m) + b"," for m in meta), _events_json(f, r, shift, tids)]
    n = len(f)
    if keep_flows:
        flows, n_flows = _flows_json(f, r, shift, threads, tids)
        out.append(flows)
        n += n_flows
    return b"".join(out), n
