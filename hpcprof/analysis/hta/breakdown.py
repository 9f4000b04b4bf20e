"""HTA's per-rank GPU breakdowns, computed on numpy arrays with HTA's exact results.

HTA's temporal breakdown, kernel-type breakdown, idle-time breakdown and kernel-launch statistics
(hta.analyzers.breakdown_analysis, cuda_kernel_analysis) are written as chains of pandas
operations: a copy, a sort, a groupby and a merge per kernel type and per stream, each classifying
every GPU event again: many times the CPU time of the rest of HTA's part of a rank
(benchmarks/hta_analyzers.py, benchmarks/README.md). The functions here compute the same
numbers on the columns of HTA's own per-rank frame (`Trace.get_trace(rank)`), with the same
operations where the result depends on them:

- intervals are merged with HTA's rule (`merge_kernel_intervals`: sorted by start; an interval
  starting after every earlier end opens a new group; touching intervals are one);
- a sum that pandas takes with `Series.sum` is `np.add.reduce` over the same array in the same
  order (pandas calls exactly that); the sort HTA does with `sort_values` is `np.argsort(kind=
  "quicksort")` over the same array, so ties come out in HTA's order (the kernel-type breakdown
  keeps the zero-length states that ties create, as HTA does);
- a sum that pandas takes in a `groupby` (compensated summation) is taken here only where its
  terms are whole numbers below 2**53, where every order gives the same exact sum; otherwise
  the function hands the case to HTA's own code (`None` returned, the caller calls HTA).

tests/analysis/test_gpu_breakdown.py compares every function with HTA's own, frame for frame
(values and dtypes), on every GPU trace of tests/data and on generated frames full of ties,
zero durations, missing kernel types and fractional times.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..intervals import union

EXACT = float(2**53)
"""Whole numbers below this are exact in float64 and their sums exact in any order."""


def merge_intervals(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hta.utils.utils.merge_kernel_intervals on the columns ts, dur: the merged (start, end) in
    start order (analysis/intervals.union, HTA's rule), with HTA's dtypes (start: ts's, end: that of
    ts + dur)."""
    return union(ts, ts + dur)


def _whole(x: np.ndarray) -> bool:
    """Whether summing `x` (floats or ints) gives the same exact result in every order."""
    if x.dtype.kind in "iub":
        return True
    x = x[~np.isnan(x)]
    return bool(np.all(np.isfinite(x)) and np.all(x == np.floor(x)) and np.abs(x).sum() < EXACT)


def temporal(ts: np.ndarray, dur: np.ndarray, comp: tuple[np.ndarray, np.ndarray], rank: int) -> pd.DataFrame:
    """HTA's temporal breakdown of one rank (BreakdownAnalysis.get_temporal_breakdown's row): kernel
    time = last end - first start of all GPU events; idle = kernel time - their merged time;
    compute = merged time of the COMPUTATION events (`comp`: their merge_intervals); non-compute =
    the rest."""
    ms, me = merge_intervals(ts, dur)
    kernel_us = me[-1] - ms[0]
    idle_us = kernel_us - (np.add.reduce(me) - np.add.reduce(ms))
    cs, ce = comp
    compute_us = np.add.reduce(ce) - np.add.reduce(cs)
    non_compute_us = kernel_us - compute_us - idle_us
    if not (idle_us <= kernel_us and compute_us <= kernel_us and non_compute_us >= 0):
        raise ValueError(f"inconsistent GPU times on rank {rank}: idle {idle_us}, compute {compute_us}, span {kernel_us}")
    row = {"rank": [rank], "idle_time(us)": [idle_us], "compute_time(us)": [compute_us],
           "non_compute_time(us)": [non_compute_us], "kernel_time(us)": [kernel_us]}
    for part, v in (("idle_time", idle_us), ("compute_time", compute_us), ("non_compute_time", non_compute_us)):
        row[f"{part}_pctg"] = [np.round(100 * (np.asarray([v]) / np.asarray([kernel_us])), 2)[0]]
    return pd.DataFrame(row)


