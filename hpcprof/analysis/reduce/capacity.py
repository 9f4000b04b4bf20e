"""Lost capacity: how many ranks can run at once per node, and the runner-time a straggler costs.

Definitions: "cost of a flagged rank" in the stragglers module docstring. Its own module because
the capacity of a node (from the manifest) and the integration over idle intervals are a separate
question from who is late, and stragglers.py would otherwise pass 300 lines.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..ranks.timeline import Intervals


def node_capacity(manifest: dict, device: str) -> dict:
    """Per node, how many ranks can run at once: one per GPU on GPU runs (left empty: the default);
    on CPU runs min(ranks, cores / threads per rank) from the manifest (node_cpus, cpu_threads).
    Nodes without that information are taken as one runner per rank."""
    if device != "cpu":
        return {}
    per_node: dict = {}
    for e in manifest.get("ranks", []) or []:
        if isinstance(e, dict) and e.get("node_cpus") and e.get("cpu_threads"):
            per_node.setdefault(e.get("node"), []).append((int(e["node_cpus"]), int(e["cpu_threads"])))
    out = {}
    for node, vals in per_node.items():
        cpus = max(c for c, _ in vals)
        threads = sorted(t for _, t in vals)[len(vals) // 2]
        out[node] = max(1.0, cpus / max(threads, 1))
    return out


def _idle_within(busy, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """The parts of [a, b) not covered by `busy` (an Intervals or None), as (starts, ends)."""
    if b <= a:
        return np.empty(0), np.empty(0)
    if busy is None or not busy.s.size:
        return np.array([a]), np.array([b])
    i0 = int(np.searchsorted(busy.e, a, side="right"))
    i1 = int(np.searchsorted(busy.s, b, side="left"))
    bs = np.clip(busy.s[i0:i1], a, b)
    be = np.clip(busy.e[i0:i1], a, b)
    starts = np.concatenate([[a], be])
    ends = np.concatenate([bs, [b]])
    keep = ends > starts
    return starts[keep], ends[keep]


def lost_capacity_ms(idle: dict[int, tuple[np.ndarray, np.ndarray]], hosts: dict[int, str | None],
                     ranks: list[int], capacity: dict) -> float:
    """Runner-time lost (ms) per unit of the job's capacity, given each rank's idle intervals (see
    `cost` in the module docstring)."""
    total_k = 0.0
    lost_us = 0.0
    by_node: dict = {}
    for r in ranks:
        by_node.setdefault(hosts.get(r), []).append(r)
    for node, members in by_node.items():
        n_ranks = len(members)
        k = float(min(n_ranks, capacity.get(node, n_ranks)))
        total_k += k
        pts, deltas = [], []
        for r in members:
            st, en = idle.get(r, (np.empty(0), np.empty(0)))
            iv = Intervals(st, en)
            pts += [iv.s, iv.e]
            deltas += [np.ones(iv.s.size), -np.ones(iv.e.size)]
        t = np.concatenate(pts)
        if not t.size:
            continue
        d = np.concatenate(deltas)
        order = np.argsort(t, kind="stable")
        t, d = t[order], d[order]
        m = np.cumsum(d)[:-1]  # idle ranks on [t_i, t_{i+1})
        lost_us += float(np.sum(np.clip(k - (n_ranks - m), 0, None) * np.diff(t)))
    return lost_us / 1e3 / total_k if total_k else 0.0


def capacity_cost(df: pd.DataFrame, busy_al: dict, s: int, steps_trace: pd.DataFrame | None,
                   offsets: dict, hosts: dict, ranks: list[int], capacity: dict) -> dict[int, float]:
    """Per step, the capacity lost to rank s (ms)."""
    out: dict[int, float] = {}
    starts = None
    if steps_trace is not None and not steps_trace.empty and "ts_us" in steps_trace:
        st = steps_trace.assign(t=steps_trace["ts_us"] - steps_trace["rank"].map(offsets).fillna(0.0))
        starts = st.groupby("step")["t"].min()
    for step, grp in df.groupby("step"):
        late = grp[grp["last_rank"] == s]
        if late.empty:
            out[int(step)] = 0.0
            continue
        end = float(late["last_arrival"].max())
        t0 = float(starts.get(step, grp["arrival"].min())) if starts is not None else float(grp["arrival"].min())
        if end <= t0:
            out[int(step)] = 0.0
            continue
        idle: dict[int, tuple[np.ndarray, np.ndarray]] = {s: _idle_within(busy_al.get(s), t0, end)}
        for r in ranks:
            if r == s:
                continue
            waits = late[late["rank"] == r]
            parts = [_idle_within(busy_al.get(r), max(a, t0), b) for a, b in zip(waits["arrival"], waits["last_arrival"]) if b > a]
            if parts:
                idle[r] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        out[int(step)] = lost_capacity_ms(idle, hosts, ranks, capacity)
    return out
