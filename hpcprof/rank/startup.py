"""A rank's start-up, before its first step: who it is (launcher variables), its device, the process
group and the two CPU control groups, the run directory (named by rank 0 and broadcast when no
launcher said), its failure context, and the clocks and rank entries rank 0 records in the manifest
with this attempt. Used by the step-loop session (hpcprof.rank.session.Run.__enter__).
"""

from __future__ import annotations

import datetime
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import record_function

from ..rundir import RunDir
from ..rundir.manifest import Clock, RankEntry, record_attempt
from ..rundir.records import control_label
from ..spec import JobSpec
from .control import thread_ids
from .device import choose_device, gpus_requested, nccl_environment
from .env import (RankEnv, collect_versions, cpu_threads, detect_rank_env, device_name, init_process_group, node_cpus,
                  pin_to_own_cores)
from .failures import FailureContext


@dataclass
class StartedRank:
    """What :func:`start_rank` set up."""

    renv: RankEnv
    device: torch.device
    backend: str
    ctrl_group: Any
    """gloo group for the control rounds (hpcprof.rank.control), the final barrier, the set-up's exchanges."""
    agree_group: Any
    """gloo group for the control channel's agreements."""
    owns_pg: bool
    """hpcprof initialised the default process group (and destroys it at a clean end)."""
    control_label: str
    """The trace name of hpcprof's own collectives on the two groups (hpcprof.rundir.records.control_label)."""
    run: RunDir
    failure: FailureContext
    entries: list[RankEntry]
    """Every rank's entry (clock after a common barrier, device, pid, ...)."""
    node_cpus: int

    def record_attempt(self, spec: JobSpec, resumed_from_step: int | None) -> None:
        """Rank 0: spec.toml if no launcher wrote it, and this attempt in the manifest."""
        if not self.run.spec_path.exists():
            self.run.write_spec(spec)
        record_attempt(self.run, spec, world_size=self.renv.world_size, launcher=self.renv.launcher,
                       job_id=self.renv.job_id, backend=self.backend, device=self.device.type,
                       versions=collect_versions(), ranks=self.entries, resumed_from_step=resumed_from_step,
                       process_group="hpcprof" if self.owns_pg else "script")


def start_rank(spec: JobSpec, run_root: str | None, log: str | None, launched: bool) -> StartedRank:
    """Set this rank up (see the module docstring). `run_root`: the run directory a launcher gave,
    None to agree on one; `launched`: an hpcprof launcher started this process (CPU ranks are then
    pinned to their own cores and get cpus_per_task threads; a user's own launcher keeps its
    settings)."""
    renv = detect_rank_env()
    requested = gpus_requested(os.environ, spec.resources.gpus_per_node)
    available = torch.cuda.is_available()
    kind, index = choose_device(requested_gpus=requested, cuda_available=available,
                                device_count=torch.cuda.device_count() if available else 0,
                                local_rank=renv.local_rank, local_world_size=renv.local_world_size,
                                torch_version=torch.__version__, torch_cuda=torch.version.cuda)
    device = torch.device(kind, index) if index is not None else torch.device(kind)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    cpus = node_cpus()  # before pinning narrows this process's affinity
    if device.type == "cpu" and launched:
        pin_to_own_cores(renv)
        torch.set_num_threads(cpu_threads(spec.resources.cpus_per_task, renv))
    owns_pg = False
    if dist.is_initialized():
        backend = dist.get_backend()
    else:
        if device.type == "cuda" and run_root:
            _nccl_env(run_root)
        init_process_group(renv, backend, spec.train.pg_timeout_s, device)
        owns_pg = True
    # Small CPU-side groups for control messages (preemption, triggered profiling, the final barrier):
    # they never queue behind NCCL kernels, and they have the job's timeout, not gloo's 30 min.
    # The threads that appear now are the two groups' gloo workers (hpcprof.rank.control.thread_ids).
    timeout = datetime.timedelta(seconds=spec.train.pg_timeout_s)
    before = thread_ids()
    ctrl_group = dist.new_group(backend="gloo", timeout=timeout)
    agree_group = dist.new_group(backend="gloo", timeout=timeout)
    label = control_label(thread_ids() - before if before else ())
    with record_function(label):
        run = RunDir(run_root) if run_root else _agree_run_dir(spec, ctrl_group)
    if device.type == "cuda" and not run_root:
        _nccl_env(str(run.root))  # before the first NCCL communicator exists (created lazily)
    run.ensure_layout()
    failure = FailureContext(run, renv.rank, renv.node, FailureContext.log_for_rank(log, renv.rank))
    with record_function(label):
        entries = _gather_rank_entries(renv, device, cpus, ctrl_group)
    return StartedRank(renv, device, backend, ctrl_group, agree_group, owns_pg, label, run, failure, entries, cpus)


def _nccl_env(root: str) -> None:
    extra = nccl_environment(root, os.environ)
    if "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" in extra:
        Path(extra["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]).parent.mkdir(parents=True, exist_ok=True)
    os.environ.update(extra)


def _agree_run_dir(spec: JobSpec, group) -> RunDir:
    """No launcher said where the run goes: rank 0 names it, every rank gets the name."""
    name = spec.name
    if not name:
        label = spec.workload.label if not spec.workload.builtin else script_label()
        job = os.environ.get("SLURM_JOB_ID")
        name = f"{label}-job{job}" if job else f"{label}-{time.strftime('%Y%m%d-%H%M%S')}"
        name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    box = [name]
    dist.broadcast_object_list(box, src=0, group=group)
    spec.name = box[0]
    return RunDir.for_spec(spec, box[0])


def _gather_rank_entries(renv: RankEnv, device: torch.device, cpus: int, group) -> list[RankEntry]:
    """Every rank reads its clocks right after the same barrier; every rank gets all entries."""
    dist.barrier(group=group)
    clock = Clock(wall_ns=time.time_ns(), monotonic_ns=time.monotonic_ns(), after_barrier=True)
    entry = RankEntry(rank=renv.rank, local_rank=renv.local_rank, node=renv.node, device=str(device),
                      device_name=device_name(device), pid=os.getpid(), launcher=renv.launcher,
                      slurm=renv.slurm, clock=clock, cpu_threads=torch.get_num_threads(), node_cpus=cpus)
    entries: list[Any] = [None] * renv.world_size
    dist.all_gather_object(entries, entry, group=group)
    return entries


def script_label() -> str:
    """The running script's stem (``train`` for ``python train.py``), for run names."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "run")
    stem = Path(path).stem
    return stem if stem not in ("", "-c", "__main__") else "run"
