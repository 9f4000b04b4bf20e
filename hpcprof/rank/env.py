"""Who am I in the job: rank, world size, local rank, node and rendezvous address, from whichever
launcher started this process, then the process group itself; and what this rank runs on (device,
threads, the cores of the node, library versions) for the manifest.

Order of detection: submitit (``submitit.helpers.TorchDistributedEnvironment``), torchrun
(``TORCHELASTIC_RUN_ID`` / ``RANK`` + ``WORLD_SIZE``), a plain ``srun`` inside an sbatch script
(``SLURM_PROCID``...; master = first host of ``SLURM_JOB_NODELIST``, port derived from the job id),
else a single process.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
import subprocess
from dataclasses import dataclass, field

import torch

from .. import __version__
from ..hta_release import installed_hta
from ..rundir.manifest import Versions

SLURM_PORT_BASE = 20000
"""Lowest rendezvous port of a job (srun- or submitit-launched)."""
SLURM_PORT_SPAN = 12000
"""Ports used: SLURM_PORT_BASE .. SLURM_PORT_BASE + SLURM_PORT_SPAN - 1 (20000-31999), below
Linux's ephemeral range (32768-60999 by default), from which the kernel picks the local port of
every outgoing connection: a rendezvous port in that range can be held by any client socket on the
master node, and rank 0 then fails with EADDRINUSE. submitit's own choice (a port drawn from the job
id in 20000-60000) lands there 70% of the time: a full-suite run failed on it (job 18, port 40902)."""
SLURM_PORTS_PER_JOB = 4
"""Consecutive ports per job id, one per start modulo 4 (SLURM_RESTART_COUNT): a requeued job's rank
0 listens on another port than the previous start's rank 0, which may still be dying or leave the
port in TIME_WAIT on the same node. Jobs whose ids differ by less than SPAN / PORTS_PER_JOB (3,000)
never share a port."""


@dataclass
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str
    """"submitit-local", "submitit-slurm", "submitit-debug", "torchrun", "srun" or "single"."""
    job_id: str | None = None
    slurm: dict = field(default_factory=dict)

    @property
    def node(self) -> str:
        return socket.gethostname()

    def export(self) -> None:
        """Set the env:// variables torch.distributed reads."""
        os.environ.update(
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=str(self.master_port),
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK=str(self.local_rank),
            LOCAL_WORLD_SIZE=str(self.local_world_size),
        )


LAUNCHER_VAR = "HPCPROF_LAUNCHER"
"""The launcher hpcprof found, kept in the environment it exports (:func:`export_launch_env`): the
torchrun variables it adds must not make a later detection in the same process say "torchrun"."""


def export_launch_env(renv: RankEnv) -> dict[str, str]:
    """Give this process (and what it starts) the environment ``torchrun`` gives its workers, so that a
    script that reads RANK / LOCAL_RANK / WORLD_SIZE at import time and calls
    ``init_process_group()`` itself runs as it does under torchrun: RANK, LOCAL_RANK, WORLD_SIZE,
    LOCAL_WORLD_SIZE, GROUP_RANK (the node's index), GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE,
    ROLE_NAME, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID (the job id), TORCHELASTIC_RESTART_COUNT
    and TORCHELASTIC_MAX_RESTARTS (frameworks such as Lightning recognise a torchrun launch by
    them). TORCHELASTIC_USE_AGENT_STORE is False: rank 0 hosts the rendezvous store (there is no
    torchrun agent). Under torchrun itself nothing is changed: its agent's variables (and its store)
    are the job's. Returns what was set."""
    if renv.launcher == "torchrun":
        return {}
    per_node = max(renv.local_world_size, 1)
    values = {
        "RANK": renv.rank, "LOCAL_RANK": renv.local_rank, "WORLD_SIZE": renv.world_size,
        "LOCAL_WORLD_SIZE": per_node, "GROUP_RANK": renv.rank // per_node,
        "GROUP_WORLD_SIZE": max(renv.world_size // per_node, 1), "ROLE_RANK": renv.rank,
        "ROLE_WORLD_SIZE": renv.world_size, "ROLE_NAME": "default", "MASTER_ADDR": renv.master_addr,
        "MASTER_PORT": renv.master_port, "TORCHELASTIC_RUN_ID": renv.job_id or "hpcprof",
        "TORCHELASTIC_RESTART_COUNT": os.environ.get("SLURM_RESTART_COUNT") or 0,
        "TORCHELASTIC_MAX_RESTARTS": 0, "TORCHELASTIC_USE_AGENT_STORE": "False", LAUNCHER_VAR: renv.launcher,
    }
    exported = {k: str(v) for k, v in values.items()}
    os.environ.update(exported)
    return exported


def slurm_vars() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("SLURM_")}


