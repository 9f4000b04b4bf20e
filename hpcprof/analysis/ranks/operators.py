"""Operator and kernel-launch views of ONE rank (part of the per-rank map).

Why: the two views users relied on in the TensorBoard profiler plugin and in HTA. The operator
view says which PyTorch operators cost host time and which keep the GPU busy; the launch view
says whether the GPU waits for the CPU to launch work (a CPU-bound job: many kernels shorter than
the call that launched them, launch delays between call and kernel start).

Definitions (also in docs/analysis.md, "Numbers and definitions"):
- operator: a host event of category `cpu_op` (aten::*, user-visible module ops), by name.
- host total time: the sum of its events' durations (children included); host self time: minus the
  time of the cpu_op events directly nested in it on the same thread.
- device time: the GPU events (kernels, memcpy, memset) launched by the operator or by anything
  nested in it: a GPU event is linked by its correlation id to the CUDA runtime call that launched
  it, and that call to every cpu_op enclosing it on its thread. Device self time counts each GPU
  event only for the innermost enclosing operator, so self times add up to the GPU time launched
  from operators.
- launch statistics: HTA's, in analysis/hta/launches.py.
"""

from __future__ import annotations

from array import array

import numpy as np
import pandas as pd

from .comm_kernels import Names, one_of

TOP_OPERATORS = 30
WALK_CHUNK = 1 << 16
"""Steps of `_walk` whose inputs are Python values at a time."""
GPU_CATS = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")
_TEXT = pd.Series(np.array(["x"], dtype=object)).dtype
"""The dtype pandas infers for texts (storage and missing value both: StringDtype compares them)."""


def _num(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)


def operator_table(ev: pd.DataFrame, top: int = TOP_OPERATORS, cats: Names | None = None) -> pd.DataFrame:
    """Per operator name: calls, host total/self time and device total/self time (us), the `top`
    operators by host total time plus the `top` by device total time. `ev`: the rank's event table
    (hpcprof's decode: columns ph, cat, name, tid, ts, dur, correlation); `cats`: its category column
    factorized, where the caller has it (the map does: the category tests then run once per distinct
    category, not once per event)."""
    cols = ["name", "calls", "host_total_us", "host_self_us", "device_total_us", "device_self_us"]
    if ev.empty or "cat" not in ev:
        return pd.DataFrame(columns=cols)
    ph_x = (ev["ph"] == "X").to_numpy(dtype=bool)
    # the category tests once per distinct category: no Python string per event (a 1 GB rank has 4 million)
    cats = cats if cats is not None else Names.column(ev, "cat", len(ev))
    ts, dur = _num(ev["ts"]), _num(ev["dur"])
    ok = ph_x & np.isfinite(ts) & np.isfinite(dur)
    op_i = np.flatnonzero(ok & cats.where(lambda u: u == "cpu_op"))
    if not op_i.size:
        return pd.DataFrame(columns=cols)
    corr = _num(ev["correlation"]) if "correlation" in ev else np.full(len(ev), -1.0)
    gpu_i = np.flatnonzero(ok & cats.where(one_of(GPU_CATS)))
    rt_i = np.flatnonzero(ok & cats.where(one_of(RUNTIME_CATS)) & (corr >= 0))
    gpu_by_corr = pd.Series(dur[gpu_i]).groupby(corr[gpu_i]).sum() if gpu_i.size else pd.Series(dtype=float)

    n_ops = op_i.size
    # walk each thread's operators and runtime calls in time order (start, longest first, operators
    # before runtime calls) with a stack of open operators; the order of the walk, and so of every
    # floating-point sum, is that of sorting (tid, ts, -dur or 0, kind, row)
    walked = np.concatenate([op_i, rt_i])
    kind = np.concatenate([np.zeros(n_ops, dtype=np.int8), np.ones(rt_i.size, dtype=np.int8)])
    tid_c = _thread_codes(ev["tid"].iloc[walked])
    w_ts = ts[walked]
    order = np.lexsort((walked, kind, np.where(kind == 0, -dur[walked], 0.0), w_ts, tid_c))
    op_pos = np.concatenate([np.arange(n_ops), np.full(rt_i.size, -1)])
    # GPU time launched by each runtime call (0 where none)
    g_rt = np.zeros(rt_i.size)
    if rt_i.size and gpu_by_corr.size:
        keys, sums = gpu_by_corr.index.to_numpy(dtype=float), gpu_by_corr.to_numpy(dtype=float)  # keys sorted
        c = corr[rt_i]
        at = np.minimum(np.searchsorted(keys, c), keys.size - 1)
        hit = keys[at] == c
        g_rt[hit] = sums[at[hit]]
    g_w = np.concatenate([np.zeros(n_ops), g_rt])
    op_end = ts[op_i] + dur[op_i]
    host_self, dev_total, dev_self = _walk(tid_c[order], w_ts[order], op_pos[order], g_w[order], op_end, dur[op_i])
    names = ev["name"].iloc[op_i]
    # a text column as pandas would infer it from the names' objects (the decode's): taken as it is,
    # not rebuilt from one Python string per operator
    names = names.reset_index(drop=True) if names.dtype == _TEXT else names.to_numpy(dtype=object)
    df = pd.DataFrame({"name": names, "host_total_us": dur[op_i], "host_self_us": np.clip(host_self, 0, None),
                       "device_total_us": dev_total, "device_self_us": dev_self})
    # one sum of all columns and one size, not a named aggregation per column (the same sums); the
    # top operators by a stable sort, as nlargest's keep="first" picks them
    g = df.groupby("name")
    agg = g.sum()
    agg.insert(0, "calls", g.size())
    agg = agg.reset_index()
    keep = np.zeros(len(agg), dtype=bool)
    for col, rows in (("host_total_us", np.arange(len(agg))), ("device_total_us", np.flatnonzero(agg["device_total_us"].to_numpy() > 0))):
        v = agg[col].to_numpy()[rows]
        keep[rows[np.argsort(-v, kind="stable")[:top]]] = True
    return agg[keep].sort_values("host_total_us", ascending=False, ignore_index=True)[cols]


