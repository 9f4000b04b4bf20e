"""Known answers for tests/helpers.drill_truth, the in-run truth every live straggler drill is
checked against: hand-written step records whose drilled and undrilled step times are chosen so
the medians, the warm-up cut and the profiled share are each visible in the result."""

from __future__ import annotations

import json

import pytest

from helpers import DrillTruth, drill_added_cost, drill_truth


def rec(step: int, rank: int, step_ms: float, sleep_ms: float = 0.0, profiled: bool = False) -> dict:
    return {"step": step, "rank": rank, "step_s": step_ms / 1e3, "drill_sleep_s": sleep_ms / 1e3,
            "profiled": profiled, "epoch": 0, "t_start": 0.0, "t_end": 0.0}


def drill_records(every: int = 2) -> dict[int, list[dict]]:
    """3 ranks, steps 0..11, rank 1 sleeps 60 ms on even steps; steps 4..7 profiled.
    Undrilled job step time (median over ranks) 100 ms, drilled 160 ms, except: warm-up steps 0-2
    are 900 ms (must be ignored), and one rank is an outlier in every step (the median ignores it)."""
    out: dict[int, list[dict]] = {0: [], 1: [], 2: []}
    for step in range(12):
        drilled = step % every == 0
        base = 900.0 if step < 3 else (160.0 if drilled else 100.0)
        prof = 4 <= step <= 7
        out[0].append(rec(step, 0, base, profiled=prof))
        out[1].append(rec(step, 1, base + 1.0, 60.0 if drilled else 0.0, prof))
        out[2].append(rec(step, 2, base + 500.0, profiled=prof))
    return out


def test_truth_is_drilled_minus_undrilled_median_of_the_job_step_time():
    t = drill_truth(drill_records())
    # job step time per step = median of (base, base + 1, base + 500) = base + 1
    assert t.truth_ms == pytest.approx(60.0)
    assert (t.drilled, t.undrilled) == (4, 5)  # steps 3..11: 4, 6, 8, 10 drilled
    assert (t.profiled, t.drilled_profiled) == (4, 2)
    assert t.expected_cost_ms == pytest.approx(30.0)
    assert t.slept_ms == pytest.approx(30.0)  # 60 ms slept in 2 of the 4 profiled steps
    assert t.uncertainty_ms == pytest.approx(0.0)  # every drilled step alike, every undrilled alike


def test_warmup_steps_are_left_out():
    # steps 0 and 2 drilled at 1000 ms (a cold start), 1 and 3 undrilled at 100 ms, 4 drilled at 160 ms
    times = {0: (1000.0, True), 1: (100.0, False), 2: (1000.0, True), 3: (100.0, False), 4: (160.0, True)}
    recs = {r: [rec(s, r, ms, 60.0 if (d and r == 1) else 0.0, s >= 3) for s, (ms, d) in times.items()] for r in (0, 1)}
    assert drill_truth(recs, warmup_steps=3).truth_ms == pytest.approx(60.0)
    assert drill_truth(recs, warmup_steps=0).truth_ms == pytest.approx(900.0)
    # the scatter of the cold start shows in the uncertainty: drilled (1000, 1000, 160), undrilled (100, 100)
    assert drill_truth(recs, warmup_steps=0).uncertainty_ms == pytest.approx(1.25 * (156800 / 3) ** 0.5)


def test_every_third_step_scales_the_expected_cost_by_the_drilled_profiled_share():
    t = drill_truth(drill_records(every=3))  # profiled 4..7: only 6 drilled
    assert t.truth_ms == pytest.approx(60.0)
    assert (t.profiled, t.drilled_profiled) == (4, 1)
    assert t.expected_cost_ms == pytest.approx(15.0)
    assert t.slept_ms == pytest.approx(15.0)


def test_the_sleep_is_what_was_recorded_not_what_was_asked():
    recs = drill_records()
    for r in recs[1]:
        if r["drill_sleep_s"]:
            r["drill_sleep_s"] = 0.0634  # the OS overslept: 63.4 ms
    assert drill_truth(recs).slept_ms == pytest.approx(63.4 / 2)


def test_reads_a_steps_folder_skipping_lines_that_are_not_step_records(tmp_path):
    for rank, recs in drill_records().items():
        lines = [json.dumps(r) for r in recs] + ["not json", json.dumps({"note": "resumed"})]
        (tmp_path / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    assert drill_truth(tmp_path) == drill_truth(drill_records())


def test_a_run_without_drilled_steps_is_an_error_naming_the_counts():
    recs = {0: [rec(s, 0, 100.0, profiled=True) for s in range(10)]}
    with pytest.raises(ValueError, match="0 drilled, 7 undrilled"):
        drill_truth(recs)


def test_profiled_only_measures_the_truth_on_the_steps_the_analysis_sees():
    # a burst outside the profiled window (steps 4..7): undrilled step 9 takes 300 ms on every rank
    recs = drill_records()
    for r in recs.values():
        r[9]["step_s"] = 0.300
    # over the run (job step time = median over ranks: 101 undrilled, 161 drilled, 300 in the burst):
    # drilled 4, 6 -> +60; 8, 10 -> 161 - (101 + 300) / 2 = -39.5; median of the four: 10.25
    assert drill_truth(recs).truth_ms == pytest.approx(10.25)
    # over the profiled steps: 4 (neighbour 5; step 3 is not profiled) and 6 -> +60 each
    t = drill_truth(recs, profiled_only=True)
    assert t.truth_ms == pytest.approx(60.0) and t.expected_cost_ms == pytest.approx(30.0)
    assert (t.profiled, t.drilled_profiled) == (4, 2)


def test_drill_added_cost_is_the_truths_statistic_on_the_per_step_costs():
    truth = DrillTruth(60.0, 30.0, 3, 6, 3, 3, 0.0, frozenset({4, 6, 8}))
    # drilled 4, 6, 8 cost 70, 65, 66; undrilled 5, 7, 9 cost 5, 5 and 100 (a burst on that rank)
    costs = {4: 70.0, 5: 5.0, 6: 65.0, 7: 5.0, 8: 66.0, 9: 100.0}
    added, n_d, n_u = drill_added_cost(costs, truth)
    # paired: 70 - 5 = 65, 65 - (5 + 5) / 2 = 60, 66 - (5 + 100) / 2 = 13.5; median 60
    # (a difference of means would say 67 - 36.7 = 30.3)
    assert (added, n_d, n_u) == (pytest.approx(60.0), 3, 3)
    with pytest.raises(AssertionError, match="no drilled step next to an undrilled one"):
        drill_added_cost({4: 70.0, 6: 65.0}, truth)


def test_on_a_gpu_the_truth_is_on_the_gpu_clock():
    """A GPU run: the host issues every step in 5 ms (it runs ahead), the GPU's clock has the drill's
    60 ms in every second step; the truth is read from gpu_ms."""
    import helpers

    recs = {}
    for rank in (0, 1):
        recs[rank] = []
        for s in range(20):
            drilled = s % 2 == 0
            recs[rank].append({"step": s, "rank": rank, "step_s": 0.005, "gpu_ms": 100.0 + (60.0 if drilled else 0.0),
                               "drill_sleep_s": 0.06 if (drilled and rank == 1) else 0.0, "profiled": 4 <= s < 14,
                               "epoch": 0, "t_start": 0.0, "t_end": 0.0})
    truth = helpers.drill_truth(recs)
    assert truth.truth_ms == 60.0 and truth.uncertainty_ms == 0.0