def kernel_type_time(ts: np.ndarray, dur: np.ndarray, types: np.ndarray, kinds: list[str]) -> pd.DataFrame | None:
    """BreakdownAnalysis._get_gpu_kernel_type_time: the time during which each combination of the
    kernel types `kinds` runs ("A", "A overlapping B", ...), columns kernel_type, sum (None where a
    time is NaN: HTA's sort puts those last, left to HTA's code). HTA melts each type's merged
    intervals (every start, then every end) onto the rows so far and sorts them by time; the
    running bitmask of the types then labels each stretch up to the next row."""
    if np.isnan(ts.astype(np.float64)).any() or np.isnan(dur.astype(np.float64)).any():
        return None
    time = np.empty(0, dtype=np.int64)  # HTA starts from an empty int column
    status = np.empty(0, dtype=np.int64)
    for i, kind in enumerate(kinds):
        sel = types == kind
        s, e = merge_intervals(ts[sel], dur[sel])
        # numpy's promotion is pandas' here: an empty kind still turns int times into floats when
        # its end column is float (ts + dur with float durations), as HTA's concat does
        time = np.concatenate([time, s, e])
        status = np.concatenate([status, np.full(len(s), 1 << i), np.full(len(s), -(1 << i))])
        order = np.argsort(time, kind="quicksort")  # HTA's sort_values(by="time"), ties in its order
        time, status = time[order], status[order]
    running = np.cumsum(status)
    # next time - time, as HTA takes it: the next time shifted in (a float column), then astype(int)
    gap = (time[1:].astype(np.float64) - time[:-1]).astype(np.int64)
    on = running[:-1] > 0
    states, gap = running[:-1][on], gap[on]
    names = {u: " overlapping ".join(k for i, k in enumerate(kinds) if u & (1 << i)) for u in np.unique(states).tolist()}
    labels = sorted(set(names.values()))
    code = {n: j for j, n in enumerate(labels)}
    lut = np.zeros(int(states.max()) + 1 if len(states) else 1, dtype=np.int64)
    for u, n in names.items():
        lut[u] = code[n]
    # whole numbers: the float sums of bincount are exact below 2**53
    total = np.bincount(lut[states], weights=gap, minlength=len(labels)) if len(states) else np.zeros(0)
    if np.abs(gap).sum() >= EXACT:
        return None
    return pd.DataFrame({"kernel_type": pd.array(labels, dtype="str"), "sum": total.astype(np.int64)})


def sort_desc(values: np.ndarray) -> np.ndarray:
    """pandas' `sort_values(ascending=False)` order of a column without NaN (nargsort): reversed,
    argsorted with quicksort, reversed again; ties in pandas' order."""
    idx = np.arange(len(values))[::-1]
    return idx[values[::-1].argsort(kind="quicksort")][::-1]


def kernel_type_order(ktime: pd.DataFrame) -> pd.DataFrame:
    """`ktime.groupby("kernel_type", as_index=False)["sum"].sum().sort_values("sum", ascending=False,
    ignore_index=True)` for kernel_type_time's table (one row per type, already in key order)."""
    return ktime.take(sort_desc(ktime["sum"].to_numpy())).reset_index(drop=True)


KERNEL_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
"""The categories of GPU events HTA's idle-time breakdown looks at (its list: no cuda_sync)."""
IDLE_NAMES = {0: "host_wait", 1: "kernel_wait", 2: "other"}
"""hta.utils.utils.IdleTimeType: value -> the name the breakdown writes."""


