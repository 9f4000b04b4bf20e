"""A rank's start-up, in two phases.

:func:`prepare_rank` (no communication): who the rank is (launcher variables), its device, its cores.
:func:`connect_rank` (collective: every rank calls it at the same point of the job): the process group
(the script's own when it made one, else hpcprof's), the two CPU control groups, the run directory
(named by rank 0 and broadcast when no launcher said), the failure context, and the clocks and rank
entries rank 0 records in the manifest with this attempt.

Why two phases: a script creates its own process group (``init_process_group``) somewhere after it
starts. hpcprof connects only when the step loop needs it (its first step, or a run-directory path
asked for before), so a script that creates its group after ``hpcprof.run()`` / ``hpcprof.start()``
keeps working, and in zero-change mode (hpcprof.rank.auto) hpcprof connects at the first optimizer
step, a point every rank of a data-parallel job passes.
"""

from __future__ import annotations

import contextlib
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
from torch.profiler import record_function

from ..rundir import RunDir, RunDirError
from ..rundir.manifest import Clock, RankEntry, record_attempt
from ..rundir.records import control_label
from ..spec import JobSpec
from .control import thread_ids
from .device import choose_device, gpus_requested, use_nccl_environment
from .env import (RankEnv, collect_versions, cpu_threads, detect_rank_env, device_name, init_process_group, node_cpus,
                  pin_to_own_cores)
from .failures import FailureContext

PG_HPCPROF, PG_SCRIPT, PG_NONE = "hpcprof", "script", "none"
"""Who made the default process group (the manifest attempt's `process_group`)."""


@dataclass
class PreparedRank:
    """What :func:`prepare_rank` found (no communication needed)."""

    renv: RankEnv
    device: torch.device
    node_cpus: int
    pinned: list[int] | None
    """The cores this rank was pinned to (CPU ranks under an hpcprof launcher), or None."""


@dataclass
class StartedRank:
    """What :func:`connect_rank` set up."""

    renv: RankEnv
    device: torch.device
    backend: str
    ctrl_group: Any
    """gloo group for the control rounds (hpcprof.rank.control), the final barrier, the set-up's exchanges."""
    agree_group: Any
    """gloo group for the control channel's agreements."""
    owns_pg: bool
    """hpcprof initialised the default process group (and destroys it at a clean end)."""
    process_group: str
    """PG_HPCPROF, PG_SCRIPT or PG_NONE (see the manifest's Attempt.process_group)."""
    control_label: str
    """The trace name of hpcprof's own collectives on the two groups (hpcprof.rundir.records.control_label)."""
    run: RunDir
    failure: FailureContext
    entries: list[RankEntry]
    """Every rank's entry (clock after a common barrier, device, pid, ...)."""
    node_cpus: int

    def record_attempt(self, spec: JobSpec, resumed_from_step: int | None, steps_source: str) -> None:
        """Rank 0: spec.toml if no launcher wrote it, and this attempt in the manifest."""
        if not self.run.spec_path.exists():
            self.run.write_spec(spec)
        record_attempt(self.run, spec, world_size=self.renv.world_size, launcher=self.renv.launcher,
                       job_id=self.renv.job_id, backend=self.backend, device=self.device.type,
                       versions=collect_versions(), ranks=self.entries, resumed_from_step=resumed_from_step,
                       process_group=self.process_group, steps_source=steps_source)


def prepare_rank(spec: JobSpec, launched: bool) -> PreparedRank:
    """Who this rank is and what it runs on. `launched`: an hpcprof launcher started this process (CPU
    ranks are then pinned to their own cores unless resources.pin_cores is off, and get cpus_per_task
    threads; a user's own launcher keeps its settings). A spec that cannot run in this world (a drill
    naming a rank it lacks, under a launcher that did not check it: torchrun) is a SpecError before
    the process group starts."""
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
    cpus = node_cpus()  # before pinning narrows this process's affinity
    pinned = None
    if device.type == "cpu" and launched:
        if spec.resources.pin_cores:  # said on the launcher's console (hpcprof.launch.submit)
            pinned = pin_to_own_cores(renv)
        torch.set_num_threads(cpu_threads(spec.resources.cpus_per_task, renv))
    return PreparedRank(renv, device, cpus, pinned)


def connect_rank(prep: PreparedRank, spec: JobSpec, run_root: str | None, log: str | None) -> StartedRank:
    """Join the job (collective; see the module docstring). `run_root`: the run directory a launcher
    gave, None to agree on one."""
    renv, device = prep.renv, prep.device
    owns_pg = False
    if dist.is_initialized():
        backend = dist.get_backend()
        made_by = PG_SCRIPT
    else:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda" and run_root:
            use_nccl_environment(run_root)
        init_process_group(renv, backend, spec.train.pg_timeout_s, device)
        owns_pg = True
        made_by = PG_HPCPROF
    # Small CPU-side groups for control messages (preemption, triggered profiling, the final barrier):
    # they never queue behind NCCL kernels, and they have the job's timeout, not gloo's 30 min.
    # The threads that appear now are the two groups' gloo workers (hpcprof.rank.control.thread_ids).
    timeout = datetime.timedelta(seconds=spec.train.pg_timeout_s)
    before = thread_ids()
    ctrl_group = dist.new_group(backend="gloo", timeout=timeout)
    agree_group = dist.new_group(backend="gloo", timeout=timeout)
    label = control_label(thread_ids() - before if before else ())
    try:
        with record_function(label):
            run = RunDir(run_root) if run_root else agree_run_dir(spec, renv, ctrl_group)
        try:
            if device.type == "cuda" and not run_root:
                use_nccl_environment(str(run.root))  # before the first NCCL communicator exists (created lazily)
            run.ensure_layout()
        except OSError as exc:
            raise RunDirError(_cannot_create(run, exc, chosen_here=not run_root)) from None
        failure = FailureContext(run, renv.rank, renv.node, FailureContext.log_for_rank(log, renv.rank))
        with record_function(label):
            entries = _gather_rank_entries(renv, device, prep.node_cpus, ctrl_group)
    except Exception:  # an error, so no collective of this rank still runs (an interrupt is left as it is)
        _leave_groups(owns_pg, ctrl_group, agree_group)
        raise
    return StartedRank(renv, device, backend, ctrl_group, agree_group, owns_pg, made_by, label, run, failure, entries,
                       prep.node_cpus)


