"""Lightning: hpcprof on every rank of a ``Trainer.fit`` through one callback.

    import lightning as L
    from hpcprof.frameworks.lightning import HpcprofCallback

    trainer = L.Trainer(strategy="ddp", accumulate_grad_batches=2, callbacks=[HpcprofCallback()])
    trainer.fit(model, loader)

Launch it as before (``torchrun``): every rank gets a step record per optimizer step and a
trace, in the run directory ``python -m hpcprof.analyze`` reads. Needs ``pip install
'hpcprof[lightning]'`` (``lightning``; ``pytorch_lightning`` is used when ``lightning`` is not
installed).

What the callback guarantees, and how:

- The session starts in ``on_train_start``: Lightning's strategy has created the process group
  and wrapped the model, a checkpoint given to ``fit`` is restored and the sanity check has run;
  the session uses that group. Its planned steps (train.steps) are the optimizer steps still to
  run (``trainer.estimated_stepping_batches - trainer.global_step``), so a run that made them
  all counts as completed. It ends in ``on_train_end`` on every rank (the session's final
  barrier runs there, before Lightning tears the group down).
- One step = one optimizer step: a step opens at the first ``on_train_batch_start`` of an
  accumulation window and closes at the ``on_train_batch_end`` in which ``trainer.global_step``
  (Lightning's count of optimizer steps) moved, so ``accumulate_grad_batches=k`` gives one record
  per k batches, and the shorter window Lightning steps at the end of an epoch is one step too.
  The records on every rank are as many as ``trainer.global_step`` counts. (Several optimizers
  stepping in one batch, in manual optimization, make that batch one step.)
- Regions, from Lightning's hooks: ``forward`` (batch start to ``on_before_backward``),
  ``backward`` (to ``on_after_backward``: DDP's all-reduce runs here), ``optimizer``
  (``on_before_optimizer_step`` to the batch's end). Lightning fetches and moves the batch before
  ``on_train_batch_start``, so that time lies between steps, not in them.
- Batch size: ``batch_size=`` (samples per batch and rank) when given, else the first dimension of
  the batch's first tensor; the record holds the samples of all the step's batches.
- A failure: ``on_exception`` drops the open step and writes hpcprof's failure note (the
  launcher names the rank that failed first; its peers are stopped within seconds).
- The Trainer's own profiler: ``profiler="simple"``/``"advanced"`` time hooks with
  ``time``/``cProfile`` and run beside hpcprof. A torch.profiler based one
  (``profiler="pytorch"``, ``PyTorchProfiler``) cannot: two torch profilers in one process
  cancel each other's traces. Then hpcprof steps aside from tracing, saying so in one line: the
  step records stay on every rank, the traces are Lightning's. (Under hpcprof's launcher the job
  spec decides: launch with ``--no-profiler-enabled``.)

The callback's keyword arguments go to :func:`hpcprof.run` (``name=``, ``runs_dir=``,
``profiler={...}``, ``drills={...}``...; under hpcprof's launcher the job spec applies).
"""

from __future__ import annotations

import math
from typing import Any

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.profilers import PyTorchProfiler
except ImportError:  # the standalone package of the same framework
    try:
        from pytorch_lightning import Callback
        from pytorch_lightning.profilers import PyTorchProfiler
    except ImportError:
        raise ImportError("hpcprof.frameworks.lightning needs Lightning: pip install 'hpcprof[lightning]'") from None

from ..rank.auto import first_dim
from .steps import OptimizerSteps, warn


class HpcprofCallback(Callback):
    """hpcprof's step loop on every rank of ``Trainer.fit`` (see the module docstring).

    batch_size: samples per batch on one rank (None: read from each batch); run_kwargs: for
    :func:`hpcprof.run`."""

    def __init__(self, *, batch_size: int | None = None, **run_kwargs: Any):
        self.steps = OptimizerSteps(run_kwargs)
        self.batch_size = batch_size
        self._global_step = 0
        self._warned_batch = False

    @property
    def run(self) -> Any:
        """The session (None before ``fit`` started it)."""
        return self.steps.run

    # ------------------------------------------------------------------ the session
    def on_train_start(self, trainer, pl_module) -> None:
        trace = not isinstance(trainer.profiler, PyTorchProfiler)
        if not trace:
            warn("Trainer(profiler=PyTorchProfiler) runs torch.profiler and two cannot run at once: hpcprof keeps "
                 "step records on every rank and takes no traces (for hpcprof's: remove the Trainer's profiler=; "
                 "launched by hpcprof: add --no-profiler-enabled)")
        try:
            planned = trainer.estimated_stepping_batches
        except Exception:  # Lightning refuses to estimate some loaders (no length): the plan is unknown
            planned = float("inf")
        planned = int(planned) - trainer.global_step if math.isfinite(planned) else None
        self.steps.start(trace=trace, planned=planned)

    def on_train_end(self, trainer, pl_module) -> None:
        self.steps.finish()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.steps.fail(exception)

    # ------------------------------------------------------------------ one optimizer step
    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None:
        if not self.steps.in_step:
            self._global_step = trainer.global_step
        self.steps.begin()
        self.steps.add_samples(self._samples(batch))
        self.steps.region("forward")

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.steps.region("backward")

    def on_after_backward(self, trainer, pl_module) -> None:
        self.steps.region(None)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.steps.region("optimizer")

    def on_train_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.steps.region(None)
        if trainer.global_step != self._global_step:  # the optimizer stepped in this batch
            self.steps.end()

    def _samples(self, batch: Any) -> int | None:
        if self.batch_size is not None:
            return self.batch_size
        n = first_dim(batch)
        if n is None and not self._warned_batch:
            self._warned_batch = True
            warn("cannot tell the batch size from the batch (no tensor in it): the step records have none; "
                 "give HpcprofCallback(batch_size=...)")
        return n
