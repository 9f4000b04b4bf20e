"""torch.profiler on every rank: the schedule from the spec, one trace per rank and cycle, written
under a temporary name and renamed (readers never see half a trace), with profiler step numbers
equal to the job's global step numbers (also after a requeue)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, schedule

from ..rundir import RunDir, temporary_then_rename
from ..rundir.memory_snapshots import snapshot_path
from ..spec import Profiler
from .clock_skew import skew_trace_file


_HISTORY = {"on": False}
"""Whether this process records the CUDA allocator's history (RankProfiler turns it on)."""


def write_memory_snapshot(run: RunDir, rank: int, oom: bool = False) -> Path:
    """memory/rank-<r>.pickle (or .oom.pickle): the CUDA caching allocator's state and history
    (profiler.memory_snapshot), for https://pytorch.org/memory_viz and `analyze`
    (hpcprof.rundir.memory_snapshots). torch.cuda.memory._dump_snapshot is a documented PyTorch API
    that carries an underscore."""
    import torch

    path = snapshot_path(run.root, rank, oom)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._dump_snapshot(str(path))
    return path


def write_oom_snapshot(run: RunDir, rank: int) -> str | None:
    """At an out-of-memory failure, where the allocator's history is recorded: the snapshot, written
    now (its path relative to the run directory); None where there is no history or it cannot be
    written (never an error: the failure note must still be written)."""
    if not _HISTORY["on"]:
        return None
    try:
        return write_memory_snapshot(run, rank, oom=True).relative_to(run.root).as_posix()
    except Exception:  # a second OOM while pickling, a full disk: the note matters more
        return None


class NullProfiler:
    """Stands in when profiling is off; same interface as the parts of torch.profiler we use."""

    step_num = 0
    export_s = 0.0
    cycles_written = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self) -> None:
        self.step_num += 1

    def is_active_step(self, step: int) -> bool:
        return False


class RankProfiler:
    """torch.profiler.profile configured from the spec for one rank."""

    def __init__(self, cfg: Profiler, run: RunDir, rank: int, use_cuda: bool, start_step: int = 0, clock_skew_ms: float = 0.0,
                 captures=None):
        """`captures`: a hpcprof.rank.trigger.CaptureSchedule (mode "triggered"): the windows the run
        decides, written to traces/ (the baseline, capture 0) and traces/capture-<k>/; None: the
        spec's fixed schedule, cycle k to traces/cycle-<k>/."""
        self.cfg, self.run, self.rank = cfg, run, rank
        self.captures = captures
        self.clock_skew_ms = clock_skew_ms  # the clock-skew drill: timestamps shifted before the rename
        self.cycles_written = 0
        self.export_s = 0.0
        """Host seconds spent writing traces so far (the step loop reads the increase per step)."""
        self.memory_snapshot = bool(cfg.memory_snapshot and use_cuda)
        if self.memory_snapshot:
            import torch

            torch.cuda.memory._record_memory_history(max_entries=100_000)
            _HISTORY["on"] = True
        self._schedule = captures if captures is not None else \
            schedule(wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=cfg.repeat)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda else [])
        self.prof = profile(
            activities=activities,
            schedule=self._schedule,
            on_trace_ready=self._write_trace,
            record_shapes=cfg.record_shapes,
            profile_memory=cfg.profile_memory,
            with_stack=cfg.with_stack,
            with_flops=cfg.with_flops,
        )
        # Continue the global step numbering after a requeue: ProfilerStep#<n> names and the
        # schedule both follow the job's step, not this process's.
        self.prof.step_num = start_step
        self.prof.current_action = self._schedule(start_step)

    @property
    def step_num(self) -> int:
        """The step the profiler is in (the job's global step number)."""
        return self.prof.step_num

    def _cycle_of(self, step: int) -> int:
        period = self.cfg.wait + self.cfg.warmup + self.cfg.active
        return step // period

    def _write_trace(self, prof) -> None:
        t = time.perf_counter()
        last_step = prof.step_num - 1
        if self.captures is not None:
            cycle = self.captures.capture_of(last_step) or 0
            final = self.run.capture_trace_path(self.rank, cycle)
        else:
            cycle = self._cycle_of(last_step)
            final = self.run.trace_path(self.rank, cycle)
        with temporary_then_rename(self.run.trace_tmp_path(self.rank, cycle), final) as tmp:
            prof.export_chrome_trace(str(tmp))  # ".gz" suffix: torch writes gzip
            if self.clock_skew_ms:
                skew_trace_file(tmp, self.clock_skew_ms)
        self.cycles_written += 1
        if self.memory_snapshot and self.cycles_written == 1:
            write_memory_snapshot(self.run, self.rank)
        self.export_s += time.perf_counter() - t

    def is_active_step(self, step: int) -> bool:
        from torch.profiler import ProfilerAction

        return self._schedule(step) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    def opens(self, step: int) -> bool:
        """The profiler does something at `step` (warm-up or recording): its window is open."""
        from torch.profiler import ProfilerAction

        return step >= 0 and self._schedule(step) != ProfilerAction.NONE

    def __enter__(self):
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        return self.prof.__exit__(*exc)

    def step(self) -> None:
        self.prof.step()


