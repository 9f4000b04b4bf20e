"""A straggler's cost is withheld as impossible only when it exceeds the steps it is averaged over
(hpcprof.analysis.reduce.sanity). The CI run that found it: a triggered capture of a rank turning
slow at step 120 held 10 steps, 5 of them 400 ms longer (about 540 ms against 140 ms); the rank's
true cost, 207 ms/step, was withheld against the run's median step over all 200 steps (about
205 ms), and the capture named no straggler. The numbers below are that run's shape."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from hpcprof.analysis.reduce.sanity import plausible_stragglers, profiled_step_ms


def _graphs(durations: dict[int, list[float]], offset_us: dict[int, float] | None = None) -> list:
    """Step graphs as the what-if holds them (step, each rank's start and end in us on the aligned
    clock): rank r's steps last durations[r] ms, its clock `offset_us[r]` away from rank 0's."""
    offset_us = offset_us or {}
    ranks = sorted(durations)
    n = len(durations[ranks[0]])
    out, t = [], 0.0
    for i in range(n):
        start = np.array([t + offset_us.get(r, 0.0) for r in ranks])
        end = start + np.array([durations[r][i] * 1e3 for r in ranks])
        out.append(SimpleNamespace(step=128 + i, start=start, end=end))
        t += max(durations[r][i] for r in ranks) * 1e3
    return out


def test_a_capture_of_slow_steps_keeps_a_cost_above_the_runs_median_step():
    slow = [140.0, 540.0] * 5
    step_ms = profiled_step_ms(_graphs({0: slow, 1: [d - 3 for d in slow]}), fallback=205.0)
    assert step_ms == sum(slow) / len(slow)  # per step the longer rank's duration, averaged: 340 ms
    kept, warnings = plausible_stragglers([{"rank": 1, "cost_ms_per_step": 207.3}], step_ms)
    assert [s["rank"] for s in kept] == [1] and warnings == []


def test_a_cost_longer_than_the_profiled_steps_is_still_withheld_with_the_reason():
    # rank 1's clock 2 s ahead of rank 0's on one host: the replay's step spans the offset; each
    # rank's own step duration does not
    step_ms = profiled_step_ms(_graphs({0: [500.0] * 4, 1: [505.0] * 4}, offset_us={1: 2e6}), fallback=None)
    assert step_ms == 505.0
    kept, warnings = plausible_stragglers([{"rank": 1, "cost_ms_per_step": 1513.1}], step_ms)
    assert kept == [] and "rank 1" in warnings[0] and "1513.1" in warnings[0] and "505.0" in warnings[0]


def test_without_step_markers_the_runs_median_step_is_the_bound():
    # no ProfilerStep in the traces: the what-if ran on one graph (step -1)
    assert profiled_step_ms([], fallback=205.0) == 205.0
    whole = SimpleNamespace(step=-1, start=np.array([0.0, 0.0]), end=np.array([9e6, 9e6]))
    assert profiled_step_ms([whole], fallback=205.0) == 205.0