def idle_breakdown(df: pd.DataFrame, sym_ids: dict, delay: float, rank: int) -> pd.DataFrame | None:
    """BreakdownAnalysis.get_idle_time_breakdown for one rank's frame `df` (HTA's, indexed by its
    `index` column): per GPU stream, the gaps before each kernel (sorted by start) that are host
    wait (the kernel's runtime call started after the previous kernel's end), kernel wait (a gap
    below `delay`) or other; columns rank, stream, idle_category, idle_time, idle_time_ratio,
    rounded to 2 decimals as HTA does. None where the index has a label twice (HTA's join would
    then give a kernel several rows: left to HTA's code)."""
    labels = df.index.to_numpy()
    by_label = np.argsort(labels, kind="stable")
    sorted_labels = labels[by_label]
    if len(labels) > 1 and not (sorted_labels[1:] > sorted_labels[:-1]).all():
        return None
    cat_ids = [sym_ids.get(c, -1000) for c in KERNEL_CATS]
    stream_all = df["stream"].to_numpy()
    sel = (stream_all != -1) & np.isin(df["cat"].to_numpy(), cat_ids)
    ts_all = df["ts"].to_numpy()
    ts, dur, stream = ts_all[sel], df["dur"].to_numpy()[sel], stream_all[sel]
    link = df["index_correlation"].to_numpy()[sel]
    # the join on index_correlation: the correlated event's start, NaN where there is none
    pos = np.searchsorted(sorted_labels, link).clip(0, max(len(labels) - 1, 0))
    found = sorted_labels[pos] == link if len(labels) else np.zeros(len(link), dtype=bool)
    runtime = np.where(found, ts_all[by_label[pos]].astype(np.float64) if len(labels) else 0.0, np.nan)
    cats, times, streams = [], [], []
    for s in pd.unique(stream):
        on = stream == s
        t, d, r = ts[on], dur[on], runtime[on]
        order = np.argsort(t, kind="quicksort")  # HTA's sort_values(by="ts"): ties in its order
        t, d, r = t[order], d[order], r[order]
        prev = np.empty(len(t), dtype=np.float64)
        prev[0] = np.nan
        prev[1:] = t[:-1] + d[:-1]
        gap = t - prev
        host = r > prev
        cat = np.full(len(t), 2)
        cat[host] = 0
        cat[~host & (gap < delay)] = 1
        present = np.unique(cat)
        if _whole(gap):
            sums = np.array([np.add.reduce(np.nan_to_num(gap[cat == c])) for c in present], dtype=np.float64)
        else:  # pandas' compensated groupby sum, over the same values in the same order
            sums = pd.Series(gap).groupby(cat).sum().to_numpy()
        cats.extend(present.tolist())
        streams.append(np.full(len(present), s, dtype=stream.dtype))
        with np.errstate(invalid="ignore", divide="ignore"):  # no idle time at all: NaN, as in HTA
            times.append(np.stack([sums, sums / np.add.reduce(sums)]))
    both = np.concatenate(times, axis=1) if times else np.zeros((2, 0))
    return pd.DataFrame({"rank": np.full(len(cats), rank, dtype=np.int64),
                         "stream": np.concatenate(streams) if streams else stream[:0],
                         "idle_category": pd.array([IDLE_NAMES[c] for c in cats], dtype="str"),
                         "idle_time": both[0], "idle_time_ratio": both[1]}).round(2)


LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "runFunction - job_prep_and_submit_for_execution",
                "cudaMemsetAsync", "cudaMemcpyAsync")
"""The runtime calls whose launches HTA's kernel-launch statistics count (memory events included)."""


def launch_stats(df: pd.DataFrame, sym_ids: dict) -> pd.DataFrame | None:
    """CudaKernelAnalysis.cuda_kernel_launch_stats for one rank's frame (memory events included):
    each launch's runtime call (CPU side) joined with its GPU event on the correlation id; columns
    correlation, cpu_duration, gpu_duration, launch_delay (GPU start - call end, at least 0). None
    where a correlation id appears twice on one side (HTA's merge then pairs every two; left to it)."""
    ids = [sym_ids[n] for n in LAUNCH_NAMES if n in sym_ids]
    corr = df["correlation"].to_numpy()
    if corr.dtype.kind == "f" and np.isnan(corr).any():
        return None  # pandas' isin matches NaN with NaN, numpy's does not
    marks = _Marks(corr)
    stream = df["stream"].to_numpy()
    hit = marks.isin(corr, corr[np.isin(df["name"].to_numpy(), ids)])
    cpu = np.flatnonzero(hit & (stream == -1))
    gpu = np.flatnonzero(hit & (stream != -1))
    cc, gc = corr[cpu], corr[gpu]
    if marks.distinct(cc) != len(cc) or marks.distinct(gc) != len(gc):
        return None
    order = np.argsort(gc, kind="stable")
    pos = np.searchsorted(gc[order], cc).clip(0, max(len(gc) - 1, 0))
    ok = gc[order][pos] == cc if len(gc) else np.zeros(len(cc), dtype=bool)
    li, gi = cpu[ok], gpu[order[pos[ok]]]  # the inner merge, in the order of the CPU side
    ts, dur = df["ts"].to_numpy(), df["dur"].to_numpy()
    delay = ts[gi] - ts[li] - dur[li]
    keep = delay >= 0
    if delay.dtype.kind == "f":
        keep |= np.isnan(delay)
    return pd.DataFrame({"correlation": corr[li], "cpu_duration": dur[li], "gpu_duration": dur[gi],
                         "launch_delay": np.where(keep, delay, 0)})


