"""Triggered profiling (``profiler.mode = "triggered"``): decide from the step records of every rank
when to capture a profiler window, and capture it on every rank at once.

What each rank shares: in every control round (hpcprof.rank.control, one per step boundary) a rank
adds two numbers about the step it just finished: its **own time** in the step and the step's time.
Its own time is the step's host time minus the time its main thread was blocked (wall time minus
CPU time of the thread) inside the step's regions other than ``data`` and ``copy``: a rank that
waits for a late peer waits inside the training's collectives (DDP's gradient all-reduce in
``backward``), which lie in those regions, while a late rank's own delays (a slow input pipeline
in ``data``, host gaps outside any region, slower compute) stay in its own time. So in a step,
the late rank's own time exceeds the others' by about its lateness, the quantity the analysis'
what-if cost measures after the fact.

How a decision is taken (:class:`TriggerPolicy`, a pure function of the gathered rounds, hence the
same on every rank): the steps are cut into windows of ``trigger_window`` steps; when a window
completes, the last ``trigger_windows`` windows are scored together. Each rank's lateness is the
trimmed mean (:func:`trimmed_mean`) over those steps of its own time minus the others' median. A
rank is slow when its lateness exceeds the threshold, max(trigger_min_ms, trigger_threshold_pct %
of the median step time), and exceeds its own median lateness of its recent healthy scores by as
much (its history: a rank that has always been a little late is not "turning slow"). The job is slow in a window when its step time rose by trigger_job_pct %
over the median of its recent windows (not while a rank's slowdown is open: that rank explains it).
A slow score opens a slowdown episode and asks for a capture; the
episode stays open (no second capture for the same slowdown) until ``trigger_windows`` healthy
scores running. A capture also needs the budget
(``max_captures``) and ``min_gap_steps`` since the last capture; otherwise the decision is recorded
as suppressed, with why.

When: the ranks read a round at different step boundaries, so the capture's first step is agreed
(:meth:`ControlChannel.agree`: the largest current step, plus one) and is in every rank's future.
The window (warm-up, then active steps) is a profiler schedule (:class:`CaptureSchedule`) that
torch.profiler consults step by step.
"""

from __future__ import annotations

import collections
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from ..spec.schema import TRIGGER_BASELINE_MIN_STEP

HISTORY_WINDOWS = 10
"""Windows of the past a rank's lateness and the job's step time are compared with."""
AUTO_WINDOW_S = 0.5
"""trigger_window = 0: windows of about this many seconds of steps (the evidence, trigger_windows
windows, is then about a second long)."""
AUTO_WINDOW_MIN, AUTO_WINDOW_MAX = 4, 200
AUTO_WINDOW_FROM = 8
"""Steps whose times (the median over ranks) set the automatic window (after the first two)."""


