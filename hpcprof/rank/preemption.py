"""Cooperative preemption: a preemption (or time-limit) signal on any rank becomes a decision all
ranks take at the same step; then rank 0 writes the checkpoint and the job is handed to its
launcher's requeue mechanism. The restarted job resumes from the checkpoint's step, so step numbers
continue (see Trainer.fit)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from .env import RankEnv

PREEMPT_SIGNAL = signal.SIGUSR2
"""What SLURM sends before a preemption or the time limit (sbatch --signal), and submitit listens to."""
REQUEUE_GRACE_S = 180
"""How long non-zero ranks wait for SLURM to kill them after rank 0 asked for a requeue."""


class Preempted(Exception):
    """All ranks agreed to stop for a preemption signal; the checkpoint is written, and this launcher
    has no requeue: running the same command again resumes."""


class PreemptionWatch:
    """Turns a preemption signal on any rank into a decision all ranks take at the same step.

    The signal handler only sets a flag. At every step boundary each rank starts an asynchronous
    MAX all-reduce of its flag on a small gloo group and reads the result of the previous one, so
    the ranks agree one step after the signal without a blocking collective on the hot path."""

    def __init__(self, group):
        self.group = group
        self.flag = False
        self.signal_time: float | None = None
        self._pending = None
        self.original_handler = signal.getsignal(PREEMPT_SIGNAL)
        signal.signal(PREEMPT_SIGNAL, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.flag = True
        self.signal_time = time.time()

    def agreed(self) -> bool:
        result = False
        if self._pending is not None:
            work, tensor = self._pending
            work.wait()
            result = bool(tensor.item())
        tensor = torch.tensor([1 if self.flag else 0], dtype=torch.int32)
        self._pending = (dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=True), tensor)
        return result

    def drain(self) -> None:
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None


def requeue(renv: RankEnv, watch: PreemptionWatch) -> None:
    """Hand over to the launcher's requeue mechanism; does not return."""
    if renv.launcher.startswith("submitit"):
        if renv.rank == 0 and callable(watch.original_handler):
            # submitit's own handler: calls TrainTask.checkpoint(), rewrites the submission, requeues, exits.
            watch.original_handler(PREEMPT_SIGNAL, None)
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