class _Marks:
    """np.isin and counts of distinct values for values from `universe`, by marking a table of its
    range where those are ints spanning at most about 32 per value (correlation ids: 1e6 for the
    events of a rank), not by sorting; np.isin and np.unique otherwise."""

    def __init__(self, universe: np.ndarray):
        self.lo = self.span = None
        if universe.dtype.kind == "i" and len(universe):
            lo, hi = int(universe.min()), int(universe.max())
            if hi - lo < 32 * len(universe) + (1 << 20):
                self.lo, self.span = lo, hi - lo + 1

    def _table(self, keys: np.ndarray) -> np.ndarray:
        mark = np.zeros(self.span, dtype=bool)
        mark[keys.astype(np.intp) - self.lo] = True  # as intp: no wrap-around in a narrow int dtype
        return mark

    def isin(self, values: np.ndarray, keys: np.ndarray) -> np.ndarray:
        return np.isin(values, keys) if self.span is None else self._table(keys)[values.astype(np.intp) - self.lo]

    def distinct(self, values: np.ndarray) -> int:
        return len(np.unique(values)) if self.span is None else int(np.count_nonzero(self._table(values)))


STATS = ["sum", "max", "min", "mean", "std"]


def kernel_stats(name: pd.Series, dur: pd.Series, coded: tuple | None = None) -> pd.DataFrame:
    """Per kernel name (sorted): count, sum, max, min, mean, std (0 for one kernel) of the
    durations, pandas' groupby aggregates (its summation and variance, as HTA gets them).
    `coded` (codes, texts): the names as a code per row into `texts` (HTA's symbol ids
    renumbered): where the texts are all str, the rows are grouped on ints ranked in the texts'
    order (the same groups in the same order, the same rows in each), and where the durations
    are whole numbers, counted, summed and their extremes taken on numpy (`_aggregates`)."""
    texts = coded[1].tolist() if coded is not None else None
    if not texts or not all(type(t) is str for t in texts):
        agg = dur.groupby(name).agg(["count", *STATS])
        agg.index.name = "name"
        return agg.reset_index().fillna({"std": 0.0})
    order = sorted(set(texts))
    rank = {t: j for j, t in enumerate(order)}
    key = np.array([rank[t] for t in texts], dtype=np.intp)[coded[0]]
    cols = _aggregates(key, dur, len(order))
    if cols is None:
        agg = dur.groupby(key).agg(["count", *STATS])
        cols = {c: agg[c].to_numpy() for c in agg.columns}
    std = cols["std"]
    return pd.DataFrame({"name": pd.array(order, dtype=name.dtype), **cols, "std": np.where(np.isnan(std), 0.0, std)})


def _aggregates(key: np.ndarray, dur: pd.Series, n: int) -> dict | None:
    """dur.groupby(key).agg(["count", *STATS]) for keys 0..n-1 (each present) as arrays: count,
    sum, max and min on numpy where the durations are whole numbers below 2**53 without NaN (every
    sum exact, so pandas' compensated sum and mean are these), the std by pandas (its one-pass
    variance); None otherwise."""
    d = dur.to_numpy()
    f = d.astype(np.float64)
    if not len(d) or np.isnan(f).any() or not _whole(f):
        return None
    count = np.bincount(key, minlength=n)
    total = np.bincount(key, weights=f, minlength=n)
    starts = np.concatenate([[0], np.cumsum(count)[:-1]])
    by_key = d[np.argsort(key, kind="stable")]
    return {"count": count.astype(np.int64), "sum": total.astype(d.dtype), "max": np.maximum.reduceat(by_key, starts),
            "min": np.minimum.reduceat(by_key, starts), "mean": total / count, "std": dur.groupby(key).std().to_numpy()}


def top_kernels(stats: pd.DataFrame, num_kernels: int, duration_ratio: float) -> pd.DataFrame:
    """BreakdownAnalysis._aggr_gpu_kernel_time from the per-name statistics of the kernels of one
    type (kernel_stats' rows of those names, in name order): sorted by total time, and beyond the
    first `num_kernels`, or past the `duration_ratio` quantile of the running total, the rest
    grouped as "others" (its statistics taken over the grouped kernels' totals)."""
    g = stats[["name", *STATS]].reset_index(drop=True)
    g = g.take(sort_desc(g["sum"].to_numpy())).reset_index(drop=True)
    if len(g) <= num_kernels:
        return g
    cum = g["sum"].cumsum()
    q = cum.quantile(duration_ratio)
    names = g["name"].to_numpy(dtype=object).copy()
    names[(cum > q).to_numpy() | (np.arange(len(g)) >= num_kernels)] = "others"
    out = g["sum"].groupby(names).agg(STATS)
    out.index.name = "name"
    return out.reset_index().fillna({"std": 0})