def first_slurm_host(nodelist: str) -> str:
    """First host of a SLURM node list such as "n[1-2]" or "jzxh[001,005]"."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30, check=True
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    # No scontrol on the node: expand the first element ourselves.
    head = nodelist.split(",")[0]
    if "[" in head:
        prefix, rest = head.split("[", 1)
        first = rest.rstrip("]").split(",")[0].split("-")[0]
        return prefix + first
    return head


def slurm_port(job_id: str, restart: int = 0) -> int:
    """A rendezvous port derived from the job id and the start (SLURM_RESTART_COUNT: 0, then one
    more per requeue), the same on every node of that start of the job; outside the ephemeral range
    (SLURM_PORT_SPAN). Used for srun and submitit launches alike; MASTER_PORT, where set, wins."""
    digits = "".join(c for c in str(job_id) if c.isdigit()) or "0"
    slot = int(digits) % (SLURM_PORT_SPAN // SLURM_PORTS_PER_JOB)
    return SLURM_PORT_BASE + slot * SLURM_PORTS_PER_JOB + restart % SLURM_PORTS_PER_JOB


def job_port(job_id: str, env) -> int:
    """The rendezvous port of this start of a SLURM or submitit job: MASTER_PORT where the user set
    it, else slurm_port of the job id and SLURM_RESTART_COUNT."""
    if env.get("MASTER_PORT"):
        return int(env["MASTER_PORT"])
    return slurm_port(job_id, int(env.get("SLURM_RESTART_COUNT") or 0))


def detect_rank_env() -> RankEnv:
    env = os.environ
    if "SUBMITIT_FOLDER" in env:
        import submitit
        from submitit.helpers import TorchDistributedEnvironment

        job_env = submitit.JobEnvironment()
        tde = TorchDistributedEnvironment()
        return RankEnv(
            rank=tde.rank,
            world_size=tde.world_size,
            local_rank=tde.local_rank,
            local_world_size=tde.local_world_size,
            master_addr=tde.master_addr,
            # submitit draws its port from 20000-60000, mostly in the ephemeral range (see SLURM_PORT_SPAN)
            master_port=job_port(str(job_env.job_id), env),
            launcher=f"submitit-{job_env.cluster}",
            job_id=str(job_env.job_id),
            slurm=slurm_vars(),
        )
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env):
        return RankEnv(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", 29500)),
            launcher=env.get(LAUNCHER_VAR) or "torchrun",
            job_id=env.get("SLURM_JOB_ID") or env.get("TORCHELASTIC_RUN_ID"),
            slurm=slurm_vars(),
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        job_id = env.get("SLURM_JOB_ID", "0")
        nodes = int(env.get("SLURM_NNODES", env.get("SLURM_JOB_NUM_NODES", "1")))
        ntasks = int(env["SLURM_NTASKS"])
        return RankEnv(
            rank=int(env["SLURM_PROCID"]),
            world_size=ntasks,
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            local_world_size=max(1, ntasks // max(nodes, 1)),
            master_addr=first_slurm_host(env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "localhost"))),
            master_port=job_port(job_id, env),
            launcher="srun",
            job_id=job_id,
            slurm=slurm_vars(),
        )
    return RankEnv(0, 1, 0, 1, "127.0.0.1", _free_port(), "single", None, slurm_vars())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(renv: RankEnv, backend: str, timeout_s: int, device: torch.device | None = None):
    """Initialise the default process group; returns it. `timeout_s` bounds waits on dead peers.

    On NCCL the rank's device is passed as ``device_id``: NCCL then binds the communicator to it at
    once, and the first ``barrier()`` (before any collective has told NCCL the device, on torch up
    to 2.5) cannot pick GPU 0 on every rank. PyTorch's own TORCH_NCCL_ASYNC_ERROR_HANDLING default
    (3) is kept; the flight recorder and NCCL_DEBUG come from hpcprof.rank.device.nccl_environment."""
    import torch.distributed as dist

    renv.export()
    kwargs = {"device_id": device} if backend == "nccl" and device is not None and device.type == "cuda" else {}
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return dist.group.WORLD


# ------------------------------------------------------------------ what this rank runs on
def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"


def cpu_threads(cpus_per_task: int, renv: RankEnv) -> int:
    """torch threads for this rank: the spec's cpus_per_task, else SLURM's, else a fair share of the node."""
    if cpus_per_task > 0:
        return cpus_per_task
    slurm_cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm_cpus and slurm_cpus.isdigit():
        return int(slurm_cpus)
    return max(1, (os.cpu_count() or 1) // max(renv.local_world_size, 1))


def pin_to_own_cores(renv: RankEnv) -> list[int] | None:
    """Outside SLURM (which binds tasks itself), give this rank its own slice of the cores this
    process may use: local rank r of n gets cores [r*k, (r+1)*k) with k = cores // n. Returns the
    cores, or None where nothing was pinned (under SLURM, fewer cores than local ranks, no affinity
    API).

    Why: the issue's "ranks on dedicated cores". Without pinning, the scheduler moves each rank's
    compute thread and its gloo worker threads over every core, so one rank's all-reduce work and
    the launcher's polling land on whichever rank happens to share the core. Pinned before the
    process group starts, the gloo threads inherit the rank's slice. Measured on the 2-core VM, it
    is not enough by itself for a quiet healthy demo: the cores' own speed drifts by up to 30%
    (healthy demos flagged a straggler in 8 of 10 runs unpinned, 7 of 10 pinned, before the flag
    rule took the other ranks' jitter into account: hpcprof.analysis.reduce.whatif)."""
    if "SLURM_JOB_ID" in os.environ or renv.launcher == "srun":
        return None
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None
    n = max(renv.local_world_size, 1)
    k = len(cores) // n
    if k < 1 or n < 2:
        return None
    mine = cores[renv.local_rank % n * k:(renv.local_rank % n + 1) * k]
    try:
        os.sched_setaffinity(0, mine)
    except OSError:
        return None
    return mine


def node_cpus() -> int:
    """CPU cores this job may use on this node: SLURM's allocation, else this process's affinity.
    The analysis needs it to know whether ranks shared cores (then a sleeping rank frees a core
    for the others, and the job loses less than the others' waiting time)."""
    on_node = os.environ.get("SLURM_CPUS_ON_NODE", "")
    if on_node.isdigit():
        return int(on_node)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _version(dist_name: str) -> str | None:
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_versions() -> Versions:
    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # pragma: no cover - no NCCL in this build
            nccl = None
    return Versions(
        hpcprof=__version__,
        python=platform.python_version(),
        torch=torch.__version__,
        torchvision=_version("torchvision"),
        cuda=torch.version.cuda,
        nccl=nccl,
        hta=str(rel) if (rel := installed_hta()) is not None else None,  # "traceinsight 0.6.1"
        submitit=_version("submitit"),
    )
