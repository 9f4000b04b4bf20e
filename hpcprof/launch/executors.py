"""Where a job runs: the executor choice, the GPUs a local job's ranks see, and the one place a
submitit executor is built (``python -m hpcprof.submit`` and the analysis job array use it).

The resolution of the resources the spec leaves open (ranks and GPUs per node) is
:mod:`hpcprof.slurm.geometry`, shared with ``python -m hpcprof.sbatch``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from ..spec.resources import SlurmResources


# ------------------------------------------------------------------------------------ choice
def slurm_reachable() -> tuple[bool, str]:
    """Whether the SLURM client commands are here and answer, with the reason."""
    if shutil.which("sbatch") is None:
        return False, "sbatch is not on PATH"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"sinfo did not answer ({exc})"
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return False, f"sinfo failed: {lines[-1][:160] if lines else 'exit code %d' % proc.returncode}"
    return True, "the SLURM client commands answer"


def choose_executor(requested: str) -> tuple[str, str]:
    """The executor for ``resources.cluster`` ("auto": slurm when SLURM answers, else local), with why."""
    if requested != "auto":
        return requested, "asked for"
    ok, why = slurm_reachable()
    return ("slurm", why) if ok else ("local", why)


# ------------------------------------------------------------------------------------ local GPUs
def local_cuda_devices(visible_env: str | None, gpus: int) -> tuple[str, ...] | None:
    """The ``CUDA_VISIBLE_DEVICES`` entries the local executor's ranks get for ``gpus`` GPUs, given
    the submitting process' own ``CUDA_VISIBLE_DEVICES`` (``visible_env``; None: unset).

    submitit's local executor exports ``CUDA_VISIBLE_DEVICES=0,...,gpus-1`` to the ranks, which
    are the machine's first GPUs, not the ones this process was given (``CUDA_VISIBLE_DEVICES=2,3``
    by a scheduler or by hand, or GPU/MIG UUIDs). So the ranks get the first ``gpus`` entries of the
    caller's list, as torch numbers them; None when the caller's variable is unset (then 0..gpus-1
    are the machine's GPUs) or no GPU is used (submitit then exports an empty list: CPU ranks)."""
    if visible_env is None or gpus == 0:
        return None
    entries = tuple(e.strip() for e in visible_env.split(",") if e.strip())
    return entries[:gpus]


# ------------------------------------------------------------------------------------ submitit
def make_executor(resources: SlurmResources, cluster: str, folder: str | Path, python: str | None = None,
                  **params: Any):
    """A submitit executor for ``resources`` on ``cluster`` ("slurm", "local", "debug"), logging into
    ``folder``. ``python``: the command starting each task's Python (SLURM: on the nodes; local: the
    training launch passes :func:`hpcprof.witness.witness_python`, which records how each rank
    ends); default: this interpreter. ``params``: further submitit parameters
    (``slurm_array_parallelism``)."""
    import submitit

    if cluster == "local":
        # The local executor itself (what AutoExecutor(cluster="local") wraps), so that the GPUs its
        # ranks see can be set: submitit exports CUDA_VISIBLE_DEVICES=",".join(visible_gpus[:gpus_per_node])
        # to them, and its parameter check takes integers only, so the entries (indices or UUIDs)
        # go into the parameters after it. tests/test_launch.py checks what a launched job sees.
        local = submitit.LocalExecutor(folder=str(folder), python=python)
        local.update_parameters(**resources.submitit_parameters(cluster), **params)
        devices = local_cuda_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), resources.gpus_per_node)
        if devices is not None:
            local.parameters["visible_gpus"] = devices
        return local
    kwargs = {"slurm_python": python} if python and cluster == "slurm" else {}
    ex = submitit.AutoExecutor(folder=str(folder), cluster=cluster, **kwargs)
    ex.update_parameters(**resources.submitit_parameters(cluster), **params)
    return ex


# ------------------------------------------------------------------------------------ results
RESULT_GRACE_S = {"local": 0.0, "slurm": 15.0}
"""How long an ended job's result files may take to show, by executor: a local task writes its file
before its process exits; on a cluster a shared file system can show it seconds after SLURM says the
task ended (submitit waits 15 s for it). One wait for the whole job: submitit's ``result()`` waits
that long again for each task that left no file (a rank killed, hung or gone by ``os._exit``), which
made a failed 16-rank job report four minutes after its ranks had ended."""


def wait_for_results(tasks: list, grace_s: float) -> None:
    """Return once every ended task of ``tasks`` (submitit jobs) has its result file, or after
    ``grace_s``, whichever comes first. Each look first rewrites the log folders' mode unchanged, as
    submitit does: an NFS client then reads the folder afresh instead of its cached listing."""
    deadline = time.monotonic() + grace_s
    while True:
        for folder in {t.paths.folder for t in tasks}:
            _reread(folder)
        if all(t.paths.result_pickle.exists() for t in tasks) or time.monotonic() >= deadline:
            return
        time.sleep(0.5)


def missing_result(task) -> str | None:
    """None where the ended submitit job ``task`` left its result file (its ``result()`` then answers
    at once, its value or its error); else the one line that says why it left none, as submitit's
    error for it would end: the last line of its stderr log, else of its stdout log."""
    _reread(task.paths.folder)
    if task.paths.result_pickle.exists():
        return None
    for text in (task.stderr(), task.stdout()):
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return f"job {task.job_id} ended without a result or any output"


def _reread(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.chmod(folder.stat().st_mode)


CONTROLLER_LOG = "submitit-controller.log"
"""The local controller's own output, in the run's logs/ (it is silent unless it fails)."""


@contextlib.contextmanager
def local_controller_apart(cluster: str, logs_dir: str | Path) -> Iterator[None]:
    """While submitting to the local executor: submitit's controller process (which starts the
    ranks) is started with SIGINT ignored, its output in ``logs_dir/CONTROLLER_LOG`` and its input
    from /dev/null. Why: it runs in the terminal's process group, so every Ctrl-C reached it with
    `submit`; it then printed its KeyboardInterrupt traceback on the user's terminal and killed the
    ranks a second later, before they could stop (issue 23, item 3). Now only `submit` acts on a
    Ctrl-C and stops the ranks itself (:func:`hpcprof.launch.outcome.stop_local_job`); the witnesses
    and the ranks lead sessions of their own (:mod:`hpcprof.witness`, :mod:`hpcprof.rank.task`), out
    of the terminal's reach, and die with `submit` however it ends (:mod:`hpcprof.rank.lifeline`).

    How, with no change to submitit: a process inherits its parent's ignored signals and open files
    at its start, and Python installs no KeyboardInterrupt handler for a SIGINT that it starts with
    ignored. So this process ignores SIGINT and points its standard streams at the log for the
    moment the controller is started, then takes both back (a Ctrl-C within that moment is lost).
    The controller is then stopped by SIGTERM or SIGKILL, never by the job's ``cancel()`` (SIGINT).
    Other executors, or a caller off the main thread (where no signal can be set): nothing changes."""
    if cluster != "local" or threading.current_thread() is not threading.main_thread():
        yield
        return
    Path(logs_dir).mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with open(os.devnull, "rb") as null, open(Path(logs_dir) / CONTROLLER_LOG, "ab") as log:
        saved = [os.dup(fd) for fd in (0, 1, 2)]
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for fd, target in ((0, null), (1, log), (2, log)):
                os.dup2(target.fileno(), fd)
            yield
        finally:
            for fd, copy in zip((0, 1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
            signal.signal(signal.SIGINT, previous)
