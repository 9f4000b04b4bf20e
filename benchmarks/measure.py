"""Measuring a command as a user runs it: wall time and the peak memory of its process tree.

`measure(cmd, log)` runs cmd in a fresh subprocess (its own process group) and samples every ~50 ms
the RSS of every process of its tree: the peak of the sum (the tree), of the command's own process
(the parent: for hpcprof the reduce and the outputs), and of the largest child (a map worker), plus
the summed PSS (pages shared between a parent and its forked workers counted once). Optional limits
stop the command (the whole group) when it runs longer than `timeout_s` or its tree's RSS passes
`max_rss_mb`, and say which: how far HTA gets on a set it cannot finish, without taking the shared
machine's memory. Every figure carries load1 (the 1-minute load average at the start).

`extra`: processes outside the tree whose command line contains this text are sampled too (the
tasks of a SLURM array run under slurmd, not under the command that submitted them): the peak of
their summed RSS, the largest of them, and the peak of tree + them at the same sample.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _pids(proc) -> set[int]:
    import psutil

    try:
        return {proc.pid, *(k.pid for k in proc.children(recursive=True)), os.getpid()}
    except psutil.Error:
        return {proc.pid, os.getpid()}


def _tree(proc) -> tuple[int, int, int, int]:
    """(summed RSS, summed PSS, RSS of proc itself, largest RSS among its descendants), bytes."""
    import psutil

    try:
        kids = proc.children(recursive=True)
    except psutil.Error:
        return 0, 0, 0, 0
    rss = pss = own = child = 0
    for p in [proc] + kids:
        try:
            r = p.memory_info().rss
        except psutil.Error:
            continue
        rss += r
        pss += _pss(p.pid)
        if p.pid == proc.pid:
            own = r
        else:
            child = max(child, r)
    return rss, pss, own, child


def _extra(text: str, exclude: set[int]) -> tuple[int, int]:
    """(summed RSS, largest RSS) of the processes not in `exclude` whose command line contains `text`."""
    import psutil

    total = largest = 0
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.info["pid"] in exclude or text not in " ".join(p.info["cmdline"] or []):
                continue
            r = p.memory_info().rss
        except psutil.Error:
            continue
        total += r
        largest = max(largest, r)
    return total, largest


def time_only(cmd: list[str], log: Path, timeout_s: float | None = None, check: bool = True) -> dict:
    """Run cmd without sampling anything: {wall_s, load1, outcome}. Why a run of its own: on 2 cores
    the sampler of `measure` (the process table and each process' memory every 50 ms) takes CPU
    from the command it measures (hpcprof's 16-rank analysis: 6.3 s alone, 6.95 s sampled, x1.09);
    the time a user waits is the command's alone, so walls come from runs like this one, memory
    from `measure`'s."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    outcome = "ok"
    with open(log, "w") as fh:
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout_s)
            outcome = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            outcome = f"stopped: time limit ({timeout_s:.0f} s)"
    wall = time.perf_counter() - t0
    if check and outcome.startswith("failed"):
        raise SystemExit(f"command {outcome}: {' '.join(cmd)}\n--- {log}:\n{log.read_text()[-3000:]}")
    return {"wall_s": wall, "load1": load, "outcome": outcome}


def measure(cmd: list[str], log: Path, interval: float = 0.05, timeout_s: float | None = None,
            max_rss_mb: float | None = None, check: bool = True, extra: str | None = None) -> dict:
    """Run cmd; {wall_s, peak_rss_mb (tree), peak_pss_mb, parent_mb, worker_mb, load1, outcome}
    and, with `extra`, extra_mb, extra_max_mb and all_mb (see the module docstring). Its wall_s
    includes the sampler's cost (see `time_only`).
    outcome: "ok", "failed (exit N)", "stopped: time limit (S s)" or "stopped: memory limit (M MB)".
    With check=True a failure (not a stop) raises SystemExit with the end of the log."""
    import psutil

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    peak = {"rss": 0, "pss": 0, "own": 0, "child": 0, "extra": 0, "extra_max": 0, "all": 0}
    stopped: list[str] = []
    with open(log, "w") as fh:
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        stop = threading.Event()

        def sample():
            proc = psutil.Process(p.pid)
            while not stop.is_set():
                rss, pss, own, child = _tree(proc)
                ext, ext_max = _extra(extra, _pids(proc)) if extra else (0, 0)
                for k, v in (("rss", rss), ("pss", pss), ("own", own), ("child", child), ("extra", ext),
                             ("extra_max", ext_max), ("all", rss + ext)):
                    peak[k] = max(peak[k], v)
                over_t = timeout_s is not None and time.perf_counter() - t0 > timeout_s
                over_m = max_rss_mb is not None and rss / 2**20 > max_rss_mb
                if (over_t or over_m) and not stopped:
                    stopped.append(f"stopped: time limit ({timeout_s:.0f} s)" if over_t else f"stopped: memory limit ({max_rss_mb:.0f} MB)")
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except OSError:
                        pass
                stop.wait(interval)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        rc = p.wait()
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
    outcome = stopped[0] if stopped else ("ok" if rc == 0 else f"failed (exit {rc})")
    if check and outcome.startswith("failed"):
        raise SystemExit(f"command failed (exit {rc}): {' '.join(cmd)}\n--- {log}:\n{log.read_text()[-3000:]}")
    mb = lambda b: b / 2**20  # noqa: E731
    res = {"wall_s": wall, "peak_rss_mb": mb(peak["rss"]), "peak_pss_mb": mb(peak["pss"]), "parent_mb": mb(peak["own"]),
           "worker_mb": mb(peak["child"]), "load1": load, "outcome": outcome}
    if extra:
        res.update(extra_mb=mb(peak["extra"]), extra_max_mb=mb(peak["extra_max"]), all_mb=mb(peak["all"]))
    return res
