"""hpcprof's own collectives in a rank's trace, told apart from the job's.

hpcprof's control rounds, agreements and barriers run on its own gloo groups, each issued inside a
``record_function`` range named ``hpcprof:control threads=<tid>,...`` (hpcprof.rundir.records
.control_label), the ids of those groups' gloo worker threads. On a CPU rank a collective is the
``gloo:<op>`` event its worker thread records, which names neither its group nor the call that issued
it: the worker thread is what ties it to hpcprof. Left in, hpcprof's rounds were matched across ranks
as the job's collectives; in a job whose ranks trained alone they were the only ones, and a rank that
reached its step boundary later was named a straggler (issue 33).
"""

from __future__ import annotations

import re

import numpy as np

from ...rundir.records import CONTROL_LABEL_RE
from .comm_kernels import Names

CONTROL_RE = re.compile(CONTROL_LABEL_RE)


def control_events(nm: Names, host: np.ndarray, gloo: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hpcprof's control ranges among the `host` events, the `gloo` events of the worker threads
    those ranges name), as masks over the event table. `nm`: the name column factorized; `tid`: the
    thread id column."""
    ranges = host & nm.test(CONTROL_RE)
    threads = _named_threads(nm.uniq[np.unique(nm.codes[ranges])])
    ours = np.zeros(len(tid), dtype=bool)
    rows = np.flatnonzero(gloo)
    ours[rows] = [_thread_id(tid[i]) in threads for i in rows]
    return ranges, ours


def _named_threads(labels) -> set[int]:
    """The thread ids the control ranges' names list (``hpcprof:control threads=<tid>,...``)."""
    out: set[int] = set()
    for text in set(labels):
        m = CONTROL_RE.match(text) if isinstance(text, str) else None
        if m and m.group(1):
            out.update(int(t) for t in m.group(1).split(","))
    return out


def _thread_id(t) -> int | None:
    """An event's thread id as an int (the trace writes it as a number, which the event table may hold
    as a float); None for anything else."""
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, float, np.integer, np.floating)):
        return None
    return int(t) if np.isfinite(t) and float(t).is_integer() else None
