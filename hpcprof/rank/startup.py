"""A rank's start-up, before its first step: who it is (launcher variables), its device, the process
group and the two CPU control groups, the run directory (named by rank 0 and broadcast when no
launcher said), its failure context, and the clocks and rank entries rank 0 records in the manifest
with this attempt. Used by the step-loop session (hpcprof.rank.session.Run.__enter__).
"""

from __future__ import annotations

import datetime
import errno
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..rundir import RunDir, RunDirError
from ..rundir.manifest import Clock, RankEntry, record_attempt
from ..spec import JobSpec
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
                       versions=collect_versions(), ranks=self.entries, resumed_from_step=resumed_from_step)


def start_rank(spec: JobSpec, run_root: str | None, log: str | None, launched: bool) -> StartedRank:
    """Set this rank up (see the module docstring). `run_root`: the run directory a launcher gave,
    None to agree on one; `launched`: an hpcprof launcher started this process (CPU ranks are then
    pinned to their own cores and get cpus_per_task threads; a user's own launcher keeps its
    settings). A spec that cannot run in this world (a drill naming a rank it lacks, under a
    launcher that did not check it: torchrun) is a SpecError before the process group starts."""
    renv = detect_rank_env()
    spec.validate(world_size=renv.world_size)  # drills naming ranks outside this world: refused, as submit does
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
    timeout = datetime.timedelta(seconds=spec.train.pg_timeout_s)
    ctrl_group = dist.new_group(backend="gloo", timeout=timeout)
    agree_group = dist.new_group(backend="gloo", timeout=timeout)
    run = RunDir(run_root) if run_root else _agree_run_dir(spec, ctrl_group)
    try:
        if len(run.root.name.encode()) > 255:  # said before any folder on the way is created
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        if device.type == "cuda" and not run_root:
            _nccl_env(str(run.root))  # before the first NCCL communicator exists (created lazily)
        run.ensure_layout()
    except OSError as exc:
        raise RunDirError(_cannot_create(run, exc, chosen_here=not run_root)) from None
    failure = FailureContext(run, renv.rank, renv.node, FailureContext.log_for_rank(log, renv.rank))
    entries = _gather_rank_entries(renv, device, cpus, ctrl_group)
    return StartedRank(renv, device, backend, ctrl_group, agree_group, owns_pg, run, failure, entries, cpus)


def _cannot_create(run: RunDir, exc: OSError, chosen_here: bool) -> str:
    """One line for a run directory that cannot be created (runs_dir a file, a dangling symlink, a
    symlink loop, no permission, a name too long for a folder), saying what to change."""
    name = run.root.name
    if exc.errno == errno.ENAMETOOLONG and len(name.encode()) > 255:
        job = os.environ.get("SLURM_JOB_ID", "")
        held = " (it holds SLURM_JOB_ID)" if job and re.sub(r"[^A-Za-z0-9._-]", "_", job) in name else ""
        return (f"the run name {name[:40]}... is {len(name.encode())} bytes long{held}, more than a folder name may be "
                "(255); give hpcprof.run(name=...)")
    where = str(run.root) if len(str(run.root)) <= 200 else str(run.root)[:197] + "..."
    hint = "; choose a writable folder as runs_dir (hpcprof.run(runs_dir=...)) or another name" if chosen_here else ""
    return f"cannot create the run directory {where} ({_in_the_way(run.root) or exc.strerror or exc}){hint}"


def _in_the_way(root: Path) -> str | None:
    """What on the way to `root` is not a folder (a file, a symbolic link to nothing or to itself), if anything."""
    for p in [*reversed(root.parents), root]:
        try:
            if p.is_symlink() and not p.exists():
                return f"{p} is a symbolic link to {os.readlink(p)!r}, which leads nowhere (a missing folder or a loop)"
            if p.exists() and not p.is_dir():
                return f"{p} is a file, not a folder"
        except OSError:
            return None
    return None


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
