"""The partition of a rank's time into the straggler-cause categories, as a clock that tells the
time spent in each category up to any instant.

Why a clock: the map sees one rank; which windows matter (before which late arrival) is known only
in the reduce, after collectives are matched across ranks. Cumulative time per category at the
instants the reduce may need (collective arrivals and ends, step starts and stops) lets it measure
any window between two of them by a difference, without the trace.
"""

from __future__ import annotations

import numpy as np

STEP_CATEGORIES = ("data_loading", "host_gap", "cpu_work", "gpu_compute", "memcpy")
"""Where a rank's step time went, per profiled step (the per-rank steps table of ranks/timeline)."""

CAUSE_CATEGORIES = STEP_CATEGORIES + ("comm",)
"""What a rank's time between two instants went to, as a partition (the categories add up to the
window): the straggler cause is chosen among them (hpcprof.analysis.reduce.whatif)."""


class CategoryClock:
    """Cumulative time per cause category up to any instant, from a labelled partition of the rank's
    timeline, so that the time in each category between any two instants is a difference of two
    look-ups (the reduce picks the windows after matching collectives across ranks).

    `layers`: (category, Intervals) in priority order: each instant belongs to the first layer that
    covers it, else to `rest`. GPU ranks: gpu_compute, memcpy, comm, then the device-idle time by
    host state (data_loading, cpu_work, rest host_gap). CPU ranks: data_loading, cpu_work (main
    thread), comm (a gloo op in flight while the main thread is idle), rest host_gap."""

    def __init__(self, layers: list, rest: str):
        self.names = [n for n, _ in layers]
        self.rest = rest
        pts = np.unique(np.concatenate([iv.s for _, iv in layers] + [iv.e for _, iv in layers] + [np.empty(0)]))
        self.pts = pts
        n = len(layers)
        self.cum = np.zeros((n, pts.size))
        if pts.size >= 2:
            mids = (pts[:-1] + pts[1:]) / 2
            label = np.full(mids.size, n)
            for j in range(n - 1, -1, -1):
                label[layers[j][1].contains(mids)] = j
            lens = np.diff(pts)
            for j in range(n):
                self.cum[j, 1:] = np.cumsum(np.where(label == j, lens, 0.0))
            self.label = label
        else:
            self.label = np.empty(0, dtype=int)

    def at(self, t) -> dict[str, np.ndarray]:
        """Time (us) in each category from the first breakpoint up to t (vectorised)."""
        t = np.asarray(t, dtype=float)
        out = {}
        if self.pts.size < 2:
            for c in self.names:
                out[c] = np.zeros(t.shape)
            out[self.rest] = t - (self.pts[0] if self.pts.size else 0.0)
            return {c: out.get(c, np.zeros(t.shape)) for c in CAUSE_CATEGORIES}
        tc = np.clip(t, self.pts[0], self.pts[-1])
        i = np.clip(np.searchsorted(self.pts, tc, side="right") - 1, 0, self.pts.size - 2)
        part = tc - self.pts[i]
        total = np.zeros(t.shape)
        for j, c in enumerate(self.names):
            v = self.cum[j, i] + np.where(self.label[i] == j, part, 0.0)
            out[c] = v
            total = total + v
        out[self.rest] = (t - self.pts[0]) - total
        return {c: out.get(c, np.zeros(t.shape)) for c in CAUSE_CATEGORIES}