def kernels_top(stats: pd.DataFrame, kinds: list[str], num_kernels: int, duration_ratio: float, rank: int) -> pd.DataFrame:
    """HTA's top kernels of each kernel type of `kinds` (`top_kernels` of the type's rows of the
    per-name statistics `stats`, with columns kernel_type and rank), joined and sorted by
    kernel_type, name and rank, as get_gpu_kernel_breakdown returns them. Computed on numpy where
    every total is a whole number below 2**53 (`_tops`); else, or where a kernel is named "others",
    by `top_kernels` per type (a dozen pandas calls each)."""
    got = _tops(stats, kinds, num_kernels, duration_ratio, rank)
    if got is not None:
        return got
    types = stats["kernel_type"].to_numpy()
    parts = [top_kernels(stats[types == k], num_kernels, duration_ratio).assign(kernel_type=k, rank=int(rank)) for k in kinds]
    return pd.concat(parts, ignore_index=True).sort_values(["kernel_type", "name", "rank"], ignore_index=True)


def _tops(stats: pd.DataFrame, kinds: list[str], num_kernels: int, duration_ratio: float, rank: int) -> pd.DataFrame | None:
    """`kernels_top` where each sum of the grouped totals is exact in any order (whole numbers
    below 2**53, no NaN): a kept kernel's row is its statistics, or, where the type's kernels are
    grouped, its total as sum, max, min and mean (std 0: one value), as pandas' groupby gives them;
    "others" aggregates the grouped totals in their sorted order (the variance by `_welford`, as
    pandas takes it). None otherwise."""
    names, types = stats["name"].to_numpy(dtype=object), stats["kernel_type"].to_numpy(dtype=object)
    total = stats["sum"].to_numpy()
    if not len(total) or not isinstance(stats["name"].dtype, pd.StringDtype) or "others" in names.tolist():
        return None
    f = total.astype(np.float64)
    if np.isnan(f).any() or not _whole(f):
        return None
    cols = {c: stats[c].to_numpy() for c in STATS}
    rows = []  # (kernel_type, name, sum, max, min, mean, std)
    for k in kinds:
        idx = np.flatnonzero(types == k)
        idx = idx[sort_desc(total[idx])]
        if len(idx) <= num_kernels:
            rows += [(k, names[i], *(cols[c][i] for c in STATS)) for i in idx.tolist()]
            continue
        t = total[idx]
        cum = np.cumsum(t)  # Series.cumsum, and Series.quantile's np.percentile
        other = (cum > np.percentile(cum, duration_ratio * 100.0, method="linear")) | (np.arange(len(t)) >= num_kernels)
        rows += [(k, names[i], v, v, v, float(v), 0.0) for i, v in zip(idx[~other].tolist(), t[~other].tolist())]
        if other.any():
            o = t[other]
            n = len(o)
            rows.append((k, "others", np.add.reduce(o), o.max(), o.min(), float(np.add.reduce(o)) / n, _welford(o.tolist())))
    rows.sort(key=lambda r: (r[0], r[1]))
    by_col = list(zip(*rows)) if rows else [()] * 7
    out = {"name": pd.array(list(by_col[1]), dtype=stats["name"].dtype)}
    for j, c in enumerate(STATS):
        out[c] = np.array(by_col[2 + j], dtype=total.dtype if c in ("sum", "max", "min") else np.float64)
    out["kernel_type"] = pd.array(list(by_col[0]), dtype="str")
    out["rank"] = np.full(len(rows), int(rank), dtype=np.int64)
    return pd.DataFrame(out)


def _welford(values: list) -> float:
    """The standard deviation pandas' groupby takes (Welford's one-pass update, in the values'
    order, in float64); 0 for one value (pandas' NaN, which top_kernels fills with 0)."""
    n, mean, m2 = 0, 0.0, 0.0
    for v in values:
        n += 1
        old = mean
        mean += (v - old) / n
        m2 += (v - mean) * (v - old)
    return math.sqrt(m2 / (n - 1)) if n > 1 else 0.0
