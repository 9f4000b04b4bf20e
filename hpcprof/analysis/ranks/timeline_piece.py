"""The merged timeline's piece of ONE rank, built in the rank's map task from the event table it
already decoded, and cached with the rest of its result (`timeline.parquet` of the parse-cache entry).

Why here: the merged timeline (outputs/timeline/trace.py) used to decode every trace a second time,
one after the other, in the parent (20.5 of 33 s of a fresh 16-rank analysis). Now the parent only
reads these pieces, selects the chosen steps, applies the size budget and the clock offsets, and
streams them into one file.

What the piece holds: every event any choice of `--timeline-steps` can select, in trace order: the
complete events ('X') of the host overlapping the window of all profiled steps of the main thread
(the thread with most ProfilerStep#N), the GPU events launched in that window (their runtime call's
correlation id) or starting in it, and the instant events ('i') inside it. Per event the columns the
parent needs to select (ts, dur, gpu, corr, runtime, is_x), to budget (kind) and to write
(name_json, cat_json: JSON-encoded once here; pid, tid as text; dev: the GPU id where the pid is
one). The step bounds of the main thread go into meta.json (`timeline`), so choosing steps needs
no event. The selection rules are `window_mask`, the one place they are written down: the piece
applies them to the window of all profiled steps, the parent to the chosen steps' window.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

from .comm_kernels import Names

PIECE = "timeline"
"""Table name in the parse-cache entry (ranks.mapper.TABLES)."""
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "gpu_user_annotation"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
KINDS = ("gpu", "python_functions", "runtime_calls", "short_cpu_ops", "cpu_ops", "instant_events", "keep")
"""What the size budget knows an event as (outputs/timeline/budget.DROP_ORDER drops some of them)."""
SHORT_OP_US = 10.0
"""CPU operators shorter than this are the kind "short_cpu_ops" (dropped before longer ones)."""


def is_in(values: np.ndarray, of: np.ndarray) -> np.ndarray:
    """np.isin(values, of) for the correlation ids of the timeline (floats; NaN matches nothing):
    each value looked up in the sorted distinct `of` (searchsorted), rather than both arrays sorted
    together as np.isin does (the same answer; the parent does this twice per rank)."""
    u = np.unique(of)
    if not u.size:
        return np.zeros(np.shape(values), dtype=bool)
    return u[np.searchsorted(u, values).clip(0, u.size - 1)] == values


def window_mask(is_x: np.ndarray, inst: np.ndarray, gpu: np.ndarray, runtime: np.ndarray, ts: np.ndarray,
                dur: np.ndarray, corr: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Which events the merged timeline shows for the window [lo, hi) of the rank's own clock: the
    selection rules, written down once (the piece applies them to the window of all profiled steps,
    outputs/timeline/render.window_rows to the chosen steps' window). Host complete events ('X',
    not `gpu`) overlapping the window; GPU complete events launched in it (a runtime call among those
    host events has their correlation id) or, without such a launch, starting in it; instant events
    (`inst`) inside it."""
    inside = (ts >= lo) & (ts < hi)
    host = is_x & ~gpu & (ts < hi) & (ts + dur > lo)
    launched = corr[host & runtime & (corr >= 0)]
    gpu_keep = is_x & gpu & ((is_in(corr, launched) & (corr >= 0)) | inside)
    return host | gpu_keep | (inst & inside)


def _num(col: pd.Series) -> np.ndarray:
    if col.dtype.kind in "if":
        return col.to_numpy(dtype=float)
    return pd.to_numeric(col.where(col.map(lambda v: not isinstance(v, bool))), errors="coerce").to_numpy(dtype=float)


def _json_strings(values: np.ndarray) -> np.ndarray:
    """Each (distinct) value JSON-encoded: quoted and escaped."""
    return np.array([msgspec.json.encode(v).decode() if isinstance(v, str) else "null" for v in values], dtype=object)


