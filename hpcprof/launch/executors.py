"""Where a job runs and with what: the executor choice, the resolution of the resources the spec
leaves open, and the one place a submitit executor is built.

Shared by ``python -m hpcprof.submit`` (which launches through submitit), ``python -m
hpcprof.sbatch`` (which renders a script for plain ``sbatch``: same resolution, so both refuse the
same impossible requests with the same words) and the analysis job array (same executor builder).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..slurm.resources import SlurmResources
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


def resolve_resources(spec: JobSpec, executor: str, default_gpus: int = 0, default_tasks: int = 0) -> JobSpec:
    """Fill in what the spec leaves open from what the executor will have, refuse what it cannot have,
    and validate the spec against the resulting world size. Modifies and returns ``spec``.

    Local and debug runs look at this machine's GPUs. On SLURM, ``default_gpus`` and
    ``default_tasks`` are what a template asks for when the spec does not say (sbatch rendering)."""
    r = spec.resources
    if executor in ("local", "debug"):
        if r.nodes != 1:
            raise LaunchError(f"--nodes {r.nodes}: the {executor} executor runs on this machine only; use --cluster slurm")
        gpus = visible_gpus()
        if r.gpus_per_node > gpus:
            raise LaunchError(f"--gpus-per-node {r.gpus_per_node}: this machine has {gpus} visible GPU(s)")
        if r.gpus_per_node == 0 and gpus and r.tasks_per_node == 0:
            r.gpus_per_node = gpus
        if r.tasks_per_node == 0:
            r.tasks_per_node = r.gpus_per_node or 2
        if executor == "debug" and r.tasks_per_node != 1:
            print(f"hpcprof: the debug executor runs one rank in this process (tasks_per_node {r.tasks_per_node} -> 1)",
                  file=sys.stderr)
            r.tasks_per_node = 1
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


# ------------------------------------------------------------------------------------ submitit
def make_executor(resources: SlurmResources, cluster: str, folder: str | Path, python: str | None = None,
                  **params: Any):
    """A submitit executor for ``resources`` on ``cluster`` ("slurm", "local", "debug"), logging into
    ``folder``. ``python``: the command starting Python on the nodes (SLURM only; default: this
    interpreter). ``params``: further submitit parameters (``slurm_array_parallelism``)."""
    import submitit

    kwargs = {"slurm_python": python} if python and cluster == "slurm" else {}
    ex = submitit.AutoExecutor(folder=str(folder), cluster=cluster, **kwargs)
    ex.update_parameters(**resources.submitit_parameters(cluster), **params)
    return ex
