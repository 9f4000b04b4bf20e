"""The merged timeline's size budget (outputs/timeline/trace.py): which events survive, decided
from counts gathered one rank at a time, never from all ranks' events at once.

At most `max_events` events. Above it, whole kinds of low value are dropped first (DROP_ORDER),
the shortest events first within the last kind touched: the cut is a duration, found from the
distinct durations of that kind and their counts summed over the ranks, and the events exactly
that long go to the lowest ranks first, then in trace order (what sorting all candidates by
duration did, when every rank's events were held at once). Launch flows go all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .render import codes, col

# dropped first to last when over budget; anything not listed is never dropped
DROP_ORDER = ("launch_flows", "python_functions", "short_cpu_ops", "runtime_calls", "instant_events", "cpu_ops")


@dataclass
class Budget:
    """Which events survive: kinds dropped whole, and the one kind cut at a duration."""

    dropped: dict[str, int]
    drop_all: set[str]
    keep_flows: bool
    cut_kind: str | None = None
    cut_below_us: float = np.inf
    """Events of cut_kind shorter than this are dropped, and `ties` of those exactly this long."""
    ties: int = 0

    def mask(self, f: pa.Table) -> np.ndarray:
        """Keep-mask of one rank's selected events; ranks must come in rank order (the ties go to
        the lowest ranks first, then in trace order)."""
        kc, kinds = codes(f, "kind")
        dropped = [i for i, k in enumerate(kinds) if k in self.drop_all]
        keep = ~np.isin(kc, dropped) if dropped else np.ones(f.num_rows, dtype=bool)
        if self.cut_kind is not None and self.cut_kind in kinds:
            is_k = kc == kinds.index(self.cut_kind)
            dur = col(f, "dur")
            keep &= ~(is_k & (dur < self.cut_below_us))
            eq = np.flatnonzero(is_k & (dur == self.cut_below_us))
            take = min(self.ties, eq.size)
            keep[eq[:take]] = False
            self.ties -= take
        return keep


class Counts:
    """Pass 1: what the chosen steps select, summed over the ranks one at a time (per kind, and the
    distinct durations with their counts for the kinds the budget may cut)."""

    def __init__(self):
        self.kinds: dict[str, int] = {}
        self.flows = 0
        self.durations: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, f: pa.Table) -> None:
        kc, names = codes(f, "kind")
        n_by = np.bincount(kc, minlength=len(names))
        for k, n in zip(names, n_by):
            if n:
                self.kinds[k] = self.kinds.get(k, 0) + int(n)
        self.flows += 2 * int(((col(f, "corr") >= 0) & col(f, "gpu")).sum())
        dur = col(f, "dur")
        for k in DROP_ORDER[1:]:
            if k not in names:
                continue
            d = dur[kc == names.index(k)]
            if d.size:
                v, c = np.unique(d, return_counts=True)
                if k in self.durations:
                    v0, c0 = self.durations[k]
                    v, inv = np.unique(np.concatenate([v0, v]), return_inverse=True)
                    c = np.bincount(inv, weights=np.concatenate([c0, c]), minlength=v.size).astype(np.int64)
                self.durations[k] = (v, c)

    def budget(self, max_events: int, n_fixed: int) -> Budget:
        total = sum(self.kinds.values()) + self.flows + n_fixed
        excess = total - max_events
        b = Budget(dropped={}, drop_all=set(), keep_flows=True)
        for k in DROP_ORDER:
            if excess <= 0:
                break
            if k == "launch_flows":
                if self.flows:
                    b.keep_flows = False  # all or nothing: half the arrows of a step help nobody
                    b.dropped[k] = self.flows
                    excess -= self.flows
                continue
            n = self.kinds.get(k, 0)
            if not n:
                continue
            take = min(excess, n)
            if take == n:
                b.drop_all.add(k)
            else:
                v, c = self.durations[k]
                cum = np.cumsum(c)
                j = int(np.searchsorted(cum, take))
                b.cut_kind, b.cut_below_us = k, float(v[j])
                b.ties = take - (int(cum[j - 1]) if j else 0)
            b.dropped[k] = take
            excess -= take
        return b
