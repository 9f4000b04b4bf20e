"""The step loop's public API: :func:`hpcprof.run` / :func:`hpcprof.start` and the :class:`Run` they return.

    import hpcprof

    with hpcprof.run(batch_size=32) as run:              # rank, world, device, run directory
        model = DDP(build().to(run.device), ...)
        run.checkpoint(model=model, optimizer=opt)       # state for preemption and requeue
        for x, y in run.steps(loader):                   # one record per step on every rank
            with run.region("forward"):
                loss = criterion(model(x), y)
            ...

Everything the built-in ResNet trainer gets, any training loop gets through this one code path
(the built-in trainer, hpcprof.rank.resnet, is its first user; zero-change mode, hpcprof.rank.auto,
drives the same session from the optimizer's steps): the run directory (spec.toml, the typed manifest
with one attempt per start, one trace per rank, step records, failure notes), the profiler schedule
with global step numbers, the drills, cooperative preemption with requeue, and the failure path
(note first, never waiting on the GPU, peers stopped within seconds).

What the script already does stays its own: its process group (hpcprof uses the group the script
made before ``hpcprof.run()``; with none, it makes the job's group itself, and says what to do when
the script's own ``init_process_group`` comes after; it never fails because the script destroyed
the group at its end; zero-change mode joins at the first optimizer step, after the script's), its
``sampler.set_epoch`` (called by hpcprof only for the passes it starts itself), its loop length
(``run.steps(loader)`` is one pass over the loader, as a plain ``for`` is; ``total=`` asks for a
number of steps instead), its own ``torch.profiler`` (hpcprof's trace steps aside with one line).

Where the settings come from: under ``python -m hpcprof.submit`` / ``hpcprof.sbatch`` /
``python -m hpcprof.train`` the launcher hands over the job spec and the run directory
(:data:`LAUNCH`); started any other way (``torchrun``, a plain ``srun``, ``python train.py``) the
spec is the defaults plus the keyword arguments of :func:`run` (or a job file given as ``spec=``),
and rank 0 creates the run directory itself (hpcprof.rank.startup.choose_run_dir).

Importable with torch alone: nothing here imports submitit or the analysis side.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist

from ..rundir import RunDirError, StepRecord, StepWriter
from ..rundir.manifest import record_steps_done
from ..spec import JobSpec, SpecError
from .checkpoint import Saver, load_checkpoint, write_checkpoint
from .control import ControlChannel, NoRounds, control_barrier
from .device import DeviceError
from .drills import RankDrills
from .failures import FailureContext, PeerWatch, disable_fatal_log, enable_fatal_log, exit_code
from .hang import start_hang_watch
from .preemption import Preempted, requeue
from .profiling import guarded_profiler
from .startup import connect_rank, prepare_rank
from .steploop import HpcprofUsageError, SessionNotStarted, StepLoop, checked_batch_size
from .timing import StepTimer
from .trigger import TriggerRuntime

@dataclass
class LaunchContext:
    """What an hpcprof launcher hands to the training code of this process (set by
    hpcprof.rank.entry.run_rank before it calls the workload)."""

    spec: JobSpec
    run_root: str
    log: str | None = None


LAUNCH: LaunchContext | None = None
"""Set while hpcprof's rank entry runs a workload in this process; None when the training code was
started some other way."""

ACTIVE: "Run | None" = None
"""The session entered in this process (one at a time)."""


_SET_UP_ON_ENTER = frozenset({
    "rank", "world_size", "local_rank", "node", "rundir", "dir", "device", "backend", "use_cuda", "run", "renv", "drills", "ctrl_group", "agree_group", "failure", "writer",
    "timer", "trigger", "control"})
"""Attributes that exist once the session has started (or joined the job)."""


class Run(StepLoop):
    """One rank's session: prepared on ``__enter__``, joined to the job at its first step (or first
    need), the step loop (:meth:`steps`, :meth:`step`, or :meth:`begin_step`/:meth:`end_step`),
    torn down on ``__exit__`` (a failure note first when the block raised). See the module docstring."""

    def __init__(self, spec: JobSpec, run_root: str | None, log: str | None, launched: bool,
                 batch_size: int | None, steps: int | None = None, steps_source: str = "api"):
        self.spec = spec
        self._run_root = run_root
        self._log = log
        self._launched = launched
        self._batch_size: int | None = checked_batch_size(batch_size, "hpcprof.run(batch_size=...)")
        self.epoch = 0
        """Passes over the data so far (:meth:`steps` counts the passes it completes; settable), saved
        with a checkpoint and restored after a requeue."""
        self.start_step = 0
        """The first step this start of the job runs (the checkpoint's step + 1 after a requeue)."""
        self._steps = steps
        self.steps_source = steps_source
        """What a step is, recorded in the manifest: "api", "optimizer" (zero-change mode), "builtin"."""
        self._step: int | None = None
        self._next_step = 0
        self._t_wall = self._t_alive = None  # the open step's start (wall clock), its last sign of life
        self._state = "new"  # new -> entered -> connected -> closed
        self._requeued = False
        self._profiler_pending = self._drill_pending = False  # deferred to the next forward (zero-change mode)
        self.last_step_end: tuple[float, float] | None = None  # (perf_counter, wall) the last record's end
        self._saver: Saver | None = None
        self._resume: dict | None = None
        self._tail: StepRecord | None = None
        self._fatal = None
        self._peer_watch: PeerWatch | None = None
        self._in_steps = False
        self.prof = None  # hpcprof.rank.profiling.GuardedProfiler, once joined

    @property
    def batch_size(self) -> int | None:
        """Samples per rank per step, recorded in every step record (settable between steps: a whole
        number from 1 to MAX_BATCH_SIZE, or None when unknown; anything else is refused at once)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        self._batch_size = checked_batch_size(value, "run.batch_size = ...")

    def __getattr__(self, name: str):
        # reached only for what is missing: before the session started (or when it failed half-way)
        if name in _SET_UP_ON_ENTER:
            when = "the session failed to start" if self.__dict__.get("_state") != "new" else \
                "the session has not started yet"
            raise SessionNotStarted(f"run.{name}: {when}; use it inside the block: `with hpcprof.run(...) as run:`")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ who and where
    def _need(self, what: str) -> None:
        """`what` (a property, or a call such as "run.steps()") needs a started session (or a live one)."""
        if self._state == "new":
            name = what if what.startswith("run.") else f"run.{what}"
            raise SessionNotStarted(f"{name}: the session has not started yet; use it inside the block: "
                                    "`with hpcprof.run(...) as run:` (or after run = hpcprof.start(...))")
        if self._state == "closed" and what.endswith("()"):
            raise HpcprofUsageError(f"{what} after the `with hpcprof.run(...) as run:` block ended: the session is "
                                    "closed (its records and trace are written); run the steps inside the block")

    @property
    def rank(self) -> int:
        self._need("rank")
        return self._prep.renv.rank

    @property
    def world_size(self) -> int:
        self._need("world_size")
        return self._prep.renv.world_size

    @property
    def local_rank(self) -> int:
        self._need("local_rank")
        return self._prep.renv.local_rank

    @property
    def node(self) -> str:
        self._need("node")
        return self._prep.renv.node

    @property
    def rundir(self) -> Path:
        """The run directory (joins the job first if it has not: a collective, as at the first step)."""
        self._need("rundir")
        self._connect()
        return self.run.root

    @property
    def dir(self) -> Path:
        """The run directory (older name of :attr:`rundir`)."""
        return self.rundir

    @property
    def profiler(self):
        """hpcprof's ``torch.profiler.profile`` object on this rank (to add your own ranges, read its
        events or export more), once the session has joined the job; None before, when profiling is
        off, or when it stepped aside for the script's own profiler."""
        return self.prof.prof if self.prof is not None else None

    @property
    def total_steps(self) -> int:
        """The job spec's train.steps (the length of ``run.steps()`` without data)."""
        return self._steps if self._steps is not None else self.spec.train.steps

    @property
    def step_number(self) -> int | None:
        """The global step being run (None outside a step)."""
        return self._step

    # ------------------------------------------------------------------ set-up
    def __enter__(self) -> "Run":
        global ACTIVE
        if self._state != "new":
            raise HpcprofUsageError("this hpcprof.run() session was entered already; call hpcprof.run() once per process")
        if ACTIVE is not None:
            raise HpcprofUsageError("hpcprof.run() inside the block of another hpcprof.run() in the same process: one "
                                    "session per process (or hpcprof.start() was called already); use its `run`")
        try:
            self._prep = prepare_rank(self.spec, self._launched)
        except SpecError as exc:  # the spec cannot run in this world (a drill naming a rank it lacks)
            raise HpcprofUsageError(f"hpcprof.run(): {exc}") from None
        self.renv, self.device = self._prep.renv, self._prep.device
        self.use_cuda = self.device.type == "cuda"
        self._state = "entered"
        ACTIVE = self
        if self.steps_source != "optimizer":
            # the API joins at once, making the process group when the script has made none before:
            # the block's code (DDP(...)) needs it. Zero-change mode joins at the first optimizer step.
            self._connect()
        return self

    def _connect(self) -> None:
        """Join the job (collective: every rank passes here at the same point) and set the loop up."""
        if self._state != "entered":
            return
        rank = connect_rank(self._prep, self.spec, self._run_root, self._log)
        self.backend, self.run = rank.backend, rank.run
        self.ctrl_group, self.agree_group, self._owns_pg = rank.ctrl_group, rank.agree_group, rank.owns_pg
        self._control_label = rank.control_label
        self.failure = rank.failure
        self._fatal = enable_fatal_log(self.run, self.rank)
        try:
            self._resume = load_checkpoint(self.run.checkpoint_path)
        except RunDirError as exc:
            self.failure.record(exc)  # the failure note, as for any error of the block
            raise
        if self._resume is not None:
            self.start_step = int(self._resume["step"]) + 1
            self.epoch = int(self._resume.get("epoch", 0))
        self._next_step = self.start_step
        if self.rank == 0:
            rank.record_attempt(self.spec, resumed_from_step=self.start_step if self._resume else None,
                                steps_source=self.steps_source)
        self.drills = RankDrills.for_rank(self.spec.drills, self.rank, self.node)
        self.writer = StepWriter(self.run.steps_path(self.rank), keep_until_step=self.start_step)
        self.timer = StepTimer(self.writer, self.use_cuda)
        p = self.spec.profiler
        self.trigger = TriggerRuntime(p, self.run, self.rank, self.world_size, self.start_step) \
            if p.enabled and p.mode == "triggered" else None
        t = self.trigger
        if self.steps_source == "optimizer" and t is None:
            self.control = NoRounds()  # zero-change mode: no preemption handling (hpcprof.rank.auto)
        else:
            self.control = ControlChannel(self.ctrl_group, self.agree_group, self.world_size,
                                          extra_payload=t.payload if t else None, extra_len=t.EXTRA if t else 0,
                                          on_round=t.on_round if t else None, label=self._control_label,
                                          install_signal=self.steps_source != "optimizer")
        if t is not None:
            t.control = self.control
        self.prof = guarded_profiler(p, self.run, self.rank, self.use_cuda, self.start_step,
                                     self.drills.clock_skew_ms, captures=t.schedule if t else None)
        self.prof.__enter__()
        self._peer_watch = PeerWatch(self.failure, on_stop=lambda: self.timer.close(block=False)).start()
        self._hang_watch = start_hang_watch(self, self.run, self.rank, self.node, self.world_size,  # None: off
                                            self.spec.train.hang_timeout_s, on_stop=lambda: self.timer.close(block=False))
        self._state = "connected"

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self, obj: Any = None, *, save: Callable[[], Any] | None = None,
                   load: Callable[[Any], None] | None = None, **named: Any) -> bool:
        """Say how to save and restore the training state, for preemption and requeue: an object with
        ``state_dict()`` / ``load_state_dict(state)``, named ones (``run.checkpoint(model=model,
        optimizer=opt)``), or ``save=`` / ``load=`` callables. On an agreed preemption every rank
        saves (it may use collectives, e.g. FSDP's full state dict) and rank 0 writes the result with
        the step (hpcprof.rank.checkpoint: tensors, numbers, strings and containers of them); when the
        requeued job starts again, the state is loaded here, on every rank. Returns True when state
        was restored (the job resumed)."""
        self._need("run.checkpoint()")
        self._saver = Saver.of(obj, save, load, named, error=HpcprofUsageError)
        self._connect()
        if self._resume is not None and "state" in self._resume:
            if self._saver.load is None:
                raise HpcprofUsageError("this job resumes from a checkpoint: run.checkpoint() needs load= to restore it")
            self._saver.load(self._resume["state"])
            return True
        return False

    def _preempted(self, step: int) -> None:
        """Every rank stops before `step`: save, checkpoint, requeue (does not return)."""
        self.timer.close(block=True)
        self.control.drain(step)
        write_checkpoint(self.run, self.rank, self._saver, step - 1, self.epoch)
        control_barrier(self.ctrl_group, self._control_label)
        self.writer.close()
        with _suppress():
            self.prof.__exit__(None, None, None)
        self._requeued = True
        requeue(self.renv, self.control.original_handler)

    # ------------------------------------------------------------------ tear-down
    def close(self, exc: BaseException | None = None) -> None:
        """End the session (what leaving the ``with`` block does; :func:`start`'s sessions call it
        at exit): `exc` is the error that ended the training, if any."""
        self.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

    def __exit__(self, exc_type, exc, tb) -> bool:
        global ACTIVE
        if self._state in ("new", "closed"):
            return False
        connected = self._state == "connected"
        self._state = "closed"
        if ACTIVE is self:
            ACTIVE = None
        if not connected:
            return False
        if self._peer_watch is not None:
            self._peer_watch.stop()
        if exc is None:
            self._close_clean()  # watched: a peer that hangs at the end still gets this rank's stack
            self._hang_watch and self._hang_watch.stop()
            return False
        self._hang_watch and self._hang_watch.stop()
        original = exc
        if self._owns_pg and isinstance(exc, ValueError) and "default process group twice" in str(exc):
            exc = HpcprofUsageError(
                "the script's init_process_group() came after hpcprof.run(), which had made the process group "
                "(none existed yet): call init_process_group() before hpcprof.run() (hpcprof then uses yours), "
                "or leave it out, or drop hpcprof.run() altogether: zero-change mode needs no change to the script")
            exc_type, tb = type(exc), None
            print(f"hpcprof: {exc}", file=sys.stderr, flush=True)
        if isinstance(exc, (SystemExit, KeyboardInterrupt, GeneratorExit, Preempted)):
            if isinstance(exc, SystemExit) and self._requeued:
                FailureContext.settle(exc)  # the requeue's own exit
            elif isinstance(exc, SystemExit) and exit_code(exc) != 0:
                self.failure.record(exc)  # sys.exit(3) in the training code: a failure, with its code
            self._tail = None
            with _suppress():
                self.timer.close(block=False)
            with _suppress():
                self.writer.close()
            return False
        # the failure path: the note first, then what can be kept without waiting on the device
        self.failure.record(exc)
        if original is not exc:
            self.failure.record_as(original, exc)
        self._tail = None
        with _suppress():
            self.timer.close(block=False)
        with _suppress():
            self.writer.close()
        if not self.use_cuda or _device_idle():
            with _suppress():
                self.prof.__exit__(exc_type, exc, tb)
        return False

    def _close_clean(self) -> None:
        self._write_tail()
        if self._step is not None:  # a step opened by begin_step and never ended: its work is done
            self.end_step()
        self.profiler_step()
        self.timer.close(block=True)
        # the script may have destroyed every process group already (destroy_process_group at its end):
        # then there is no round to drain and no barrier to pass; nothing is lost but the wait
        alive = dist.is_initialized()
        if alive:
            self.control.drain(self._next_step)
        self.prof.__exit__(None, None, None)
        if self.rank == 0:
            record_steps_done(self.run, self._next_step)
        if alive:
            control_barrier(self.ctrl_group, self._control_label)
        self.writer.close()
        if self._fatal is not None:
            disable_fatal_log(self._fatal)
            self._fatal = None
        if self._owns_pg and dist.is_initialized():
            dist.destroy_process_group()


class _suppress:
    """Best effort on the way out: nothing here may hide the error being reported."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return exc[0] is not None and issubclass(exc[0], Exception)


def _device_idle() -> bool:
    """Whether this rank's GPU has finished what was queued on its current stream (non-blocking): then
    stopping the profiler, which synchronises, cannot hang behind a collective of a dead peer."""
    try:
        import torch

        return bool(torch.cuda.current_stream().query())
    except Exception:
        return False


__all__ = ["Run", "LaunchContext", "LAUNCH", "HpcprofUsageError", "SessionNotStarted", "DeviceError", "RunDirError"]
