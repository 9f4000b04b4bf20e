"""The worker processes of one analysis command (the per-rank map's workers, the chart process):
a `concurrent.futures.ProcessPoolExecutor` whose workers die with their parent, ignore SIGINT,
and can be stopped at once. Jobs (training, the analysis' SLURM array) go through submitit instead
(docs/architecture.md, "Processes hpcprof runs")."""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor

from ..lifetime import die_with_parent


def worker_init() -> None:
    """Initializer of every worker pool of the analysis (map and charts): dies with its parent
    (:func:`hpcprof.lifetime.die_with_parent`: a SIGKILLed `analyze` left its chart
    workers drawing PNGs for minutes, issue 13) and ignores SIGINT. Why: Ctrl-C in a terminal reaches the whole
    process group; workers that took it printed their own KeyboardInterrupt tracebacks and broke
    the pool, so `analyze` sometimes ended "analysis failed (BrokenProcessPool)" instead of
    "interrupted" (issue 23, item 3). The parent alone handles it and stops them (:func:`stop_pool`)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


class WorkerPool(ProcessPoolExecutor):
    """A process pool that knows its workers: each reports its pid when it starts (through a queue
    of the pool's own), so that :func:`stop_pool` can kill them. Why not the pool's private process
    table: it is another package's internal (issue 34)."""

    def __init__(self, max_workers: int, mp_context=None, initializer=None, initargs: tuple = ()):
        ctx = mp_context or mp.get_context()
        self.worker_pids = ctx.SimpleQueue()
        super().__init__(max_workers=max_workers, mp_context=ctx, initializer=_report_pid,
                         initargs=(self.worker_pids, initializer, initargs))

    def pids(self) -> set[int]:
        """The pids of the workers started so far."""
        seen: set[int] = set()
        while not self.worker_pids.empty():
            seen.add(self.worker_pids.get())
        return seen


def _report_pid(queue, initializer, initargs) -> None:
    queue.put(os.getpid())
    if initializer is not None:
        initializer(*initargs)


def stop_pool(pool: WorkerPool) -> None:
    """Stop a pool now, its running tasks included (on an interruption: waiting for the current
    tasks could take minutes on large traces)."""
    import signal

    for pid in pool.pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # already gone
            pass
    pool.shutdown(wait=True, cancel_futures=True)
