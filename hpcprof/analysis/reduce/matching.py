"""Matching collective instances across ranks, checked so that a wrong pairing is never used as
evidence of waiting (issue 10, item 4; docs/analysis.md "Matching you can trust").

Matching you can trust: instances are first keyed by (process group, sequence number) or else by
(group, step, kind, n-th of that kind in the step); then checked. A collective ends on all its
ranks at nearly the same instant and nobody leaves before the last one arrived, so an instance is
kept only if its end lies within TOL / 2 of the collective's median end (two kept instances end
at most TOL apart) and not before the last arrival minus TOL. TOL is learned from the data
(`learn_tolerance`): TOL_FACTOR x the median end spread of the cluster of well-matched
collectives. Instances that fail are re-paired by end time (same kind and group, mutual nearest end
within TOL, overlapping): a sampled or multi-stream trace pairs kernels wrongly by order. What still
fails is dropped, counted and reported as a warning; the replay (reduce.whatif) then treats it as
the rank's own work, never as evidence of waiting. Clock offsets come from the one estimator
(reduce.clocks) on the keyed instances, before the check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .clocks import estimate_clocks

TOL_FLOOR_US = 20.0  # NCCL kernels of one collective end within a few us on one host (Kineto: 1 us)
TOL_FLOOR_CPU_US = 4000.0  # a gloo worker thread may wait a scheduler tick (4 ms at HZ=250) to run
TOL_JUMP = 10.0  # wrong pairings end 40x and more further apart than the true ones (hta_sampled_2of128)
TOL_FACTOR = 4.0  # true NCCL send/recv ends spread up to 3x their median on hta_sampled_2of128


KEYED_BY = ("comms_id", "seq", "order")
"""How instances are keyed across ranks, strongest first (Matching.keyed_by counts each)."""


def key_collectives(colls: pd.DataFrame) -> pd.DataFrame:
    """Give every collective a cross-rank key, strongest evidence first: the `Comms Id` Kineto
    writes per collective (the same on every rank of it) when every instance carries one; else
    (group, `Seq`: the process group's sequence number) when every instance carries a sequence
    number; else (group, step, kind, n-th of that kind in the step). Column `keyed_by` says which."""
    df = colls.copy()
    if df.empty:
        return df.assign(key=pd.Series(dtype=str), keyed_by=pd.Series(dtype=str))
    # stream ids / group names must agree across ranks to be used as the group
    groups_per_rank = df.groupby("rank")["group"].apply(frozenset)
    if len(set(groups_per_rank)) > 1:
        df["group"] = "default"
        df["idx"] = df.sort_values("arrival_us").groupby(["rank", "group", "step", "kind"]).cumcount()
    cid = df["comms_id"] if "comms_id" in df else pd.Series(None, index=df.index, dtype=object)
    if cid.notna().all():
        df["key"] = "cid|" + cid.astype(str)
        df["keyed_by"] = "comms_id"
    elif df["seq"].notna().all():
        df["key"] = df["group"].astype(str) + "|seq" + df["seq"].astype("int64").astype(str)
        df["keyed_by"] = "seq"
    else:
        df["key"] = (df["group"].astype(str) + "|" + df["step"].astype("int64").astype(str) + "|"
                     + df["kind"].astype(str) + "|" + df["idx"].astype("int64").astype(str))
        df["keyed_by"] = "order"
    return df


def learn_tolerance(df: pd.DataFrame) -> float:
    """TOL (us): how far apart the ends of one collective's instances may lie, learned from the end
    spreads (latest - earliest end) of the keys whose instances overlap in time (the last arrival
    before the first end: physically possible matches). Sorted, the spreads of true matches form one
    cluster and a wrong pairing sits far above it (hta_sampled_2of128: 8, 55, 189, 332 us, then
    13.9 ms): the cluster ends before the first spread above TOL_JUMP x the median of the smaller
    ones. TOL = TOL_FACTOR x the cluster's median, spreads counted as at least the floor (GPU:
    TOL_FLOOR_US; CPU: TOL_FLOOR_CPU_US). `df` is clock-aligned (columns key, rank, arrival, end)."""
    floor = TOL_FLOOR_CPU_US if "source" in df and (df["source"] == "cpu").any() else TOL_FLOOR_US
    g = df.groupby("key")
    n = g["rank"].nunique()
    overlap = (g["arrival"].max() <= g["end"].min()) & (n >= 2)
    spread = np.sort(np.maximum((g["end"].max() - g["end"].min())[overlap].to_numpy(float), floor))
    if spread.size == 0:
        return TOL_FACTOR * floor
    k = 1
    while k < spread.size and spread[k] <= TOL_JUMP * np.median(spread[:k]):
        k += 1
    return float(TOL_FACTOR * np.median(spread[:k]))


def _consistent(df: pd.DataFrame, tol: float) -> np.ndarray:
    """Per instance: end within tol of its key's median end, not before the key's last arrival - tol
    (the latest arriver is removed first when it arrived after the others had left)."""
    ok = np.ones(len(df), dtype=bool)
    tol_end = tol / 2  # two kept instances end at most tol apart
    end = df["end"].to_numpy(float)
    arr = df["arrival"].to_numpy(float)
    for _, idx in df.groupby("key").indices.items():
        idx = np.asarray(idx)
        med = np.median(end[idx])
        keep = idx[np.abs(end[idx] - med) <= tol_end]
        while keep.size >= 2:
            late = keep[np.argmax(arr[keep])]
            if arr[late] <= end[keep].min() + tol:
                break
            keep = keep[keep != late]
        ok[idx] = False
        if keep.size >= 2:
            ok[keep] = True
    return ok


def _rematch(rest: pd.DataFrame, tol: float) -> pd.DataFrame:
    """Pair leftover instances across ranks by end time: same kind and group, mutual nearest end
    within tol, overlapping in time. Returns the re-keyed instances that found partners: the
    instances joined by such pairs (transitively) form a collective when they are two or more, one
    per rank, keyed "end-matched|<label of its root instance>".

    The pairs of every two ranks (`_mutual_nearest`) and their union (`_union`) are vectorised: the
    pairwise version (a distance matrix and a Python union per pair of ranks) grows with the square
    of the ranks and was the largest part of the reduce at 256 ranks (benchmarks/README.md). Same
    pairs, same order, same roots (tests/analysis/test_rematch.py checks it against the pairwise
    version)."""
    pos = np.arange(len(rest))
    us, vs = [], []
    for _, grp in rest.assign(_pos=pos).groupby(["kind", "group"]):
        u, v = _mutual_nearest(grp["rank"].to_numpy(), grp["end"].to_numpy(float), grp["arrival"].to_numpy(float), tol)
        rows = grp["_pos"].to_numpy()
        us.append(rows[u])
        vs.append(rows[v])
    u = np.concatenate(us) if us else np.empty(0, dtype=np.int64)
    v = np.concatenate(vs) if vs else np.empty(0, dtype=np.int64)
    if not u.size:
        return rest.iloc[:0]
    members, root = _union(u, v, len(rest))
    labels = rest.index.to_numpy()
    members = labels[members].tolist()
    roots = pd.Series(labels[root], index=members)
    sub = rest.loc[members].assign(_root=roots.to_numpy())
    g = sub.groupby("_root")["rank"]
    # a group of two or more instances, one per rank (in first-seen order of the groups, as before)
    ok = (g.transform("size") >= 2) & (g.transform("nunique") == g.transform("size"))
    sub = sub[ok.to_numpy()]
    order = {r: i for i, r in enumerate(dict.fromkeys(roots.to_numpy().tolist()))}
    sub = sub.iloc[np.argsort(sub["_root"].map(order).to_numpy(), kind="stable")]
    return sub.assign(key=["end-matched|" + str(r) for r in sub["_root"]]).drop(columns="_root")


def _mutual_nearest(rank: np.ndarray, end: np.ndarray, arrival: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (x, y) of rows (x of rank a, y of rank b, a < b) whose ends are each other's nearest
    among the other rank's instances (the first in row order on a tie), at most tol apart, and that
    overlap in time (both arrived before either ended, within tol). Ordered by rank a, rank b, then
    x's row. A rank with a non-finite end pairs with none (as a distance matrix with NaN never did).

    Each rank's ends are sorted once; the nearest instance of rank b to any end is one of its two
    sorted neighbours there, found for all rows at once by one `searchsorted` in keys that order the
    rows by (rank, end). Equal to the argmin of the distance matrix for ends that subtract exactly
    (ends within a factor 2 of each other, as a job's timestamps are)."""
    rank_ids, r = np.unique(rank, return_inverse=True)
    bad = np.zeros(rank_ids.size, dtype=bool)
    bad[r[~np.isfinite(end)]] = True
    if bad.any():  # keep the other ranks, numbered as before
        keep = ~bad[r]
        idx = np.flatnonzero(keep)
        u, v = _mutual_nearest(rank[keep], end[keep], arrival[keep], tol)
        return idx[u], idx[v]
    n_ranks = rank_ids.size
    if n_ranks < 2:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    rows = np.arange(end.size)
    order = np.lexsort((rows, end, r))  # by rank, end, row
    values, code = np.unique(end, return_inverse=True)
    key = r[order].astype(np.int64) * (values.size + 1) + code[order]  # ascending
    seg_lo = np.searchsorted(r[order], np.arange(n_ranks), side="left")
    seg_hi = np.searchsorted(r[order], np.arange(n_ranks), side="right")
    s_end = end[order]
    new_value = np.r_[True, key[1:] != key[:-1]]
    run_start = np.flatnonzero(new_value)[np.cumsum(new_value) - 1]  # first sorted row of each row's (rank, end)

    def nearest(q: np.ndarray, target: int | np.ndarray) -> np.ndarray:
        """For rows q, the row of rank `target` (one, or one per row) whose end is nearest to q's end."""
        wanted = np.asarray(target, dtype=np.int64) * (values.size + 1) + code[q]
        if np.ndim(target) == 0:  # one rank: search its part of the keys only
            lo, hi = seg_lo[target], seg_hi[target]
            p = lo + np.searchsorted(key[lo:hi], wanted, side="left")
        else:
            lo, hi = seg_lo[target], seg_hi[target]
            p = np.searchsorted(key, wanted, side="left")
        has_l, has_r = p > lo, p < hi
        pl, pr = np.where(has_l, p - 1, 0), np.where(has_r, p, 0)
        run_l = run_start[pl]  # the first row of the left neighbour's end (rows of one end are sorted by row)
        d_l = end[q] - s_end[pl]
        d_r = s_end[pr] - end[q]
        left = has_l & (~has_r | (d_l < d_r) | ((d_l == d_r) & (order[run_l] < order[pr])))
        return order[np.where(left, run_l, pr)]

    by_rank = np.argsort(r, kind="stable")
    upto = np.searchsorted(r[by_rank], np.arange(n_ranks), side="left")
    us, vs, bs = [], [], []
    for b in range(1, n_ranks):
        x = by_rank[: upto[b]]  # the rows of the ranks before b
        y = nearest(x, b)
        back = nearest(y, r[x])
        ok = (back == x) & (np.abs(end[x] - end[y]) <= tol) & (np.maximum(arrival[x], arrival[y]) <= np.minimum(end[x], end[y]) + tol)
        us.append(x[ok])
        vs.append(y[ok])
        bs.append(np.full(int(ok.sum()), b))
    u, v, b = np.concatenate(us), np.concatenate(vs), np.concatenate(bs)
    o = np.lexsort((u, b, r[u]))
    return u[o], v[o]


