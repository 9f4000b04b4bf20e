"""The callable submitit runs on every task, checkpointable the submitit way.

On a preemption or time-limit signal the ranks agree on a step, rank 0 writes
``checkpoint/latest.pt`` into the run directory, and submitit's handler calls
:meth:`~submitit.helpers.Checkpointable.checkpoint`, which resubmits this same task: the state lives
in the run directory, not in the task, so the restarted job resumes from the checkpoint's step and
the step numbers continue."""

from __future__ import annotations

import os
from typing import Any

from submitit.helpers import Checkpointable

from ..spec import JobSpec, spec_from_dict


class TrainTask(Checkpointable):
    def __init__(self, spec: JobSpec, run_root: str, launcher: str | None = None):
        # Keep a plain dict: the pickle stays readable across hpcprof versions.
        self.spec_dict = spec.to_dict()
        self.run_root = str(run_root)
        self.launcher = launcher
        """The launching process (hpcprof.rank.lifeline.launcher_identity) for local runs: the ranks
        die with it. None on SLURM, where the job outlives the command that submitted it."""

    def __call__(self) -> dict[str, Any]:
        import submitit

        from .entry import run_rank
        from .failures import FailureContext

        try:
            env = submitit.JobEnvironment()
            log = FailureContext.log_for_rank(str(env.paths.stderr), env.global_rank)
        except Exception:  # not under a submitit job (a test calling the task): no log to name
            env, log = None, None
        launcher = getattr(self, "launcher", None)  # tasks pickled by older versions have none
        if launcher and env is not None and os.environ.get("SUBMITIT_EXECUTOR") == "local":
            from ..lifetime import lead_own_group
            from .lifeline import die_with_launcher

            die_with_launcher(launcher, self.run_root, env.global_rank)
            if lead_own_group():  # what the training code forks stays in a group of this rank's own
                import atexit

                from ..lifetime import end_own_group

                # when the process ends, after submitit has written the result: a child left behind
                # would hold this rank's sockets and outlive the job (ended then, a DataLoader's
                # workers cannot fail the task)
                atexit.register(end_own_group)
        return run_rank(spec_from_dict(self.spec_dict), self.run_root, log=log)
