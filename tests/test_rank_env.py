"""Where a local CPU rank runs (hpcprof.rank.env.pin_to_own_cores): each rank on its own cores, so
that one rank's gloo threads and other processes do not land on the core of another (issue 10,
"ranks on dedicated cores"). The affinity calls are replaced by a fake machine with N cores."""

from __future__ import annotations

import os

import pytest

from hpcprof.rank import env as E


def renv(local_rank: int, local_world_size: int, launcher: str = "submitit-local") -> E.RankEnv:
    return E.RankEnv(rank=local_rank, world_size=local_world_size, local_rank=local_rank,
                     local_world_size=local_world_size, master_addr="127.0.0.1", master_port=29500, launcher=launcher)


@pytest.fixture
def machine(monkeypatch):
    """A fake affinity API over cores 0..n-1; returns the dict holding what each call set."""
    state = {"cores": set(range(4)), "set": None}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(state["cores"]))
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cores: state.update(set=sorted(cores)))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return state


@pytest.mark.parametrize("local_rank, expected", [(0, [0, 1]), (1, [2, 3])])
def test_two_local_ranks_on_four_cores_get_two_cores_each(machine, local_rank, expected):
    assert E.pin_to_own_cores(renv(local_rank, 2)) == expected
    assert machine["set"] == expected


def test_the_cores_this_process_may_use_are_the_ones_shared_out(machine):
    machine["cores"] = {4, 5, 6, 7, 8}  # e.g. a cgroup or taskset: 5 cores, 2 ranks -> 2 each
    assert E.pin_to_own_cores(renv(1, 2)) == [6, 7]


@pytest.mark.parametrize("case", ["one rank", "more ranks than cores", "slurm"])
def test_nothing_is_pinned_where_it_would_not_give_each_rank_its_own_core(machine, monkeypatch, case):
    if case == "one rank":
        r = renv(0, 1)
    elif case == "more ranks than cores":
        r = renv(3, 8)
    else:
        monkeypatch.setenv("SLURM_JOB_ID", "42")  # SLURM binds tasks itself (--cpu-bind)
        r = renv(1, 2, launcher="submitit-slurm")
    assert E.pin_to_own_cores(r) is None
    assert machine["set"] is None


def srun_env(monkeypatch, job_id: str, procid: int, restart: str | None) -> E.RankEnv:
    """detect_rank_env for one task of `srun` in a 2-node, 4-task job (the sbatch templates' launch)."""
    for var in ("SUBMITIT_FOLDER", "TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", job_id)
    monkeypatch.setenv("SLURM_PROCID", str(procid))
    monkeypatch.setenv("SLURM_LOCALID", str(procid % 2))
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_NNODES", "2")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    if restart is not None:
        monkeypatch.setenv("SLURM_RESTART_COUNT", restart)
    return E.detect_rank_env()


def test_srun_tasks_agree_on_master_and_a_requeued_start_listens_on_another_port(monkeypatch):
    first = [srun_env(monkeypatch, "22", r, None) for r in range(4)]
    assert {(e.master_addr, e.master_port) for e in first} == {("n1", E.slurm_port("22"))}
    assert [(e.rank, e.local_rank, e.world_size, e.launcher) for e in first] == [
        (0, 0, 4, "srun"), (1, 1, 4, "srun"), (2, 0, 4, "srun"), (3, 1, 4, "srun")]
    # After a requeue every task of the new start sees SLURM_RESTART_COUNT=1: one new port for all,
    # not the one the previous start's rank 0 listened on (it may not have released it yet).
    again = {srun_env(monkeypatch, "22", r, "1").master_port for r in range(4)}
    assert len(again) == 1 and again != {first[0].master_port}
    # Four starts in a row, and the neighbouring jobs' ports, are all different.
    ports = {E.slurm_port(str(j), k) for j in (21, 22, 23) for k in range(4)}
    assert len(ports) == 12


def test_rendezvous_ports_stay_below_the_ephemeral_range():
    """Outgoing connections take their local port from 32768-60999 (Linux's default): a rendezvous
    port there can be held by any client socket on the master node (EADDRINUSE in a full-suite run,
    submitit's port 40902). Real job ids are large: every id and start maps below 32768."""
    ports = {E.slurm_port(str(j), k) for j in list(range(0, 20000, 7)) + [1234567, 98765432, 4294967295] for k in range(6)}
    assert min(ports) >= E.SLURM_PORT_BASE >= 1024 and max(ports) < 32768


def test_a_submitit_task_uses_the_job_port_unless_master_port_is_set(monkeypatch):
    import submitit
    from submitit.helpers import TorchDistributedEnvironment

    class Job:
        job_id, cluster = "418", "slurm"

    class Tde:
        rank, world_size, local_rank, local_world_size, master_addr, master_port = 1, 2, 1, 2, "n1", 40902

    monkeypatch.setenv("SUBMITIT_FOLDER", "/nowhere")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setattr(submitit, "JobEnvironment", Job)
    monkeypatch.setattr(submitit.helpers, "TorchDistributedEnvironment", Tde)
    assert TorchDistributedEnvironment is not Tde  # what detect_rank_env imports is looked up at call time
    e = E.detect_rank_env()
    assert (e.rank, e.master_addr, e.master_port, e.launcher) == (1, "n1", E.slurm_port("418", 1), "submitit-slurm")
    monkeypatch.setenv("MASTER_PORT", "29511")
    assert E.detect_rank_env().master_port == 29511