def _leave_groups(owns_pg: bool, *groups) -> None:
    """Destroy the process groups made here when joining fails. A process that exits with live gloo
    groups may end in SIGABRT ("terminate called without an active exception", torch's worker
    threads torn down with the interpreter) instead of its exit code 1 and one-line error. No
    collective is in flight at this point and no NCCL communicator exists yet (created lazily), so
    destroying cannot wait on a peer. A process group the script made is left to the script."""
    for group in groups:
        with contextlib.suppress(Exception):
            dist.destroy_process_group(group)
    if owns_pg and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


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


def agree_run_dir(spec: JobSpec, renv: RankEnv, group) -> RunDir:
    """No launcher said where the run goes: rank 0 chooses (:func:`choose_run_dir`), every rank gets
    the answer, and every rank raises the same one-line RunDirError when rank 0 refused."""
    box: list[Any] = [None]
    if renv.rank == 0:
        try:
            box[0] = ("ok", str(choose_run_dir(spec, os.environ.get("SLURM_JOB_ID") or None).root))
        except RunDirError as exc:
            box[0] = ("error", str(exc))
    dist.broadcast_object_list(box, src=0, group=group)
    kind, text = box[0]
    if kind == "error":
        raise RunDirError(text)
    spec.name = Path(text).name
    return RunDir(text)


def choose_run_dir(spec: JobSpec, job_id: str | None) -> RunDir:
    """Rank 0: the run directory of a job no hpcprof launcher started, created here so that no other
    job can take it.

    - A directory that holds a run of this same SLURM job (its manifest's job_id, or its name
      ``<script>-job<SLURM_JOB_ID>``) is this job's own directory after a requeue: it is resumed.
    - With an explicit name (``hpcprof.run(name=...)``, ``--name``) any other existing run is refused in
      one line: nothing of an earlier run is changed.
    - Without one, the name is ``<script>-job<SLURM_JOB_ID>`` under SLURM, else
      ``<script>-<date>-<time>``; when that is taken (two jobs started in the same second), ``-2``,
      ``-3``... is added."""
    explicit = bool(spec.name)
    if explicit:
        base = spec.name
    else:
        label = script_label() if spec.workload.builtin or spec.workload.script == INTERACTIVE else spec.workload.label
        base = f"{label}-job{job_id}" if job_id else f"{label}-{time.strftime('%Y%m%d-%H%M%S')}"
        base = re.sub(r"[^A-Za-z0-9._-]", "_", base)
    root = Path(spec.runs_dir)
    for k in range(1, 1000):
        name = base if k == 1 else f"{base}-{k}"
        run = RunDir.for_spec(spec, name)
        try:
            if len(name.encode()) > 255:  # said before any folder on the way is created
                raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
            root.mkdir(parents=True, exist_ok=True)
            run.root.mkdir()
            return run
        except FileExistsError:
            if not run.root.is_dir():
                raise RunDirError(_cannot_create(run, FileExistsError(errno.EEXIST, "exists"), True)) from None
        except OSError as exc:
            raise RunDirError(_cannot_create(run, exc, chosen_here=True)) from None
        if job_id and (_job_of(run) == str(job_id) or (k == 1 and not explicit)):
            return run  # this job's own directory (its name or its manifest says the job): a requeue resumes it
        if explicit:
            raise RunDirError(f"run directory {run.root} already holds another run; choose another name "
                              "(hpcprof.run(name=...) / --name) or remove it")
    raise RunDirError(f"runs directory {root}: no free name for {base!r}")


def _job_of(run: RunDir) -> str | None:
    try:
        job = run.read_manifest().get("job_id")
    except (RunDirError, OSError, ValueError):
        return None
    return str(job) if job is not None else None


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


INTERACTIVE = "<interactive>"
"""The workload script recorded for code whose __main__ is no file (``python -c``, a notebook)."""


def running_script() -> tuple[str, list[str]]:
    """(the script this process runs, its arguments): what the spec records as the workload of code
    started without an hpcprof launcher (torchrun, srun, python), so that its report names it rather
    than the built-in trainer. :data:`INTERACTIVE` where __main__ is no file."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return (str(Path(path).resolve()) if path else INTERACTIVE), [str(a) for a in sys.argv[1:]]


def script_label() -> str:
    """The running script's stem (``train`` for ``python train.py``), for run names."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "run")
    stem = Path(path).stem
    return stem if stem not in ("", "-c", "__main__") else "run"
