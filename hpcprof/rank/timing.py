"""Timing one step on a rank: host times of its regions, and its time on the GPU's clock, without a
synchronisation on the hot path.

Host times (``time.perf_counter``) say when the host issued work. On a GPU the host runs ahead of
the device by up to a queue of kernels, so a host step time is a launch time: it can be short while
the GPU is the bottleneck, or absorb a host delay the GPU never sees. The step's time on the GPU is
measured with one CUDA event per step boundary, recorded on the rank's current stream when a step's
work has been issued (and before the first step): step n's GPU time is the time between the
boundary before it and the one after it, i.e. the GPU's own period for that step, idle time
included (a GPU waiting for a slow host shows it here). The boundary is recorded before the
profiler writes a trace at the end of a window, so that host pause lands in the next step, as it
does on the host clock.
Events are read back only once ``Event.query()`` says they have completed, so records of a GPU
run are written a few steps late; nothing ever calls ``synchronize()`` on the hot path, and the
failure path never waits for the GPU (a peer may be dead and the queue stuck behind its collective).
"""

from __future__ import annotations

import collections
import time
from contextlib import contextmanager
from typing import Iterator

import torch
from torch.profiler import record_function

from ..rundir import StepRecord, StepWriter
from ..rundir.records import region_label


OWN_REGIONS = ("data", "copy")
"""Regions whose waits are the rank's own (the input pipeline, its own device): not counted as
waiting for other ranks."""


class StepTimer:
    """The open step's host timings and the GPU boundary events; writes each step's record."""

    def __init__(self, writer: StepWriter, use_cuda: bool):
        self.writer = writer
        self.use_cuda = use_cuda
        self._pending: collections.deque = collections.deque()
        """[record, the boundary event before its step, the one after it], oldest first."""
        self._open_event = None
        self._closing = None
        self.region_s: dict[str, float] = {}
        self.blocked_s = 0.0
        self.first_forward: float | None = None
        self.t0 = 0.0
        self._open: list[list[float]] = []
        """[wall, CPU] time of the nested regions of each region open now, outermost first."""

    # ------------------------------------------------------------------ the open step
    def begin(self) -> float:
        """Mark the step's start on the host clock (and the first GPU boundary, before the first step).
        Returns the host start."""
        self.region_s = {}
        self.blocked_s = 0.0
        self.first_forward = None
        if self.use_cuda and self._open_event is None:
            self._boundary()
        self.t0 = time.perf_counter()
        return self.t0

    def backdate(self, t0: float) -> float:
        """The open step really began at host time `t0` (earlier than :meth:`begin`: zero-change mode's
        first step, whose start is seen before the job is joined). Returns it."""
        self.t0 = min(t0, self.t0)
        return self.t0

    def end(self) -> float:
        """The step's work is issued: the host end, and the GPU boundary closing the step."""
        t1 = time.perf_counter()
        if self.use_cuda:
            self._closing = self._open_event
            self._boundary()
        return t1

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        """A named region of the open step: a ``record_function`` range in the trace and host time
        in the step record (a region entered twice in one step adds up). In the regions where the
        training's collectives run (every region but ``data`` and ``copy``), the time the thread was
        blocked (wall time minus the thread's CPU time) adds to ``blocked_s``: waiting for other
        ranks (hpcprof.rank.trigger).

        Nested regions: time inside a region that runs inside another counts for the innermost one
        only (exclusive time), in the region times and in ``blocked_s`` alike, so that a step's
        region times never add up to more than the step (``run.region("train_step")`` around
        forward, backward and optimizer keeps only what lies outside those three)."""
        t = time.perf_counter()
        c = time.thread_time()
        if name == "forward" and self.first_forward is None:
            self.first_forward = t
        inner = [0.0, 0.0]  # wall and CPU time of the regions nested in this one
        self._open.append(inner)
        try:
            with record_function(region_label(name)):
                yield
        finally:
            self._open.pop()
            wall, cpu = time.perf_counter() - t, time.thread_time() - c
            if self._open:
                self._open[-1][0] += wall
                self._open[-1][1] += cpu
            own_wall, own_cpu = wall - inner[0], cpu - inner[1]
            self.region_s[name] = self.region_s.get(name, 0.0) + own_wall
            if name not in OWN_REGIONS:
                self.blocked_s += max(0.0, own_wall - own_cpu)

    def finish(self, record: StepRecord) -> None:
        """The step's record: written at once on CPU; on a GPU once its GPU time is known."""
        if not self.use_cuda:
            self.writer.write(record)
            return
        self._pending.append([record, self._closing, self._open_event])
        self.flush_ready()

    # ------------------------------------------------------------------ GPU boundary events
    def _boundary(self) -> None:
        """Record a boundary event: it ends one step's GPU interval and starts the next's."""
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self._open_event = ev

    def flush_ready(self) -> None:
        """Write the records whose GPU interval has completed (non-blocking)."""
        while self._pending:
            rec, start, end = self._pending[0]
            if end is None or not end.query():
                return
            rec.gpu_ms = start.elapsed_time(end)
            self._pending.popleft()
            self.writer.write(rec)

    def close(self, block: bool) -> None:
        """End of the loop. `block` (the normal end): a last boundary event, waited for, so every
        record gets its GPU time. Without it (the failure path) the records whose GPU time is not
        known yet are written with gpu_ms null: their host timings stay true, and nothing waits on
        a GPU queue that may never drain (a collective behind a dead peer)."""
        if self.use_cuda and self._pending:
            if block:
                self._pending[-1][2].synchronize()
            self.flush_ready()
        while self._pending:
            self.writer.write(self._pending.popleft()[0])