UNION_BATCH = 1 << 12
"""Pairs joined at a time by `_union` (the pairs already inside one group are skipped a batch at a time)."""


def _union(u: np.ndarray, v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Join the pairs (u[i], v[i]) in order, each by `parent[find(u)] = find(v)`: (the nodes in the
    order they first appear, v before u in each pair, and each one's root). Only the pairs whose
    ends were in different groups when their batch began go through the Python union-find: the
    others cannot change a root (at 256 ranks: about 1,000,000 pairs, a few thousand joins)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    label = np.arange(n)  # each node's root when the batch began
    for lo in range(0, u.size, UNION_BATCH):
        bu, bv = u[lo: lo + UNION_BATCH], v[lo: lo + UNION_BATCH]
        apart = label[bu] != label[bv]
        joined = []
        for a, b in zip(bu[apart].tolist(), bv[apart].tolist()):
            rb = find(b)
            ra = find(a)
            if ra != rb:
                parent[ra] = rb
                joined.append(ra)
        if joined:
            remap = np.arange(n)
            remap[joined] = [find(j) for j in joined]
            label = remap[label]
    flat = np.empty(2 * u.size, dtype=np.int64)
    flat[0::2], flat[1::2] = v, u
    nodes, first = np.unique(flat, return_index=True)
    members = nodes[np.argsort(first, kind="stable")]
    return members, label[members]


@dataclass
class Matching:
    """Matched, clock-aligned collective instances (columns arrival, end, key) and what was dropped."""

    df: pd.DataFrame
    offsets: dict
    clocks: object
    tol_us: float
    n_instances: int
    n_rematched: int
    n_dropped: int
    warnings: list = field(default_factory=list)
    keyed_by: dict = field(default_factory=dict)
    """Instances keyed by each rule of KEYED_BY (key_collectives), re-paired ones under "end_time"."""


def match_collectives(colls: pd.DataFrame, hosts: dict) -> Matching:
    """Key, align, check and (where needed) re-pair collective instances (module docstring)."""
    df = key_collectives(colls.reset_index(drop=True))
    cnt = df.groupby("key")["rank"].transform("nunique")
    clocks = estimate_clocks(df[cnt >= 2], hosts)
    offsets = clocks.rank_offsets()
    df["arrival"] = df["arrival_us"] - df["rank"].map(offsets).fillna(0.0)
    df["end"] = df["end_us"] - df["rank"].map(offsets).fillna(0.0)
    tol = learn_tolerance(df[cnt >= 2])
    ok = _consistent(df, tol)
    kept = df[ok]
    again = _rematch(df[~ok], tol)
    n_rest = int((~ok).sum())
    n_dropped = n_rest - len(again)
    warnings = []
    # instances with no counterpart on any analysed rank (a collective with ranks outside the set)
    # are not failures: they never had a partner to agree with
    lonely = int(((cnt < 2) & ~ok).sum())
    failed = n_dropped - lonely
    if failed > 0:
        warnings.append(
            f"{failed} of {len(df)} collective instances were dropped from the cross-rank analysis: paired with "
            f"another rank's instance by order, their end times disagree by more than the tolerance of "
            f"{tol / 1e3:.3f} ms learned from the well-matched collectives (or one rank left before another "
            "arrived), and no instance of the same kind ends within it; they count as the rank's own work, "
            "never as waiting"
        )
    out = pd.concat([kept, again]) if len(again) else kept
    keyed = {k: int(v) for k, v in kept["keyed_by"].value_counts().items()} if len(kept) else {}
    if len(again):
        keyed["end_time"] = len(again)
    return Matching(out, offsets, clocks, tol, len(df), len(again), n_dropped, warnings, keyed)
