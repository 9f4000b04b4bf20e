"""A process hpcprof starts dies with the process that started it, even when that one is killed by
SIGKILL (nothing runs in a killed process to stop its children).

One definition for every side: the analysis' worker pools (hpcprof.analysis.pool: a
SIGKILLed `analyze` left its chart workers drawing for minutes) and the local ranks
(hpcprof.rank.lifeline: under submitit's controller). Imports nothing but the standard library.

And no process of a job outlives it: a local rank leads its own process group
(:func:`lead_own_group`), ends what is left in it when it ends (:func:`end_own_group`), and the
launcher ends what is left in the group of a rank that could not (:func:`end_orphaned_group`).
"""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL to this process when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere
    nothing). Why SIGKILL: the parent is gone, nobody is left to wait for a clean stop. Call it in
    the child, first thing (a pool initializer, a rank's start-up); a parent that died before the
    call is caught too: this process then exits at once.

    Caveat (Linux): "parent" is the thread that started this process; hpcprof's starters (the
    pools' and submitit's controller's main threads) live as long as their process."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:  # the parent died before the call
        os._exit(1)


def group_members(pgid: int) -> list[int]:
    """The processes of this user in process group `pgid`, from /proc (empty without /proc)."""
    uid = os.getuid()
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[-1].split()  # from field 3 (state) on
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X") and os.stat(f"/proc/{name}").st_uid == uid:
                out.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def lead_own_group() -> bool:
    """Make this process the leader of a new session and process group (``setsid``), so that every
    process it forks or starts stays in a group that is this process's alone, and
    :func:`end_own_group` / :func:`end_orphaned_group` can find them. False where it cannot (it
    leads a group already, or no setsid)."""
    try:
        os.setsid()
    except (OSError, AttributeError):
        return False
    return True


def end_own_group() -> list[int]:
    """SIGKILL to every other process of this process's group, when it leads the group (a process
    that does not lead its group shares it with its parent's, which are not its to end). Called
    when a local rank ends: a child it left (a forked process stuck in a destructor) would keep its
    sockets open, so its peers wait out the process group's timeout, and would outlive the job.
    Returns the pids signalled."""
    me = os.getpid()
    if os.getpgrp() != me:
        return []
    return _kill([p for p in group_members(me) if p != me])


def end_orphaned_group(leader: int) -> list[int]:
    """SIGKILL to what is left of the process group of `leader`, a process that led its group (a
    local rank) and has ended (os._exit, SIGKILL: it could not end its group itself). Nothing is
    done while a process `leader` runs: the pid may have been given to another process (a pid
    cannot be given again while a group of that id has members, so members of a group whose leader
    is gone are the leader's). Returns the pids signalled."""
    if _running(leader):
        return []
    return _kill(group_members(leader))


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _kill(pids: list[int]) -> list[int]:
    done = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            done.append(pid)
        except OSError:
            pass
    return done
