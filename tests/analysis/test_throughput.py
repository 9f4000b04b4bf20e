"""Throughput from step records whose answer is known by construction (hpcprof.analysis.reduce.throughput)."""

from __future__ import annotations

import pandas as pd
import pytest

from hpcprof.analysis.reduce.throughput import classify_steps, median_ci, throughput

STEPS_PER_EPOCH = 16
N_STEPS = 40
PROFILED = (13, 14, 15)  # profiler schedule wait 11, warmup 2, active 3 -> warm-up steps 11, 12


def _steady_s(step: int) -> float:
    # distinct steady step times: 100 ms + (step * 7 mod 37) ms / 10, so the sorted order is known
    return 0.1 + ((step * 7) % 37) / 10_000


def make_steps(ranks=(0, 1), batch=32, slow_rank=1, slow=1.25) -> pd.DataFrame:
    rows = []
    for r in ranks:
        for s in range(N_STEPS):
            t = _steady_s(s)
            if s == 0:
                t = 3.0  # warm-up
            elif s % STEPS_PER_EPOCH == 0:
                t = 0.9  # new DataLoader iterator
            elif s in PROFILED:
                t = 0.4
            elif s in (11, 12):
                t = 0.3  # profiler warm-up (traced, discarded)
            if r == slow_rank:
                t *= slow
            rows.append({"rank": r, "step": s, "epoch": s // STEPS_PER_EPOCH, "step_s": t, "batch_size": batch,
                         "profiled": s in PROFILED, "t_start": 100.0 + s, "t_end": 100.0 + s + t})
    return pd.DataFrame(rows)


def test_median_ci_order_statistics():
    # n = 32: the 95% interval is [x(10), x(23)] (binomial tables)
    med, lo, hi, cov = median_ci(range(1, 33))
    assert (med, lo, hi) == (16.5, 10.0, 23.0)
    assert 0.95 <= cov < 0.99
    # n = 5: no interval reaches 95%; the whole range with its real coverage 1 - 2/32
    med, lo, hi, cov = median_ci([5, 1, 4, 2, 3])
    assert (med, lo, hi) == (3.0, 1.0, 5.0)
    assert cov == pytest.approx(1 - 2 / 32)
    assert median_ci([]) == (None, None, None, None)


def test_phases_are_counted_and_excluded():
    d = classify_steps(make_steps(), profiler_warmup=2)
    r0 = d[d["rank"] == 0].set_index("step")["phase"]
    assert r0[0] == "warmup"
    assert r0[16] == r0[32] == "epoch_boundary"
    assert list(r0[[13, 14, 15]]) == ["profiled"] * 3
    assert list(r0[[11, 12]]) == ["profiler_warmup"] * 2
    assert (r0 == "steady").sum() == N_STEPS - 8


def test_known_answer_per_rank_and_job():
    summary, per_step, job_steps = throughput(make_steps(), profiler_warmup=2)
    steady_steps = [s for s in range(N_STEPS) if s not in (0, 16, 32, 11, 12, *PROFILED)]
    expected = sorted(32 / _steady_s(s) for s in steady_steps)
    r0 = summary["per_rank"][0]
    assert r0["steps"] == {"total": 40, "warmup": 1, "epoch_boundary": 2, "trace_export": 0, "profiled": 3,
                           "profiler_warmup": 2, "steady": 32}
    assert summary["step_time_source"] == "host_clock"
    assert r0["median_samples_per_s"] == pytest.approx((expected[15] + expected[16]) / 2)
    assert r0["ci95_samples_per_s"] == pytest.approx([expected[9], expected[22]])
    assert r0["profiled_median_samples_per_s"] == pytest.approx(32 / 0.4)
    assert r0["rate_samples_per_s"] == pytest.approx(32 * 32 / sum(_steady_s(s) for s in steady_steps))
    # rank 1 is 25% slower on every step: the job runs at its pace with both ranks' samples
    r1 = summary["per_rank"][1]
    assert r1["median_samples_per_s"] == pytest.approx(r0["median_samples_per_s"] / 1.25)
    job = summary["job"]
    assert job["median_samples_per_s"] == pytest.approx(2 * r1["median_samples_per_s"])
    assert job["steps"]["steady"] == 32 and job["steps"]["epoch_boundary"] == 2
    assert job["batch"] == 64
    assert len(job_steps) == N_STEPS


def test_larger_batch_with_slower_steps_is_faster():
    # the ladder's batch rung: steps 3x slower, 4x more samples -> throughput up by 4/3
    small, _, _ = throughput(make_steps(batch=32, slow=1.0))
    big_steps = make_steps(batch=128, slow=1.0)
    big_steps["step_s"] *= 3
    big, _, _ = throughput(big_steps)
    assert big["job"]["median_step_ms"] > small["job"]["median_step_ms"]
    assert big["job"]["median_samples_per_s"] == pytest.approx(small["job"]["median_samples_per_s"] * 4 / 3)


