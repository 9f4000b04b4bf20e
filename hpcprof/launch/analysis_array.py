"""The analysis' per-rank map as a submitit job ARRAY on SLURM (``python -m hpcprof.analyze
--executor slurm``).

Each array task runs :func:`hpcprof.analysis.ranks.mapper.analyze_rank` on one rank's trace (or on a
chunk of ``--array-chunk`` ranks) on a compute node and writes its small per-rank tables into the
shared parse cache; :func:`map_on_slurm` waits for the tasks (progress bar over finished tasks) and
returns the same list of RankResult as ``hpcprof.analysis.executors.local.map_local``, so the
cross-rank reduce runs unchanged where the command runs. The trace folder, the cache folder and the
log folder must therefore be on a file system that both this machine and the compute nodes see (the
run directory normally is).

A task that fails (killed for memory or time, node failure, a crash in the analysis) costs only its
own ranks: each becomes a failed RankResult (``ok=False``) whose error names the file, the array
task and its log, which the reduce turns into a warning.

Why in :mod:`hpcprof.launch` and not in :mod:`hpcprof.analysis`: it submits to SLURM with the
launcher's submitit executor and the job spec's resource flags, and the analysis imports neither.
The analyze command builds :class:`SlurmOptions` from its flags and hands them to
:func:`hpcprof.analysis.analyze` (``slurm=``), whose map calls :meth:`SlurmOptions.map`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..analysis.errors import AnalysisError
from ..analysis.ranks.mapper import analyze_rank
from ..analysis.ranks.result import RankResult
from ..spec.cli import add_resource_arguments, resources_from_args
from ..spec.resources import SlurmResources
from .executors import RESULT_GRACE_S, make_executor, missing_result

#: Seconds between two looks at the array tasks while waiting.
POLL_S = 1.0
#: A task that neither squeue nor sacct has known for this long is gone: SLURM keeps no record of an
#: array task cancelled while the whole array was still one pending job (Slurm 22.05: `scancel 5_1`
#: on `5_[0-1%1] PENDING` leaves sacct with 5_0 only), so submitit would report it UNKNOWN forever.
GONE_S = 30.0


#: The analysis command's flags for the SLURM resources of its array tasks. The resources are the
#: training job's type (:class:`hpcprof.spec.resources.SlurmResources`): same help, same parsing,
#: same checks and wording; only the flag names differ (the training job says --partition).
ARRAY_FLAGS = {
    "partition": "--slurm-partition",
    "account": "--slurm-account",
    "qos": "--slurm-qos",
    "constraint": "--slurm-constraint",
    "time_min": "--slurm-time",
    "cpus_per_task": "--slurm-cpus",
    "mem_gb": "--slurm-mem-gb",
    "setup": "--slurm-setup",
    "slurm_extra": "--slurm-extra",
}


def array_resources(**changes: Any) -> SlurmResources:
    """What one array task asks for unless told otherwise: one node, one task, one CPU
    (analyze_rank is single-threaded apart from JSON/parquet I/O), 60 minutes, the partition's
    memory (about 8x one rank's uncompressed JSON is needed)."""
    defaults = dict(nodes=1, tasks_per_node=1, cpus_per_task=1, time_min=60, job_name="hpcprof-analyze")
    return SlurmResources(**{**defaults, **changes})


@dataclass
class SlurmOptions:
    """The analysis array: the SLURM resources of each task, and how the ranks are spread over tasks."""

    resources: SlurmResources = field(default_factory=array_resources)
    """What each array task asks SLURM for (one node, one task: the fields ARRAY_FLAGS lists are the
    ones a user sets)."""
    array_chunk: int = 1
    """Ranks per array task: 1 = one task per rank; larger chunks cut scheduling overhead."""
    array_parallelism: int | None = None
    """At most this many tasks at once (sbatch --array=...%N); None: all."""
    python: str | None = None
    """Command that starts Python in the task; None: this process's interpreter (sys.executable),
    which must then exist at the same path on the compute nodes (a venv on the shared file system)."""

    def validate(self) -> "SlurmOptions":
        self.resources.validate(name=lambda f: ARRAY_FLAGS.get(f, f"resources.{f}"))
        if self.resources.nodes != 1 or self.resources.tasks_per_node != 1:
            raise ValueError("an analysis array task runs on one node as one task "
                             f"(got nodes={self.resources.nodes}, tasks_per_node={self.resources.tasks_per_node})")
        if self.array_chunk < 1:
            raise ValueError(f"--array-chunk {self.array_chunk}: must be at least 1 (ranks per array task)")
        if self.array_parallelism is not None and self.array_parallelism < 1:
            raise ValueError(f"--array-parallelism {self.array_parallelism}: must be at least 1")
        return self

    def map(self, files: Sequence[Path], cache_dir: str | os.PathLike, use_cache: bool, *,
            log_dir: str | os.PathLike | None = None, progress: bool = True) -> list[RankResult]:
        """The per-rank map of ``analyze(executor="slurm", slurm=self)``: :func:`map_on_slurm` with
        these options (what :func:`hpcprof.analysis.executors.run_map` calls)."""
        return map_on_slurm(files, cache_dir, use_cache, self, log_dir=log_dir, progress=progress)


# ------------------------------------------------------------------------------------ CLI
def add_slurm_arguments(ap: argparse.ArgumentParser) -> None:
    """The SLURM options of ``python -m hpcprof.analyze`` (used with ``--executor slurm``)."""
    g = ap.add_argument_group("SLURM array (with --executor slurm)")
    g.add_argument("--array-chunk", type=int, default=1, metavar="N", help="ranks per array task (default 1: one task per rank)")
    g.add_argument("--array-parallelism", type=int, default=None, metavar="N", help="run at most N array tasks at once")
    add_resource_arguments(g, ARRAY_FLAGS, array_resources())
    g.add_argument("--slurm-python", default=None, metavar="CMD",
                   help="command starting Python on the nodes (default: this interpreter, %s)" % sys.executable)


def slurm_options_from_args(a: argparse.Namespace) -> SlurmOptions:
    """The validated SlurmOptions of a parsed command line; a bad value is a ValueError naming its flag."""
    return SlurmOptions(
        resources=resources_from_args(a, ARRAY_FLAGS, array_resources()),
        array_chunk=a.array_chunk,
        array_parallelism=a.array_parallelism,
        python=a.slurm_python,
    ).validate()


# ------------------------------------------------------------------------------------ task side
def run_chunk(paths: Sequence[str], cache_dir: str, use_cache: bool) -> list[RankResult]:
    """One array task: analyse each trace of the chunk; an exception costs only its own file."""
    out = []
    task = os.environ.get("SLURM_ARRAY_JOB_ID", "?") + "_" + os.environ.get("SLURM_ARRAY_TASK_ID", "?")
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    for p in paths:
        try:
            out.append(analyze_rank(p, cache_dir, use_cache))
        except Exception as exc:  # analyze_rank reports bad input itself; this is the unexpected rest
            out.append(RankResult.failed(p, f"{Path(p).name}: analysis failed in SLURM array task {task} on {host} ({type(exc).__name__}: {exc})"))
    return out


# ------------------------------------------------------------------------------------ submit side
def _check_slurm() -> None:
    if shutil.which("sbatch") is None:
        raise AnalysisError("--executor slurm: sbatch is not on PATH; run on a SLURM login node "
                            "(or start the local cluster from a checkout: make slurm-up, then eval \"$(make -s slurm-env)\"), "
                            "or use --executor local")


def _executor(opts: SlurmOptions, log_dir: Path, n_tasks: int):
    return make_executor(opts.resources, "slurm", log_dir, python=opts.python,
                         slurm_array_parallelism=opts.array_parallelism or max(1, n_tasks))


def _cached_state(job) -> str:
    """SLURM's state of a task as submitit last read it from sacct (no new sacct call); "UNKNOWN"
    where sacct has no record of it or the state cannot be read (it is a hint, never an error)."""
    try:
        return str(job.watcher.get_state(job.job_id, mode="cache") or "UNKNOWN")
    except Exception:
        return "UNKNOWN"


def _failure(job, said: str) -> str:
    """One line for a task that ended without a result: SLURM's state for it where sacct knows one
    (CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL: a task cancelled before it started has no log to
    read), the last line of what ``said`` why (submitit's error, which ends with the task's traceback,
    or :func:`missing_result`), and the log."""
    lines = [ln.strip() for ln in said.strip().splitlines() if ln.strip()]
    tail = lines[-1] if lines else "no reason given"
    if len(tail) > 300:
        tail = tail[:300] + "..."
    state = _cached_state(job)
    ended = f" ended {state}" if state.upper() not in ("UNKNOWN", "COMPLETED") else ""
    return f"SLURM array task {job.job_id}{ended} failed ({tail}); log: {job.paths.stderr}"


class _GoneTasks:
    """Finds the array tasks SLURM has forgotten (see GONE_S): a task whose state submitit does not
    know (UNKNOWN: no sacct record) and that squeue does not list either, continuously for GONE_S."""

    def __init__(self, array_id: str, every_s: float = 5.0):
        self.array_id = array_id
        self.every_s = every_s
        self.last = 0.0
        self.missing_since: dict[int, float] = {}

    def _queued(self) -> set[str] | None:
        try:
            out = subprocess.run(["squeue", "-h", "-r", "-j", self.array_id, "-o", "%i"], capture_output=True,
                                 text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return set(out.stdout.split()) if out.returncode == 0 else None

    def check(self, pending: dict) -> list[int]:
        now = time.monotonic()
        if not pending or now - self.last < self.every_s:
            return []
        self.last = now
        queued = self._queued()
        if queued is None:  # squeue did not answer: no evidence either way
            return []
        out = []
        for i, job in pending.items():
            if job.job_id in queued or _cached_state(job).upper() != "UNKNOWN":
                self.missing_since.pop(i, None)
                continue
            since = self.missing_since.setdefault(i, now)
            if now - since >= GONE_S:
                out.append(i)
        return out


def map_on_slurm(
    files: Sequence[Path],
    cache_dir: str | os.PathLike,
    use_cache: bool,
    opts: SlurmOptions | None = None,
    log_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> list[RankResult]:
    """Run analyze_rank on every file as a SLURM job array; return the RankResults sorted by path (as map_local)."""
    from tqdm import tqdm

    opts = (opts or SlurmOptions()).validate()
    _check_slurm()
    files = [Path(f) for f in files]
    cache_dir = Path(cache_dir).resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    log_dir = Path(log_dir).resolve() if log_dir is not None else cache_dir.parent / "slurm-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    chunks = [[str(f.resolve()) for f in files[i : i + opts.array_chunk]] for i in range(0, len(files), opts.array_chunk)]
    originals = {str(f.resolve()): str(f) for f in files}
    if not chunks:
        return []

    ex = _executor(opts, log_dir, len(chunks))
    n = len(chunks)
    try:
        jobs = ex.map_array(run_chunk, chunks, [str(cache_dir)] * n, [use_cache] * n)
    except Exception as exc:
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        raise AnalysisError(
            f"--executor slurm: submitting the analysis array failed ({lines[-1] if lines else type(exc).__name__}); "
            "check that sbatch works here (SLURM_CONF, partition/account/qos names), or use --executor local"
        ) from None
    array_id = jobs[0].job_id.split("_")[0]
    print(f"hpcprof: analysis array {array_id}: {n} task(s) x {opts.array_chunk} rank(s), logs in {log_dir}", file=sys.stderr)

    results: list[RankResult] = []
    pending = dict(enumerate(jobs))
    gone = _GoneTasks(array_id)
    ended: dict[int, float] = {}  # when each task was first seen ended without its result file
    bar = tqdm(total=n, desc=f"hpcprof: SLURM array {array_id}", unit="task", disable=not progress, file=sys.stderr)
    try:
        while pending:
            for i, job in list(pending.items()):
                if not job.done():
                    continue
                # a task that left no result file is failed once its file has had its time to show
                # (one wait per task, beside the others: submitit's result() would hold the loop)
                reason = missing_result(job)
                if reason is not None and time.monotonic() - ended.setdefault(i, time.monotonic()) < RESULT_GRACE_S["slurm"]:
                    continue
                del pending[i]
                if reason is None:
                    try:
                        res = job.result()
                    except Exception as exc:
                        reason = str(exc) or type(exc).__name__
                if reason is not None:
                    why = _failure(job, reason)
                    res = [RankResult.failed(p, f"{Path(p).name}: {why}") for p in chunks[i]]
                results.extend(res)
                bar.update()
            for i in gone.check(pending):
                job = pending.pop(i)
                why = (f"SLURM array task {job.job_id} is neither queued (squeue) nor recorded (sacct) for {GONE_S:.0f} s: "
                       f"cancelled before it started? log folder: {log_dir}")
                results.extend(RankResult.failed(p, f"{Path(p).name}: {why}") for p in chunks[i])
                bar.update()
            if pending:
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        for job in pending.values():
            try:
                job.cancel(check=False)
            except Exception:
                pass
        raise
    finally:
        bar.close()
    # report the paths as the caller gave them (the reduce and summary.json show them)
    for r in results:
        r.path = originals.get(r.path, r.path)
        if r.ok and isinstance(r.meta, dict):
            r.meta["path"] = r.path
    return sorted(results, key=lambda r: r.path)
