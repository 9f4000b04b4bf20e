"""Why a straggler is late: the category of its time that explains its cost (reduce/whatif.py names
it for every flagged rank; reduce/critical_path.py splits the path's segments into the same
categories, those of ranks/categories.py).

Cause: in the windows before the straggler's late arrivals (the segments of the collectives where
it arrived last, and its tail when it ended the step last), the time in each category minus the
median of the other ranks' matching segments, summed, then netted: time a category lost cancels
the largest positive excesses first (excesses that cancel are no cause; see `_net`).
GPU ranks partition each window by device state first (gpu_compute, memcpy, comm: collectives
outside the matched ones) and split the device-idle time by host state (data_loading, cpu_work,
host_gap); CPU ranks partition by the main thread (data_loading, cpu_work, comm: a gloo op in
flight while the main thread is idle, host_gap). The largest category is named when it explains
at least CAUSE_MIN_SHARE (half) of the cost; otherwise the cause is "mixed" with the top two shares.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..ranks.categories import CAUSE_CATEGORIES
from .medians import nanmedian0
from .step_graph import StepGraph

CAUSE_MIN_SHARE = 0.5
CAUSE_TEXT = {
    "data_loading": "waiting for data (time in hpcprof.data / DataLoader before its late arrivals)",
    "host_gap": "host-side gap (un-annotated host time: sleep, Python overhead, slow input outside the profiled regions)",
    "cpu_work": "CPU operators (host-side operators took longer than on the other ranks: the same operators on a slower or shared core, other processes on that node, CPU frequency, or more work on that rank)",
    "gpu_compute": "GPU compute (kernels before its late arrivals ran longer than on the other ranks)",
    "memcpy": "memory copies (memcpy/memset before its late arrivals)",
    "comm": "communication transfer (collectives outside the matched ones, e.g. with ranks not analysed, took longer)",
    "mixed": "mixed: no single category explains half of the cost",
    "unknown": "unknown: the per-rank tables hold no category times (re-run the analysis without the cache)",
}



def _cum_columns(df: pd.DataFrame, at: str) -> list[str]:
    return [f"cum_{c}_{at}_ms" for c in CAUSE_CATEGORIES]


class ClockIndex:
    """The matched instances `m` as arrays, once for all the step graphs (cause_clock reads them per
    graph; with pandas' isin and map on the key strings of every instance that was 3.7 ms a graph)."""

    def __init__(self, m: pd.DataFrame):
        codes, uniq = pd.factorize(m["key"])  # a missing key: -1
        self.codes = codes
        self.code_of = {k: i for i, k in enumerate(uniq)}
        self.rank = m["rank"].to_numpy(np.int64)
        arr_cols, end_cols = _cum_columns(m, "arrival"), _cum_columns(m, "end")
        have = set(arr_cols + end_cols) <= set(m.columns)
        self.arr = m[arr_cols].to_numpy(float) if have else None
        self.end = m[end_cols].to_numpy(float) if have else None


def cause_clock(g: StepGraph, m: pd.DataFrame, steps: pd.DataFrame | None, index: ClockIndex | None = None) -> tuple | None:
    """The cumulative category times of graph g's ranks at their arrivals, collective ends, step
    starts and stops (what window_excess reads; gathered once per step, not once per rank); None
    without category columns. `index`: ClockIndex(m), made once when several graphs are read."""
    arr_cols, end_cols = _cum_columns(m, "arrival"), _cum_columns(m, "end")
    if steps is None or not set(arr_cols + end_cols) <= set(m.columns):
        return None
    st_start, st_end = _cum_columns(steps, "start"), _cum_columns(steps, "stop")
    if not set(st_start + st_end) <= set(steps.columns):
        return None
    ix = index if index is not None else ClockIndex(m)
    R, K = g.member.shape
    ncat = len(CAUSE_CATEGORIES)
    ca = np.full((R, K, ncat), np.nan)
    ce = np.full((R, K, ncat), np.nan)
    # the instances of g's collectives on g's ranks, in the frame's order (a repeated (rank, key): the last wins)
    col_of = np.full(len(ix.code_of) + 1, -1)  # a key's column in g, -1: not in g (the last slot: a missing key)
    for j, k in enumerate(g.keys):
        c = ix.code_of.get(k)
        if c is not None:
            col_of[c] = j
    kk = col_of[ix.codes]
    # a rank's row in g, -1: not in g; indexed from the lowest rank seen, so that any int works
    # (analyze() never passes a negative one: ranks.select skips those traces with a warning)
    ranks = np.asarray([int(r) for r in g.ranks], dtype=np.int64)
    both = np.concatenate([ranks, ix.rank])
    base = int(both.min(initial=0))
    row_of = np.full(int(both.max(initial=0)) - base + 1, -1)
    row_of[ranks - base] = np.arange(len(ranks))
    rr = row_of[ix.rank - base]
    sel = (kk >= 0) & (rr >= 0)
    ca[rr[sel], kk[sel]] = ix.arr[sel]
    ce[rr[sel], kk[sel]] = ix.end[sel]
    stp = steps[steps["step"] == g.step].drop_duplicates("rank").set_index("rank")
    s0 = stp.reindex(g.ranks)[st_start].to_numpy(float)
    s1 = stp.reindex(g.ranks)[st_end].to_numpy(float)
    return ca, ce, s0, s1


def window_excess(g: StepGraph, s: int, clock: tuple | None) -> dict[str, float] | None:
    """Net category excess (ms) of rank index s over the others' median in the windows before its
    late arrivals in graph g (see the module docstring); None without category columns (`clock`:
    cause_clock of g)."""
    if clock is None:
        return None
    ca, ce, s0, s1 = clock
    R, K = g.member.shape
    ncat = len(CAUSE_CATEGORIES)

    def window(i: int, k: int, after: int) -> np.ndarray:
        """Categories of rank i's segment before k (k = -1: its tail), starting no earlier than its
        arrival at collective `after` (the previous late arrival: windows never overlap, so the
        same time is not counted twice where segments share a start, as on CPU ranks)."""
        p = g.prev[i, k] if k >= 0 else g.last_k[i]
        t0, c0 = (g.coll_end[i, p], ce[i, p]) if p >= 0 else (g.start[i], s0[i])
        if after >= 0 and g.member[i, after] and g.arrival[i, after] > t0:
            c0 = ca[i, after]
        return (ca[i, k] if k >= 0 else s1[i]) - c0

    excess = np.zeros(ncat)
    last = np.nanargmax(np.where(g.member, g.arrival, -np.inf), axis=0) if K else np.empty(0, dtype=int)
    after = -1
    for k in np.flatnonzero(last == s):
        others = [window(i, k, after) for i in np.flatnonzero(g.member[:, k]) if i != s]
        if others:
            excess += np.nan_to_num(window(s, k, after) - nanmedian0(others))
        after = k
    if int(np.argmax(g.end)) == s:
        others = [window(i, -1, after) for i in range(R) if i != s]
        excess += np.nan_to_num(window(s, -1, after) - nanmedian0(others))
    return dict(zip(CAUSE_CATEGORIES, excess.tolist()))


def _net(excess: dict[str, float]) -> dict[str, float]:
    """The excesses net of each other: time a category lost (negative excess) cancels the largest
    positive excesses first (a rank that spent 90 ms more in CPU operators and 90 ms less in host
    gaps reshuffled its time; it did not lose 90 ms to CPU work). What remains explains the cost."""
    neg = -sum(min(0.0, v) for v in excess.values())
    out = {c: max(0.0, v) for c, v in excess.items()}
    for c in sorted(out, key=out.get, reverse=True):
        take = min(out[c], neg)
        out[c] -= take
        neg -= take
    return out


def name_cause(excess: dict[str, float] | None, cost_ms: float) -> tuple[str, dict[str, float]]:
    """(cause, shares): the category whose net excess explains >= CAUSE_MIN_SHARE of the cost, else
    "mixed" (shares of the two largest); "unknown" without category data or without a cost."""
    if excess is None or cost_ms <= 0:
        return "unknown", {}
    net = _net(excess)
    shares = {c: v / cost_ms for c, v in net.items()}
    top = sorted(shares, key=shares.get, reverse=True)
    if shares[top[0]] >= CAUSE_MIN_SHARE:
        return top[0], {top[0]: round(shares[top[0]], 3)}
    return "mixed", {c: round(shares[c], 3) for c in top[:2]}
