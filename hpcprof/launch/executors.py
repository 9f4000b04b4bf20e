"""Where a job runs and with what: the executor choice, the resolution of the resources the spec
leaves open, and the one place a submitit executor is built.

Shared by ``python -m hpcprof.submit`` (which launches through submitit), ``python -m
hpcprof.sbatch`` (which renders a script for plain ``sbatch``: same resolution, so both refuse the
same impossible requests with the same words) and the analysis job array (same executor builder).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Iterator

from ..spec.resources import SlurmResources
from ..spec import JobSpec


class LaunchError(RuntimeError):
    """Something the user can fix before anything runs (resources this machine or job cannot have)."""


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


# ------------------------------------------------------------------------------------ resources
# Device nodes without which no GPU is visible to torch: NVIDIA's driver, ROCm's, WSL2's GPU bridge.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def visible_gpus() -> int:
    """The GPUs a local rank would see (torch's count). Why the device-node check first: importing
    torch costs the launcher 2-3 s before any rank can start, and on a machine with none of
    GPU_DEVICE_NODES torch cannot see a GPU, so the answer there is 0 without it."""
    if not any(Path(p).exists() for p in GPU_DEVICE_NODES):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_resources(spec: JobSpec, executor: str, default_gpus: int = 0, default_tasks: int = 0,
                      visible: int | None = None) -> JobSpec:
    """Fill in what the spec leaves open from what the executor will have, refuse what it cannot have,
    and validate the spec against the resulting world size. Modifies and returns ``spec``.

    Local and debug runs take this machine's GPUs: ``visible`` GPUs (default: :func:`visible_gpus`;
    a test passes the count). One rank per GPU, always:

    - ``gpus_per_node`` unset (0) and GPUs visible: the run takes ``tasks_per_node`` of them, or all
      of them when ``tasks_per_node`` is unset too; more ranks than visible GPUs is refused (run
      fewer ranks, or hide the GPUs with ``CUDA_VISIBLE_DEVICES=`` to run CPU ranks on gloo).
    - no GPU visible: ``tasks_per_node`` CPU ranks, 2 when unset.
    - ``gpus_per_node`` set: that many GPUs (at most the visible ones), ``tasks_per_node`` of them
      used (default: all).
    - debug: one rank in the submitting process, on one GPU when any is visible.

    On SLURM, ``default_gpus`` and ``default_tasks`` are what a template asks for when the spec does
    not say (sbatch rendering): the machine's geometry comes from the template or the flags."""
    r = spec.resources
    if executor in ("local", "debug"):
        if r.nodes != 1:
            raise LaunchError(f"--nodes {r.nodes}: the {executor} executor runs on this machine only; use --cluster slurm")
        gpus = visible_gpus() if visible is None else visible
        if r.gpus_per_node > gpus:
            raise LaunchError(f"--gpus-per-node {r.gpus_per_node}: this machine has {gpus} visible GPU(s)")
        skew = spec.drills.clock_skew_node_ms
        host = socket.gethostname()
        if skew and skew[0] != host:
            # every rank of a local run is on this machine: a drill on another node would shift nothing
            raise LaunchError(f"--inject-clock-skew {spec.drills.clock_skew}: node {skew[0]!r} runs no rank of a "
                              f"{executor} run, whose only node is this machine, {host!r} "
                              f"(e.g. --inject-clock-skew {host}:{skew[1]:g})")
        if executor == "debug":
            if r.tasks_per_node not in (0, 1):
                print(f"hpcprof: the debug executor runs one rank in this process (tasks_per_node "
                      f"{r.tasks_per_node} -> 1)", file=sys.stderr)
            r.tasks_per_node = 1
            r.gpus_per_node = min(r.gpus_per_node or gpus, 1)
        elif r.gpus_per_node == 0 and gpus:
            if r.tasks_per_node > gpus:
                raise LaunchError(
                    f"resources.tasks_per_node = {r.tasks_per_node} (--tasks-per-node) but this machine has "
                    f"{gpus} visible GPU(s) and a run takes one rank per GPU: use --tasks-per-node {gpus} "
                    f"or fewer, or hide the GPUs (CUDA_VISIBLE_DEVICES= python -m hpcprof.submit ...) "
                    f"to run {r.tasks_per_node} CPU ranks on gloo")
            r.tasks_per_node = r.tasks_per_node or gpus
            r.gpus_per_node = r.tasks_per_node
        elif r.tasks_per_node == 0:
            r.tasks_per_node = r.gpus_per_node or 2
    else:
        r.gpus_per_node = r.gpus_per_node or default_gpus
        if r.tasks_per_node == 0:
            r.tasks_per_node = r.gpus_per_node or default_tasks or 1
    if r.gpus_per_node and r.tasks_per_node > r.gpus_per_node:
        raise LaunchError(
            f"resources.tasks_per_node = {r.tasks_per_node} > {r.gpus_per_node} GPUs per node "
            f"(--tasks-per-node > --gpus-per-node): one rank per GPU at most")
    r.cluster = executor
    return spec.validate(world_size=r.nodes * r.tasks_per_node)


def geometry_warnings(resources: SlurmResources, num_workers: int = 0, slurm: bool = True) -> list[str]:
    """What a resolved geometry wastes, one line each (empty: nothing): GPUs no rank uses, and on
    SLURM (``slurm``) ranks with no ``cpus_per_task``, which SLURM binds to one core each, shared
    with the rank's DataLoader workers and its GPU's launch thread. ``python -m hpcprof.sbatch``
    (with the template's ``--cpus-per-task`` in ``resources``) and ``python -m hpcprof.submit``
    print them as warnings; neither refuses: the job runs, just slower than the machine allows."""
    r = resources
    out = []
    if r.gpus_per_node and r.tasks_per_node < r.gpus_per_node:
        idle = r.gpus_per_node - r.tasks_per_node
        out.append(f"resources.tasks_per_node = {r.tasks_per_node} < gpus_per_node = {r.gpus_per_node}: "
                   f"{idle} GPU(s) per node stay idle (one rank per GPU); leave --tasks-per-node unset for "
                   f"one rank per GPU, or ask for --gpus-per-node {r.tasks_per_node}")
    if slurm and not r.cpus_per_task and (r.gpus_per_node or num_workers):
        who = []
        if num_workers:
            who.append(f"its {num_workers} DataLoader worker(s) (data.num_workers)")
        if r.gpus_per_node:
            who.append("the feeding of its GPU")
        out.append(f"resources.cpus_per_task is not set: SLURM binds each of the {r.tasks_per_node} rank(s) "
                   f"per node to 1 core, shared with {' and '.join(who)}; set --cpus-per-task to the "
                   f"node's cores / {r.tasks_per_node} (e.g. --cpus-per-task {max(40 // r.tasks_per_node, 1)} "
                   f"on a 40-core node)")
    return out


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
    ``folder``. ``python``: the command starting Python on the nodes (SLURM only; default: this
    interpreter). ``params``: further submitit parameters (``slurm_array_parallelism``)."""
    import submitit

    if cluster == "local":
        # The local executor itself (what AutoExecutor(cluster="local") wraps), so that the GPUs its
        # ranks see can be set: submitit exports CUDA_VISIBLE_DEVICES=",".join(visible_gpus[:gpus_per_node])
        # to them, and its parameter check takes integers only, so the entries (indices or UUIDs)
        # go into the parameters after it. tests/test_launch.py checks what a launched job sees.
        local = submitit.LocalExecutor(folder=str(folder))
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
