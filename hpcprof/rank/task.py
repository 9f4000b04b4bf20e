"""The callable submitit runs on every task, checkpointable the submitit way.

On a preemption or time-limit signal the ranks agree on a step, rank 0 writes
``checkpoint/latest.pt`` into the run directory, and submitit's handler calls
:meth:`~submitit.helpers.Checkpointable.checkpoint`, which resubmits this same task: the state lives
in the run directory, not in the task, so the restarted job resumes from the checkpoint's step and
the step numbers continue."""

from __future__ import annotations

from typing import Any

from submitit.helpers import Checkpointable

from ..spec import JobSpec, spec_from_dict


class TrainTask(Checkpointable):
    def __init__(self, spec: JobSpec, run_root: str):
        # Keep a plain dict: the pickle stays readable across hpcprof versions.
        self.spec_dict = spec.to_dict()
        self.run_root = str(run_root)

    def __call__(self) -> dict[str, Any]:
        import submitit

        from .entry import run_rank
        from .failures import FailureContext

        try:
            env = submitit.JobEnvironment()
            log = FailureContext.log_for_rank(str(env.paths.stderr), env.global_rank)
        except Exception:  # not under a submitit job (a test calling the task): no log to name
            log = None
        return run_rank(spec_from_dict(self.spec_dict), self.run_root, log=log)