@dataclass
class Decision:
    """One decision of the policy: a window in which a slowdown episode opened (kind "rank" or
    "job"), or the baseline. Recorded in steps/triggers.jsonl; a capture also in the manifest."""

    kind: str
    """"baseline", "rank" (a rank turned slow) or "job" (every rank's step time rose)."""
    window: list[int]
    """[first, last] step of the window that completed the episode's evidence."""
    rank: int | None = None
    score_ms: float | None = None
    """The rank's lateness in the window (kind rank), or the job's step-time rise (kind job), ms."""
    threshold_ms: float | None = None
    history_ms: float | None = None
    """The rank's median lateness in its recent healthy windows (kind rank), or the job's median step
    time of its recent windows (kind job)."""
    decision: str = "capture"
    """capture, or why not: suppressed_budget, suppressed_gap, suppressed_busy."""
    capture: int | None = None
    """The capture's index (traces/capture-<k>/), when one was taken."""
    steps: list[int] | None = None
    """[first warm-up step, last active step] of the capture."""
    read_at: int | None = None
    """The step boundary at which this rank read the deciding round (rank 0's, as recorded)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TriggerSettings:
    window: int
    windows: int
    threshold_pct: float
    min_ms: float
    job_pct: float
    max_captures: int
    min_gap_steps: int
    warmup: int
    active: int
    baseline_at: int

    @classmethod
    def from_profiler(cls, p) -> "TriggerSettings":
        return cls(p.trigger_window, p.trigger_windows, p.trigger_threshold_pct, p.trigger_min_ms, p.trigger_job_pct,
                   p.max_captures, p.min_gap_steps, p.warmup, p.active, max(p.wait, TRIGGER_BASELINE_MIN_STEP))


@dataclass
class _Episode:
    healthy_run: int = 0
    open: bool = False


@dataclass
class TriggerPolicy:
    """The deterministic decision rule (see the module docstring): feed it the gathered rounds
    (:meth:`add`), in order; it returns the decisions each completed window leads to."""

    settings: TriggerSettings
    world: int
    start_step: int = 0
    own: dict[int, list[float]] = field(default_factory=dict)
    """step -> every rank's own time in that step (ms)."""
    step_ms: dict[int, list[float]] = field(default_factory=dict)
    window: int | None = None
    next_window_start: int | None = None
    lateness_history: list[list[float]] = field(default_factory=list)
    """Per rank, its lateness in its recent windows in which it was not slow."""
    job_history: list[float] = field(default_factory=list)
    episodes: dict[Any, _Episode] = field(default_factory=dict)
    recent: collections.deque = field(default_factory=collections.deque)
    """The last `windows` windows' per-step lateness of every rank and job step times."""
    captures_taken: int = 0
    last_capture_end: int | None = None
    busy_until: int | None = None

    def __post_init__(self):
        self.lateness_history = [[] for _ in range(self.world)]
        self.recent = collections.deque(maxlen=max(1, self.settings.windows))
        if self.settings.window:
            self.window = self.settings.window
            self.next_window_start = self.start_step + 2  # the first steps of a start are warm-up

    # ------------------------------------------------------------------ feeding
    def add(self, step: int, own_ms: list[float], step_ms: list[float]) -> list[Decision]:
        """Every rank's numbers for global step `step`; returns the decisions of the windows it completes."""
        if step < self.start_step or any(not math.isfinite(x) for x in own_ms + step_ms):
            return []
        self.own[step] = list(own_ms)
        self.step_ms[step] = list(step_ms)
        if self.window is None:
            self._choose_window()
            return []
        out = []
        while self.next_window_start is not None and all(
                s in self.own for s in range(self.next_window_start, self.next_window_start + self.window)):
            first = self.next_window_start
            out += self._evaluate(first, first + self.window - 1)
            for s in range(first, first + self.window):
                self.own.pop(s, None)
                self.step_ms.pop(s, None)
            self.next_window_start = first + self.window
        return out

    def _choose_window(self) -> None:
        steps = sorted(s for s in self.own if s >= self.start_step + 2)
        if len(steps) < AUTO_WINDOW_FROM:
            return
        med_ms = statistics.median(statistics.median(self.step_ms[s]) for s in steps[:AUTO_WINDOW_FROM])
        self.window = int(min(AUTO_WINDOW_MAX, max(AUTO_WINDOW_MIN, round(AUTO_WINDOW_S * 1e3 / max(med_ms, 1e-3)))))
        self.next_window_start = steps[AUTO_WINDOW_FROM - 1] + 1

    # ------------------------------------------------------------------ scoring
    def _evaluate(self, first: int, last: int) -> list[Decision]:
        """A window [first, last] completed: score the last `windows` windows together (the evidence
        of a slowdown is that many windows long; it is re-scored at every window, so a slowdown is
        caught within about one window of the evidence being there)."""
        st = self.settings
        steps = range(first, last + 1)
        late = {r: [self.own[s][r] - statistics.median([x for i, x in enumerate(self.own[s]) if i != r] or [0.0])
                    for s in steps] for r in range(self.world)}
        self.recent.append({"first": first, "late": late, "job": [max(self.step_ms[s]) for s in steps]})
        if len(self.recent) < st.windows:
            return []
        span = [self.recent[0]["first"], last]
        job_med = statistics.median([x for w in self.recent for x in w["job"]])
        threshold = max(st.min_ms, st.threshold_pct / 100.0 * job_med)
        decisions: list[Decision] = []
        for r in range(self.world):
            score = trimmed_mean([x for w in self.recent for x in w["late"][r]])
            hist = self.lateness_history[r]
            base = statistics.median(hist[-HISTORY_WINDOWS:]) if hist else 0.0
            slow = score > threshold and score - base > threshold
            if not slow:
                hist.append(score)
            d = self._step_episode(("rank", r), slow, span)
            if d is not None:
                d.rank, d.score_ms, d.threshold_ms, d.history_ms = r, round(score, 3), round(threshold, 3), round(base, 3)
                decisions.append(d)
        past = self.job_history[-HISTORY_WINDOWS:]
        ref = statistics.median(past) if len(past) >= 3 else None
        job_slow = ref is not None and job_med > ref * (1 + st.job_pct / 100.0) and job_med - ref > st.min_ms
        if not job_slow:
            self.job_history.append(job_med)
        d = self._step_episode(("job",), job_slow, span)
        rank_open = any(e.open for k, e in self.episodes.items() if k[0] == "rank")
        if d is not None and not rank_open:  # a slow rank explains the job's rise: one decision, the rank's
            d.score_ms = round(job_med - (ref or job_med), 3)
            d.threshold_ms = round((ref or 0.0) * st.job_pct / 100.0, 3)
            d.history_ms = round(ref, 3) if ref is not None else None
            decisions.append(d)
        return decisions

    def _step_episode(self, key, slow: bool, span: list[int]) -> Decision | None:
        """A slow score opens an episode (one capture asked for); `windows` healthy scores running
        close it."""
        e = self.episodes.setdefault(key, _Episode())
        if slow:
            e.healthy_run = 0
            if not e.open:
                e.open = True
                return Decision(kind=key[0], window=list(span), decision="capture")
        else:
            e.healthy_run += 1
            if e.open and e.healthy_run >= self.settings.windows:
                e.open = False
        return None

    # ------------------------------------------------------------------ the budget
    def admit(self, decision: Decision, at_step: int) -> Decision:
        """Whether the capture asked for can be taken at step boundary `at_step` (budget, gap, a
        capture already scheduled); sets `decision.decision`."""
        st = self.settings
        if self.busy_until is not None and at_step <= self.busy_until:
            decision.decision = "suppressed_busy"
        elif self.captures_taken >= st.max_captures:
            decision.decision = "suppressed_budget"
        elif self.last_capture_end is not None and at_step - self.last_capture_end < st.min_gap_steps:
            decision.decision = "suppressed_gap"
        else:
            decision.decision = "capture"
        return decision

    def scheduled(self, decision: Decision, first_step: int, capture: int) -> None:
        """A capture of warm-up + active steps starts at `first_step` on every rank."""
        last = first_step + self.settings.warmup + self.settings.active - 1
        decision.capture, decision.steps = capture, [first_step, last]
        self.captures_taken += 1
        self.last_capture_end = last
        self.busy_until = last


