"""Zero-change mode: a training script that never imports hpcprof gets, on every rank, what the
step-loop API gives (step records, the profiler schedule with global step numbers, the GPU clock,
drills, failure notes, triggered capture, the run directory), through PyTorch's public global hooks.

- One step is one optimizer step (``torch.optim.optimizer.register_optimizer_step_post_hook``): a
  step ends when the optimizer's ``step()`` returns, and the next begins there, so the data loading,
  forward, backward and anything else the script does between two optimizer steps (an evaluation, a
  checkpoint) is in the step where it happened. The records tile the run (each step starts where the
  previous one ended): hpcprof's own work at the boundary (the record, its bookkeeping) is in the next
  step, so that the steps add up to what the script's own timer sees over the same iterations.
  Gradient accumulation counts once (one ``optimizer.step()``); a step that AMP's GradScaler skips
  (inf gradients) is not counted. With several optimizers, the first one that steps drives the
  steps, and one line names the others.
- Step 0 begins at the first forward pass run with gradients enabled
  (``torch.nn.modules.module.register_module_forward_pre_hook``, removed after it): set-up and an
  evaluation under ``no_grad`` before training are not a step. Step 0's GPU time covers only its end.
- The batch size is counted, not guessed: the first dimension of the first tensor given to the model
  (the module whose forward ran first with gradients on) in every forward pass with gradients on
  between two optimizer steps (micro-batches add up). Models whose inputs are not batch-first get a
  wrong count: use ``hpcprof.start(batch_size=...)`` there.
- hpcprof joins the job (a collective) at the end of the first optimizer step, which every rank of a
  data-parallel job passes, using the process group the script made by then (hpcprof makes one if
  there is none: the manifest then says the ranks trained alone).
- The loop's length is the script's: the manifest records the steps that ran.
- hpcprof's profiler takes its step at the next forward pass rather than in the optimizer's hook:
  a script that runs its own torch.profiler calls its ``prof.step()`` before that, so where both
  windows would open at once the script's opens first and hpcprof's steps aside with one line
  (hpcprof.rank.profiling.GuardedProfiler); the script never fails for it. hpcprof's
  ``ProfilerStep#`` ranges therefore start at the forward pass, and the straggler drill sleeps
  there too (inside the step's range in the trace, as in its record).

What needs the API: preemption with requeue (hpcprof cannot save and restore a script's state it
does not know; in zero-change mode SIGUSR2 is left to the script and to SLURM, said in one console
line), named regions (the trace shows the script's operators), a batch size that is not batch-first.
A script that calls ``hpcprof.run()`` / ``hpcprof.start()`` itself takes over from this mode.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from ..spec import JobSpec
from . import session
from .session import Run

CURRENT: "AutoSession | None" = None
"""The zero-change session of this process, while it watches."""


class AutoSession:
    """Drives a :class:`Run` (steps_source "optimizer") from the optimizer's steps."""

    def __init__(self, spec: JobSpec, run_root: str | None, log: str | None, launched: bool):
        self.run = Run(spec, run_root, log, launched=launched, batch_size=None, steps_source="optimizer")
        self._first: tuple[float, float] | None = None
        self._driver: Any = None
        self._others: set[str] = set()
        self._model: Any = None
        self._samples = 0
        self._counted = True
        self._handles: list = []
        self._model_handle = None
        self.retired = False

    # ------------------------------------------------------------------ life cycle
    def install(self) -> "AutoSession":
        """Prepare the rank (device, cores; no communication) and start watching."""
        global CURRENT
        self.run.__enter__()
        self.install_hooks()
        CURRENT = self
        if self.run.rank == 0:
            print("hpcprof: zero-change mode: one step per optimizer step; a preemption signal is left to the "
                  "script (requeue with resume needs hpcprof.run() and run.checkpoint())", file=sys.stderr, flush=True)
        return self

    def install_hooks(self) -> None:
        """The global hooks (the optimizer's; the first forward's until it has run; the model's)."""
        self._handles = [register_optimizer_step_post_hook(self._on_optimizer_step)]
        if self._model is None:
            self._handles.append(register_module_forward_pre_hook(self._on_first_forward))
        elif self._model() is not None:
            self._model_handle = self._model().register_forward_pre_hook(self._on_model_forward, with_kwargs=True)

    def _unhook(self) -> None:
        global CURRENT
        for h in self._handles + ([self._model_handle] if self._model_handle else []):
            h.remove()
        self._handles, self._model_handle = [], None
        if CURRENT is self:
            CURRENT = None

    def retire(self) -> None:
        """The script opens its own session (hpcprof.run()/start()): this one steps back, unless it has
        recorded steps already (then mixing both would count steps twice)."""
        if self.run._state == "connected":
            raise session.HpcprofUsageError("hpcprof.run()/hpcprof.start() after the training has started: "
                                            "call it before the first optimizer step")
        self._unhook()
        self.retired = True
        self.run._state = "closed"
        if session.ACTIVE is self.run:
            session.ACTIVE = None

    def close(self, exc: BaseException | None = None) -> None:
        """The script has ended (`exc`: how, if it raised; ``sys.exit(0)`` is a clean end)."""
        if self.retired:
            return
        self._unhook()
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            exc = None
        r = self.run
        if r._state == "connected" and r.step_number is not None:
            r._step = None  # opened after the last optimizer step: no work of its own, not a step
        r.close(exc)

    # ------------------------------------------------------------------ hooks
    def _on_first_forward(self, module, args):
        if not torch.is_grad_enabled():
            return None
        self._first = (time.perf_counter(), time.time())
        self._handles.pop().remove()
        self._model = weakref.ref(module)
        self._model_handle = module.register_forward_pre_hook(self._on_model_forward, with_kwargs=True)
        self._on_model_forward(module, args, {})
        return None

    def _on_model_forward(self, module, args, kwargs):
        self.run.show_alive()
        if torch.is_grad_enabled():
            if self.run.step_number is not None:
                self.run.profiler_step()
            n = first_dim([*args, *kwargs.values()])
            if n is None:
                self._counted = False
            else:
                self._samples += n
        return None

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self._driver is None:
            self._driver = weakref.ref(optimizer)
        elif self._driver() is not optimizer:
            name = type(optimizer).__name__
            if name not in self._others and self.run.rank == 0:
                print(f"hpcprof: steps are counted on the first optimizer that stepped "
                      f"({type(self._driver()).__name__}); another optimizer ({name}) steps too and is not counted",
                      file=sys.stderr, flush=True)
            self._others.add(name)
            return
        r = self.run
        r.batch_size = self._samples if self._counted and self._samples > 0 else None
        self._samples, self._counted = 0, True
        if r.step_number is None:  # the first optimizer step: join the job, step 0 began at the first forward
            now = (time.perf_counter(), time.time())
            r.begin_step(started=self._first or now)
        r.end_step(defer_profiler=True)
        r.begin_step(started=r.last_step_end, defer_drill=True)


def first_dim(batch: Any) -> int | None:
    """The samples in a batch: the first dimension of its first tensor (a tensor, or one inside a
    mapping, list or tuple, depth first); None when it holds no tensor. Zero-change mode counts the
    model's inputs with it, the framework adapters (hpcprof.frameworks) their batches."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim else 1
    if isinstance(batch, dict) or hasattr(batch, "keys") and hasattr(batch, "__getitem__"):
        items = [batch[k] for k in batch.keys()]
    elif isinstance(batch, (list, tuple)):
        items = list(batch)
    else:
        return None
    for item in items:
        n = first_dim(item)
        if n is not None:
            return n
    return None


def install(spec: JobSpec, run_root: str | None, log: str | None, launched: bool) -> AutoSession:
    """Start zero-change mode in this process (before the script runs)."""
    return AutoSession(spec, run_root, log, launched).install()


def yield_to_api() -> None:
    """Called by hpcprof.run()/start(): the script's own session replaces zero-change mode."""
    if CURRENT is not None:
        CURRENT.retire()
