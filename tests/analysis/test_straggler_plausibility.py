"""A straggler's cost is withheld as impossible only when it exceeds the steps it is averaged over
(hpcprof.analysis.reduce.sanity). The CI run that found it: a triggered capture of a rank turning
slow at step 120 held 10 steps, 5 of them 400 ms longer (about 540 ms against 140 ms); the rank's
true cost, 207 ms/step, was withheld against the run's median step over all 200 steps (about
205 ms), and the capture named no straggler. The numbers below are that run's shape."""

from __future__ import annotations

import pandas as pd

from hpcprof.analysis.reduce.sanity import plausible_stragglers, profiled_step_ms


def _steps(durations: dict[int, list[float]]) -> pd.DataFrame:
    rows = []
    for rank, durs in durations.items():
        t = 0.0
        for step, d in enumerate(durs, start=128):
            rows.append({"rank": rank, "step": step, "ts_us": t, "end_us": t + d * 1e3, "dur_ms": d})
            t += d * 1e3
    return pd.DataFrame(rows)


def test_a_capture_of_slow_steps_keeps_a_cost_above_the_runs_median_step():
    slow = [140.0, 540.0] * 5
    trace = _steps({0: slow, 1: [d - 3 for d in slow]})
    step_ms = profiled_step_ms(trace, list(range(128, 138)), fallback=205.0)
    assert step_ms == sum(slow) / len(slow)  # per step the longer rank's duration, averaged: 340 ms
    kept, warnings = plausible_stragglers([{"rank": 1, "cost_ms_per_step": 207.3}], step_ms)
    assert [s["rank"] for s in kept] == [1] and warnings == []


def test_a_cost_longer_than_the_profiled_steps_is_still_withheld_with_the_reason():
    # rank 1's clock 2 s ahead of rank 0's on one host: the replay's step spans the offset; each
    # rank's own ProfilerStep durations do not
    trace = _steps({0: [500.0] * 4, 1: [505.0] * 4})
    step_ms = profiled_step_ms(trace, [128, 129, 130, 131], fallback=None)
    kept, warnings = plausible_stragglers([{"rank": 1, "cost_ms_per_step": 1513.1}], step_ms)
    assert kept == [] and "rank 1" in warnings[0] and "1513.1" in warnings[0] and "505.0" in warnings[0]


def test_without_step_markers_the_runs_median_step_is_the_bound():
    # no ProfilerStep in the traces: the what-if ran on one graph (step -1)
    assert profiled_step_ms(pd.DataFrame(), [-1], fallback=205.0) == 205.0
    assert profiled_step_ms(_steps({0: [100.0]}), [-1], fallback=205.0) == 205.0


def test_a_gpu_step_lasts_until_its_last_kernel():
    trace = _steps({0: [50.0, 50.0]}).assign(device_end_us=lambda d: d["ts_us"] + 300e3)
    assert profiled_step_ms(trace, [128, 129], fallback=None) == 300.0
