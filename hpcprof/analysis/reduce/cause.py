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

import warnings

import numpy as np
import pandas as pd

from ..ranks.categories import CAUSE_CATEGORIES
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
    """The matched instances `m` (and the steps table) as arrays, once for all the step graphs
    (cause_clock reads them per graph: not pandas' isin and map on the key strings of every
    instance per graph, nor a pandas selection of the step's rows of the steps table per graph,
    twice: for the cause and for the critical path)."""

    def __init__(self, m: pd.DataFrame, steps: pd.DataFrame | None = None):
        codes, uniq = pd.factorize(m["key"])  # a missing key: -1
        self.codes = codes
        self.code_of = {k: i for i, k in enumerate(uniq)}
        self.rank = m["rank"].to_numpy(np.int64)
        arr_cols, end_cols = _cum_columns(m, "arrival"), _cum_columns(m, "end")
        have = set(arr_cols + end_cols) <= set(m.columns)
        self.arr = m[arr_cols].to_numpy(float) if have else None
        self.end = m[end_cols].to_numpy(float) if have else None
        self.steps = steps
        self.step_row: dict = {}  # (step, rank) -> its first row in the steps table
        self.step_clock = None  # (start, stop): the cum_* columns at the step starts and stops, a row of NaN last
        st_start, st_end = _cum_columns(steps, "start"), _cum_columns(steps, "stop")
        if steps is not None and set(st_start + st_end) <= set(steps.columns):
            for i, key in enumerate(zip(steps["step"].tolist(), steps["rank"].tolist())):
                self.step_row.setdefault(key, i)
            nan = np.full((1, len(st_start)), np.nan)
            self.step_clock = (np.vstack([steps[st_start].to_numpy(float), nan]), np.vstack([steps[st_end].to_numpy(float), nan]))


def cause_clock(g: StepGraph, m: pd.DataFrame, steps: pd.DataFrame | None, index: ClockIndex | None = None) -> tuple | None:
    """The cumulative category times of graph g's ranks at their arrivals, collective ends, step
    starts and stops (what window_excesses reads; gathered once per step, not once per rank); None
    without category columns. `index`: ClockIndex(m, steps), made once when several graphs are read."""
    arr_cols, end_cols = _cum_columns(m, "arrival"), _cum_columns(m, "end")
    if steps is None or not set(arr_cols + end_cols) <= set(m.columns):
        return None
    ix = index if index is not None and index.steps is steps else ClockIndex(m, steps)
    if ix.step_clock is None:
        return None
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
    # each rank's first row of the step in the steps table (NaN where it has none)
    rows = [ix.step_row.get((g.step, r), -1) for r in g.ranks.tolist()]
    return ca, ce, ix.step_clock[0][rows], ix.step_clock[1][rows]


def window_excesses(g: StepGraph, clock: tuple | None) -> np.ndarray | None:
    """(R, categories): each rank's net category excess (ms) over the others' median in the windows
    before its late arrivals in graph g (see the module docstring); None without category columns
    (`clock`: cause_clock of g).

    Every collective has one last rank, so the windows of all ranks are taken at once: per
    collective k, every member's window before k, starting no earlier than its arrival at the
    previous collective the same rank arrived last at (the windows of one rank never overlap, so
    the same time is not counted twice where segments share a start, as on CPU ranks), and the
    others' median of all collectives in one call; each rank's excesses are then summed in the
    order of its collectives, as one rank at a time did (one median call per collective, not per
    rank and collective)."""
    if clock is None:
        return None
    ca, ce, s0, s1 = clock
    R, K = g.member.shape
    ncat = len(CAUSE_CATEGORIES)
    out = np.zeros((R, ncat))
    rows = np.arange(R)[:, None]

    def start(p: np.ndarray, after: np.ndarray) -> np.ndarray:
        """(R, n, ncat): the category clock where each window starts: at the end of the collective
        p its segment starts from (or the step start), or at the rank's arrival at `after` where
        that came later (after = -1: none)."""
        if not K:  # no collective: every window starts at the step start
            return np.broadcast_to(s0[:, None, :], (R, p.shape[1], ncat))
        has = p >= 0
        pp = np.maximum(p, 0)
        t0 = np.where(has, g.coll_end[rows, pp], g.start[:, None])
        c0 = np.where(has[..., None], ce[rows, pp], s0[:, None, :])
        aa = np.maximum(after, 0)
        later = (after >= 0)[None, :] & g.member[:, aa] & (g.arrival[:, aa] > t0)
        return np.where(later[..., None], ca[:, aa], c0)

    after = np.full(K, -1)
    prev_late = {}  # rank index -> its latest collective as the last arrival, in replay order
    if K:
        last = np.nanargmax(np.where(g.member, g.arrival, -np.inf), axis=0)
        for k, s in enumerate(last.tolist()):
            after[k] = prev_late.get(s, -1)
            prev_late[s] = k
        win = ca - start(g.prev, after)  # (R, K, ncat)
        others = g.member.copy()
        others[last, np.arange(K)] = False
        with warnings.catch_warnings():
            # a collective without other members (skipped below) or a category no other member has: NaN
            warnings.filterwarnings("ignore", "All-NaN slice", RuntimeWarning)
            med = np.nanmedian(np.where(others[..., None], win, np.nan).reshape(R, K * ncat), axis=0).reshape(K, ncat)
        diff = np.nan_to_num(win[last, np.arange(K)] - med)
        for k, s in enumerate(last.tolist()):
            if others[:, k].any():
                out[s] += diff[k]
    s = int(np.argmax(g.end))
    if R > 1:
        tail = s1 - start(g.last_k[:, None], np.array([prev_late.get(s, -1)]))[:, 0]
        out[s] += np.nan_to_num(tail[s] - np.nanmedian(np.delete(tail, s, axis=0), axis=0))
    return out


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
