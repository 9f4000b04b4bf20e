"""Where a job runs: the executor choice, the GPUs a local job's ranks see, and the one place a
submitit executor is built (``python -m hpcprof.submit`` and the analysis job array use it).

The resolution of the resources the spec leaves open (ranks and GPUs per node) is
:mod:`hpcprof.slurm.geometry`, shared with ``python -m hpcprof.sbatch``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import types
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


CONTROLLER_LOG = "submitit-controller.log"
"""The local controller's own output, in the run's logs/ (it is silent unless it fails)."""


@contextlib.contextmanager
def local_controller_apart(cluster: str, logs_dir: str | Path) -> Iterator[None]:
    """While submitting to the local executor: submitit's controller process (which starts the
    ranks) runs in its own session, its output in ``logs_dir/CONTROLLER_LOG``. Why: in the
    terminal's process group it received every Ctrl-C along with `submit` and printed its
    KeyboardInterrupt traceback on the user's terminal (issue 23, item 3); apart, only `submit`
    gets the Ctrl-C and stops the ranks itself (hpcprof.launch.outcome.stop_local_job), and the ranks
    die with `submit` however it ends (hpcprof.rank.lifeline). Other executors: nothing changes."""
    if cluster != "local":
        yield
        return
    from unittest import mock

    import submitit.local.local as local_executor

    Path(logs_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(logs_dir) / CONTROLLER_LOG, "ab") as log:
        popen = functools.partial(subprocess.Popen, start_new_session=True, stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=subprocess.STDOUT)
        # only submitit's local module sees this Popen (start_controller is its one user here)
        with mock.patch.object(local_executor, "subprocess", types.SimpleNamespace(Popen=popen)):
            yield
