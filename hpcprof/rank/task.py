"""The callable submitit runs on every task: checkpointable the submitit way.

On a preemption or time-limit signal the ranks agree on a step, rank 0 writes
``checkpoint/latest.pt`` into the run directory, and submitit's requeue calls :meth:`checkpoint`,
which resubmits this same task: the state lives in the run directory, so the restarted job resumes
from the checkpoint's step and the step numbers continue."""

from __future__ import annotations

import os
from typing import Any

from ..spec import JobSpec, spec_from_dict


class TrainTask:
    def __init__(self, spec: JobSpec, run_root: str):
        # Keep a plain dict: the pickle stays readable across hpcprof versions.
        self.spec_dict = spec.to_dict()
        self.run_root = str(run_root)

    def __call__(self) -> dict[str, Any]:
        from .loop import run_rank

        try:
            import submitit

            env = submitit.JobEnvironment()
            os.environ["HPCPROF_LOG_HINT"] = str(env.paths.stderr).replace("%t", str(env.global_rank))
        except Exception:
            pass
        return run_rank(spec_from_dict(self.spec_dict), self.run_root)

    def checkpoint(self, *args: Any, **kwargs: Any):
        """Called by submitit on rank 0 after the checkpoint is on disk: resubmit the same task."""
        import submitit

        return submitit.helpers.DelayedSubmission(self)