def test_resumed_attempt_starts_with_warmup_and_no_batch_size_means_unknown():
    d = make_steps(ranks=(0,))
    d = d[(d["step"] < 20) | (d["step"] > 22)]  # a gap: the attempt restarted at step 23
    c = classify_steps(d)
    assert c.set_index("step")["phase"][23] == "warmup"
    c = classify_steps(make_steps(ranks=(0,)), attempt_starts=[25])
    assert c.set_index("step")["phase"][25] == "warmup"
    assert throughput(make_steps().drop(columns="batch_size"))[0] is None


def test_a_rank_whose_records_hold_no_batch_size_leaves_the_job_samples_per_s_unknown():
    """Rank 1's training code did not say its batch size: the job's samples/s would be rank 0's
    samples over the job's step (half the truth, were both 32); it is left unknown, not guessed,
    and rank 0's own figure stands."""
    d = make_steps()
    d["batch_size"] = d["batch_size"].astype(object).where(d["rank"] == 0, None)
    summary, _, job_steps = throughput(d, profiler_warmup=2)
    job = summary["job"]
    assert job["median_samples_per_s"] is None and job["batch"] is None and job["end_to_end_samples_per_s"] is None
    assert job_steps["samples_per_s"].isna().all()
    r0, r1 = summary["per_rank"]
    assert r0["median_samples_per_s"] == pytest.approx(throughput(make_steps(), profiler_warmup=2)[0]["per_rank"][0]["median_samples_per_s"])
    assert r1["median_samples_per_s"] is None


def _gpu_run() -> pd.DataFrame:
    """A CUDA run's records: the host issues every step in 20 ms (it runs ahead of the device), while
    the GPU's clock says what each step really took (its boundary events): _steady_s, and 60 ms more
    in the step after the profiler wrote a trace at the end of step 15 (the host stopped for the
    export; the GPU ran dry)."""
    d = make_steps(slow=1.0)
    d["gpu_ms"] = d["step_s"] * 1e3
    d["step_s"] = 0.020
    d["trace_export_s"] = [0.06 if s == 15 else 0.0 for s in d["step"]]
    d["epoch"] = (d["step"] >= 32).astype(int)  # one epoch boundary (32), so step 16 shows the export phase
    d.loc[d["step"] == 16, "gpu_ms"] = (_steady_s(16) + 0.06) * 1e3
    return d


def test_on_a_gpu_the_step_time_is_the_gpus_clock_and_warm_up_is_two_steps():
    summary, per_step, job_steps = throughput(_gpu_run(), profiler_warmup=2)
    assert summary["step_time_source"] == "gpu_clock" and summary["warmup_steps_per_attempt"] == 2
    steady = [s for s in range(N_STEPS) if s not in (0, 1, 16, 32, 11, 12, *PROFILED)]
    r0 = summary["per_rank"][0]
    assert r0["steps"]["warmup"] == 2 and r0["steps"]["trace_export"] == 1 and r0["steps"]["steady"] == len(steady)
    median_s = pd.Series([_steady_s(s) for s in steady]).median()
    assert r0["median_samples_per_s"] == pytest.approx(pd.Series([32 / _steady_s(s) for s in steady]).median())
    assert summary["job"]["median_step_ms"] == pytest.approx(1e3 * median_s)
    # the host's 20 ms launch time would have said 1,600 samples/s per rank
    assert r0["median_samples_per_s"] < 400


def test_the_step_after_a_trace_export_is_counted_apart():
    d = make_steps(ranks=(0,))
    d["trace_export_s"] = [0.15 if s == 15 else 0.0 for s in d["step"]]
    c = classify_steps(d, profiler_warmup=2).set_index("step")["phase"]
    assert c[15] == "profiled"  # the export happens after it: its own time is clean
    assert c[16] == "epoch_boundary"  # first match wins, as documented
    d["trace_export_s"] = [0.15 if s == 20 else 0.0 for s in d["step"]]
    c = classify_steps(d).set_index("step")["phase"]
    assert c[21] == "trace_export" and c[20] == "steady" and c[22] == "steady"


def test_gpu_step_stats_keep_the_host_launch_time_apart():
    from hpcprof.analysis.reduce.step_stats import per_rank_step_stats

    st = per_rank_step_stats(_gpu_run()).set_index("rank")
    assert st.loc[0, "step_time_source"] == "gpu_clock"
    assert st.loc[0, "host_step_median_ms"] == pytest.approx(20.0)
    assert st.loc[0, "step_median_ms"] > 100.0
