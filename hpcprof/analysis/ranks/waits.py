"""Whether a rank's main thread sat blocked in a CPU (gloo) collective, or went on computing while a
gloo worker thread ran it.

Guarantees: :func:`main_waited` says "waited" only when the main thread was not computing around the
collective's end (an idle stretch it resumed from close to that end); a collective the main thread
computed through is never a wait, even with the microsecond gaps between its operators. The step
graph (hpcprof.analysis.reduce.step_graph) makes a waited collective a chain point: the rank's step
could not go on before the slowest peer arrived.
"""

from __future__ import annotations

import numpy as np

from ..intervals import Intervals

WAITED_RESUME_US = 10000.0
"""A CPU collective counts as waited for when the main thread was not computing (operators other
than the c10d:: calls that enqueue or wait for collectives) at its end and resumed within this
long after it: the main thread sat blocked in it (DDP's buffer broadcast, the wait for the last
gradient buckets at the end of backward) rather than going on while a gloo worker thread ran it
(the gradient all-reduces launched during backward). Why this bound: a woken thread runs at once on
a quiet host but may wait a few scheduler ticks (1-4 ms each) on a loaded one, and a bound below
that misses real waits (the blocked rank's cost then comes out near 0). A longer bound risks little:
to be counted wrongly, a collective must end while the main thread is between operators (gaps of
microseconds while it computes)."""
WAITED_MIN_IDLE_US = 1000.0
"""The idle stretch inside a collective that counts as a wait when the main thread resumed before
the collective's range ended (:func:`main_waited`): far above the microsecond gaps between the
operators of a thread that computes, below the shortest wait that costs a step anything worth
reporting."""


def main_waited(op_start: np.ndarray, op_end: np.ndarray, t: np.ndarray, since: np.ndarray | None = None) -> np.ndarray:
    """Per collective ending at t (started at `since`): whether the main thread sat blocked in it. Yes
    when the main thread was idle at t and resumed computing within WAITED_RESUME_US after it; or
    when it resumed up to WAITED_RESUME_US *before* t after an idle stretch of at least
    WAITED_MIN_IDLE_US inside the collective: a gloo worker's ``gloo:<op>`` range closes after the
    data arrived and the waiting thread was woken, so DDP's main thread may resume shortly before the
    range ends (by the first rule alone such a wait for a slow peer would not count). The operator
    intervals are the main thread's computing ops."""
    busy = Intervals(op_start, op_end)
    starts = np.sort(op_start)
    j = np.searchsorted(starts, t, side="left")
    nxt = np.where(j < starts.size, starts[np.minimum(j, max(starts.size - 1, 0))] if starts.size else np.inf, np.inf)
    waited = ~busy.contains(t) & (nxt - t <= WAITED_RESUME_US)
    if since is None or not busy.s.size:
        return waited
    # the idle gaps between the merged busy intervals: [busy.e[i-1], busy.s[i]), resuming at busy.s[i]
    gap_from = np.concatenate([[-np.inf], busy.e[:-1]])
    for n in np.flatnonzero(~waited):
        lo, hi = np.searchsorted(busy.s, [t[n] - WAITED_RESUME_US, t[n]], side="left")
        idle = busy.s[lo:hi] - np.maximum(gap_from[lo:hi], since[n])
        waited[n] = bool(idle.size) and float(idle.max()) >= WAITED_MIN_IDLE_US
    return waited
