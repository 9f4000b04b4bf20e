"""What every framework adapter does with the session, whichever hooks drive it: one hpcprof step
per optimizer step, on the public surface of :class:`hpcprof.rank.session.Run` only (entering and
leaving it, ``run.step()``, ``run.region(name)``, ``run.batch_size``).

A framework calls hooks, not a ``with`` block, so the context managers of the session are entered
in one hook and left in another: the step opens at the first micro-batch of an optimizer step and
closes after the optimizer stepped; at most one adapter region is open at a time (a new one closes
the previous one), always inside the open step. ``run.batch_size`` is set just before the step is
left, where its record is made: the step's samples are known only once its micro-batches ran.
Imports no framework.
"""

from __future__ import annotations

import sys
from typing import Any

import hpcprof

from ..rank.session import HpcprofUsageError


class OptimizerSteps:
    """The adapter's session and its open step on one rank, as the framework's hooks drive them:
    created by :meth:`start` with `run_kwargs` (hpcprof.run()'s keyword arguments), left by
    :meth:`finish` at the end of training or by :meth:`fail` when it raised."""

    def __init__(self, run_kwargs: dict | None = None):
        self.run: Any = None
        self._run_kwargs = dict(run_kwargs or {})
        self._step: Any = None
        self._region: Any = None
        self._samples: int | None = 0
        self._closed = False

    @property
    def started(self) -> bool:
        """The session is entered and not left yet."""
        return self.run is not None and not self._closed

    @property
    def in_step(self) -> bool:
        return self._step is not None

    def start(self, trace: bool = True, planned: int | None = None) -> None:
        """Enter the session (once). `trace` False: no torch.profiler of hpcprof's (the framework
        runs its own); the step records are kept. `planned`: the optimizer steps the framework
        will run: the job's train.steps (the run counts as completed when every rank recorded
        them) unless ``steps=`` was given; a plan shorter than the profiler's schedule gets step
        records without traces, said in one line."""
        if self.run is not None:
            return
        kwargs = dict(self._run_kwargs)
        if planned is not None and planned > 0:
            kwargs.setdefault("steps", int(planned))
        if not trace:
            kwargs["profiler"] = {**kwargs.get("profiler", {}), "enabled": False}
        try:
            run = hpcprof.run(None, **kwargs)
        except HpcprofUsageError as exc:
            if not trace or "steps" in self._run_kwargs or "steps" not in kwargs:
                raise
            kwargs["profiler"] = {**kwargs.get("profiler", {}), "enabled": False}
            try:
                run = hpcprof.run(None, **kwargs)
            except HpcprofUsageError:
                raise exc from None
            warn(f"{exc}: this run of {planned} optimizer steps gets step records on every rank, no traces")
        run.__enter__()
        self.run = run

    def begin(self) -> None:
        """A micro-batch starts: it opens a step unless one is open (gradient accumulation: the
        step's later micro-batches belong to it)."""
        if self._step is None and self.started:
            step = self.run.step()
            step.__enter__()  # the step loop's preemption, drills and records start here
            self._step = step
            self._samples = 0

    def add_samples(self, n: int | None) -> None:
        """Samples of one micro-batch of the open step on this rank (None: not known; the step's
        record then has no batch size)."""
        if self._step is not None:
            self._samples = None if n is None or self._samples is None else self._samples + int(n)

    def region(self, name: str | None) -> None:
        """Close the open region, then open `name` (None: none) in the open step."""
        if self._region is not None:
            region, self._region = self._region, None
            region.__exit__(None, None, None)
        if name is not None and self._step is not None:
            region = self.run.region(name)
            region.__enter__()
            self._region = region

    def end(self) -> None:
        """The optimizer stepped: the open step's record, with the samples of its micro-batches."""
        if self._step is None:
            return
        self.region(None)
        self.run.batch_size = self._samples or None
        step, self._step = self._step, None
        step.__exit__(None, None, None)

    def finish(self) -> None:
        """Training ended: a step still open (micro-batches after the last optimizer step, which
        only a loop that skips its optimizer leaves) is recorded, then the session is left (its
        final barrier: every rank calls this at the end of training)."""
        if not self.started:
            return
        self.end()
        self._closed = True
        self.run.__exit__(None, None, None)

    def fail(self, exc: BaseException) -> None:
        """Training raised `exc`: the open step is dropped and the session writes its failure note
        (hpcprof's failure path: the launcher names the rank that failed first, its peers stop)."""
        if not self.started:
            return
        self._closed = True
        try:
            self.region(None)
        finally:
            step, self._step = self._step, None
            if step is not None:
                step.__exit__(type(exc), exc, exc.__traceback__)
            self.run.__exit__(type(exc), exc, exc.__traceback__)


def warn(message: str) -> None:
    """One line on stderr from rank 0 (every rank when there is no process group), as hpcprof
    says what it does not stop for."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return
    print(f"hpcprof: {message}", file=sys.stderr, flush=True)
