"""The control channel: small messages between the ranks over CPU (gloo) groups, that never make a
healthy rank wait for a slow one.

Why one channel: everything the ranks must agree on during the run (a preemption signal on any
rank, the step timings the triggered profiler scores) travels in the same rounds. Collectives on a
group are matched by the order they are issued in, so the schedule of rounds must be the same on
every rank whatever their speed: one round is issued at every step boundary (an asynchronous
``all_gather`` of one small float vector per rank), by step number alone.

Nobody waits: a round's result is read at the first step boundary after it completed
(``Work.is_completed``, polled, never waited for). Every rank reads the same results in the same
order, so a decision taken from a round's numbers is the same on every rank, at whatever step each
rank reads it.

Agreeing on a step (a preemption stops every rank before the same step; a triggered capture starts
at the same step on every rank): the rank that reads the deciding round does one blocking
``all_reduce(MAX)`` of its current step on a second gloo group (:meth:`ControlChannel.agree`). Every
rank reads the same deciding round, so every rank takes part in the same agreements in the same
order; a rank waits there at most until the slowest rank reaches its next step boundary, once per
decision (the end of the job, or a capture), never in a healthy step.

Payload (float64): ``[preempt_flag, step, *extra]``; ``extra`` is what the triggered profiler adds,
the same length on every rank.

Recognisable in the trace: every collective of the channel is issued inside a ``record_function``
range named by :func:`hpcprof.rundir.records.control_label` (with the ids of the control groups'
worker threads, :func:`thread_ids`), so the analysis never takes hpcprof's rounds for the job's
collectives (docs/contract.md, "hpcprof's own collectives").
"""

from __future__ import annotations

import collections
import os
import signal
import time
from typing import Callable

import torch
import torch.distributed as dist
from torch.profiler import record_function

from ..rundir.records import CONTROL_REGION

PREEMPT_SIGNAL = signal.SIGUSR2
"""What SLURM sends before a preemption or the time limit (sbatch --signal), and submitit listens to."""


class Round:
    """One completed round: the gathered payload of every rank (rows = ranks)."""

    def __init__(self, rows: torch.Tensor, step: int):
        self.rows = rows
        self.step = step
        """The step boundary at which every rank issued this round."""

    @property
    def preempt(self) -> bool:
        return bool(self.rows[:, 0].max().item() > 0)

    def extra(self) -> torch.Tensor:
        return self.rows[:, 2:]


class ControlChannel:
    """Rounds on the control group, the preemption flag and the agreed stop step.

    ``extra_payload``: a callable returning the ``extra_len`` floats this rank adds to a round (the
    triggered profiler's timings), or None. ``on_round(round, step)``: called with every completed
    :class:`Round`, in order, on every rank, and the step boundary at which this rank reads it."""

    def __init__(self, group, agree_group, world_size: int, extra_payload: Callable[[], list[float]] | None = None,
                 extra_len: int = 0, on_round: Callable[[Round, int], None] | None = None, install_signal: bool = True,
                 label: str = CONTROL_REGION):
        self.group = group
        self.label = label
        """The trace name of the channel's collectives (hpcprof.rundir.records.control_label)."""
        self.agree_group = agree_group
        self.world_size = world_size
        self.extra_payload = extra_payload
        self.extra_len = extra_len
        self.on_round = on_round
        self.flag = False
        self.signal_time: float | None = None
        self.stop_step: int | None = None
        self.rounds_read = 0
        self.agreements = 0
        self.agree_s = 0.0
        """Host time this rank spent in agreements (once per decision)."""
        self._pending: collections.deque = collections.deque()
        self.original_handler = signal.getsignal(PREEMPT_SIGNAL) if install_signal else None
        if install_signal:
            signal.signal(PREEMPT_SIGNAL, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.flag = True
        self.signal_time = time.time()

    # ------------------------------------------------------------------ rounds
    def _issue(self, step: int) -> None:
        extra = list(self.extra_payload()) if self.extra_payload else []
        if len(extra) != self.extra_len:
            raise ValueError(f"control payload: {len(extra)} extra values, expected {self.extra_len}")
        mine = torch.tensor([1.0 if self.flag else 0.0, float(step), *extra], dtype=torch.float64)
        rows = [torch.zeros_like(mine) for _ in range(self.world_size)]
        with record_function(self.label):
            work = dist.all_gather(rows, mine, group=self.group, async_op=True)
        self._pending.append((work, rows, step))

    def _read(self, step: int, block: bool = False) -> None:
        """Read the completed rounds in order (all of them, waiting, with `block`)."""
        while self._pending:
            work, rows, issued = self._pending[0]
            if not block and not work.is_completed():
                return
            work.wait()
            self._pending.popleft()
            self.rounds_read += 1
            rnd = Round(torch.stack(rows), issued)
            if rnd.preempt and self.stop_step is None:
                self.stop_step = self.agree(step)
            if self.on_round is not None:
                self.on_round(rnd, step)

    def agree(self, step: int, ahead: int = 0) -> int:
        """Every rank: the largest current step, plus `ahead` (blocking; see the module docstring)."""
        t0 = time.perf_counter()
        t = torch.tensor([step], dtype=torch.int64)
        with record_function(self.label):
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.agree_group)
        self.agreements += 1
        self.agree_s += time.perf_counter() - t0
        return int(t.item()) + ahead

    def poll(self, step: int) -> bool:
        """At the boundary before global step `step`: read what completed, then issue this step's
        round. True when the job must stop here (an agreed preemption): every rank returns True at
        the same step, having run every step below it."""
        self._read(step)
        if self.stop_step is not None and step >= self.stop_step:
            return True
        self._issue(step)
        return False

    def drain(self, step: int) -> None:
        """At the end of the loop (before global step `step`, which does not run): wait for every
        round in flight (every rank issued the same rounds), taking part in the agreements they call
        for like any boundary. A rank that read a preemption only now agrees on `step`: the others then
        run up to it, that is to the end."""
        self._read(step, block=True)


class NoRounds:
    """Stands in for :class:`ControlChannel` where nothing needs the ranks to agree during the run
    (zero-change mode without triggered capture: no preemption handling, hpcprof.rank.auto): no
    round is issued, so nothing of hpcprof's runs on the job's groups between set-up and the end."""

    original_handler = None
    agreements = 0
    agree_s = 0.0

    def poll(self, step: int) -> bool:
        return False

    def drain(self, step: int) -> None:
        return None


def control_barrier(group, label: str = CONTROL_REGION) -> None:
    """A barrier on one of hpcprof's own groups, inside its control range (`label`), so that the
    analysis never takes it for a collective of the job's."""
    with record_function(label):
        dist.barrier(group=group)


def thread_ids() -> set[int]:
    """The ids of this process' threads (Linux: /proc/self/task, the ids the profiler's trace gives its
    events); empty where they cannot be listed.

    Why: a gloo process group runs its collectives on worker threads it starts when it is created,
    and their trace events (``gloo:<op>``) carry no group name. The threads that appear while
    hpcprof creates its control groups are those groups' workers; their ids, in the control label,
    let the analysis leave hpcprof's rounds out of the job's collectives."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task") if t.isdigit()}
    except OSError:
        return set()
