"""The step loop's public API: :func:`hpcprof.run` and the :class:`Run` it returns.

    import hpcprof

    with hpcprof.run(batch_size=32) as run:              # rank, world, device, run directory
        model = DDP(build().to(run.device), ...)
        run.checkpoint(save=..., load=...)              # state for preemption and requeue
        for x, y in run.steps(loader):                   # one record per step on every rank
            with run.region("copy"):
                x, y = x.to(run.device), y.to(run.device)
            with run.region("forward"):
                loss = criterion(model(x), y)
            ...

Everything the built-in ResNet trainer gets, any training loop gets through this one code path
(the built-in trainer, hpcprof.rank.resnet, is its first user): the run directory (spec.toml, the
typed manifest with one attempt per start, one trace per rank, step records, failure notes), the
profiler schedule with global step numbers, the drills, cooperative preemption with requeue, and the
failure path (note first, never waiting on the GPU, peers stopped within seconds).

Where the settings come from: under ``python -m hpcprof.submit`` / ``hpcprof.sbatch`` /
``python -m hpcprof.train`` the launcher hands over the job spec and the run directory
(:data:`LAUNCH`); started any other way (``torchrun``, a plain ``srun``, ``python train.py``) the
spec is the defaults plus the keyword arguments of :func:`hpcprof.run` (or a job file given as
``spec=``), and rank 0 creates the run directory ``<runs_dir>/<name>`` itself, the name agreed by
all ranks (``<script>-job<SLURM_JOB_ID>`` under SLURM, so a requeued job finds its directory again;
else ``<script>-<date>-<time>``).

Importable with torch alone: nothing here imports submitit or the analysis side.
"""

from __future__ import annotations

import collections.abc
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.distributed as dist
from torch.profiler import record_function

from ..rundir import KNOWN_REGIONS, StepRecord, StepWriter
from ..rundir.records import REGION_NAME_RE
from ..spec import JobSpec, SpecError, apply_values, validate_run_name
from .control import ControlChannel
from .device import DeviceError
from .drills import RankDrills
from .failures import PeerWatch, disable_fatal_log, enable_fatal_log
from .preemption import Preempted, requeue
from .profiling import make_profiler
from .startup import start_rank
from .timing import StepTimer
from .trigger import TriggerRuntime

_REGION_RE = re.compile(REGION_NAME_RE)


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


class HpcprofUsageError(RuntimeError):
    """The step-loop API was used in a way it cannot work (the message says how to fix it)."""


