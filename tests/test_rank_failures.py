"""Issue 37: how a job of a user's script ends when one rank does something other than raise: hangs,
exits with a code, or leaves a child process behind. Each is a real 2-rank job of a script written
as users write them, launched with ``python -m hpcprof.submit --cluster local --script`` (or
``torchrun``), and read back from what the user sees: what submit says, the manifest's outcome,
the failure notes, the processes left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpcprof.rundir import RunDir


def _submit(tmp: Path, script: str, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    (tmp / "train.py").write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", str(tmp / "runs"),
                           "--script", "train.py", *args], cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))


def _blame_line(proc: subprocess.CompletedProcess) -> str:
    """submit's line naming the rank held responsible."""
    return next(ln for ln in proc.stdout.splitlines() if ln.startswith("hpcprof: rank") and "at step" in ln)


def test_drills_naming_ranks_outside_a_torchrun_world_are_refused_at_start_up_and_not_recorded(tmp_path):
    """Issue 37 item 8: under torchrun, drills on ranks 9 and 7 of a world of 2 were silently ignored
    (submit refuses them) yet recorded in the manifest as drills of the run."""
    (tmp_path / "train.py").write_text(textwrap.dedent('''
        import hpcprof

        with hpcprof.run(batch_size=8, drills={"straggler": "9:60:2", "crash": "7:3"}) as run:
            for step in run.steps():
                pass
    '''))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = "HpcprofUsageError: hpcprof.run(): drills.straggler: rank 9 does not exist (world size 2)"
    assert proc.stderr.count(said) >= 2, proc.stderr[-3000:]  # each rank says it
    assert not (tmp_path / "runs").exists()  # no run directory, no manifest recording the drills
