"""The critical path's own lane on the merged timeline: "hpcprof: critical path".

A lane of the timeline writer (trace.py: a function of the TimelineContext returning a
Lane): the reduce's critical path (reduce/critical_path.py, one row per link, times on the job's
aligned clock) as a thread "hpcprof: critical path" at the top of every rank's process. Each link is
a slice on the rank it belongs to (a collective's transfer on the rank that arrived last at it),
named by what it is, with its time by category in its args; a flow arrow joins consecutive links
that change rank, so the chain can be followed across the ranks. The slices of one step add up to
the replayed step time.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from .trace import Lane, TimelineContext

LANE_NAME = "hpcprof: critical path"
LANE_TID = 999_999  # below the GPU streams' thread ids (render.GPU_TID_BASE), above the CPU threads'
LANE_SORT = -2  # above "hpcprof: waits" (-1)
FLOW_BASE = 2 * 10**15


def _label(row: dict) -> str:
    what = row["collective_kind"] if isinstance(row["collective_kind"], str) else "collective"
    if row["kind"] == "collective":
        return f"critical path: transfer of {what}"
    r = int(row["rank"])
    return {"segment": f"critical path: rank {r}, work before {what}", "tail": f"critical path: rank {r}, tail (ends the step)",
            "start_skew": f"critical path: rank {r} starts the step late"}.get(row["kind"], f"critical path: rank {r}, {row['kind']}")


def critical_path_lane(links: pd.DataFrame | None) -> Callable[[TimelineContext], Lane]:
    """The lane builder for trace.write_timeline's `lanes`."""

    def build(ctx: TimelineContext) -> Lane:
        lane = Lane(LANE_NAME, LANE_TID, LANE_SORT)
        if links is None or links.empty:
            return lane
        cats = [c for c in links.columns if c.endswith("_ms") and c not in ("start_ms", "dur_ms")]
        have, flow = set(ctx.ranks), 0
        step = prev = owner = None  # prev: (pid, end on the timeline) of the previous link of the step
        # every step's links in order, converted at once (not one selection and conversion per step)
        for row in links[links["step"].isin(ctx.steps)].sort_values(["step", "order"], kind="stable").to_dict("records"):
            if row["step"] != step:
                step, prev, owner = row["step"], None, None
            owner = int(row["rank"]) if not pd.isna(row["rank"]) else owner  # a transfer: the rank before it
            if owner is None or owner not in have:
                prev = None
                continue
            ts = round(float(row["start_us"]) - ctx.origin_us, 3)
            dur = round(float(row["dur_ms"]) * 1e3, 3)
            args = {"step": int(step), "dur_ms": round(float(row["dur_ms"]), 3),
                    **{c[:-3]: round(float(row[c]), 3) for c in cats if row[c]}}
            if isinstance(row["collective"], str):
                args["collective"] = row["collective"]
            lane.events.append({"ph": "X", "cat": "hpcprof", "name": _label(row), "pid": owner, "tid": LANE_TID,
                                "ts": ts, "dur": dur, "args": args})
            if prev is not None and prev[0] != owner:  # the chain moves to another rank
                flow += 1
                lane.events.append({"ph": "s", "cat": "hpcprof", "name": "critical path", "id": FLOW_BASE + flow,
                                    "pid": prev[0], "tid": LANE_TID, "ts": round(prev[1] - 0.001, 3)})
                lane.events.append({"ph": "f", "bp": "e", "cat": "hpcprof", "name": "critical path", "id": FLOW_BASE + flow,
                                    "pid": owner, "tid": LANE_TID, "ts": ts})
            prev = (owner, ts + dur)
        return lane

    return build