def trimmed_mean(values: list[float]) -> float:
    """The mean without the largest and the smallest 10% (at least one of each from 5 values on): a
    hiccup of a step or two does not move it, and a rank late in every second step (a periodic
    straggler) still counts, at half its delay, where a median would say 0 or all of it."""
    v = sorted(values)
    if len(v) >= 5:
        k = max(1, round(0.1 * len(v)))
        v = v[k:-k]
    return sum(v) / len(v)


class CaptureSchedule:
    """A torch.profiler schedule made of capture windows (warm-up steps, then active steps), added as
    the run decides them; NONE outside them. ``capture_of(step)`` says which capture a step's trace
    belongs to."""

    def __init__(self, warmup: int, active: int):
        self.warmup, self.active = warmup, active
        self.windows: list[tuple[int, int]] = []  # (capture index, first warm-up step)

    def add(self, capture: int, first_step: int) -> None:
        self.windows.append((capture, first_step))

    def capture_of(self, step: int) -> int | None:
        for k, first in self.windows:
            if first <= step < first + self.warmup + self.active:
                return k
        return None

    def __call__(self, step: int):
        from torch.profiler import ProfilerAction

        for _k, first in self.windows:
            if first <= step < first + self.warmup:
                return ProfilerAction.WARMUP
            last = first + self.warmup + self.active - 1
            if first + self.warmup <= step < last:
                return ProfilerAction.RECORD
            if step == last:
                return ProfilerAction.RECORD_AND_SAVE
        return ProfilerAction.NONE


