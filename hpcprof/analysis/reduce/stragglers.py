"""Cross-rank reduce for collectives: clock alignment, matching, waits, stragglers with cost and cause.

Definitions (also in README.md, "Numbers and definitions"):
- arrival of rank r at a collective: the start of its collective work (GPU: the NCCL kernel's start;
  CPU/gloo: the start of `gloo:<op>` on the gloo thread, i.e. when r was ready to exchange data).
- clock alignment: ranks on one host share a clock (offset 0). Across hosts, a collective ends on all
  ranks at nearly the same instant (nobody leaves before the last one arrived and the data moved),
  so each host's offset is estimated from the end times (reduce/clocks.py, the one estimator: per
  host, the median difference to the reference host, with an uncertainty).
- wait of rank r at collective c: [arrival_r, last arrival]. The last arriver is what the others
  wait for. Only BLOCKED waiting counts: the part of that interval where r did no useful work
  (GPU rank: no compute/memcpy kernel running; CPU rank: no operator running on its main thread).
  A bucket all-reduce that waits while backward keeps computing costs nothing and is not counted.
  Per rank and step, the wait intervals are merged (several collectives in flight at once, e.g.
  gloo's two worker threads, are not counted twice).
- waiting inflicted by rank s per step: for each step, the MEDIAN over the other ranks of their
  blocked waiting at the collectives where s arrived last; then the mean over the profiled steps.
  It decides who is flagged (reported as blocked_wait_ms_per_step).
- cost of a flagged rank s per step (cost_ms_per_step): the capacity the job lost to it. Per node,
  K = the ranks that can run at once (GPU ranks: one per GPU, K = ranks on the node; CPU ranks:
  min(ranks, cores / threads per rank), from the manifest). In each step, up to s's arrival at the
  last collective it was late for, a rank is idle for s while it sits blocked waiting for s, and s
  is idle while it does no work itself (its sleep, gap or data wait). With m(t) such idle ranks out
  of R on a node, the node loses max(0, K - (R - m(t))) runners; cost = that loss integrated over
  the window, summed over nodes, divided by the job's total K. With dedicated devices this is the
  mean of everyone's idle time (about the others' waiting); on shared cores a rank that sleeps
  frees its core for the others, and the cost is the real slowdown, not the others' waiting.
  Reported as the mean over profiled steps (the median as cost_ms_per_step_median).
- straggler: a rank flagged in either of two ways.
  (a) by the waiting it inflicts: above threshold = max(NOISE_FLOOR_MS, REL_THRESHOLD x median
      step time), at least DOMINANCE x the median of the other ranks, and persistent (not
      scheduling noise that moves from rank to rank): above the threshold in at least
      MIN_STEP_SHARE of the profiled steps, or it is the top inflictor and its own excess (below)
      is above the threshold in at least OWN_EXCESS_SHARE of the steps; and its cost (the
      capacity lost, below) is above the threshold too (on shared cores the others' waiting can
      cost the job little: the cores stay busy);
  (b) by an excess of its own that the others notice: its time in one cause category exceeds the
      other ranks' by more than the threshold in at least OWN_EXCESS_SHARE of the steps, and the
      others wait for it (more than NOISE_FLOOR_MS) in at least MIN_STEP_SHARE of the steps. On
      shared cores a rank that sleeps frees its core, the others compute faster meanwhile, and the
      waits it causes shift onto whichever rank then finishes its CPU work last; its own excess
      does not move. A healthy run flags nobody.
  Flagged ranks are ordered: those with a cause first ("unknown": no excess of its own, most likely
  lateness inherited from another straggler or from sharing cores with it), then by their own
  excess in their cause category (the time the rank itself lost), then by the waiting they inflict.
- cause: per profiled step, the time s spent in each category (data loading, un-annotated host gap,
  CPU work, GPU compute, memory copies) minus the median of the other ranks in the same step; the
  category with the largest median excess over steps. Without step markers: the same comparison
  in the windows before s arrived late (from its previous collective's end to its arrival).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..ranks.timeline import CATEGORIES, Intervals
from .capacity import capacity_cost
from .clocks import estimate_clocks

NOISE_FLOOR_MS = 1.0
REL_THRESHOLD = 0.05
MIN_STEP_SHARE = 0.6
DOMINANCE = 1.5
OWN_EXCESS_SHARE = 0.8
MIN_CAUSE_MS = 0.5
MIN_CAUSE_SHARE = 0.2
CAUSE_TEXT = {
    "data_loading": "waiting for data (time in hpcprof.data / DataLoader before the collective)",
    "host_gap": "host-side gap (un-annotated host time on the main thread: sleep, Python overhead, slow input outside the profiled regions)",
    "cpu_work": "CPU work (host-side operators took longer than on the other ranks)",
    "gpu_compute": "GPU compute (kernels before the collective ran longer than on the other ranks)",
    "memcpy": "memory copies (memcpy/memset before the collective)",
    "unknown": "unknown: no category (data, host gap, CPU work, GPU compute, memcpy) shows enough excess time on this rank; its lateness may be inherited from another rank or come from outside the trace",
}


def clock_offsets(colls: pd.DataFrame, hosts: dict[int, str | None]) -> dict[int, float]:
    """Rank -> clock offset (us) from the one clock estimator (reduce/clocks.py), which the merged
    timeline and the what-if replay use too."""
    ranks = sorted(int(r) for r in colls["rank"].unique()) if len(colls) else []
    return {r: v for r, v in estimate_clocks(colls, {r: hosts.get(r) for r in ranks}).rank_offsets().items() if r in ranks}


def match(colls: pd.DataFrame) -> pd.DataFrame:
    """Give every collective a cross-rank key: (group, seq) when the trace has sequence numbers,
    else (group, step, kind, n-th of that kind in the step)."""
    if colls.empty:
        return colls.assign(key=pd.Series(dtype=str))
    df = colls.copy()
    # stream ids / group names must agree across ranks to be used as the group
    groups_per_rank = df.groupby("rank")["group"].apply(frozenset)
    if len(set(groups_per_rank)) > 1:
        df["group"] = "default"
        df["idx"] = df.sort_values("arrival_us").groupby(["rank", "group", "step", "kind"]).cumcount()
    has_seq = df["seq"].notna().all()
    if has_seq:
        df["key"] = df["group"].astype(str) + "|seq" + df["seq"].astype("int64").astype(str)
    else:
        df["key"] = (
            df["group"].astype(str) + "|" + df["step"].astype("int64").astype(str) + "|" + df["kind"].astype(str) + "|" + df["idx"].astype(str)
        )
    return df


def _blocked(starts, ends, busy) -> float:
    if len(starts) == 0:
        return 0.0
    iv = Intervals(starts, ends)
    covered = busy.covered(iv.s, iv.e).sum() if busy is not None else 0.0
    return max(0.0, (iv.total - float(covered)) / 1e3)


def analyze_collectives(
    colls: pd.DataFrame, hosts: dict[int, str | None], step_ms: float | None, busy: dict | None = None,
    steps_trace: pd.DataFrame | None = None, capacity: dict | None = None,
):
    """Return (per-collective table, per-rank-per-step wait table, stragglers list, offsets).

    `capacity`: per node, how many ranks can run at once (see the module docstring); a node
    missing from it is taken as one runner per rank (dedicated devices)."""
    if colls.empty or colls["rank"].nunique() < 2:
        return pd.DataFrame(), pd.DataFrame(), [], {}
    df = match(colls.reset_index(drop=True))
    offsets = clock_offsets(df, hosts)
    df["arrival"] = df["arrival_us"] - df["rank"].map(offsets)
    df["end"] = df["end_us"] - df["rank"].map(offsets)
    n_ranks = df["rank"].nunique()
    cnt = df.groupby("key")["rank"].transform("nunique")
    df = df[cnt >= max(2, n_ranks)].copy() if (cnt >= n_ranks).any() else df[cnt >= 2].copy()
    if df.empty:
        return pd.DataFrame(), pd.DataFrame(), [], offsets
    g = df.groupby("key")
    df["last_arrival"] = g["arrival"].transform("max")
    df["wait_ms"] = (df["last_arrival"] - df["arrival"]) / 1e3
    idx_last = g["arrival"].idxmax()
    last = df.loc[idx_last, ["key", "rank"]].rename(columns={"rank": "last_rank"})
    df = df.merge(last, on="key").reset_index(drop=True)
    others = df[df["rank"] != df["last_rank"]]
    inflicted = others.groupby("key")["wait_ms"].median().rename("inflicted_ms")
    per_coll = (
        df.groupby("key")
        .agg(
            group=("group", "first"),
            kind=("kind", "first"),
            step=("step", "max"),
            first_arrival_us=("arrival", "min"),
            last_arrival_us=("arrival", "max"),
            end_us=("end", "max"),
            n_ranks=("rank", "nunique"),
        )
        .join(last.set_index("key"))
        .join(inflicted)
        .fillna({"inflicted_ms": 0.0})
        .reset_index()
    )
    per_coll["skew_ms"] = (per_coll["last_arrival_us"] - per_coll["first_arrival_us"]) / 1e3
    per_coll = per_coll.sort_values("first_arrival_us", ignore_index=True)

    ranks = sorted(int(r) for r in df["rank"].unique())
    steps = sorted(int(s) for s in df["step"].unique())
    busy = busy or {}
    # busy intervals in the aligned clock
    busy_al = {r: (Intervals(b.s - offsets.get(r, 0.0), b.e - offsets.get(r, 0.0)) if b is not None else None) for r, b in busy.items()}
    w = df[df["last_arrival"] > df["arrival"]]
    rows = []
    blocked_by: dict[tuple[int, int, int], float] = {}
    for (r, s), grp in w.groupby(["rank", "step"]):
        b = busy_al.get(int(r))
        suffered = _blocked(grp["arrival"].to_numpy(), grp["last_arrival"].to_numpy(), b)
        rows.append((int(r), int(s), suffered))
        for lr, g2 in grp.groupby("last_rank"):
            blocked_by[(int(r), int(s), int(lr))] = _blocked(g2["arrival"].to_numpy(), g2["last_arrival"].to_numpy(), b)
    suffered_map = {(r, s): v for r, s, v in rows}
    per_step_rows = []
    for r in ranks:
        for s in steps:
            inflicted = float(np.median([blocked_by.get((o, s, r), 0.0) for o in ranks if o != r]))
            per_step_rows.append(
                {
                    "rank": r,
                    "step": s,
                    "wait_suffered_ms": float(suffered_map.get((r, s), 0.0)),
                    "wait_inflicted_ms": inflicted,
                }
            )
    per_step = pd.DataFrame(per_step_rows)
    # per collective: the blocked part of the others' waits (median) for the table
    if busy_al:
        bw = df["wait_ms"].to_numpy(dtype=float, copy=True)
        arr, la, rk = df["arrival"].to_numpy(float), df["last_arrival"].to_numpy(float), df["rank"].to_numpy()
        for r, b in busy_al.items():
            m = (rk == r) & (la > arr)
            if b is not None and m.any():
                bw[m] = (la[m] - arr[m] - b.covered(arr[m], la[m])) / 1e3
        df["blocked_wait_ms"] = bw
        per_coll = per_coll.join(df[df["rank"] != df["last_rank"]].groupby("key")["blocked_wait_ms"].median().rename("blocked_inflicted_ms"), on="key")

    n_steps = max(len(steps), 1)
    cost = per_step.groupby("rank")["wait_inflicted_ms"].mean()  # total waiting inflicted / steps
    cost_median = per_step.groupby("rank")["wait_inflicted_ms"].median()
    total_infl = float(per_step["wait_inflicted_ms"].sum()) or 1.0
    threshold = max(NOISE_FLOOR_MS, REL_THRESHOLD * (step_ms or 0.0))
    top_share = (per_step["wait_inflicted_ms"] > threshold).groupby(per_step["rank"]).sum() / n_steps
    noticed_share = (per_step["wait_inflicted_ms"] > NOISE_FLOOR_MS).groupby(per_step["rank"]).sum() / n_steps
    stragglers = []
    order = cost.sort_values(ascending=False)
    have_steps = steps_trace is not None and not steps_trace.empty
    for r, c in order.items():
        share = float(top_share.get(r, 0.0))
        others = float(order.drop(r).median()) if len(order) > 1 else 0.0
        cause, excess, own_share = _cause_steps(steps_trace, int(r), threshold) if have_steps else (None, None, 0.0)
        own = cause not in (None, "unknown") and own_share >= OWN_EXCESS_SHARE
        # (a) by the waiting it inflicts, persistent over steps, and costing the job capacity
        by_wait = c >= threshold and c >= DOMINANCE * others and (share >= MIN_STEP_SHARE or (r == order.index[0] and own))
        # (b) by a persistent excess of its own that the others notice
        by_own = own and float(noticed_share.get(r, 0.0)) >= MIN_STEP_SHARE
        if not (by_wait or by_own):
            continue
        lost = capacity_cost(df, busy_al, int(r), steps_trace if have_steps else None, offsets, hosts, ranks, capacity or {})
        lost_vals = [lost.get(st, 0.0) for st in steps]
        if not by_own and float(np.mean(lost_vals)) < threshold:
            continue  # the others wait for it, but the job loses little: shared cores stay busy
        if cause is None:
            cause, excess = _cause(df, per_coll, int(r))
            excess = {k: v / n_steps for k, v in excess.items()}
        share = max(share, own_share if cause != "unknown" else 0.0)
        # consistency needs several steps: one profiled step caps the confidence at 0.5
        conf = share * (float(c) * n_steps / total_infl) * n_steps / (n_steps + 1)
        if cause != "unknown" and excess.get(cause, 0.0) < max(MIN_CAUSE_MS, MIN_CAUSE_SHARE * float(c)):
            cause = "unknown"  # no category explains a meaningful part of the cost
        stragglers.append(
            {
                "rank": int(r),
                "cost_ms_per_step": round(float(np.mean(lost_vals)), 3),
                "cost_ms_per_step_median": round(float(np.median(lost_vals)), 3),
                "blocked_wait_ms_per_step": round(float(c), 3),
                "blocked_wait_ms_per_step_median": round(float(cost_median.get(r, 0.0)), 3),
                "cause": cause,
                "cause_detail": CAUSE_TEXT.get(cause, cause),
                "cause_excess_ms_per_step": {k: round(v, 3) for k, v in excess.items()},
                "confidence": round(float(min(1.0, max(0.0, conf))), 3),
                "late_in_steps_share": round(share, 3),
                "threshold_ms": round(threshold, 3),
            }
        )
    # a flagged rank with no excess of its own in any category (cause "unknown") most likely inherits
    # its lateness from another straggler (e.g. it shares cores with it): list it after those with a
    # cause; then the largest own excess first (see the module docstring)
    stragglers.sort(key=lambda x: (x["cause"] == "unknown", -x["cause_excess_ms_per_step"].get(x["cause"], 0.0), -x["blocked_wait_ms_per_step"]))
    return per_coll, per_step, stragglers, offsets


def _cause_steps(steps: pd.DataFrame, r: int, threshold: float) -> tuple[str | None, dict[str, float] | None, float]:
    """Cause from per-step excess over the other ranks; also the share of steps in which that
    excess is above the threshold."""
    cols = [f"{c}_ms" for c in CATEGORIES if f"{c}_ms" in steps]
    if r not in set(steps["rank"]) or steps["rank"].nunique() < 2 or not cols:
        return None, None, 0.0
    mine = steps[steps["rank"] == r].set_index("step")[cols]
    oth = steps[steps["rank"] != r].groupby("step")[cols].median()
    diff = (mine - oth).dropna()
    if diff.empty:
        return None, None, 0.0
    excess = {c[:-3]: float(diff[c].median()) for c in cols}
    cause = max(excess, key=excess.get)
    if excess[cause] <= 0:
        return "unknown", excess, 0.0
    return cause, excess, float((diff[f"{cause}_ms"] > threshold).mean())


def _cause(df: pd.DataFrame, per_coll: pd.DataFrame, r: int) -> tuple[str, dict[str, float]]:
    col = "blocked_inflicted_ms" if "blocked_inflicted_ms" in per_coll else "inflicted_ms"
    keys = per_coll.loc[(per_coll["last_rank"] == r) & (per_coll[col] > 0), "key"]
    sub = df[df["key"].isin(keys)]
    excess = {}
    for c in CATEGORIES:
        col = f"win_{c}_ms"
        mine = sub[sub["rank"] == r].set_index("key")[col]
        oth = sub[sub["rank"] != r].groupby("key")[col].median()
        excess[c] = float((mine - oth).dropna().sum())
    cause = max(excess, key=excess.get)
    if excess[cause] <= 0:
        cause = "unknown"
    return cause, excess
