"""Hugging Face Transformers: hpcprof on every rank of a ``Trainer.train`` through one callback.

    from hpcprof.frameworks.transformers import HpcprofCallback

    with HpcprofCallback() as profiling:              # the `with`: a failure leaves hpcprof's note
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[profiling])
        trainer.train()

Launch it as before (``torchrun``, ``accelerate launch``): every rank gets a step record per
optimizer step and a trace, in the run directory ``python -m hpcprof.analyze`` reads. Needs
``pip install 'hpcprof[transformers]'`` (``transformers``, ``accelerate``).

What the callback guarantees, and how:

- The session starts in ``on_train_begin``: the Trainer's ``TrainingArguments`` have set up the
  process group by then (through Accelerate, under ``torchrun`` or ``accelerate launch``), and the
  session uses it. Its planned steps (train.steps) are the optimizer steps still to run
  (``state.max_steps - state.global_step``), so a run that made them all counts as completed.
  It ends in ``on_train_end`` (every rank; the session's final barrier runs there).
- One step = one optimizer step: the Trainer calls ``on_step_begin`` at the first micro-batch of
  an optimizer step and ``on_step_end`` after the optimizer stepped (``on_substep_end`` after
  each other micro-batch), so ``gradient_accumulation_steps=k`` gives one record per k batches
  and the records on every rank are as many as ``state.global_step`` counts.
- Regions: ``forward_backward`` (``on_step_begin`` to ``on_pre_optimizer_step``: every
  micro-batch's forward and backward, DDP's all-reduce included; the Trainer runs them inside
  ``training_step`` with no hook between them, so they are one region) and ``optimizer`` (to
  ``on_optimizer_step``). The Trainer fetches an optimizer step's batches before
  ``on_step_begin``: that time lies between steps, not in them.
- Batch size: ``batch_size=`` (samples per micro-batch and rank), else the Trainer's
  ``per_device_train_batch_size``, times the step's micro-batches (fewer in the last step of an
  epoch that does not divide evenly).
- A failure: the Trainer has no hook for an exception, so a callback never sees one. The
  callback is also a context manager: an exception that leaves its ``with`` (around
  ``trainer.train()``, above) drops the open step and writes hpcprof's failure note (the launcher
  names the rank that failed first; its peers are stopped within seconds). Without the ``with``,
  hpcprof's launcher writes the note anyway; under another launcher there is none (the records
  so far are kept).
- The framework's profiler: the Trainer has none. Accelerate's ``accelerator.profile()`` runs
  torch.profiler, which cannot run beside hpcprof's (two torch profilers in one process cancel
  each other's traces): use one or the other (``HpcprofCallback(profiler={"enabled": False})``
  keeps hpcprof's step records without its traces).

The callback's keyword arguments go to :func:`hpcprof.run` (``name=``, ``runs_dir=``,
``profiler={...}``, ``drills={...}``...; under hpcprof's launcher the job spec applies).
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("hpcprof.frameworks.transformers needs Transformers: "
                      "pip install 'hpcprof[transformers]'") from None

from .steps import OptimizerSteps


class HpcprofCallback(TrainerCallback):
    """hpcprof's step loop on every rank of ``Trainer.train`` (see the module docstring); as a
    context manager around ``trainer.train()``, the failure note of an exception that leaves it.

    batch_size: samples per micro-batch on one rank (None: ``args.per_device_train_batch_size``);
    run_kwargs: for :func:`hpcprof.run`."""

    def __init__(self, *, batch_size: int | None = None, **run_kwargs: Any):
        self.steps = OptimizerSteps(run_kwargs)
        self.batch_size = batch_size
        self._micro = 0

    @property
    def run(self) -> Any:
        """The session (None before ``train`` started it)."""
        return self.steps.run

    def __enter__(self) -> "HpcprofCallback":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            self.steps.fail(exc)
        return False

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        planned = state.max_steps - state.global_step if state.max_steps and state.max_steps > 0 else None
        self.steps.start(planned=planned)

    def on_train_end(self, args, state, control, **kwargs) -> None:
        self.steps.finish()

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        if not self.steps.in_step:
            self._micro = 0
        self.steps.begin()
        self.steps.region("forward_backward")
        self._micro += 1

    def on_substep_end(self, args, state, control, **kwargs) -> None:
        self._micro += 1  # a micro-batch whose optimizer step is still to come

    def on_pre_optimizer_step(self, args, state, control, **kwargs) -> None:
        self.steps.region("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs) -> None:
        self.steps.region(None)

    def on_step_end(self, args, state, control, **kwargs) -> None:
        per = self.batch_size if self.batch_size is not None else args.per_device_train_batch_size
        self.steps.add_samples(per * self._micro)
        self.steps.end()
