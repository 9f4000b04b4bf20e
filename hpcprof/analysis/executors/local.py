"""The per-rank map in worker processes on this machine (``--executor local``, the default).

Forked workers each run ``analyze_rank`` on one trace at a time, so peak memory is about workers x
one rank; a worker that crashes costs only its own file (it becomes a failed RankResult that the
reduce turns into a warning).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ...lifetime import die_with_parent
from ..ranks.mapper import analyze_rank
from ..ranks.result import RankResult

DEFAULT_MAX_WORKERS = 8


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


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now, its running tasks included (on an interruption: waiting for the current
    tasks could take minutes on large traces)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except Exception:  # already gone
            pass
    pool.shutdown(wait=True, cancel_futures=True)


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
    # always in worker processes, one at least: a rank's decode leaves its memory with the process
    # that did it (freed but kept by the allocator), and the chart processes forked later from this
    # one would count it again
    try:
        if files:
            _map_pool(files, cache_dir, use_cache, max(1, min(workers, len(files))), digests, results, bar)
    finally:
        bar.close()  # also on Ctrl-C: the message after it starts on a line of its own
    return sorted(results, key=lambda r: r.path)


def _map_pool(files: list[Path], cache_dir: Path, use_cache: bool, workers: int, digests: dict | None,
              results: list[RankResult], bar) -> None:
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    ex = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=worker_init)
    try:
        futs = {ex.submit(analyze_rank, f, cache_dir, use_cache, (digests or {}).get(f)): f for f in files}
        for fut in as_completed(futs):
            try:
                results.append(fut.result())
            except Exception as exc:  # a worker crash must not lose the other ranks
                results.append(RankResult.failed(futs[fut], f"{futs[fut].name}: analysis failed ({type(exc).__name__}: {exc})"))
            bar.update()
    except BaseException:  # Ctrl-C, or a signal turned into an exception: stop the workers now
        stop_pool(ex)
        raise
    ex.shutdown()
