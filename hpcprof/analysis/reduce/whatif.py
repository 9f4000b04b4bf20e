"""What-if replay of each profiled step: what every rank costs the job, the job's straggler slowdown,
and whether collective instances matched across ranks can be trusted.

Why a replay: "the others waited X ms for rank s" is not what s costs the job. Waits overlap, a
rank that is late at one collective may be early at the next, and the delay a late rank causes
propagates through every later collective. The question a user acts on is "how much faster would
the step be if s behaved like the others?"; a replay of the step's dependency graph answers it.

Model (docs/analysis.md, "What-if replay" and "Straggler flag", says the same in prose):
- Per rank and profiled step, a CHAIN: the step start (ProfilerStep#N start), then alternately the
  rank's own work SEGMENT and a matched COLLECTIVE, then the TAIL up to the rank's step end (the
  later of the ProfilerStep end and the end of the device work launched in the step).
  Arrival of rank r at collective k = start of its NCCL kernel (GPU) or of its `gloo:<op>` (CPU);
  segment w_r(k) = arrival_r(k) - end_r(previous collective in the chain, or step start). Work that
  is not a matched collective (compute, copies, host time, collectives with ranks outside the
  analysed set or whose matching failed) is part of the segments.
- Collectives are ordered by their last arrival (all ranks agree on that order, so the graph has no
  cycles). GPU: the NCCL kernels of a stream run one after another, so a rank's segment starts at
  the end of its previous collective, or, where that one was still running when the rank arrived
  (another stream), at the latest one that had ended (`_anchors`). CPU (gloo): collectives run on
  worker threads; the main thread waits for some (DDP's buffer broadcast at the start of forward,
  the gradient all-reduces still in flight at the end of backward) and goes on computing during
  others (the gradient all-reduces launched during backward). The rank mapper marks each instance
  `waited` from the main thread's activity during it (hpcprof.analysis.ranks.timeline); a CPU
  rank's segment starts at the end of the latest-ending collective it waited for, or the step
  start, and its tail at the end of the latest-ending one it waited for (`_chain_points`).
  The model ignores: a dependency on a collective that overlapped the arrival (another stream),
  transfer times that would change with other arrival patterns, and a rank whose arrival was set by its own compute while the model chains it to the previous
  collective's end (GPU; it then overstates what an earlier end would have saved).
- A collective ends at its last arrival plus its TRANSFER, T(k) = median over its ranks of
  (end_r - last arrival), held fixed in every replay. Every rank leaves it at that instant.
- Replay: start at the measured (clock-aligned) step starts, walk the collectives in order:
  E(k) = max over its ranks of (E(previous of r) + w_r(k)) + T(k); rank end = E(last) + tail.
  Step time = latest rank end - earliest rank start (the same definition as the trace drills of
  hpcprof.drills.trace_drill, whose injected delays are the known answers the tests check).
- replay error = (step time replayed with the measured segments - measured step time) / measured;
  it must be small before any cost is trusted (reported per run and per step).
- cost(s) per step = replayed step time - replayed step time with s's segments and tail replaced
  by the median of the other ranks' matching segments (same collective) and tails. Both terms are
  replays, so the model's own error cancels. It can be negative (s was faster than the median).
- straggler slowdown S = replayed step time / step time replayed with every rank at the median of
  all ranks (sum over the profiled steps).
- Step starts are inputs: lateness a rank brings into a step was made in the previous step.

Flag rule: a rank is a straggler when its cost exceeds max(NOISE_FLOOR_MS, REL_THRESHOLD x that
step's time) PLUS the other ranks' typical cost (over the other ranks, the median of their median
cost over the profiled steps), in at least MIN_STEP_SHARE of the profiled steps; stragglers are
ordered by their mean cost. Why the others' cost is added: the
replay puts s at the others' median, which removes s's step-to-step noise as well as any lateness,
so in a job whose ranks jitter every rank has a positive cost (2 ranks with independent jitter of
standard deviation sd per segment: about 0.56 sd per segment each; measured on the 2-rank CPU
demo: both ranks 15-55 ms in a 550 ms step). What the others typically cost is that noise level;
a straggler costs more than it, a healthy rank of a jittery job does not. Typical, not the same
step's: in a step where another rank was itself late elsewhere (a core slowing down for a moment),
its cost is its own lateness, not jitter, and must not hide the straggler's (a live drill missed
one of its 5 drilled steps that way). A real straggler
among ranks that do not jitter (8-rank GPU jobs, the trace drills) meets others' costs near zero,
so the threshold is unchanged there. The same holds across steps: where the late rank changes
from step to step (2 ranks whose cores slow down in turn), each is above the threshold in about
half of the steps; so a straggler must also cost more than the other ranks over the profiled
steps: its mean cost minus the median of the other ranks' mean costs above the (median) base
threshold. The price of holding each rank against the others: with two ranks that are both late
through most steps (each at its own point of the step), each is held against the other and
neither may be flagged; their costs still show in per_rank (docs/analysis.md, "Straggler flag").
NOISE_FLOOR_MS (1 ms): below it scheduling and clock jitter dominate, and nothing a user
could fix is that small per step; REL_THRESHOLD (5%): a rank costing less than a twentieth of the
step is not worth chasing before the job's other recommendations; MIN_STEP_SHARE (0.5, at least
half): a straggler is late persistently or periodically (a rank late every second step, as a
periodic checkpoint, GC or slow shard causes, costs the job its mean cost every step), not once.

Cause: in the windows before the straggler's late arrivals (the segments of the collectives where
it arrived last, and its tail when it ended the step last), the time in each category minus the
median of the other ranks' matching segments, summed, then netted: time a category lost cancels
the largest positive excesses first (excesses that cancel are no cause; see `_net`).
GPU ranks partition each window by device state first (gpu_compute, memcpy, comm: collectives
outside the matched ones) and split the device-idle time by host state (data_loading, cpu_work,
host_gap); CPU ranks partition by the main thread (data_loading, cpu_work, comm: a gloo op in
flight while the main thread is idle, host_gap). The largest category is named when it explains
at least CAUSE_MIN_SHARE (half) of the cost; otherwise the cause is "mixed" with the top two shares.

Matching: see hpcprof.analysis.reduce.matching (only trusted instances reach the replay).

Size: over 300 lines because the step graph, its replay and the cause read the same StepGraph
arrays (anchors, segments, arrivals); split, they would pass all of them between modules.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..ranks.categories import CAUSE_CATEGORIES
from .matching import Matching, match_collectives

MAX_REPLAY_ERROR_PCT = 3.0  # above it the replay does not reproduce the step: the costs get a warning
NOISE_FLOOR_MS = 1.0
REL_THRESHOLD = 0.05
MIN_STEP_SHARE = 0.5
CAUSE_MIN_SHARE = 0.5
BASE_THRESHOLD_TEXT = f"max({NOISE_FLOOR_MS:g} ms, {100 * REL_THRESHOLD:g}% of the step)"
"""The base straggler threshold in words, for the report and the recommendations (one definition)."""
NO_STRAGGLER_TEXT = (f"no rank costs the job more than the threshold ({BASE_THRESHOLD_TEXT}, plus what the other "
                     "ranks cost from their own jitter) in most profiled steps")
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


# --------------------------------------------------------------------------------------- replay
@dataclass
class StepGraph:
    """One profiled step: R ranks x K collectives (in replay order)."""

    step: int
    ranks: np.ndarray  # (R,)
    start: np.ndarray  # (R,) aligned step starts
    end: np.ndarray  # (R,) aligned step ends
    member: np.ndarray  # (R, K) bool
    seg: np.ndarray  # (R, K) segment before collective k (NaN if not a member)
    transfer: np.ndarray  # (K,)
    tail: np.ndarray  # (R,)
    arrival: np.ndarray  # (R, K) aligned arrivals (NaN if not a member)
    keys: list
    prev: np.ndarray  # (R, K) the collective the segment before k starts from (-1: step start), see _anchors
    last_k: np.ndarray  # (R,) the rank's latest-ending collective, where its tail starts (-1: none)
    coll_end: np.ndarray  # (R, K) aligned ends (NaN if not a member)

    @property
    def measured_ms(self) -> float:
        return float(self.end.max() - self.start.min()) / 1e3


def build_graphs(m: pd.DataFrame, steps: pd.DataFrame, offsets: dict) -> list[StepGraph]:
    """Step graphs from matched instances `m` (arrival/end aligned, key) and the per-rank steps
    table (rank, step, ts_us, end_us[, device_end_us]). Without step markers, one graph over the
    whole trace (start = a rank's first arrival, end = its last collective end)."""
    if steps is None or steps.empty:
        g = m.groupby("rank")
        steps = pd.DataFrame({"rank": g["arrival"].min().index, "step": -1, "start": g["arrival"].min().to_numpy(),
                              "stop": g["end"].max().to_numpy()})
        m = m.assign(step=-1)
    else:
        off = steps["rank"].map(offsets).fillna(0.0)
        stop = steps["end_us"]
        if "device_end_us" in steps:
            stop = np.fmax(stop, steps["device_end_us"])
        steps = pd.DataFrame({"rank": steps["rank"], "step": steps["step"], "start": steps["ts_us"] - off, "stop": stop - off})
    # GPU: NCCL kernels of a stream run one after the other: a rank's segment runs from its previous
    # collective's end. CPU (gloo): only the collectives the main thread waited for are chain points.
    serial = not ("source" in m and (m["source"] == "cpu").mean() > 0.5)
    waited_col = m["waited"].fillna(True).astype(bool) if "waited" in m else pd.Series(True, index=m.index)
    m = m.assign(waited=waited_col)
    out = []
    key_step = m.groupby("key")["step"].agg(lambda s: s.mode().iloc[0])
    m = m[m["step"].to_numpy() == m["key"].map(key_step).to_numpy()]
    for step, st in steps.groupby("step"):
        st = st.drop_duplicates("rank").sort_values("rank")
        ranks = st["rank"].to_numpy()
        if len(ranks) < 2:
            continue
        sub = m[(m["step"] == step) & m["rank"].isin(ranks)]
        cnt = sub.groupby("key")["rank"].transform("nunique")
        sub = sub[cnt >= 2]
        g = sub.groupby("key")
        order = pd.DataFrame({"last": g["arrival"].max(), "end": g["end"].median()}).sort_values(["last", "end"])
        keys = list(order.index)
        R, K = len(ranks), len(keys)
        ri = {int(r): i for i, r in enumerate(ranks)}
        ki = {k: j for j, k in enumerate(keys)}
        arr = np.full((R, K), np.nan)
        end = np.full((R, K), np.nan)
        waited = np.zeros((R, K), dtype=bool)
        for r, k, a, e, w in zip(sub["rank"], sub["key"], sub["arrival"], sub["end"], sub["waited"]):
            arr[ri[int(r)], ki[k]], end[ri[int(r)], ki[k]] = a, e
            waited[ri[int(r)], ki[k]] = bool(w)
        member = ~np.isnan(arr)
        chain = member if serial else member & _chain_points(member, arr, waited)[None, :]
        start, stop = st["start"].to_numpy(float), st["stop"].to_numpy(float)
        prev = _anchors(member, arr, end, chain, by_end=not serial)
        seg = np.full((R, K), np.nan)
        for i in range(R):
            for k in np.flatnonzero(member[i]):
                p = prev[i, k]
                seg[i, k] = arr[i, k] - (end[i, p] if p >= 0 else start[i])
        last_k = _tail_anchors(chain, end)
        tail = stop - np.where(last_k >= 0, end[np.arange(R), np.maximum(last_k, 0)] if K else start, start)
        last_arr = np.nanmax(arr, axis=0) if K else np.empty(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            transfer = np.nanmedian(end - last_arr[None, :], axis=0) if K else np.empty(0)
        out.append(StepGraph(int(step), ranks, start, stop, member, seg, transfer, tail, arr, keys, prev, last_k, end))
    return out


def _anchors(member: np.ndarray, arr: np.ndarray, end: np.ndarray, chain: np.ndarray | None = None,
             by_end: bool = False) -> np.ndarray:
    """(R, K): the collective each rank's segment before k starts from (-1: the step start).

    Normally the rank's previous collective. Where that one was still running when the rank arrived
    at k (gloo runs collectives on two worker threads; NCCL on several streams), k did not wait for
    it: go back to the latest collective that had ended. Only collectives in `chain` qualify (CPU:
    the ones the main thread waited for), and with `by_end` the latest-ending one is taken rather
    than the latest in replay order (CPU: the main thread resumes when the last of them ends). The
    anchor is then the same for every member (the earliest of their own), so that the ranks'
    segments before k span the same work and the median of the others' is a fair stand-in."""
    R, K = member.shape
    chain = member if chain is None else chain & member
    own = np.full((R, K), -1, dtype=int)
    for i in range(R):
        ks = np.flatnonzero(member[i])
        for n, k in enumerate(ks):
            done = [j for j in ks[:n] if chain[i, j] and end[i, j] <= arr[i, k]]
            if done:
                own[i, k] = max(done, key=lambda j: (end[i, j], j)) if by_end else done[-1]
    anchor = np.full((R, K), -1, dtype=int)
    for k in range(K):
        m = np.flatnonzero(member[:, k])
        common = own[m, k].min() if m.size else -1
        for i in m:
            anchor[i, k] = common if common < 0 or chain[i, common] else own[i, k]
    return anchor


def _chain_points(member: np.ndarray, arr: np.ndarray, waited: np.ndarray) -> np.ndarray:
    """(K,) CPU ranks: the collectives whose end the ranks' later work depends on: a rank that
    arrived before the last one sat blocked in it until it ended (`waited`, from the main thread's
    activity). The late rank itself hardly waits (only the transfer), so its flag is not asked.
    One decision per collective, so that every member's segments start from the same point and
    the median of the others' is a fair stand-in."""
    K = member.shape[1]
    out = np.zeros(K, dtype=bool)
    for k in range(K):
        m = np.flatnonzero(member[:, k])
        if m.size == 0:
            continue
        last = m[np.argmax(arr[m, k])]
        early = m[m != last]
        out[k] = bool(waited[early, k].any()) if early.size else bool(waited[m, k].all())
    return out


def _tail_anchors(chain: np.ndarray, end: np.ndarray) -> np.ndarray:
    """(R,) the collective each rank's tail starts from (-1: the step start): its latest-ending chain
    point, or, where the ranks' differ, the earliest of them that is a chain point of every rank, so
    that the tails span the same work (as `_anchors` does for segments)."""
    R, K = chain.shape
    if not K:
        return np.full(R, -1, dtype=int)
    own = np.where(chain.any(axis=1), np.nanargmax(np.where(chain, end, -np.inf), axis=1), -1)
    if (own >= 0).all():
        common = int(own.min())
        if chain[:, common].all():
            return np.full(R, common, dtype=int)
    return own


def _median_others(x: np.ndarray, member: np.ndarray) -> np.ndarray:
    """(R, K): per rank s and collective k, the median of the other members' x (x[s] itself where
    s is the only member). Per collective from its members' sorted values: leaving out the value at
    sorted position p shifts the indices at and above p by one (no R x R work: 256 ranks)."""
    out = np.array(x, dtype=float, copy=True)
    for k in range(x.shape[1]):
        valid = member[:, k] & ~np.isnan(x[:, k])
        m = np.flatnonzero(valid)
        n = m.size
        if n == 0:
            continue
        order = np.argsort(x[m, k], kind="stable")
        v = x[m, k][order]
        # the ranks that are not (valid) members: the median of all n members
        half = n // 2
        med_all = v[half] if n % 2 else (v[half - 1] + v[half]) / 2
        out[~valid, k] = med_all
        if n == 1:
            continue  # its only member keeps its own value
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)  # sorted position of each member
        n1 = n - 1

        def at(i):
            return v[i + (i >= pos)]

        out[m, k] = at(np.full(n, (n1 - 1) // 2)) if n1 % 2 else (at(np.full(n, n1 // 2 - 1)) + at(np.full(n, n1 // 2))) / 2
    return out


def replay(g: StepGraph, seg: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """Step times (ms) of S scenarios: `seg` (S, R, K) and `tail` (S, R) replace the measured ones."""
    S, R = tail.shape
    K = g.member.shape[1]
    E = np.zeros((S, K + 1))  # E[:, k]: when collective k ends; column K (index -1): unused
    base = np.broadcast_to(g.start, (S, R))
    for k in range(K):
        m = np.flatnonzero(g.member[:, k])
        a = g.prev[m, k]
        t0 = np.where(a >= 0, E[:, a], base[:, m])
        E[:, k] = np.max(t0 + seg[:, m, k], axis=1) + g.transfer[k]
    lk = g.last_k
    fin = np.where(lk >= 0, E[:, lk], base) + tail
    return (np.max(fin, axis=1) - g.start.min()) / 1e3


def scenarios(g: StepGraph) -> tuple[np.ndarray, np.ndarray]:
    """Segments and tails of the R + 2 replays: as measured, each rank s at the median of the others
    in this step (scenario 1 + s), every rank at the median of all (last).

    Why the same step and not the others' median pooled over the profiled steps: with few ranks the
    pooled median mixes the others' good and bad steps (2 ranks, one late every second step: the
    pooled "others" of the healthy rank is half late), and the step's own conditions (a slow step
    for every rank) are lost."""
    R, K = g.seg.shape
    S = R + 2
    seg = np.broadcast_to(g.seg, (S, R, K)).copy()
    tail = np.broadcast_to(g.tail, (S, R)).copy()
    mo = _median_others(g.seg, g.member)
    to = _median_others(g.tail[:, None], np.ones((R, 1), dtype=bool))[:, 0]
    idx = np.arange(R)
    seg[1 + idx, idx, :] = np.where(g.member, mo, np.nan)
    tail[1 + idx, idx] = to
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ma = np.nanmedian(np.where(g.member, g.seg, np.nan), axis=0) if K else np.empty(0)
    seg[-1] = np.where(g.member, ma[None, :], np.nan)
    tail[-1] = np.median(g.tail)
    return seg, tail


# ---------------------------------------------------------------------------------------- cause
def _cum_columns(df: pd.DataFrame, at: str) -> list[str]:
    return [f"cum_{c}_{at}_ms" for c in CAUSE_CATEGORIES]


def _cause_clock(g: StepGraph, m: pd.DataFrame, steps: pd.DataFrame | None) -> tuple | None:
    """The cumulative category times of graph g's ranks at their arrivals, collective ends, step
    starts and stops (what _window_excess reads; gathered once per step, not once per rank); None
    without category columns."""
    arr_cols, end_cols = _cum_columns(m, "arrival"), _cum_columns(m, "end")
    if steps is None or not set(arr_cols + end_cols) <= set(m.columns):
        return None
    st_start, st_end = _cum_columns(steps, "start"), _cum_columns(steps, "stop")
    if not set(st_start + st_end) <= set(steps.columns):
        return None
    R, K = g.member.shape
    ncat = len(CAUSE_CATEGORIES)
    ca = np.full((R, K, ncat), np.nan)
    ce = np.full((R, K, ncat), np.nan)
    ri = {int(r): i for i, r in enumerate(g.ranks)}
    ki = {k: j for j, k in enumerate(g.keys)}
    sub = m[(m["key"].isin(ki)) & (m["rank"].isin(ri))]
    rr = sub["rank"].map(ri).to_numpy()
    kk = sub["key"].map(ki).to_numpy()
    ca[rr, kk] = sub[arr_cols].to_numpy(float)
    ce[rr, kk] = sub[end_cols].to_numpy(float)
    stp = steps[steps["step"] == g.step].drop_duplicates("rank").set_index("rank")
    s0 = stp.reindex(g.ranks)[st_start].to_numpy(float)
    s1 = stp.reindex(g.ranks)[st_end].to_numpy(float)
    return ca, ce, s0, s1


def _window_excess(g: StepGraph, s: int, clock: tuple | None) -> dict[str, float] | None:
    """Net category excess (ms) of rank index s over the others' median in the windows before its
    late arrivals in graph g (see the module docstring); None without category columns (`clock`:
    _cause_clock of g)."""
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
            excess += np.nan_to_num(window(s, k, after) - np.nanmedian(others, axis=0))
        after = k
    if int(np.argmax(g.end)) == s:
        others = [window(i, -1, after) for i in range(R) if i != s]
        excess += np.nan_to_num(window(s, -1, after) - np.nanmedian(others, axis=0))
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


# --------------------------------------------------------------------------------------- result
@dataclass
class WhatIf:
    steps: pd.DataFrame  # step, measured_ms, replayed_ms, replay_error_pct, ideal_ms, threshold_ms
    costs: pd.DataFrame  # rank, step, cost_ms, wait_ms, others_cost_ms, threshold_ms, above
    per_rank: pd.DataFrame  # rank, whatif_cost_ms_per_step, whatif_cost_ms_per_step_median, steps_above_share
    stragglers: list
    collectives: pd.DataFrame
    matching: Matching | None
    straggler_slowdown: float | None
    replay_error_pct: float | None  # largest |error| over the profiled steps
    warnings: list = field(default_factory=list)
    # every rank's window excess per category (ms per profiled step, before netting): what its cause
    # would be read from, flagged or not; {} without category data
    excess_ms_per_step: dict = field(default_factory=dict)
    graphs: list = field(default_factory=list)
    """The replayed step graphs (StepGraph), for the critical path (reduce/critical_path.py)."""


def analyze(colls: pd.DataFrame, steps: pd.DataFrame | None, hosts: dict) -> WhatIf:
    """The what-if analysis of a job from the per-rank collectives and steps tables (module docstring).

    `colls`: rank, group, kind, seq, step, idx, arrival_us, end_us and, for the cause, the
    cumulative category columns cum_<category>_{arrival,end}_ms. `steps`: rank, step, ts_us, end_us
    [, device_end_us, cum_<category>_{start,stop}_ms]. `hosts`: rank -> host (one clock per host)."""
    empty = WhatIf(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), [], pd.DataFrame(), None, None, None, [])
    if colls is None or colls.empty or colls["rank"].nunique() < 2:
        return empty
    mt = match_collectives(colls, hosts)
    graphs = [g for g in build_graphs(mt.df, steps, mt.offsets) if g.member.shape[1] > 0]
    if not graphs:
        empty.matching, empty.warnings = mt, list(mt.warnings)
        return empty
    step_rows, cost_rows = [], []
    excess_sum: dict[int, np.ndarray] = {}
    have_cause = True
    for g in graphs:
        seg, tail = scenarios(g)
        t = replay(g, seg, tail)
        thr = max(NOISE_FLOOR_MS, REL_THRESHOLD * g.measured_ms)
        step_rows.append({"step": g.step, "measured_ms": g.measured_ms, "replayed_ms": t[0], "ideal_ms": t[-1],
                          "replay_error_pct": 100 * (t[0] - g.measured_ms) / g.measured_ms if g.measured_ms else 0.0,
                          "threshold_ms": thr, "collectives": g.member.shape[1]})
        last_arr = np.nanmax(g.arrival, axis=0)
        step_costs = t[0] - t[1:1 + len(g.ranks)]
        clock = _cause_clock(g, mt.df, steps)
        for i, r in enumerate(g.ranks):
            cost = float(step_costs[i])
            # a rank's time in the matched collectives: waiting for the last arrival, then the transfer
            wait = float(np.nansum(np.where(g.member[i], last_arr - g.arrival[i], 0.0))) / 1e3
            inside = float(np.nansum(np.where(g.member[i], g.coll_end[i] - g.arrival[i], 0.0))) / 1e3
            cost_rows.append({"rank": int(r), "step": g.step, "cost_ms": cost, "wait_ms": wait, "in_collectives_ms": inside,
                              "transfer_ms": max(0.0, inside - wait), "base_threshold_ms": thr})
            ex = _window_excess(g, i, clock)
            if ex is None:
                have_cause = False
            else:
                excess_sum[int(r)] = excess_sum.get(int(r), np.zeros(len(CAUSE_CATEGORIES))) + np.array(list(ex.values()))
    st = pd.DataFrame(step_rows)
    costs = pd.DataFrame(cost_rows)
    # the jitter level each rank is held against: the median, over the other ranks, of their median
    # cost over the profiled steps (see the module docstring, "Flag rule")
    typical = costs.groupby("rank")["cost_ms"].median()
    noise = {r: max(0.0, float(typical.drop(r).median())) if len(typical) > 1 else 0.0 for r in typical.index}
    costs["others_cost_ms"] = costs["rank"].map(noise)
    costs["threshold_ms"] = costs["base_threshold_ms"] + costs["others_cost_ms"]
    costs["above"] = costs["cost_ms"] > costs["threshold_ms"]
    costs = costs.drop(columns="base_threshold_ms")
    g = costs.groupby("rank")
    n_steps = len(graphs)
    per_rank = pd.DataFrame({
        "whatif_cost_ms_per_step": g["cost_ms"].mean(),
        "whatif_cost_ms_per_step_median": g["cost_ms"].median(),
        "steps_above_share": g["above"].sum() / n_steps,
        "wait_ms_per_step": g["wait_ms"].mean(),
        "transfer_ms_per_step": g["transfer_ms"].mean(),
        "in_collectives_ms_per_step": g["in_collectives_ms"].mean(),
    }).reset_index()
    excess_per_step = {r: {c: round(float(v) / n_steps, 3) for c, v in zip(CAUSE_CATEGORIES, e)}
                       for r, e in sorted(excess_sum.items())} if have_cause else {}
    stragglers = []
    base_thr = float(st["threshold_ms"].median())
    for row in per_rank.sort_values(["whatif_cost_ms_per_step", "rank"], ascending=[False, True]).itertuples():
        others_mean = per_rank.loc[per_rank["rank"] != row.rank, "whatif_cost_ms_per_step"]
        excess = row.whatif_cost_ms_per_step - max(0.0, float(others_mean.median()) if len(others_mean) else 0.0)
        if not (row.steps_above_share >= MIN_STEP_SHARE and excess > base_thr):
            continue
        mine = costs[costs["rank"] == row.rank]
        total = float(mine["cost_ms"].clip(lower=0).sum())
        ex = dict(zip(CAUSE_CATEGORIES, excess_sum[row.rank].tolist())) if have_cause else None
        cause, shares = name_cause(ex, total)
        flagged = int(mine["above"].sum())
        stragglers.append({
            "rank": int(row.rank),
            "cost_ms_per_step": round(float(row.whatif_cost_ms_per_step), 3),
            "cost_ms_per_step_median": round(float(row.whatif_cost_ms_per_step_median), 3),
            "steps_flagged": flagged,
            "steps": n_steps,
            "late_in_steps_share": round(float(row.steps_above_share), 3),
            # the share of profiled steps above the threshold, x n/(n+1): one profiled step gives at most 0.5
            "confidence": round(flagged / n_steps * n_steps / (n_steps + 1), 3),
            "cause": cause,
            "cause_detail": CAUSE_TEXT.get(cause, cause) if cause != "mixed" else
            "mixed: " + ", ".join(f"{c} {100 * v:.0f}%" for c, v in shares.items()) + " of the cost",
            "cause_shares": shares,
            "cause_excess_ms_per_step": excess_per_step.get(int(row.rank), {}),
            "threshold_ms": round(float(mine["threshold_ms"].median()), 3),
            "base_threshold_ms": round(base_thr, 3),
            "excess_over_others_ms_per_step": round(float(excess), 3),
            "others_cost_ms_per_step": round(float(mine["others_cost_ms"].median()), 3),
            "others_wait_ms_per_step": round(float(per_rank.loc[per_rank["rank"] != row.rank, "wait_ms_per_step"].median()), 3),
        })
    ideal = float(st["ideal_ms"].sum())
    slowdown = float(st["replayed_ms"].sum()) / ideal if ideal > 0 else None
    err = float(st["replay_error_pct"].abs().max())
    warnings = list(mt.warnings)
    return WhatIf(st, costs, per_rank, stragglers, _collectives_table(mt.df), mt, slowdown, err, warnings, excess_per_step, graphs)


def _collectives_table(m: pd.DataFrame) -> pd.DataFrame:
    """One row per matched collective: who arrived last, the skew and the transfer time."""
    if m.empty:
        return pd.DataFrame()
    g = m.groupby("key")
    last = m.loc[g["arrival"].idxmax(), ["key", "rank"]].set_index("key")["rank"]
    out = pd.DataFrame({
        "group": g["group"].first(), "kind": g["kind"].first(), "step": g["step"].max(), "n_ranks": g["rank"].nunique(),
        "first_arrival_us": g["arrival"].min(), "last_arrival_us": g["arrival"].max(), "end_us": g["end"].median(),
        "last_rank": last,
    })
    out["skew_ms"] = (out["last_arrival_us"] - out["first_arrival_us"]) / 1e3
    out["transfer_ms"] = (out["end_us"] - out["last_arrival_us"]) / 1e3
    # what the others spent waiting for the last arrival, summed over the ranks
    out["waited_ms"] = (m["key"].map(out["last_arrival_us"]) - m["arrival"]).clip(lower=0).groupby(m["key"]).sum() / 1e3
    for col in ("msg_bytes", "comms_id", "seq", "comm_reason"):
        if col in m:
            out[col] = g[col].median() if col == "msg_bytes" else g[col].first()
    return out.reset_index().sort_values("first_arrival_us", ignore_index=True)
