"""The geometry of a job: how many ranks and GPUs per node it gets, decided before anything runs.

Shared by ``python -m hpcprof.submit`` (which launches through submitit) and ``python -m
hpcprof.sbatch`` (which renders a script for plain ``sbatch``): the same resolution, so both
refuse the same impossible requests with the same words, and print the same warnings about what a
geometry wastes. It sits in :mod:`hpcprof.slurm`, below :mod:`hpcprof.launch`, so that the sbatch
renderer needs nothing of the launcher.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from ..spec import JobSpec
from ..spec.resources import SlurmResources


class LaunchError(RuntimeError):
    """Something the user can fix before anything runs (resources this machine or job cannot have)."""


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
