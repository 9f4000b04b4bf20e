"""The step graph of the what-if replay, and the replay itself: each profiled step as R ranks x K
matched collectives, and the step time they give when some ranks' work changes (reduce/whatif.py
asks it what each rank costs the job; reduce/critical_path.py walks it back to the chain that sets
the step's end).

Model (docs/analysis.md, "What-if replay", says the same in prose):
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
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd



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
    measured_ends: tuple | None = None
    """replay_ends with the measured segments (E, setter, fin of one scenario), kept by `replay` of
    the `scenarios`, whose scenario 0 it is: the critical path reads it rather than replaying again."""

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
    # the keys as integers in the order of the key texts (the groupbys below sort and break ties by
    # key as before): integer keys group far faster than the Arrow strings themselves
    codes, key_text = pd.factorize(m["key"], sort=True)
    m = pd.DataFrame({"key": codes, "step": m["step"], "rank": m["rank"], "arrival": m["arrival"], "end": m["end"],
                      "waited": waited_col})[codes >= 0]
    out = []
    # each collective's step: the most frequent among its instances, the lowest of equally frequent ones
    # (Series.mode's first), counted in one groupby rather than one Python call per collective
    n = m.groupby(["key", "step"]).size().rename("n").reset_index()
    key_step = n.sort_values(["key", "n", "step"], ascending=[True, False, True], kind="stable").drop_duplicates("key").set_index("key")["step"]
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
        keys = list(key_text[order.index])  # order.index: the key codes
        R, K = len(ranks), len(keys)
        ri = {int(r): i for i, r in enumerate(ranks)}
        arr = np.full((R, K), np.nan)
        end = np.full((R, K), np.nan)
        waited = np.zeros((R, K), dtype=bool)
        # each instance's cell, the last instance of a (rank, key) kept (as assigning them in order did)
        cell = np.array([ri[r] for r in sub["rank"].tolist()], dtype=np.int64) * K + order.index.get_indexer(sub["key"])
        last = cell.size - 1 - np.unique(cell[::-1], return_index=True)[1]
        cell = cell[last]
        arr.flat[cell] = sub["arrival"].to_numpy(float)[last]
        end.flat[cell] = sub["end"].to_numpy(float)[last]
        waited.flat[cell] = sub["waited"].to_numpy(bool)[last]
        member = ~np.isnan(arr)
        chain = member if serial else member & _chain_points(member, arr, waited)[None, :]
        start, stop = st["start"].to_numpy(float), st["stop"].to_numpy(float)
        prev = _anchors(member, arr, end, chain, by_end=not serial)
        frm = np.where(prev >= 0, end[np.arange(R)[:, None], np.maximum(prev, 0)], start[:, None])
        seg = np.where(member, arr - frm, np.nan)
        last_k = _tail_anchors(chain, end)
        tail = stop - np.where(last_k >= 0, end[np.arange(R), np.maximum(last_k, 0)] if K else start, start)
        last_arr = np.nanmax(arr, axis=0) if K else np.empty(0)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "All-NaN slice", RuntimeWarning)  # a collective without an end on any rank: NaN
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
    earlier = np.tri(K, K, -1, dtype=bool)  # [k, j]: j before k in replay order
    cols = np.arange(K)
    for i in range(R):  # one rank's (K, K) candidates at a time: K x K x R could be large
        done = earlier & chain[i][None, :] & (end[i][None, :] <= arr[i][:, None])  # [k, j]: j had ended when i arrived at k
        if by_end:  # the latest-ending, the latest in replay order among equal ends
            e = np.where(done, end[i][None, :], -np.inf)
            done &= e == e.max(axis=1, initial=-np.inf)[:, None]
        pick = np.where(done, cols[None, :], -1).max(axis=1, initial=-1)  # the latest candidate in replay order
        own[i] = np.where(member[i], pick, -1)
    common = np.where(member, own, K).min(axis=0, initial=K)  # the earliest of the members' own anchors
    at = chain[np.arange(R)[:, None], np.clip(common, 0, max(K - 1, 0))[None, :]] if K else np.zeros((R, 0), dtype=bool)
    use = (common < 0)[None, :] | at
    return np.where(member, np.where(use, common[None, :], own), -1)


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
    s is the only member). From each collective's members' sorted values: leaving out the value at
    sorted position p shifts the indices at and above p by one (no R x R work: 256 ranks). All
    collectives at once: the members' values sorted within each column (the others after them),
    the same positions picked column by column as one collective at a time did (an infinite value,
    which would tie with the others' fill, takes the loop)."""
    x = np.asarray(x, dtype=float)
    valid = member & ~np.isnan(x)
    if np.isinf(x[valid]).any():
        return _median_others_loop(x, member)
    out = x.copy()
    R, K = x.shape
    if not (R and K):
        return out
    order = np.argsort(np.where(valid, x, np.inf), axis=0, kind="stable")
    cols = np.arange(K)
    v = x[order, cols]  # each column's members' values ascending, then the others'
    pos = np.empty((R, K), dtype=np.int64)
    pos[order, cols] = np.arange(R)[:, None]  # each row's sorted position in its column
    n = valid.sum(axis=0)
    half = n // 2
    med_all = np.where(n % 2 == 1, v[np.minimum(half, R - 1), cols], (v[np.maximum(half - 1, 0), cols] + v[np.minimum(half, R - 1), cols]) / 2)
    out = np.where(~valid & (n > 0)[None, :], med_all[None, :], out)  # not a (valid) member: the median of all members
    n1 = n - 1

    def at(i):  # (R, K): the value at sorted position i of the column without the row's own value
        j = i[None, :] + (i[None, :] >= pos)
        return v[np.clip(j, 0, R - 1), cols[None, :]]

    others = np.where((n1 % 2 == 1)[None, :], at((n1 - 1) // 2), (at(n1 // 2 - 1) + at(n1 // 2)) / 2)
    return np.where(valid & (n > 1)[None, :], others, out)


def _median_others_loop(x: np.ndarray, member: np.ndarray) -> np.ndarray:
    """_median_others one collective at a time (for the values that are infinite)."""
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


@dataclass
class ScenarioSegments:
    """The segments of the R + 2 scenarios of `scenarios`, without their (S, R, K) array: scenario 0
    is the measured segments, scenario 1 + s the measured ones with rank s's row replaced by `own[s]`,
    the last one `every` for all ranks. The array grows with the square of the ranks (at 1,024 ranks
    it was the reduce's peak); a collective's column of it (`column`) is all the replay reads at a time."""

    measured: np.ndarray  # (R, K)
    own: np.ndarray  # (R, K): rank s's segments in scenario 1 + s
    every: np.ndarray  # (R, K): all ranks' in the last scenario

    def column(self, m: np.ndarray, k: int) -> np.ndarray:
        """(S, len(m)): collective k's segments of ranks m in every scenario."""
        out = np.empty((self.measured.shape[0] + 2, m.size))
        out[:] = self.measured[m, k]
        out[1 + m, np.arange(m.size)] = self.own[m, k]
        out[-1] = self.every[m, k]
        return out

    def array(self) -> np.ndarray:
        """(S, R, K), as a plain array (what `replay_ends` also accepts)."""
        R = self.measured.shape[0]
        seg = np.broadcast_to(self.measured, (R + 2,) + self.measured.shape).copy()
        seg[1 + np.arange(R), np.arange(R), :] = self.own
        seg[-1] = self.every
        return seg


def replay_ends(g: StepGraph, seg: np.ndarray | ScenarioSegments, tail: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The replay of S scenarios (`seg` (S, R, K), or ScenarioSegments, and `tail` (S, R) replace the measured ones):
    when each collective ends, E (S, K); the rank index whose arrival set that end (the first of
    equal ones), (S, K); when each rank ends, (S, R). The one definition of the replay: `replay`
    gives its step times; the critical path (reduce/critical_path.py) walks it back from the rank
    that ends last."""
    S, R = tail.shape
    K = g.member.shape[1]
    E = np.zeros((S, K + 1))  # E[:, k]: when collective k ends; column K (index -1): unused
    setter = np.full((S, K), -1, dtype=int)
    base = np.broadcast_to(g.start, (S, R))
    rows = np.arange(S)
    for k in range(K):
        m = np.flatnonzero(g.member[:, k])
        a = g.prev[m, k]
        ready = np.where(a >= 0, E[:, a], base[:, m]) + (seg.column(m, k) if isinstance(seg, ScenarioSegments) else seg[:, m, k])
        j = np.argmax(ready, axis=1)
        setter[:, k] = m[j]
        E[:, k] = ready[rows, j] + g.transfer[k]
    lk = g.last_k
    fin = np.where(lk >= 0, E[:, lk], base) + tail
    return E[:, :K], setter, fin


def replay(g: StepGraph, seg: np.ndarray | ScenarioSegments, tail: np.ndarray) -> np.ndarray:
    """Step times (ms) of S scenarios: `seg` (S, R, K, or ScenarioSegments) and `tail` (S, R) replace the measured ones."""
    E, setter, fin = replay_ends(g, seg, tail)
    if isinstance(seg, ScenarioSegments):  # scenario 0: the measured segments and tails (each row is replayed apart)
        g.measured_ends = (E[0], setter[0], fin[0])
    return (np.max(fin, axis=1) - g.start.min()) / 1e3


def scenarios(g: StepGraph) -> tuple[ScenarioSegments, np.ndarray]:
    """Segments and tails of the R + 2 replays: as measured, each rank s at the median of the others
    in this step (scenario 1 + s), every rank at the median of all (last).

    Why the same step and not the others' median pooled over the profiled steps: with few ranks the
    pooled median mixes the others' good and bad steps (2 ranks, one late every second step: the
    pooled "others" of the healthy rank is half late), and the step's own conditions (a slow step
    for every rank) are lost."""
    R, K = g.seg.shape
    S = R + 2
    tail = np.broadcast_to(g.tail, (S, R)).copy()
    mo = _median_others(g.seg, g.member)
    to = _median_others(g.tail[:, None], np.ones((R, 1), dtype=bool))[:, 0]
    idx = np.arange(R)
    tail[1 + idx, idx] = to
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "All-NaN slice", RuntimeWarning)  # a collective without a segment on any rank: NaN
        ma = np.nanmedian(np.where(g.member, g.seg, np.nan), axis=0) if K else np.empty(0)
    tail[-1] = np.median(g.tail)
    return ScenarioSegments(g.seg, np.where(g.member, mo, np.nan), np.where(g.member, ma[None, :], np.nan)), tail