class Run:
    """One rank's session: set up on ``__enter__``, the step loop (:meth:`steps` or :meth:`step`),
    torn down on ``__exit__`` (a failure note first when the block raised). See the module docstring."""

    def __init__(self, spec: JobSpec, run_root: str | None, log: str | None, launched: bool,
                 batch_size: int | None):
        self.spec = spec
        self._run_root = run_root
        self._log = log
        self._launched = launched
        self.batch_size: int | None = batch_size
        """Samples per rank per step, recorded in every step record (settable between steps)."""
        self.epoch = 0
        """Passes over the data so far; :meth:`steps` counts them (settable: the built-in trainer
        keeps its own), saved with a checkpoint and restored after a requeue."""
        self.start_step = 0
        """The first step this start of the job runs (the checkpoint's step + 1 after a requeue)."""
        self._step: int | None = None
        self._next_step = 0
        self._entered = False
        self._saver: Callable[[], Any] | None = None
        self._resume: dict | None = None
        self._owns_pg = False
        self._tail: StepRecord | None = None
        self._fatal = None
        self._peer_watch: PeerWatch | None = None

    # ------------------------------------------------------------------ who and where
    @property
    def rank(self) -> int:
        return self.renv.rank

    @property
    def world_size(self) -> int:
        return self.renv.world_size

    @property
    def local_rank(self) -> int:
        return self.renv.local_rank

    @property
    def node(self) -> str:
        return self.renv.node

    @property
    def dir(self) -> Path:
        """The run directory."""
        return self.run.root

    @property
    def total_steps(self) -> int:
        """The job's number of steps (train.steps: global, a resumed job continues up to it)."""
        return self.spec.train.steps

    @property
    def step_number(self) -> int | None:
        """The global step being run (None outside a step)."""
        return self._step

    # ------------------------------------------------------------------ set-up
    def __enter__(self) -> "Run":
        if self._entered:
            raise HpcprofUsageError("this hpcprof.run() session was entered already; call hpcprof.run() once per process")
        self._entered = True
        rank = start_rank(self.spec, self._run_root, self._log, self._launched)
        self.renv, self.device, self.backend, self.run = rank.renv, rank.device, rank.backend, rank.run
        self.use_cuda = self.device.type == "cuda"
        self.ctrl_group, self.agree_group, self._owns_pg = rank.ctrl_group, rank.agree_group, rank.owns_pg
        self._control_label = rank.control_label
        self.failure = rank.failure
        self._fatal = enable_fatal_log(self.run, self.rank)
        if self.run.checkpoint_path.exists():
            self._resume = torch.load(self.run.checkpoint_path, map_location="cpu", weights_only=False)
            self.start_step = int(self._resume["step"]) + 1
            self.epoch = int(self._resume.get("epoch", 0))
        self._next_step = self.start_step
        if self.rank == 0:
            rank.record_attempt(self.spec, resumed_from_step=self.start_step if self._resume else None)
        self.drills = RankDrills.for_rank(self.spec.drills, self.rank, self.node)
        self.writer = StepWriter(self.run.steps_path(self.rank), keep_until_step=self.start_step)
        self.timer = StepTimer(self.writer, self.use_cuda)
        p = self.spec.profiler
        self.trigger = TriggerRuntime(p, self.run, self.rank, self.world_size, self.start_step) \
            if p.enabled and p.mode == "triggered" else None
        t = self.trigger
        self.control = ControlChannel(self.ctrl_group, self.agree_group, self.world_size,
                                      extra_payload=t.payload if t else None, extra_len=t.EXTRA if t else 0,
                                      on_round=t.on_round if t else None, label=self._control_label)
        if t is not None:
            t.control = self.control
        self.prof = make_profiler(p, self.run, self.rank, self.use_cuda, self.start_step, self.drills.clock_skew_ms,
                                  captures=t.schedule if t else None)
        self.prof.__enter__()
        self._peer_watch = PeerWatch(self.failure, on_stop=lambda: self.timer.close(block=False)).start()
        return self

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self, obj: Any = None, *, save: Callable[[], Any] | None = None,
                   load: Callable[[Any], None] | None = None) -> bool:
        """Say how to save and restore the training state, for preemption and requeue: an object with
        ``state_dict()`` / ``load_state_dict(state)`` (a model, an optimizer, or your own holder), or
        ``save=`` / ``load=`` callables. On an agreed preemption every rank calls ``save()`` (it may
        use collectives, e.g. FSDP's full state dict) and rank 0 writes its result with the step; when
        the requeued job starts again, the state is loaded here, on every rank. Returns True when
        state was restored (the job resumed)."""
        if obj is not None:
            if save or load:
                raise HpcprofUsageError("run.checkpoint(): give an object with state_dict/load_state_dict, or save=/load=, not both")
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise HpcprofUsageError(f"run.checkpoint({type(obj).__name__}): the object needs state_dict() and "
                                        "load_state_dict(state); or pass save= and load= callables")
            save, load = obj.state_dict, obj.load_state_dict
        if save is None:
            raise HpcprofUsageError("run.checkpoint() needs save= (and load= to restore)")
        self._saver = save
        if self._resume is not None and "state" in self._resume:
            if load is None:
                raise HpcprofUsageError("this job resumes from a checkpoint: run.checkpoint() needs load= to restore it")
            load(self._resume["state"])
            return True
        return False

    def _save_checkpoint(self, last_step: int) -> None:
        """Every rank calls the saver; rank 0 writes checkpoint/latest.pt (temporary name, then rename)."""
        state = self._saver() if self._saver else None
        if self.rank != 0:
            return
        path = self.run.checkpoint_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        payload = {"step": last_step, "epoch": self.epoch, "time": time.time()}
        if self._saver is not None:
            payload["state"] = state
        torch.save(payload, tmp)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ regions
    def region(self, name: str):
        """``with run.region("forward"):``: a named part of the step, traced as ``hpcprof.<name>``
        and timed in the step record. Known names: data, copy, forward, backward, optimizer (the
        analysis breaks steps down by them); any other name is reported as a user region."""
        if not _REGION_RE.fullmatch(str(name)):
            raise HpcprofUsageError(f"region name {name!r}: use a letter then letters, digits, '_' or '-' (at most 64)")
        return self.timer.region(name)

    # ------------------------------------------------------------------ the step loop
    def _begin(self) -> int:
        step = self._next_step
        self._write_tail()
        self.failure.step = step
        if self.control.poll(step):
            self._preempted(step)
        self.drills.before_step(step)
        self._step = step
        self._profiled = self.prof.is_active_step(step)
        self._t_wall = time.time()
        self._t0 = self.timer.begin()
        self._drill_s = 0.0
        return step

    def _straggle(self, step: int) -> None:
        self._drill_s += self.drills.straggle(step, self.use_cuda)

    def _record(self) -> StepRecord:
        """The open step's record (the step's work is issued)."""
        t1 = self.timer.end()
        r = self.timer.region_s
        known = {k: r.get(k) for k in KNOWN_REGIONS}
        ff = self.timer.first_forward
        return StepRecord(
            step=self._step, epoch=self.epoch, rank=self.rank, t_start=self._t_wall,
            t_end=self._t_wall + (t1 - self._t0), step_s=t1 - self._t0, data_wait_s=known["data"],
            host_pre_forward_s=(ff - self._t0) if ff else None, drill_sleep_s=self._drill_s,
            forward_s=known["forward"], backward_s=known["backward"], optimizer_s=known["optimizer"],
            batch_size=self.batch_size, profiled=self._profiled, copy_s=known["copy"],
            regions={k: v for k, v in r.items() if k not in KNOWN_REGIONS}, blocked_s=self.timer.blocked_s,
        )

    def _advance(self, rec: StepRecord) -> None:
        """After the step: the profiler's step (a trace is written when a window ends: timed into the
        record), then the record goes to the writer."""
        if self.trigger is not None:
            self.trigger.step_done(rec.step_s - rec.blocked_s, rec.step_s)
        before = self.prof.export_s
        self.prof.step()
        rec.trace_export_s = self.prof.export_s - before
        self._step = None
        self._next_step = rec.step + 1
        self.timer.finish(rec)

    def _write_tail(self) -> None:
        """A step whose loop was left by `break`: finish it now that the block goes on."""
        if self._tail is not None:
            rec, self._tail = self._tail, None
            self._advance(rec)

    def steps(self, iterable: Iterable | None = None, total: int | None = None) -> Iterator[Any]:
        """Yield the batches of `iterable` (or the step numbers when it is None), one training step
        each, from :attr:`start_step` up to `total` (default: train.steps), every step timed and
        recorded on every rank. Getting the next batch is the ``data`` region. When the iterable is
        exhausted, a new pass starts (a new epoch: ``sampler.set_epoch`` is called when the loader's
        sampler has it) if it can be iterated again; a generator simply ends the loop. Every rank
        must run the same steps."""
        total = self.total_steps if total is None else int(total)
        it = None
        # a container or a DataLoader starts a new pass with iter(); an iterator or generator cannot
        restartable = iterable is not None and not isinstance(iterable, collections.abc.Iterator)
        while self._next_step < total:
            step = self._begin()
            try:
                if iterable is None:
                    batch = step
                else:
                    with self.timer.region("data"):
                        if it is None:
                            it = self._new_pass(iterable)
                        try:
                            batch = next(it)
                        except StopIteration:
                            if not restartable:
                                self._abandon()
                                return
                            self.epoch += 1
                            it = self._new_pass(iterable)
                            batch = next(it)
                self._straggle(step)
            except BaseException:
                self._abandon()
                raise
            try:
                yield batch
            except GeneratorExit:
                # the loop was left (break, or an exception on its way out): keep the step's record;
                # the next step or a clean __exit__ finishes it, a failing __exit__ drops it
                self._tail = self._record()
                self._step = None
                raise
            self._advance(self._record())

    def _new_pass(self, iterable):
        sampler = getattr(iterable, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        return iter(iterable)

    def _abandon(self) -> None:
        """The open step never ran its body (the data ran out, or getting it failed)."""
        self._step = None

    def step(self):
        """``with run.step():`` one training step, for loops that do not iterate over a loader (the
        step number is :attr:`step_number` inside the block). Same records, drills and preemption
        as :meth:`steps`."""
        return _StepBlock(self)

    def _preempted(self, step: int) -> None:
        """Every rank stops before `step`: save, checkpoint, requeue (does not return)."""
        self.timer.close(block=True)
        self.control.drain(step)
        self._save_checkpoint(step - 1)
        with record_function(self._control_label):
            dist.barrier(group=self.ctrl_group)
        self.writer.close()
        with _suppress():
            self.prof.__exit__(None, None, None)
        requeue(self.renv, self.control.original_handler)

    # ------------------------------------------------------------------ tear-down
    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._peer_watch is not None:
            self._peer_watch.stop()
        if exc is None:
            self._close_clean()
            return False
        if isinstance(exc, (SystemExit, KeyboardInterrupt, GeneratorExit, Preempted)):
            self._tail = None
            with _suppress():
                self.timer.close(block=False)
            with _suppress():
                self.writer.close()
            return False
        # the failure path: the note first, then what can be kept without waiting on the device
        self.failure.record(exc)
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
        self.timer.close(block=True)
        self.control.drain(self._next_step)
        self.prof.__exit__(None, None, None)
        with record_function(self._control_label):
            dist.barrier(group=self.ctrl_group)
        self.writer.close()
        if self._fatal is not None:
            disable_fatal_log(self._fatal)
            self._fatal = None
        if self._owns_pg:
            dist.destroy_process_group()


class _StepBlock:
    def __init__(self, run: Run):
        self.run = run

    def __enter__(self) -> int:
        step = self.run._begin()
        self.run._straggle(step)
        return step

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.run._advance(self.run._record())
        return False


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
        return bool(torch.cuda.current_stream().query())
    except Exception:
        return False


# ------------------------------------------------------------------ the public entry point
def run(batch_size: int | None = None, *, spec: JobSpec | str | Path | None = None, steps: int | None = None,
        name: str | None = None, runs_dir: str | None = None, **sections: dict) -> Run:
    """The session of this rank (use it as a context manager: ``with hpcprof.run(...) as run:``).

    batch_size: samples per rank per step (recorded with every step: the analysis' samples/s).
    Under an hpcprof launcher the rest comes from the job spec it hands over (flags such as
    ``--train-steps``, ``--inject-straggler``, ``--profiler-active`` apply); otherwise from:
    spec: a JobSpec or a job file (TOML, as in jobs/); steps: train.steps (the default `total` of
    :meth:`Run.steps`); name / runs_dir: where the run directory goes; and sections as dicts, e.g.
    ``profiler={"wait": 5, "active": 3}``, ``drills={"straggler": "1:60:2"}``, ``train={"pg_timeout_s": 120}``."""
    if LAUNCH is not None:
        given = [k for k, v in (("spec", spec), ("steps", steps), ("name", name), ("runs_dir", runs_dir)) if v is not None]
        given += list(sections)
        if given:
            print(f"hpcprof: launched by hpcprof, so the job spec applies; ignored hpcprof.run() argument(s) "
                  f"{', '.join(given)} (set them as flags of the launch instead)", file=sys.stderr)
        return Run(LAUNCH.spec, LAUNCH.run_root, LAUNCH.log, launched=True, batch_size=batch_size)
    if isinstance(spec, JobSpec):
        job = spec
    else:
        from ..spec import load_spec

        job = load_spec(spec) if spec is not None else JobSpec()
    values: dict[str, Any] = {k: v for k, v in sections.items()}
    if steps is not None:
        values.setdefault("train", {})["steps"] = int(steps)
    try:
        apply_values(job, values, where="hpcprof.run(): ")
        if name is not None:
            job.name = validate_run_name(name, "hpcprof.run(name=...)")
        if runs_dir is not None:
            job.runs_dir = str(runs_dir)
        if job.workload.builtin:  # this is the user's own code (the built-in trainer runs under LAUNCH)
            job.workload.script, job.workload.args = _running_script()
        job.validate()
    except SpecError as exc:
        raise HpcprofUsageError(str(exc)) from None
    root = os.environ.get("HPCPROF_RUN_DIR") or None
    return Run(job, root, os.environ.get("HPCPROF_LOG_HINT"), launched=False, batch_size=batch_size)


def _running_script() -> tuple[str, list[str]]:
    """(the script this process runs, its arguments): what the spec records as the workload of code
    started without an hpcprof launcher (torchrun, srun, python), so that its report names it rather
    than the built-in trainer. ``<interactive>`` where __main__ is no file (``python -c``, a notebook)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return (str(Path(path).resolve()) if path else "<interactive>"), [str(a) for a in sys.argv[1:]]


__all__ = ["Run", "run", "LaunchContext", "LAUNCH", "HpcprofUsageError", "DeviceError"]