class GuardedProfiler:
    """hpcprof's profiler, stepping aside when the training code runs a torch.profiler of its own.

    Two torch profilers cannot record on one thread: the second to start fails ("Profiler is already
    enabled on this thread"), or, when it had prepared its window before the first started, starts
    nothing and later crashes the process when it exports (a segmentation fault in Kineto). So
    hpcprof never opens its window beside another profiler: at every step boundary where its window
    would open, it looks for another ``torch.profiler.profile`` object alive in the process (the
    garbage collector's list of objects, once per window, not per step); when there is one, hpcprof's
    profiler is dropped for the rest of the run, with one line on the rank's console, and never touched
    again. A start that still fails with "already enabled" is handled the same way. Step records,
    drills and the rest go on; the script's own traces are where it writes them."""

    ASIDE = "Profiler is already enabled"

    def __init__(self, inner, rank: int):
        self.inner = inner
        self.rank = rank
        self.aside_at: int | None = None
        """The step at which hpcprof's trace stepped aside (None: it did not)."""

    @property
    def export_s(self) -> float:
        return self.inner.export_s

    @property
    def prof(self):
        """The torch.profiler.profile object (None when profiling is off or stepped aside)."""
        return getattr(self.inner, "prof", None) if self.aside_at is None else None

    def is_active_step(self, step: int) -> bool:
        return self.aside_at is None and self.inner.is_active_step(step)

    def _step_aside(self) -> None:
        self.aside_at = getattr(self.inner, "step_num", None)
        print(f"hpcprof: rank {self.rank}: another torch.profiler is running in this process (the training "
              f"code's own); hpcprof's trace steps aside from step {self.aside_at} (step records go on)",
              file=sys.stderr, flush=True)
        null = NullProfiler()
        null.step_num = self.aside_at or 0
        null.export_s = self.inner.export_s
        self.inner = null

    def _guard(self, call, *args):
        if self.aside_at is not None:
            return False
        try:
            return call(*args)
        except RuntimeError as exc:
            if self.ASIDE not in str(exc):
                raise
            self._step_aside()
            return False

    def _opens_beside_another(self, step: int) -> bool:
        """hpcprof's window opens at `step` (it is idle now) while another profiler exists."""
        inner = self.inner
        if not isinstance(inner, RankProfiler) or inner.opens(step - 1) or not inner.opens(step):
            return False
        import gc
        import warnings

        from torch.profiler import profile

        mine = inner.prof
        with warnings.catch_warnings():  # isinstance() on some modules' objects warns of deprecations
            warnings.simplefilter("ignore")
            return any(isinstance(o, profile) for o in gc.get_objects() if o is not mine)

    def __enter__(self):
        if self._opens_beside_another(getattr(self.inner, "step_num", 0) + 1) or \
                self._opens_beside_another(getattr(self.inner, "step_num", 0)):
            self._step_aside()
        self._guard(self.inner.__enter__)
        return self

    def __exit__(self, *exc):
        return self._guard(self.inner.__exit__, *exc)

    def step(self) -> None:
        if self.aside_at is None and self._opens_beside_another(getattr(self.inner, "step_num", 0) + 1):
            self._step_aside()
        self._guard(self.inner.step)


def guarded_profiler(cfg: Profiler, run: RunDir, rank: int, use_cuda: bool, start_step: int,
                     clock_skew_ms: float = 0.0, captures=None) -> GuardedProfiler:
    """:func:`make_profiler` behind a :class:`GuardedProfiler`."""
    return GuardedProfiler(make_profiler(cfg, run, rank, use_cuda, start_step, clock_skew_ms, captures), rank)


def make_profiler(cfg: Profiler, run: RunDir, rank: int, use_cuda: bool, start_step: int, clock_skew_ms: float = 0.0,
                  captures=None):
    if not cfg.enabled:
        p = NullProfiler()
        p.step_num = start_step
        return p
    return RankProfiler(cfg, run, rank, use_cuda, start_step, clock_skew_ms, captures)
