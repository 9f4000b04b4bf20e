"""Interval algebra over one rank's activity: sets of disjoint [start, end) intervals (microseconds).

Guarantees: :func:`union` merges intervals by HTA's `merge_kernel_intervals` rule (touching
intervals are one; the order of equal starts does not change the result); an :class:`Intervals` is
built once per rank and then answers how much of any window [a, b) it covers, and whether an instant
lies inside it, with two binary searches per query (vectorised over windows), so the per-step and
per-window tables cost no pass over the events.
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as disjoint ones, in start order, with the arrays'
    dtypes: sorted by start, an interval starting after every earlier end opens a new one, and
    touching intervals are one (HTA's `merge_kernel_intervals` rule; the order of equal starts does
    not change the result)."""
    if not len(starts):
        return starts[:0], ends[:0]
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


class Intervals:
    """A set of disjoint [start, end) intervals with O(log n) covered-length queries."""

    def __init__(self, starts, ends):
        s, e = union(np.asarray(starts, dtype=float), np.asarray(ends, dtype=float))
        self.s, self.e = s, e
        self.cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def _upto(self, t):
        t = np.asarray(t, dtype=float)
        i = np.searchsorted(self.s, t, side="right")  # intervals starting at or before t
        full = self.cum[np.maximum(i - 1, 0)]
        last_s = self.s[np.maximum(i - 1, 0)] if self.s.size else np.zeros_like(t)
        last_e = self.e[np.maximum(i - 1, 0)] if self.e.size else np.zeros_like(t)
        part = np.clip(np.minimum(t, last_e) - last_s, 0, None)
        return np.where(i > 0, full + part, 0.0)

    def covered(self, a, b):
        """Length of [a, b) covered by the set (vectorised over a, b)."""
        if not self.s.size:
            return np.zeros(np.broadcast(np.asarray(a), np.asarray(b)).shape)
        return np.clip(self._upto(b) - self._upto(a), 0, None)

    def contains(self, t) -> np.ndarray:
        """Whether each instant t lies inside the set."""
        t = np.asarray(t, dtype=float)
        i = np.searchsorted(self.s, t, side="right") - 1
        return (i >= 0) & (t < self.e[np.maximum(i, 0)]) if self.s.size else np.zeros(t.shape, dtype=bool)

    @property
    def total(self) -> float:
        return float(self.cum[-1])
