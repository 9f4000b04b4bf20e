"""The per-rank map on this machine (``--executor local``, the default): ``--workers`` processes, the
parent and ``workers - 1`` forked workers, each running ``analyze_rank`` on one trace at a time, so
peak memory is about workers x one rank. A rank that fails costs only its own file (it becomes a
failed RankResult that the reduce turns into a warning); a worker that dies costs its rank, and the
parent analyses what the broken pool left.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .. import cache
from ..pool import WorkerPool, stop_pool, worker_init
from ..ranks.mapper import analyze_rank, preload
from ..ranks.result import RankResult

DEFAULT_MAX_WORKERS = 8


def default_workers(n_traces: int) -> int:
    """min(cores, traces, DEFAULT_MAX_WORKERS), at least 1."""
    return max(1, min(os.cpu_count() or 1, n_traces, DEFAULT_MAX_WORKERS))


def map_local(files: list[Path], cache_dir: Path, use_cache: bool, workers: int, progress: bool,
              digests: dict | None = None) -> list[RankResult]:
    """analyze_rank on every file (in `workers` processes when more than one); results sorted by path.
    `digests`: content hashes already computed (by the memo), passed on so no file is hashed twice."""
    from tqdm import tqdm

    results: list[RankResult] = []
    bar = tqdm(total=len(files), desc="hpcprof: parsing traces", unit="rank", disable=not progress, file=sys.stderr)
    # the parent maps ranks too: one process fewer holding pandas, pyarrow and HTA during the map
    # (a lower peak tree RSS at the same CPU time: benchmarks/README.md, runs 5-7). What
    # a rank's decode freed stays with the process (kept by the allocator) and the chart process
    # forked later counts it again, but the tree's peak stays in the map
    try:
        if files:
            _map_pool(files, cache_dir, use_cache, max(1, min(workers, len(files))), digests, results, bar)
    finally:
        bar.close()  # also on Ctrl-C: the message after it starts on a line of its own
    return sorted(results, key=lambda r: r.path)


def _map_pool(files: list[Path], cache_dir: Path, use_cache: bool, workers: int, digests: dict | None,
              results: list[RankResult], bar) -> None:
    """The parent is one of the `workers` map processes: it and `workers - 1` forked workers take the
    ranks one at a time from one queue (a worker's next rank is handed to it as its last one ends,
    in the pool's thread, so no rank waits queued behind another while a process is free)."""
    import threading
    from collections import deque

    todo = deque(files)
    cond = threading.Condition()
    running = [0]  # ranks handed to the workers and not done yet

    def failed(f: Path, exc: BaseException) -> RankResult:
        return RankResult.failed(f, f"{f.name}: analysis failed ({type(exc).__name__}: {exc})")

    def hand_out(ex: ProcessPoolExecutor) -> None:  # the next rank to a free worker, if any is left
        with cond:
            if not todo:
                return
            f = todo.popleft()
            running[0] += 1
        try:
            fut = ex.submit(analyze_rank, f, cache_dir, use_cache, (digests or {}).get(f))
        except Exception:  # the pool is broken or stopped: the parent takes the rank back
            with cond:
                todo.appendleft(f)
                running[0] -= 1
                cond.notify_all()
            return
        fut.add_done_callback(lambda fut, f=f: done(ex, fut, f))

    def done(ex: ProcessPoolExecutor, fut, f: Path) -> None:  # in the pool's thread
        if fut.cancelled():  # stopped (Ctrl-C)
            with cond:
                running[0] -= 1
                cond.notify_all()
            return
        try:
            res = fut.result()
        except Exception as exc:  # a worker crash must not lose the other ranks
            res = failed(f, exc)
        with cond:
            results.append(res)
            bar.update()
            running[0] -= 1
            cond.notify_all()
        hand_out(ex)

    ex = None
    if workers > 1:
        if _parses(files, cache_dir, use_cache, digests):
            preload()  # before the fork: the workers inherit it (their first rank does not import it again)
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        ex = WorkerPool(max_workers=workers - 1, mp_context=ctx, initializer=worker_init)
    try:
        for _ in range(workers - 1):
            hand_out(ex)
        while True:
            with cond:
                f = todo.pop() if todo else None
            if f is None:
                break
            try:
                res = analyze_rank(f, cache_dir, use_cache, (digests or {}).get(f))
            except Exception as exc:  # what analyze_rank did not foresee: this file only
                res = failed(f, exc)
            with cond:
                results.append(res)
                bar.update()
        with cond:  # the workers' last ranks, unless a broken pool gave ranks back
            while running[0] and not todo:
                cond.wait(0.5)
        if todo:  # the pool broke while the parent was busy: the parent analyses what is left
            _map_pool(list(todo), cache_dir, use_cache, 1, digests, results, bar)
    except BaseException:  # Ctrl-C, or a signal turned into an exception: stop the workers now
        if ex is not None:
            stop_pool(ex)
        raise
    if ex is not None:
        ex.shutdown()
    _give_back_freed_memory()


def _parses(files: list[Path], cache_dir: Path, use_cache: bool, digests: dict | None) -> bool:
    """Whether some file will be parsed (not found in the parse cache: a cheap look at its entry's
    meta.json, where its digest is known; analyze_rank decides)."""
    if not use_cache or digests is None:
        return True
    return any(f not in digests or not (cache.entry_dir(cache_dir, digests[f]) / cache.META).is_file() for f in files)


def _give_back_freed_memory() -> None:
    """Return to the system the heap memory the parent's own ranks freed (glibc ``malloc_trim``;
    elsewhere nothing): the chart process forked next would count it again. Once, after the map
    (after every rank, the next rank paid page faults to take the memory back)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