class TriggerRuntime:
    """Mode "triggered" on one rank: the policy, the capture schedule, what this rank adds to each
    control round, and what a completed round leads to (agreeing on a capture's first step, and on
    rank 0 recording it: the manifest's captures and steps/triggers.jsonl)."""

    EXTRA = 2
    """Floats this rank adds to a round: its own time and the step's time in its last step (ms)."""

    def __init__(self, profiler_cfg, run, rank: int, world: int, start_step: int, control=None):
        from ..rundir import manifest as run_manifest

        self.run, self.rank, self.control = run, rank, control
        self.settings = TriggerSettings.from_profiler(profiler_cfg)
        self.policy = TriggerPolicy(self.settings, world, start_step)
        self.schedule = CaptureSchedule(self.settings.warmup, self.settings.active)
        self.last: tuple[float, float] = (float("nan"), float("nan"))
        known = (run_manifest.load(run) or run_manifest.Manifest()).captures
        self.next_index = 1 + max((c.index for c in known), default=0)
        self.policy.captures_taken = sum(1 for c in known if c.kind != "baseline")
        if known:
            self.policy.last_capture_end = max(c.steps[1] for c in known)
        if start_step <= self.settings.baseline_at and not any(c.index == 0 for c in known):
            first = self.settings.baseline_at
            self.schedule.add(0, first)
            d = Decision(kind="baseline", window=[first, first], capture=0,
                         steps=[first, first + self.settings.warmup + self.settings.active - 1])
            self.policy.busy_until = d.steps[1]
            self._record(d)

    # ------------------------------------------------------------------ the control rounds
    def payload(self) -> list[float]:
        return list(self.last)

    def step_done(self, own_s: float, step_s: float) -> None:
        self.last = (own_s * 1e3, step_s * 1e3)

    def on_round(self, rnd, step: int) -> None:
        """A completed round (issued at boundary `rnd.step`, so its numbers are of step rnd.step - 1),
        read at this rank's boundary `step`."""
        extra = rnd.extra()
        decisions = self.policy.add(rnd.step - 1, [float(x) for x in extra[:, 0]], [float(x) for x in extra[:, 1]])
        for d in decisions:
            self.policy.admit(d, d.window[1] + 1)
            d.read_at = step
            if d.decision == "capture":
                first = self.control.agree(step, ahead=1)
                k = self.next_index
                self.next_index += 1
                self.schedule.add(k, first)
                self.policy.scheduled(d, first, k)
            self._record(d)

    # ------------------------------------------------------------------ the record (rank 0)
    def _record(self, d: Decision) -> None:
        if self.rank != 0:
            return
        import json

        from ..rundir import manifest as run_manifest

        with open(self.run.triggers_path, "a") as fh:
            fh.write(json.dumps(d.to_dict()) + "\n")
        if d.capture is not None:
            run_manifest.record_capture(self.run, run_manifest.Capture(
                index=d.capture, kind=d.kind, steps=list(d.steps),
                folder=str(self.run.capture_dir(d.capture).relative_to(self.run.root)), rank=d.rank,
                score_ms=d.score_ms, threshold_ms=d.threshold_ms, history_ms=d.history_ms,
                window=list(d.window) if d.kind != "baseline" else None))
