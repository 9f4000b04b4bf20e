"""GPU idle outliers: ranks whose GPU sits idle far more than the others', with HTA's idle cause.

Why a rule of its own: a job-wide "GPUs are idle" rule looks at the median and stays silent when
two ranks of eight idle 35% of the time against 2.5% for the rest, and the straggler analysis only
names a rank when others wait for it. An idle outlier is worth a look either way: it either holds
the job back (then it is also a straggler) or wastes its own GPU (input, host-side work, syncs).

Definitions (also in docs/analysis.md, "Numbers and definitions"):
- idle share: HTA's temporal breakdown, idle time / profiled time of the rank's GPU (`idle_pct`).
- outlier: idle share >= IDLE_RATIO x the median idle share of the OTHER ranks and at least
  IDLE_POINTS percentage points above it (both: 2% vs 1% is no finding, nor 60% vs 52%).
  Needs at least two ranks with an idle share.
- idle cause: HTA's idle-time breakdown (`get_idle_time_breakdown`) summed over the rank's
  streams: host_wait (the host did not queue work in time), kernel_wait (short gaps between
  consecutive kernels: launch overhead), other (waits on other streams, events or collectives);
  the category with the largest share, with all three shares.
"""

from __future__ import annotations

import pandas as pd

IDLE_RATIO = 2.0
IDLE_POINTS = 10.0
IDLE_CAUSE_TEXT = {
    "host_wait": "host wait: the host did not queue GPU work in time (input pipeline, host-side Python/CPU work, CPU contention)",
    "kernel_wait": "kernel wait: short gaps between consecutive kernels (launch overhead of many small kernels; CUDA graphs or torch.compile help)",
    "other": "other: the GPU waited on something else (synchronisation, events, another stream, a collective's peers)",
}


def idle_causes(idle: pd.DataFrame, rank: int) -> dict[str, float]:
    """Share (0-1) of each idle category for one rank, summed over its streams; {} without data."""
    if idle is None or idle.empty or not {"rank", "idle_category", "idle_time"} <= set(idle.columns):
        return {}
    d = idle[idle["rank"] == rank].groupby("idle_category")["idle_time"].sum()
    tot = float(d.sum())
    return {str(k): float(v) / tot for k, v in d.items()} if tot > 0 else {}


def idle_outliers(per_rank: pd.DataFrame, idle: pd.DataFrame, straggler_ranks) -> list[dict]:
    """The outlier ranks (module docstring), most idle first."""
    if per_rank is None or per_rank.empty or "idle_pct" not in per_rank:
        return []
    pr = per_rank[per_rank["idle_pct"].notna()]
    if len(pr) < 2:
        return []
    flagged = {int(r) for r in straggler_ranks}
    out = []
    for _, row in pr.iterrows():
        r = int(row["rank"])
        others = float(pr.loc[pr["rank"] != row["rank"], "idle_pct"].median())
        v = float(row["idle_pct"])
        if v >= IDLE_RATIO * others and v >= others + IDLE_POINTS:
            shares = idle_causes(idle, r)
            out.append({
                "rank": r,
                "node": row.get("node"),
                "idle_pct": v,
                "others_median_idle_pct": others,
                "cause": max(shares, key=shares.get) if shares else None,
                "cause_shares": shares,
                "straggler": r in flagged,
            })
    return sorted(out, key=lambda o: -o["idle_pct"])


def outlier_recommendation(o: dict) -> dict:
    """The recommendation naming one outlier rank, its idle cause and whether it is a straggler."""
    node = o.get("node") or "unknown"
    cause = IDLE_CAUSE_TEXT.get(o["cause"], "cause unknown (no idle-time breakdown for this rank)")
    shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(o["cause_shares"].items(), key=lambda kv: -kv[1]))
    strag = ("it is also a flagged straggler: the others wait for it (see the straggler finding)" if o["straggler"]
             else "it is not a flagged straggler: the others do not wait for it, its own GPU is under-used")
    return {
        "title": f"GPU idle outlier: rank {o['rank']} (node {node}) leaves its GPU idle far more than the other ranks; {cause.split(':')[0]} dominates",
        "evidence": (f"GPU idle {o['idle_pct']:.1f}% of the profiled time vs a median of {o['others_median_idle_pct']:.1f}% on the other ranks "
                     f"(HTA temporal breakdown; outlier at >= {IDLE_RATIO:g}x and >= {IDLE_POINTS:g} points above); idle cause: {cause}"
                     f"{f' ({shares}, HTA idle-time breakdown)' if shares else ''}; {strag}"),
        "score": (o["idle_pct"] - o["others_median_idle_pct"]) / 2,
    }
