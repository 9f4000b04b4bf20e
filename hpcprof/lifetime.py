"""A process hpcprof starts dies with the process that started it, even when that one is killed by
SIGKILL (nothing runs in a killed process to stop its children).

One definition for every side: the analysis' worker pools (hpcprof.analysis.executors.local: a
SIGKILLed `analyze` left its chart workers drawing for minutes) and the local ranks
(hpcprof.rank.lifeline: under submitit's controller). Imports nothing but the standard library.
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
