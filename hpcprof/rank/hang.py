"""The hang watchdog of a rank: when this rank has made no progress for the hang timeout (or another
rank's watchdog has fired), it records what every thread was doing and ends the process, so that a
hung job ends within the timeout plus a few seconds instead of at the process group's timeout
(often 10-30 minutes of a whole allocation), and says which rank the others waited for.

What it costs the step loop: nothing. The loop already stamps the start of every step
(``_t_wall``, before it publishes the step number ``_step``); the watchdog thread reads both once
a second. The median step time that scales the timeout is sampled from those readings too (the
mean step time between two readings), never from the records.

When it fires (:meth:`HangWatch.fire`), in this order:
1. every thread's Python stack goes to hangs/rank-<r>.stack.txt (``faulthandler.dump_traceback``:
   it reads the stacks without the GIL-holding main thread's help, which may be stuck);
2. the hang note, hangs/rank-<r>.json (hpcprof.rundir.hangs.HangNote): the step it was in, the
   last step it completed, the seconds without progress, and whether its main thread was blocked
   in a collective (read from the stack just written);
3. it waits (at most `grace_s`) for every rank's note, so that no rank's exit breaks a peer's
   collective before that peer has written its own stack;
4. ``os._exit(HANG_EXIT_CODE)``: a rank blocked in a collective cannot be unwound by an exception,
   and a clean exit would wait on that collective.

PyTorch's flight recorder has no public dump call (``torch._C._distributed_c10d._dump_nccl_trace``
and its gloo twin are private names), so it is not dumped here; on NCCL, PyTorch dumps it itself at
its own timeout (hpcprof.rank.device.nccl_environment).
"""

from __future__ import annotations

import faulthandler
import json
import os
import statistics
import threading
import time
from collections import deque
from typing import Any, Callable

from ..rundir import RunDir, atomic_write_text
from ..rundir.frames import where_and_caller
from ..rundir.hangs import HANG_EXIT_CODE, HangNote, hang_path, hang_stack_path, read_hangs, thread_stacks, waiting_in

MEDIAN_FACTOR = 20.0
"""The timeout is at least this many median step times (see hpcprof.spec.Train.hang_timeout_s)."""


PAUSE_S = 5.0
"""A watchdog poll this late (its interval is 1 s) means the process was stopped, or starved: the
time without progress counts from then on, so a job suspended and resumed is not called hung."""


class HangWatch:
    """A daemon thread watching one rank's step loop `loop` (hpcprof.rank.steploop.StepLoop.liveness)."""

    def __init__(self, loop: Any, run: RunDir, rank: int, node: str, world_size: int, floor_s: float,
                 on_stop: Callable[[], None] | None = None, interval_s: float = 1.0, grace_s: float = 10.0):
        self.loop, self.run, self.rank, self.node, self.world_size = loop, run, rank, node, world_size
        self.floor_s = float(floor_s)
        self.on_stop = on_stop
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.samples: deque[float] = deque(maxlen=3600)
        self._started = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hpcprof-hang-watch", daemon=True)

    def start(self) -> "HangWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ reading the loop
    def progress(self) -> tuple[int | None, float | None, float | None]:
        """(step being run or None, when it began, when it began or last showed life), read consistently."""
        return self.loop.liveness()[:3]

    def limit_s(self) -> float:
        """max(floor, 20 x the median sampled step time)."""
        med = statistics.median(self.samples) if self.samples else 0.0
        return max(self.floor_s, MEDIAN_FACTOR * med)

    def peer_fired(self) -> dict | None:
        """Another rank's hang note written since this watch started (one of an earlier start of the
        job, before a requeue, does not count)."""
        for rank, note in read_hangs(self.run).items():
            if rank != self.rank and isinstance(note.get("time"), (int, float)) and note["time"] >= self._started:
                return note
        return None

    def _run(self) -> None:
        last: tuple[int, float] | None = None
        polled, resumed = time.monotonic(), 0.0
        while not self._stop.wait(self.interval_s):
            try:
                now = time.monotonic()
                if now - polled > PAUSE_S:  # this process was stopped (SIGSTOP, a SLURM suspend): not a hang
                    resumed = time.time()
                polled = now
                step, began, since = self.progress()
                if step is not None and last is not None and step > last[0] and began > last[1]:
                    self.samples.append((began - last[1]) / (step - last[0]))
                if step is not None:
                    last = (step, began)
                idle = time.time() - max(since, resumed) if since is not None else 0.0
                if idle > self.floor_s and idle > self.limit_s():
                    self.fire("timeout", step, idle)
                elif self.peer_fired() is not None:
                    self.fire("peer", step, idle)
            except Exception:  # a half-written folder on a slow file system: look again
                continue

    # ------------------------------------------------------------------ firing
    def fire(self, noticed: str, step: int | None, idle_s: float) -> None:
        """Dump, note, wait for the others' notes, end the process (see the module docstring)."""
        if self._stop.is_set():
            return
        stack = hang_stack_path(self.run, self.rank)
        stack.parent.mkdir(parents=True, exist_ok=True)
        with open(stack, "w") as fh:
            faulthandler.dump_traceback(file=fh, all_threads=True)
        frames = thread_stacks(stack.read_text(errors="replace")).get(threading.main_thread().ident or -1, [])
        coll = waiting_in(frames)
        where, caller = where_and_caller(frames)
        nxt = self.loop.liveness()[3]
        done = step - 1 if step is not None else (nxt - 1 if isinstance(nxt, int) else None)
        note = HangNote(rank=self.rank, node=self.node, pid=os.getpid(), step=step,
                        last_completed_step=done if done is not None and done >= 0 else None,
                        seconds_without_progress=round(idle_s, 1), timeout_s=round(self.limit_s(), 1), noticed=noticed,
                        in_collective=coll is not None, collective=coll, where=where, caller=caller, time=time.time(),
                        stack_file=str(stack.relative_to(self.run.root)))
        atomic_write_text(hang_path(self.run, self.rank), json.dumps(note.to_dict(), indent=2))
        deadline = time.time() + self.grace_s
        while time.time() < deadline and len(read_hangs(self.run)) < self.world_size:
            time.sleep(0.2)
        if self.on_stop is not None:
            try:
                self.on_stop()
            except Exception:
                pass
        os._exit(HANG_EXIT_CODE)


def start_hang_watch(loop: Any, run: RunDir, rank: int, node: str, world_size: int, floor_s: float,
                     on_stop: Callable[[], None] | None = None) -> HangWatch | None:
    """The watchdog of this rank, started; None when train.hang_timeout_s is 0 (off)."""
    if not floor_s or floor_s <= 0:
        return None
    return HangWatch(loop, run, rank, node, world_size, floor_s, on_stop=on_stop).start()
