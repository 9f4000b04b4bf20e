"""A local rank dies with the command that launched it, whichever way that command ends.

Why: with ``--cluster local`` the process tree is ``submit`` (or ``ladder``) -> submitit's
controller (``python -m submitit.local._local``) -> the ranks. A launcher stopped by SIGINT,
SIGTERM or SIGHUP stops the ranks itself (:func:`hpcprof.launch.outcome.stop_local_job`), but
nothing runs in a launcher killed by SIGKILL (the OOM killer, ``kill -9``, a closed terminal's
last resort): the controller and the ranks went on under init for the whole run, holding the
cores, and ignoring SIGTERM ("submitit: Bypassing signal SIGTERM"); the manifest never said what
happened (issue 23, item 1).

So each local rank, at start-up (:func:`die_with_launcher`, called by
:class:`hpcprof.rank.task.TrainTask` before it trains):

- asks the kernel for SIGKILL when its parent, the controller, dies (``PR_SET_PDEATHSIG``,
  :func:`hpcprof.lifetime.die_with_parent`);
- watches the launcher, two levels up, from a thread: when the launcher's process is gone (or a
  zombie, or its pid now belongs to a process started later), rank 0 records the outcome
  ``interrupted`` in the manifest, naming the launcher, and every rank stops as on Ctrl-C
  (SIGINT: the step loop unwinds, no failure note); a rank still alive after `grace_s` exits hard.
  The controller sees every rank gone and exits by itself.

Each local rank also leads its own process group (:func:`hpcprof.lifetime.lead_own_group`, by
:class:`hpcprof.rank.task.TrainTask`), and ends whatever is left in it when it ends, however it
ends in Python (a forked child stuck in a destructor held the rank's sockets, so its peer waited
for the process group's timeout, and outlived the job); the launcher ends what a rank killed
outright left (:func:`hpcprof.launch.outcome.end_leftovers`).

SLURM ranks are not watched: a SLURM job outlives the command that submitted it by design.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from ..lifetime import die_with_parent, end_own_group

POLL_S = 0.5
"""How often the watchdog looks at the launcher."""
GRACE_S = 20.0
"""How long the ranks have to stop on SIGINT before they exit hard."""


def launcher_identity(pid: int | None = None) -> str:
    """``"<pid>:<start time>"`` of a process (default: this one), for its ranks to watch it. The
    start time (clock ticks since boot, /proc/<pid>/stat field 22) tells the process apart from a
    later one given the same pid; without /proc it is left out."""
    pid = os.getpid() if pid is None else pid
    start = _start_ticks(pid)
    return f"{pid}:{start}" if start is not None else str(pid)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()  # fields from 3 (state) on: the name may hold spaces


def _start_ticks(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def launcher_alive(identity: str) -> bool:
    """Whether the process of `identity` (from :func:`launcher_identity`) still runs."""
    pid_text, _, start = identity.partition(":")
    pid = int(pid_text)
    if Path("/proc").is_dir():
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        return not start or fields[19] == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die_with_launcher(identity: str, run_root: str | os.PathLike, rank: int, grace_s: float = GRACE_S) -> threading.Thread:
    """Arm both: death with the parent, and the watchdog on the launcher `identity`. Returns the
    (daemon) watchdog thread."""
    die_with_parent()
    thread = threading.Thread(target=_watch, args=(identity, Path(run_root), rank, grace_s),
                              name="hpcprof-lifeline", daemon=True)
    thread.start()
    return thread


def _watch(identity: str, run_root: Path, rank: int, grace_s: float) -> None:
    while launcher_alive(identity):
        time.sleep(POLL_S)
    if rank == 0:
        record_launcher_death(run_root, identity)
    os.kill(os.getpid(), signal.SIGINT)  # the main thread unwinds as on Ctrl-C
    time.sleep(grace_s)
    end_own_group()
    os._exit(1)  # still here: stuck in a collective whose peer is gone


def record_launcher_death(run_root: Path, identity: str) -> None:
    """The manifest's outcome, when the launcher could not write one (best effort)."""
    import contextlib

    from ..rundir import RunDir, RunDirError
    from ..rundir import manifest as run_manifest

    run = RunDir(run_root)
    with contextlib.suppress(OSError, RunDirError, ValueError):
        current = run_manifest.load(run)
        if current is not None and current.outcome is not None:
            return  # the launcher said how it ended
        pid = identity.partition(":")[0]
        run_manifest.record_outcome(run, run_manifest.Outcome(
            state="interrupted", time=run_manifest.now_iso(),
            error=f"the launcher (pid {pid}) ended without stopping the job (killed by SIGKILL, or it crashed); "
                  "the ranks stopped themselves"))
