"""Requeue after an agreed preemption: the ranks have agreed on a step (hpcprof.rank.control), rank 0
has written the checkpoint (hpcprof.rank.session), and the job is handed to its launcher's requeue
mechanism. The restarted job resumes from the checkpoint's step, so step numbers continue."""

from __future__ import annotations

import subprocess
import sys
import time

from .control import PREEMPT_SIGNAL
from .env import RankEnv

REQUEUE_GRACE_S = 180
"""How long non-zero ranks wait for SLURM to kill them after rank 0 asked for a requeue."""


class Preempted(Exception):
    """All ranks agreed to stop for a preemption signal; the checkpoint is written, and this launcher
    has no requeue: running the same command again resumes."""


def requeue(renv: RankEnv, original_handler) -> None:
    """Hand over to the launcher's requeue mechanism; does not return. `original_handler`: the
    SIGUSR2 handler that was installed before hpcprof's (submitit's, which requeues its job)."""
    if renv.launcher.startswith("submitit"):
        if renv.rank == 0 and callable(original_handler):
            # submitit's own handler: calls RankTask.checkpoint(), rewrites the submission, requeues, exits.
            original_handler(PREEMPT_SIGNAL, None)
            sys.exit(0)  # pragma: no cover - the handler exits
        if renv.launcher == "submitit-local":
            from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE

            sys.exit(LOCAL_REQUEUE_RETURN_CODE)
    elif renv.launcher == "srun" and renv.rank == 0:
        subprocess.run(["scontrol", "requeue", str(renv.job_id)], check=False, timeout=60)
    elif renv.launcher != "srun":
        raise Preempted("preempted: checkpoint written; run the same command again to resume")
    # Other ranks: wait for SLURM to stop this job for its requeue.
    deadline = time.time() + REQUEUE_GRACE_S
    while time.time() < deadline:
        time.sleep(1.0)
    sys.exit(0)
