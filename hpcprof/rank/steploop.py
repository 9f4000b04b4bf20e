"""The step loop of a session (hpcprof.rank.session.Run): regions, steps opened and closed (by
:meth:`StepLoop.steps`, :meth:`StepLoop.step`, or :meth:`StepLoop.begin_step`/:meth:`StepLoop.end_step`
from callbacks), their records, and the profiler's step after each. Every step runs the same things
in the same order on every rank: the previous step's tail, the control round, the drills, the
timer; so that preemption, triggered capture and drills act at the same step everywhere.
"""

from __future__ import annotations

import numbers
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ..rundir import KNOWN_REGIONS, StepRecord
from ..rundir.records import REGION_NAME_RE

_REGION_RE = re.compile(REGION_NAME_RE)


class HpcprofUsageError(RuntimeError):
    """The step-loop API was used in a way it cannot work (the message says how to fix it)."""


MAX_BATCH_SIZE = 2**31 - 1
"""The largest batch_size taken (samples per rank per step): beyond it a value is a mistake."""

class SessionNotStarted(HpcprofUsageError, AttributeError):
    """What the session sets up when it starts, asked for before (an AttributeError too, so that
    ``hasattr(run, "device")`` stays False there)."""


def checked_batch_size(value: Any, where: str) -> int | None:
    """`value` as a batch size (None stays None: unknown), or a one-line HpcprofUsageError naming
    `where`: a bool, a float, a string, NaN, zero or a negative number would be recorded with every
    step and turn the analysis' samples/s (and its count of finished steps) into nonsense."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and 1 <= int(value) <= MAX_BATCH_SIZE:
        return int(value)
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise HpcprofUsageError(f"{where}: batch_size {shown} ({type(value).__name__}) is not a batch size; give the "
                            f"samples per rank per step as a whole number from 1 to {MAX_BATCH_SIZE}, or None")


class StepLoop:
    """The step-loop half of :class:`hpcprof.rank.session.Run` (which provides ``_need``,
    ``_connect``, and the timer, writer, profiler, control channel and drills once connected)."""

    def region(self, name: str):
        """``with run.region("forward"):``: a named part of the step, traced as ``hpcprof.<name>``
        and timed in the step record. Known names: data, copy, forward, backward, optimizer (the
        analysis breaks steps down by them); any other name is reported as a user region."""
        self._need("run.region()")
        if not isinstance(name, str) or not _REGION_RE.fullmatch(name):
            shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
            raise HpcprofUsageError(f"run.region({shown}): a region name is a string of a letter then letters, digits, "
                                    "'_' or '-' (at most 64)")
        self._connect()
        return self.timer.region(name)

    # ------------------------------------------------------------------ liveness (the hang watchdog)
    def liveness(self) -> tuple[int | None, float | None, float | None, int | None]:
        """What the hang watchdog (hpcprof.rank.hang, another thread) reads: (the open step or None,
        its wall-clock start, the last sign of life (that start or a later one), the next step's
        number). The start is read on both sides of the step so that a step opening meanwhile is
        never paired with the previous one's start: (None, None, None, next) then."""
        t1 = self._t_wall
        step = self._step
        t2 = self._t_wall
        nxt = self._next_step
        if t1 != t2 or step is None or t2 is None:
            return None, None, None, nxt
        alive = self._t_alive
        return step, t2, max(t2, alive) if isinstance(alive, float) else t2, nxt

    def show_alive(self) -> None:
        """A sign of life inside a step (zero-change mode: a forward pass), for the hang watchdog: an
        evaluation between two optimizer steps runs forward passes, a hung rank does not."""
        self._t_alive = time.time()

    # ------------------------------------------------------------------ the step loop
    def begin_step(self, started: tuple[float, float] | None = None, what: str = "run.begin_step()",
                   defer_drill: bool = False) -> int:
        """Open the next step (joins the job first); returns its global step number. For loops
        driven from callbacks (hpcprof.frameworks, zero-change mode); :meth:`steps` and :meth:`step`
        call it. `started`: (perf_counter, wall time) when the step really began, if earlier."""
        self._need(what)
        self._connect()
        if self._step is not None:
            raise _nested(what, self._step)
        step = self._next_step
        self._write_tail()
        self.failure.step = step
        if self.control.poll(step):
            self._preempted(step)
        self.drills.before_step(step)
        # _t_wall before _step: the hang watchdog (hpcprof.rank.hang) reads the step, then its start
        self._t_wall = time.time()
        self._step = step
        self._profiled = self.prof.is_active_step(step)
        self._t0 = self.timer.begin()
        if started is not None:
            self._t0, self._t_wall = self.timer.backdate(started[0]), started[1]
        self._drill_s = 0.0
        if defer_drill:  # zero-change mode: the sleep goes where the trace's step begins (profiler_step)
            self._drill_pending = True
        else:
            self._step_drills(step)
        return step

    def _step_drills(self, step: int) -> None:
        """The drills that act inside the step, before its work: the straggler's sleep, the hang."""
        self._drill_s += self.drills.straggle(step, self.use_cuda)
        self.drills.hang(step)

    def end_step(self, defer_profiler: bool = False) -> None:
        """Close the open step: its record is written (on a GPU once its GPU time is known).
        `defer_profiler`: the profiler's step is taken later, by :meth:`profiler_step` (zero-change
        mode takes it at the next forward pass, after the script's own ``prof.step()``)."""
        if self._step is None:
            raise HpcprofUsageError("run.end_step(): no step is open (call run.begin_step() first)")
        self._advance(self._record(), defer_profiler)

    def profiler_step(self) -> None:
        """The profiler step deferred by ``end_step(defer_profiler=True)``, if one is pending; then the
        straggler drill's sleep deferred by ``begin_step(defer_drill=True)``, so that both the trace's
        ``ProfilerStep#`` range and the step record hold it."""
        if self._profiler_pending:
            self._profiler_pending = False
            self.prof.step()
        if self._drill_pending and self._step is not None:
            self._drill_pending = False
            self._step_drills(self._step)

    def _record(self) -> StepRecord:
        """The open step's record (the step's work is issued)."""
        t1 = self.timer.end()
        r = self.timer.region_s
        known = {k: r.get(k) for k in KNOWN_REGIONS}
        ff = self.timer.first_forward
        self.last_step_end = (t1, self._t_wall + (t1 - self._t0))
        return StepRecord(
            step=self._step, epoch=self.epoch, rank=self.rank, t_start=self._t_wall,
            t_end=self.last_step_end[1], step_s=t1 - self._t0, data_wait_s=known["data"],
            host_pre_forward_s=(ff - self._t0) if ff else None, drill_sleep_s=self._drill_s,
            forward_s=known["forward"], backward_s=known["backward"], optimizer_s=known["optimizer"],
            batch_size=self.batch_size, profiled=self._profiled, copy_s=known["copy"],
            regions={k: v for k, v in r.items() if k not in KNOWN_REGIONS}, blocked_s=self.timer.blocked_s,
        )

    def _advance(self, rec: StepRecord, defer_profiler: bool = False) -> None:
        """After the step: the profiler's step (a trace is written when a window ends: timed into the
        record), then the record goes to the writer."""
        if self.trigger is not None:
            self.trigger.step_done(rec.step_s - rec.blocked_s, rec.step_s)
        self.profiler_step()
        self._step = None  # the step's work is done: a slow trace export below is not a hang
        if defer_profiler:
            self._profiler_pending = True
        else:
            before = self.prof.export_s
            self.prof.step()
            rec.trace_export_s = self.prof.export_s - before
        self._next_step = rec.step + 1
        self.timer.finish(rec)

    def _write_tail(self) -> None:
        """A step whose loop was left by `break`: finish it now that the block goes on."""
        if self._tail is not None:
            rec, self._tail = self._tail, None
            self._advance(rec)

    def steps(self, iterable: Iterable | None = None, total: int | None = None) -> Iterator[Any]:
        """Yield the batches of `iterable`, one training step each, every step timed and recorded on
        every rank; getting the next batch is the ``data`` region.

        With data and no `total` (nor ``hpcprof.run(steps=N)``): one pass over it, as a plain ``for``
        loop (call it again for the next epoch; the script's own ``sampler.set_epoch`` stands). With
        `total`: up to that global step, starting new passes (each a new epoch, ``set_epoch`` called
        for them when the loader's sampler has it) while the data can be iterated again. Without data:
        the step numbers from :attr:`start_step` up to `total` (default: train.steps). Every rank must
        run the same steps."""
        self._need("run.steps()")
        if self._in_steps or self._step is not None:
            raise _nested("run.steps()", self._step)
        self._connect()
        if total is None:
            total = self._steps if self._steps is not None or iterable is not None else self.total_steps
        return self._loop(iterable, None if total is None else int(total))

    def _loop(self, iterable, total: int | None) -> Iterator[Any]:
        self._in_steps = True
        it = None
        first = self._next_step
        # a container or a DataLoader starts a new pass with iter(); an iterator or generator cannot
        restartable = iterable is not None and total is not None and not isinstance(iterable, Iterator)
        try:
            while total is None or self._next_step < total:
                step = self.begin_step(what="run.steps()")
                try:
                    if iterable is None:
                        batch = step
                    else:
                        with self.timer.region("data"):
                            if it is None:
                                it = iter(iterable)
                            batch = next(it, _END)
                            if batch is _END and step == first:
                                raise _empty(iterable, step)
                            if batch is _END:
                                self.epoch += 1
                                if restartable:
                                    it = self._new_pass(iterable)
                                    batch = next(it, _END)
                                    if batch is _END:
                                        raise _empty(iterable, step)
                        if batch is _END:  # the data ran out: the open step never ran
                            self._step = None
                            return
                except BaseException:
                    self._step = None
                    raise
                try:
                    yield batch
                except GeneratorExit:
                    # the loop was left (break, or an exception on its way out): keep the step's record;
                    # the next step or a clean __exit__ finishes it, a failing __exit__ drops it
                    self._tail = self._record()
                    self._step = None
                    raise
                self.end_step()
        finally:
            self._in_steps = False

    def _new_pass(self, iterable):
        sampler = getattr(iterable, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        return iter(iterable)

    def step(self):
        """``with run.step():`` one training step, for loops that do not iterate over a loader (the
        step number is :attr:`step_number` inside the block). Same records, drills and preemption
        as :meth:`steps`."""
        return _StepBlock(self)

_END = object()


class _StepBlock:
    def __init__(self, run: StepLoop):
        self.run = run

    def __enter__(self) -> int:
        return self.run.begin_step(what="run.step()")

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.run.end_step()
        else:
            self.run._step = None
        return False




def _nested(what: str, step: int | None) -> HpcprofUsageError:
    return HpcprofUsageError(f"{what} inside step {step}, which is still running: steps do not nest; use one "
                             "`for ... in run.steps(...)` loop (or `with run.step():`) at a time")


def _empty(iterable, step: int) -> HpcprofUsageError:
    return HpcprofUsageError(f"run.steps(): a pass over the {type(iterable).__name__} gave no batch at all (it is empty) "
                             f"at step {step}; give it data (a DataLoader with drop_last=True and fewer samples than "
                             "a batch is empty)")
