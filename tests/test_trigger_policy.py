"""The triggered profiler's decision rule (hpcprof.rank.trigger.TriggerPolicy), on step timings whose
answer is known by construction: every rank's own time and the step time per step, as the control
rounds carry them. The rule is a pure function of those numbers, so every rank decides alike."""

from __future__ import annotations

import random

import pytest

from hpcprof.rank.trigger import CaptureSchedule, TriggerPolicy, TriggerSettings

STEP_MS = 100.0


def settings(**kw) -> TriggerSettings:
    base = dict(window=5, windows=2, threshold_pct=10.0, min_ms=1.0, job_pct=50.0, max_captures=3, min_gap_steps=20,
                warmup=1, active=3, baseline_at=2)
    base.update(kw)
    return TriggerSettings(**base)


def feed(policy: TriggerPolicy, steps: range, late: dict[int, float] | None = None, noise_ms: float = 8.0,
         job_ms: float = STEP_MS, seed: int = 0):
    """Feed `steps`: every rank's own time is about 70 ms (noise_ms of jitter), rank r's plus late[r];
    the step time is the slowest rank's own time plus 30 ms of communication. Returns the decisions
    with the step at which they came."""
    rng = random.Random(seed)
    out = []
    for s in steps:
        own = [0.7 * job_ms + rng.uniform(-noise_ms, noise_ms) + (late or {}).get(r, 0.0) for r in range(policy.world)]
        step = [max(own) + 0.3 * job_ms] * policy.world
        for d in policy.add(s, own, step):
            policy.admit(d, d.window[1] + 1)
            if d.decision == "capture":
                policy.scheduled(d, d.window[1] + 2, policy.captures_taken + 1)
            out.append((s, d))
    return out


def test_healthy_ranks_with_jitter_never_trigger():
    p = TriggerPolicy(settings(), world=4)
    assert feed(p, range(0, 600), noise_ms=15.0) == []


def test_a_rank_that_turns_slow_is_named_within_two_windows_with_its_lateness():
    p = TriggerPolicy(settings(), world=4)
    assert feed(p, range(0, 120)) == []
    got = feed(p, range(120, 200), late={1: 60.0})
    assert len(got) == 1
    step, d = got[0]
    assert d.kind == "rank" and d.rank == 1 and d.decision == "capture"
    assert step <= 120 + 2 * 5  # scored over two windows (windows start at 2): [117, 126] is mostly slow already
    # its lateness over the deciding windows, which begin before the slowdown: between the threshold
    # (10% of the step) and the 60 ms it is late in each slow step
    assert d.threshold_ms < d.score_ms <= 68.0 and d.threshold_ms <= 0.1 * 170


def test_a_slowdown_that_comes_and_goes_is_captured_once_and_a_new_one_again():
    p = TriggerPolicy(settings(), world=2)
    feed(p, range(0, 100))
    got = feed(p, range(100, 140), late={1: 60.0})  # slow for 8 windows: one episode
    got += feed(p, range(140, 200))  # healthy again: the episode closes
    assert [(d.kind, d.rank) for _, d in got] == [("rank", 1)]
    got = feed(p, range(200, 240), late={0: 60.0})  # another rank, later: a new episode
    assert [(d.kind, d.rank, d.decision) for _, d in got] == [("rank", 0, "capture")]


def test_the_budget_holds_when_slowdowns_keep_coming():
    p = TriggerPolicy(settings(max_captures=1), world=2)
    feed(p, range(0, 60))
    first = feed(p, range(60, 100), late={1: 60.0})
    feed(p, range(100, 140))
    second = feed(p, range(140, 180), late={1: 60.0})
    assert [d.decision for _, d in first] == ["capture"]
    assert [d.decision for _, d in second] == ["suppressed_budget"]


def test_captures_keep_their_gap():
    p = TriggerPolicy(settings(min_gap_steps=100), world=2)
    feed(p, range(0, 60))
    first = feed(p, range(60, 80), late={1: 60.0})
    feed(p, range(80, 100))  # the episode of rank 1 closes
    second = feed(p, range(100, 120), late={0: 60.0})
    assert [d.decision for _, d in first] == ["capture"] and [d.decision for _, d in second] == ["suppressed_gap"]


def test_a_rank_that_was_always_a_little_late_is_not_turning_slow():
    """Against its own history: a rank 25 ms late from the start (over the 19 ms threshold) is not
    flagged while it stays so, and is when it gets 60 ms later still."""
    p = TriggerPolicy(settings(), world=2)
    p.lateness_history[1] = [25.0] * 10  # what its healthy windows said
    assert feed(p, range(0, 100), late={1: 25.0}) == []
    got = feed(p, range(100, 140), late={1: 85.0})
    assert [(d.kind, d.rank) for _, d in got] == [("rank", 1)]


def test_the_whole_job_slowing_down_is_its_own_trigger():
    p = TriggerPolicy(settings(), world=4)
    feed(p, range(0, 100))
    got = feed(p, range(100, 140), job_ms=2.2 * STEP_MS)
    assert [(d.kind, d.decision) for _, d in got] == [("job", "capture")]
    assert got[0][1].score_ms > 0.5 * got[0][1].history_ms


def test_the_automatic_window_is_about_a_second_of_steps():
    p = TriggerPolicy(settings(window=0), world=2)
    feed(p, range(0, 20), job_ms=50.0, noise_ms=0.0)
    assert p.window == 10  # 0.5 s / 50 ms
    q = TriggerPolicy(settings(window=0), world=2)
    feed(q, range(0, 20), job_ms=2000.0, noise_ms=0.0)
    assert q.window == 4  # at least 4 steps


def test_the_capture_schedule_is_warmup_then_active_steps():
    from torch.profiler import ProfilerAction

    sched = CaptureSchedule(warmup=1, active=3)
    sched.add(0, 2)
    sched.add(1, 130)
    actions = [sched(s) for s in (1, 2, 3, 4, 5, 6, 130, 131, 133)]
    assert actions == [ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD,
                       ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD,
                       ProfilerAction.RECORD_AND_SAVE]
    assert sched.capture_of(133) == 1 and sched.capture_of(4) == 0 and sched.capture_of(50) is None


def test_a_periodic_straggler_counts_at_its_average_and_one_hiccup_does_not():
    p = TriggerPolicy(settings(), world=2)
    feed(p, range(0, 100))
    late_every_second = []
    for s in range(100, 140):  # rank 1 late by 60 ms in every second step
        late_every_second += feed(p, range(s, s + 1), late={1: 60.0 if s % 2 == 0 else 0.0}, seed=s)
    assert [(d.kind, d.rank) for _, d in late_every_second] == [("rank", 1)]
    assert late_every_second[0][1].score_ms == pytest.approx(30.0, abs=14.0)
    q = TriggerPolicy(settings(), world=2)
    hiccups = []
    for s in range(0, 400):  # one step in 20 is 100 ms late on rank 1: hiccups, never a slowdown
        hiccups += feed(q, range(s, s + 1), late={1: 100.0 if s % 20 == 7 else 0.0}, seed=s)
    assert hiccups == []