def _thread_codes(tid: pd.Series) -> np.ndarray:
    """Codes of the threads as texts (equal texts, one thread), in order of first appearance: the
    distinct ids turned into texts, not every row, where the ids are ints
    and texts only (a factorization holds 1, 1.0 and True for one value: three texts); else per row."""
    if tid.dtype.kind in "iu" or set(map(type, tid.to_numpy(dtype=object))) <= {str, int}:
        codes, uniq = pd.factorize(tid)  # nothing missing
        return pd.factorize(pd.Series(uniq, dtype=object).astype(str), use_na_sentinel=False)[0][codes]
    return pd.factorize(tid.astype(str), use_na_sentinel=False)[0]


def _walk(tid: np.ndarray, t0: np.ndarray, op: np.ndarray, g: np.ndarray, op_end: np.ndarray,
          op_dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(host self, device total, device self) per operator, from the walk (in walk order: thread code,
    start, operator index or -1 for a runtime call, GPU time that call launched): a stack of the
    thread's open operators; an operator's duration is taken from its parent's host self time, a
    runtime call's GPU time goes to every open operator (total) and the innermost (self).

    The walk is a Python loop (each step depends on the stack); its per-operator figures are kept as
    C doubles (`array`), not as lists of Python floats, and the walk's inputs become Python values
    WALK_CHUNK at a time: lists of every value (a pointer and a float object, 32 bytes a value) were
    most of the peak memory of a large rank's analysis. The same operations in the same order: the
    same sums."""
    durations = op_dur.astype(np.float64).tobytes()
    dur, host_self, end = array("d", durations), array("d", durations), array("d", op_end.astype(np.float64).tobytes())
    dev_total, dev_self = array("d", bytes(8 * op_end.size)), array("d", bytes(8 * op_end.size))
    prev_tid = None
    stack: list[int] = []
    for lo in range(0, tid.size, WALK_CHUNK):
        hi = lo + WALK_CHUNK
        for tc, t, k, gk in zip(tid[lo:hi].tolist(), t0[lo:hi].tolist(), op[lo:hi].tolist(), g[lo:hi].tolist()):
            if tc != prev_tid:
                stack = []
                prev_tid = tc
            while stack and end[stack[-1]] <= t:
                stack.pop()
            if k >= 0:
                if stack:
                    host_self[stack[-1]] -= dur[k]
                stack.append(k)
            elif gk and stack:
                dev_self[stack[-1]] += gk
                for j in stack:
                    dev_total[j] += gk
    return tuple(np.frombuffer(a, dtype=np.float64).copy() for a in (host_self, dev_total, dev_self))
