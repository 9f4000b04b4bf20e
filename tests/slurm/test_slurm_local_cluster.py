"""The local cluster itself: multi-node sbatch jobs, accounting, submitit + gloo across nodes."""

from __future__ import annotations

import socket
import subprocess
import sys

import cloudpickle
import submitit

# Test modules are not importable inside the job: pickle this module's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _sbatch(cluster, *args: str) -> str:
    res = subprocess.run(["sbatch", "--parsable", f"--partition={cluster.partition}", *args],
                         env=cluster.env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def test_sbatch_job_on_two_nodes_sees_node_hostnames_and_is_accounted(slurm_cluster, tmp_path):
    out = tmp_path / "hostnames-%j.out"
    job = _sbatch(slurm_cluster, "--nodes=2", "--ntasks-per-node=1", "--time=2",
                  f"--output={out}", "--wrap", "srun hostname")
    assert slurm_cluster.wait_job(job, timeout=60) == "COMPLETED"
    lines = (tmp_path / f"hostnames-{job}.out").read_text().split()
    assert sorted(lines) == ["n1", "n2"]
    # (sacct -X -j <one job> -o NodeList prints only the first node in Slurm 22.05; NNodes and
    # the step's node list are right.)
    acct = subprocess.run(["sacct", "-n", "-P", "-o", "JobID,NNodes,NodeList", "-j", job],
                          env=slurm_cluster.env, capture_output=True, text=True).stdout.split()
    assert f"{job}|2|" in acct[0] and f"{job}.0|2|n[1-2]" in acct


def test_failed_job_is_accounted_as_failed(slurm_cluster, tmp_path):
    job = _sbatch(slurm_cluster, "--nodes=1", "--time=1", f"--output={tmp_path}/%j.out",
                  "--wrap", "exit 3")
    assert slurm_cluster.wait_job(job, timeout=60) == "FAILED"


def _gloo_all_reduce(port: int):
    import os

    import torch
    import torch.distributed as dist

    # submitit's helper draws the port from the job id (job 29: 55094, once found in use by another
    # connection of this machine in a full-suite run); the test gives one it found free
    os.environ["MASTER_PORT"] = str(port)
    env = submitit.helpers.TorchDistributedEnvironment().export(overwrite=True)  # MASTER_PORT: ours
    dist.init_process_group("gloo")
    t = torch.tensor([float(env.rank + 1)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return {"rank": env.rank, "world_size": env.world_size, "local_rank": env.local_rank,
            "host": socket.gethostname(), "sum": t.item()}


def test_submitit_two_nodes_two_tasks_gloo_all_reduce(slurm_cluster, slurm_env, tmp_path):
    ex = submitit.AutoExecutor(folder=tmp_path / "logs", cluster="slurm")
    ex.update_parameters(nodes=2, tasks_per_node=2, cpus_per_task=1, timeout_min=3,
                         slurm_partition=slurm_cluster.partition)
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    job = ex.submit(_gloo_all_reduce, port)
    results = sorted(job.results(), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert [r["host"] for r in results] == ["n1", "n1", "n2", "n2"]
    assert [r["local_rank"] for r in results] == [0, 1, 0, 1]
    assert all(r["world_size"] == 4 and r["sum"] == 10.0 for r in results)
    assert slurm_cluster.wait_job(job.job_id, timeout=60) == "COMPLETED"
