"""The cross-rank critical path of each profiled step: the chain of (rank, segment or collective) that
sets the step's end.

Why: HTA's critical path is single-rank (its own documentation says so), while in a multi-rank job
the step ends when the last rank ends, and that rank waited at its collectives for whichever rank
arrived last there, and so on back to the step's start. Reading that chain tells where the job's
time goes across ranks: which rank's work, in which category, and how much of it is transfer.

Read from the what-if replay's step graph (reduce/step_graph.py: StepGraph, replay_ends) with the measured segments,
so the path is the replay's own explanation of the step time:
- the replay: collective k ends at E(k) = max over its ranks m of (t0(m, k) + seg(m, k)) + T(k),
  where t0(m, k) is the end of the collective m's segment starts from (step_graph._anchors), or m's
  step start; rank r ends at (E(its last collective) or its start) + tail(r); the step time is the
  latest rank end minus the earliest step start;
- the path, walked backwards: the rank that ends last, its TAIL; the collective its tail starts
  from, its TRANSFER T(k); the rank that arrived last at k (the argmax above), its SEGMENT before
  k; the collective that segment starts from, and so on, until a segment or tail that starts at
  its rank's step start; before it, START SKEW: from the earliest step start of any rank to that
  rank's (lateness brought from before the step: the previous step, or the profiler's start).
- The links add up to the replayed step time exactly (`total_ms` = `replayed_ms`, tested on every
  real trace set and drill).

Time by category: a segment's or tail's time split into the cause categories of the straggler
analysis (ranks/categories.py: data_loading, host_gap, cpu_work, gpu_compute, memcpy, comm) from
the map's cumulative category columns, "transfer" for the collectives, "start_skew" for the skew;
"uncategorised" where the per-rank tables carry no category columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..ranks.categories import CAUSE_CATEGORIES
from .cause import ClockIndex, cause_clock
from .step_graph import StepGraph, replay_ends

MAX_LINKS_IN_SUMMARY = 100
"""Links per step written into summary.json (all of them are in tables/critical_path)."""
PATH_CATEGORIES = ("start_skew",) + tuple(CAUSE_CATEGORIES) + ("transfer", "uncategorised")


@dataclass
class CriticalPath:
    links: pd.DataFrame
    """One row per link: step, order, rank (NaN for a transfer), kind (start_skew, segment,
    collective, tail), collective (key), collective_kind, start_us (aligned, absolute), start_ms
    (from the step's earliest start), dur_ms, <category>_ms."""
    steps: list = field(default_factory=list)
    """Per step: step, total_ms, replayed_ms, by_rank_ms, by_category_ms, transfer_ms."""

    def summary(self) -> dict | None:
        """summary.json `critical_path` (docs/summary-json.md); None without a replayed step."""
        if not self.steps:
            return None
        n = len(self.steps)
        by_rank: dict = {}
        by_cat: dict = {}
        for s in self.steps:
            for r, v in s["by_rank_ms"].items():
                by_rank[r] = by_rank.get(r, 0.0) + v / n
            for c, v in s["by_category_ms"].items():
                by_cat[c] = by_cat.get(c, 0.0) + v / n
        # the links' rows once, by step (not a selection and to_dict per step, twice: for the
        # recommendations and for summary.json)
        by_step: dict = {}
        for row in self.links.to_dict("records"):
            by_step.setdefault(row["step"], []).append(row)
        steps = []
        for s in self.steps:
            mine = by_step.get(s["step"], [])
            steps.append({**s, "links": len(mine), "chain": [_link_dict(row) for row in mine[:MAX_LINKS_IN_SUMMARY]]})
        return {
            "total_ms_per_step": float(np.mean([s["total_ms"] for s in self.steps])),
            "replayed_ms_per_step": float(np.mean([s["replayed_ms"] for s in self.steps])),
            "by_rank_ms_per_step": dict(sorted(by_rank.items(), key=lambda kv: -kv[1])),
            "by_category_ms_per_step": {c: v for c, v in sorted(by_cat.items(), key=lambda kv: -kv[1]) if v > 0},
            "steps": steps,
        }


def _link_dict(row: dict) -> dict:
    cats = {c: row[f"{c}_ms"] for c in PATH_CATEGORIES if row.get(f"{c}_ms")}
    return {"rank": None if pd.isna(row["rank"]) else int(row["rank"]), "kind": row["kind"],
            "collective": row["collective"] if isinstance(row["collective"], str) else None,
            "collective_kind": row["collective_kind"] if isinstance(row["collective_kind"], str) else None,
            "start_ms": row["start_ms"], "dur_ms": row["dur_ms"], "category_ms": cats}


def path_of(g: StepGraph, m: pd.DataFrame, steps: pd.DataFrame | None, kinds: dict | None = None,
            index: ClockIndex | None = None) -> tuple[list[dict], dict]:
    """The critical path of one step graph: its links in time order and the step's totals
    (`index`: cause.ClockIndex(m, steps), made once for all the graphs)."""
    # the replay with the measured segments (kept by the what-if replay where it ran)
    E, setter, fin = g.measured_ends if g.measured_ends is not None else (x[0] for x in replay_ends(g, g.seg[None], g.tail[None]))
    cats = cause_clock(g, m, steps, index)  # the cumulative category times the straggler cause reads
    origin = float(g.start.min())
    links: list[dict] = []

    def split(i: int, frm: int, to: int, dur_us: float) -> dict:
        """Categories (ms) of rank i's time from the end of collective `frm` (-1: its step start) to
        its arrival at collective `to` (-1: its step stop)."""
        if cats is None:
            return {"uncategorised": dur_us / 1e3}
        ca, ce, s0, s1 = cats
        a = ce[i, frm] if frm >= 0 else s0[i]
        b = ca[i, to] if to >= 0 else s1[i]
        d = b - a
        if not np.all(np.isfinite(d)):
            return {"uncategorised": dur_us / 1e3}
        out = {c: max(0.0, float(v)) for c, v in zip(CAUSE_CATEGORIES, d)}
        rest = dur_us / 1e3 - sum(out.values())  # clock rounding between the two tables
        if abs(rest) > 1e-3:
            out["uncategorised"] = rest
        return out

    def add(rank, kind, key, t0_us, dur_us, categories):
        links.append({"step": g.step, "rank": rank, "kind": kind, "collective": key,
                      "collective_kind": (kinds or {}).get(key) if key is not None else None,
                      "start_us": t0_us, "start_ms": (t0_us - origin) / 1e3, "dur_ms": dur_us / 1e3, **categories})

    r = int(np.argmax(fin))
    k = int(g.last_k[r])
    t_end = float(fin[r])
    # the tail of the rank that ends last
    t0 = E[k] if k >= 0 else float(g.start[r])
    add(int(g.ranks[r]), "tail", None, t0, t_end - t0, split(r, k, -1, t_end - t0))
    while k >= 0:
        key = g.keys[k]
        add(None, "collective", key, E[k] - g.transfer[k], float(g.transfer[k]), {"transfer": float(g.transfer[k]) / 1e3})
        i = int(setter[k])
        p = int(g.prev[i, k])
        s0 = E[p] if p >= 0 else float(g.start[i])
        seg = float(g.seg[i, k])
        add(int(g.ranks[i]), "segment", key, s0, seg, split(i, p, k, seg))
        r, k = i, p
    skew = float(g.start[r]) - origin
    if skew > 0:
        add(int(g.ranks[r]), "start_skew", None, origin, skew, {"start_skew": skew / 1e3})
    links.reverse()
    total = sum(x["dur_ms"] for x in links)
    by_rank: dict = {}
    by_cat: dict = {}
    for x in links:
        if x["rank"] is not None:
            by_rank[str(x["rank"])] = by_rank.get(str(x["rank"]), 0.0) + x["dur_ms"]
        for c in PATH_CATEGORIES:
            if x.get(c):
                by_cat[c] = by_cat.get(c, 0.0) + x[c]
    replayed = (float(fin.max()) - origin) / 1e3
    totals = {"step": int(g.step), "total_ms": total, "replayed_ms": replayed, "measured_ms": g.measured_ms,
              "transfer_ms": by_cat.get("transfer", 0.0),
              "by_rank_ms": dict(sorted(by_rank.items(), key=lambda kv: -kv[1])),
              "by_category_ms": {c: v for c, v in sorted(by_cat.items(), key=lambda kv: -kv[1])}}
    return links, totals


def critical_paths(graphs: list[StepGraph], m: pd.DataFrame | None, steps: pd.DataFrame | None) -> CriticalPath:
    """The critical path of every replayed step (`graphs`: WhatIf.graphs; `m`: the matched
    instances, Matching.df, with the map's cum_* category columns; `steps`: the steps table)."""
    cols = ["step", "order", "rank", "kind", "collective", "collective_kind", "start_us", "start_ms", "dur_ms"] + \
        [f"{c}_ms" for c in PATH_CATEGORIES]
    if not graphs or m is None:
        return CriticalPath(pd.DataFrame(columns=cols))
    kinds = m.groupby("key")["kind"].first().to_dict() if "kind" in m else {}
    rows, totals = [], []
    index = ClockIndex(m, steps)
    for g in graphs:
        links, tot = path_of(g, m, steps, kinds, index)
        for n, x in enumerate(links):
            rows.append({**{c: x.get(c) for c in ("step", "rank", "kind", "collective", "collective_kind", "start_us", "start_ms", "dur_ms")},
                         "order": n, **{f"{c}_ms": float(x.get(c) or 0.0) for c in PATH_CATEGORIES}})
        totals.append(tot)
    links = pd.DataFrame(rows, columns=cols)
    links["rank"] = pd.to_numeric(links["rank"], errors="coerce")
    return CriticalPath(links, totals)