def _factor(values, coded: Names | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values) of a column; every per-value test runs on the few distinct values
    (a trace has about a thousand names in 85,000 events), not on every event, and no Python object
    is made per event. Missing values are one value (NaN), coded where they first occur, as
    pd.factorize(use_na_sentinel=False) codes them; made from the codes with missing values as -1,
    as that first tests every value of an object column for being missing (a pass over pid, tid).
    `coded`: that factorization of `values`, where the caller has it (the map's Names of the name
    and category columns; not one made row by row, as the unhashable values make this one fail)."""
    if coded is not None and not coded.per_row:
        c, u = coded.codes, coded.uniq
    else:
        c, u = pd.factorize(values, use_na_sentinel=True)
        u = np.asarray(u, dtype=object)
    missing = np.flatnonzero(c < 0)
    if missing.size:
        k = int(c[:missing[0]].max()) + 1 if missing[0] else 0  # the distinct values before the first missing one
        c = c + (c >= k)
        c[missing] = k
        u = np.insert(u, k, np.nan)
    return c, u


def timeline_piece(ev: pd.DataFrame, names: Names | None = None, cats: Names | None = None) -> tuple[pa.Table | None, dict]:
    """(the piece's events or None when the rank has no profiler step, meta.json's `timeline`:
    {"main_tid": str, "steps": [[step, start_us, end_us], ...]} of the main thread). `names`,
    `cats`: the name and category columns factorized (comm_kernels.Names.column), where the caller has them."""
    n = len(ev)
    get = lambda k, default=None: ev[k] if k in ev else pd.Series([default] * n)  # noqa: E731
    ph = get("ph")
    ph_x, ph_i = (ph == "X").to_numpy(dtype=bool), (ph == "i").to_numpy(dtype=bool)
    name_c, names = _factor(get("name"), names)
    cat_c, cats = _factor(get("cat"), cats)
    cats = np.array(["" if not isinstance(v, str) and pd.isna(v) else v for v in cats], dtype=object)  # no category: ""
    ts = _num(get("ts", np.nan))
    dur = _num(get("dur", np.nan))
    pid_c, pids = _factor(get("pid"))
    tid_c, tids = _factor(get("tid"))
    corr = _num(get("correlation", -1))
    name_is_str = np.array([isinstance(v, str) for v in names], dtype=bool)
    is_str = name_is_str[name_c]
    is_x = ph_x & np.isfinite(ts) & np.isfinite(dur) & is_str
    is_gpu = np.array([v in GPU_CATS for v in cats], dtype=bool)[cat_c]
    is_rt = np.array([v in RUNTIME_CATS for v in cats], dtype=bool)[cat_c]
    step_of = np.array([int(m.group(1)) if isinstance(v, str) and (m := STEP_RE.match(v)) else -1 for v in names])
    steps: dict = {}
    main_count: dict = {}
    for i in np.flatnonzero(is_x & ~is_gpu & (step_of[name_c] >= 0)):
        t = tids[tid_c[i]]
        steps.setdefault(t, {})[int(step_of[name_c[i]])] = (float(ts[i]), float(ts[i] + dur[i]))
        main_count[t] = main_count.get(t, 0) + 1
    if not steps:
        return None, {"main_tid": None, "steps": []}
    main_tid = max(main_count, key=main_count.get)
    all_steps = steps[main_tid]
    info = {"main_tid": str(main_tid), "steps": [[s, a, b] for s, (a, b) in sorted(all_steps.items())]}
    # the window of all profiled steps: any choice of steps selects from what lies in it
    lo = min(v[0] for v in all_steps.values())
    hi = max(v[1] for v in all_steps.values())
    idx = np.flatnonzero(window_mask(is_x, ph_i & np.isfinite(ts) & is_str, is_gpu, is_rt, ts, dur, corr, lo, hi))
    nc, cc, d, px, pi = name_c[idx], cat_c[idx], dur[idx], ph_x[idx], ph_i[idx]
    g = is_gpu[idx]
    K = {k: i for i, k in enumerate(KINDS)}
    kind = np.full(idx.size, -1, dtype=np.int8)
    kind[g] = K["gpu"]
    kind[~g & (cats[cc] == "python_function")] = K["python_functions"]
    kind[~g & is_rt[idx]] = K["runtime_calls"]
    cpu_op = ~g & (cats[cc] == "cpu_op")
    kind[cpu_op & (d < SHORT_OP_US)] = K["short_cpu_ops"]
    kind[cpu_op & (d >= SHORT_OP_US)] = K["cpu_ops"]
    kind[pi] = K["instant_events"]
    # never dropped: GPU activity, step markers and other annotations, collectives (gloo:*/nccl ops)
    coll = np.array([isinstance(v, str) and (v.startswith("gloo:") or "nccl" in v.lower() or v.startswith("c10d::")) for v in names], dtype=bool)
    kind[coll[nc] & (kind != K["gpu"])] = K["keep"]
    kind[kind < 0] = K["keep"]
    # the GPU id a device event's pid names (an int, or digits), else NaN
    dev = np.array([float(int(x)) if isinstance(x, (int, np.integer)) or str(x).isdigit() else np.nan for x in pids], dtype=float)
    # text columns as dictionary arrays (codes into the distinct values): a 1 GB rank's piece holds
    # no Python object per event
    def dictionary(codes: np.ndarray, values) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array([str(v) for v in values], pa.string()))

    frame = pa.table({
        "is_x": px,
        "cat_json": dictionary(cc, _json_strings(cats)),
        "name_json": dictionary(nc, _json_strings(names)),
        "ts": ts[idx],
        "dur": np.where(px, d, 0.0),
        "pid": dictionary(pid_c[idx], pids),
        "tid": dictionary(tid_c[idx], tids),
        "dev": dev[pid_c[idx]],
        "gpu": g,
        "runtime": is_rt[idx] & ~g,
        "corr": corr[idx],
        "kind": dictionary(kind, KINDS),
    })
    return frame, info
