"""The failure note of a rank (failures/rank-<r>.json): which rank failed, at which step, why, and where
its log is, so that the launcher can name the first rank that failed rather than the ones that
stopped after it.

The context travels as one explicit object: the launcher side says where the rank's log is when it
builds it, the trainer moves ``step`` forward, and :meth:`FailureContext.record` writes the note."""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass

import torch.distributed as dist

from ..rundir import FailureNote, RunDir, atomic_write_text
from .drills import DrillCrash

# Errors that a rank sees when another rank died first.
PEER_FAILURE_TEXTS = ("Connection closed", "Connection reset", "Broken pipe", "timed out", "Timeout", "NCCL")


@dataclass
class FailureContext:
    run: RunDir
    rank: int
    node: str
    log: str | None = None
    """This rank's log file (submitit's stderr path, or the sbatch script's per-task log)."""
    step: int | None = None
    """The step being run; None before the step loop. Set by the trainer."""

    @staticmethod
    def log_for_rank(template: str | None, rank: int) -> str | None:
        """A log path with SLURM's %t (task id = rank) filled in; None when there is none."""
        return template.replace("%t", str(rank)) if template else None

    def note(self, exc: BaseException) -> FailureNote:
        text = f"{type(exc).__name__}: {exc}"
        peer = isinstance(exc, getattr(dist, "DistError", ())) or any(s in text for s in PEER_FAILURE_TEXTS)
        return FailureNote(
            rank=self.rank,
            node=self.node,
            pid=os.getpid(),
            step=self.step,
            time=time.time(),
            error=text[:2000],
            peer_failure=bool(peer) and not isinstance(exc, DrillCrash),
            traceback=traceback.format_exc()[-8000:],
            log=self.log,
        )

    def record(self, exc: BaseException) -> None:
        """Write the note; a failure to write it never hides the original error."""
        try:
            atomic_write_text(self.run.failure_path(self.rank), json.dumps(self.note(exc).to_dict(), indent=2))
        except OSError:
            pass
