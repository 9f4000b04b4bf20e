"""`hpcprof.analyze --executor slurm`: the per-rank map as a submitit job array on the local cluster.

The real DLRM traces (8 ranks) are analysed once by the local process pool and once by a SLURM
array; summary.json must agree, and sacct must show one COMPLETED array task per rank (or chunk).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

from hpcprof.analysis import analyze
from hpcprof.analysis.executors.slurm_array import SlurmOptions, array_resources, map_on_slurm

cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parents[2]
DLRM = (REPO / ".." / "shared" / "traces" / "param_dlrm_8x_v100").resolve()

# summary.json keys that must be equal whichever executor ran the map (paths and cache info differ)
SAME_KEYS = ("world_size", "ranks_analyzed", "device", "warnings", "per_rank", "kernel_breakdown",
             "stragglers", "recommendations", "step_time", "clock_offsets_us", "collectives_matched")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    if not DLRM.is_dir():
        pytest.skip(f"{DLRM}: shared DLRM traces not found")
    d = tmp_path_factory.mktemp("dlrm") / "traces"
    d.mkdir()
    for f in sorted(DLRM.iterdir()):
        shutil.copy(f, d / f.name)
    return d


def _sacct_tasks(cluster, array_id: str) -> dict[str, tuple[str, str]]:
    """{array task id: (state, node list)} of the allocations (-X) of one array job."""
    res = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State,NodeList", "-j", array_id],
                         env=cluster.env, capture_output=True, text=True, timeout=30)
    out = {}
    for line in res.stdout.split():
        jid, state, nodes = line.split("|")
        out[jid] = (state, nodes)
    return out


def _wait_accounted(cluster, array_id: str, n: int) -> dict[str, tuple[str, str]]:
    # sacct can lag the end of the job by a moment; wait_job waits for the whole array's end
    for i in range(n):
        cluster.wait_job(f"{array_id}_{i}", timeout=60)
    return _sacct_tasks(cluster, array_id)


def test_slurm_array_summary_equals_local_pool_one_task_per_rank(slurm_cluster, traces, tmp_path):
    local = analyze(traces, out=tmp_path / "local", use_cache=False, progress=False, workers=2)

    out = tmp_path / "slurm"
    proc = subprocess.run(
        [sys.executable, "-m", "hpcprof.analyze", str(traces), "--out", str(out), "--no-cache", "--quiet",
         "--executor", "slurm", "--slurm-partition", slurm_cluster.partition, "--slurm-time", "5",
         "--slurm-cpus", "1", "--slurm-mem-gb", "2"],
        env=slurm_cluster.env, capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())

    for key in SAME_KEYS:
        assert summary[key] == local[key], key
    assert [r["rank"] for r in summary["per_rank"]] == list(range(8))
    assert summary["cache"]["executor"] == "slurm"
    assert summary["cache"]["parsed_ranks"] == list(range(8))  # parsed on the cluster, not served from a cache
    # the tables the reduce read are the ones the array tasks wrote into the shared cache
    assert len(list((out / ".cache").glob("*-v*/meta.json"))) == 8

    m = re.search(r"analysis array (\d+): 8 task\(s\) x 1 rank\(s\)", proc.stderr)
    assert m, proc.stderr[-2000:]
    tasks = _wait_accounted(slurm_cluster, m.group(1), 8)
    assert sorted(tasks) == sorted(f"{m.group(1)}_{i}" for i in range(8))
    assert all(state == "COMPLETED" for state, _ in tasks.values()), tasks
    assert {nodes for _, nodes in tasks.values()} <= set(slurm_cluster.node_names)


def _flaky_rank(path, cache_dir, use_cache):
    """analyze_rank, except that worker2 raises inside the task and worker6 kills its task."""
    from hpcprof.analysis.ranks.mapper import analyze_rank

    name = os.path.basename(path)
    if name.startswith("worker2_"):
        raise ValueError("injected failure")
    if name.startswith("worker6_"):
        os._exit(3)
    return analyze_rank(path, cache_dir, use_cache)


def test_slurm_array_chunks_and_task_failures_become_per_file_errors(slurm_cluster, slurm_env, traces, tmp_path, capfd):
    files = sorted(traces.iterdir())
    opts = SlurmOptions(array_resources(partition=slurm_cluster.partition, time_min=5, mem_gb=2), array_chunk=3)
    results = map_on_slurm(files, tmp_path / "cache", True, opts, log_dir=tmp_path / "logs", progress=False,
                           rank_fn=_flaky_rank)

    assert [r.path for r in results] == [str(f) for f in files]  # same shape and order as executors.local.map_local
    by_worker = {Path(r.path).name.split("_")[0]: r for r in results}
    ok = sorted(w for w, r in by_worker.items() if r.ok)
    assert ok == ["worker0", "worker1", "worker3", "worker4", "worker5"]
    assert all(by_worker[w].meta["rank"] == int(w[-1]) for w in ok)

    array_id = re.search(r"analysis array (\d+): 3 task\(s\) x 3 rank\(s\)", capfd.readouterr().err).group(1)
    # an exception in one file costs only that file; the rest of its chunk was analysed
    err2 = by_worker["worker2"].error
    assert err2.startswith(files[2].name) and f"SLURM array task {array_id}_0" in err2 and "injected failure" in err2
    # a task that dies costs its whole chunk, each file named with the task and its log
    for w in ("worker6", "worker7"):
        err = by_worker[w].error
        assert err.startswith(Path(by_worker[w].path).name), err
        assert f"SLURM array task {array_id}_2 failed" in err and "log: " in err, err

    tasks = _wait_accounted(slurm_cluster, array_id, 3)
    assert [tasks[f"{array_id}_{i}"][0] for i in range(3)] == ["COMPLETED", "COMPLETED", "FAILED"]


def test_slurm_options_from_the_command_line_reach_the_sbatch_parameters(tmp_path):
    import argparse

    from hpcprof.analysis.executors.slurm_array import _executor, add_slurm_arguments, slurm_options_from_args

    ap = argparse.ArgumentParser()
    add_slurm_arguments(ap)
    a = ap.parse_args(["--array-chunk", "4", "--array-parallelism", "3", "--slurm-partition", "gpu_p2",
                       "--slurm-account", "abc@v100", "--slurm-qos", "qos_gpu-dev", "--slurm-time", "20",
                       "--slurm-cpus", "4", "--slurm-mem-gb", "12", "--slurm-setup", "module load python",
                       "--slurm-extra", "constraint=v100", "--slurm-python", "/opt/venv/bin/python"])
    opts = slurm_options_from_args(a)
    params = _executor(opts, tmp_path, n_tasks=10)._executor.parameters
    assert params["partition"] == "gpu_p2" and params["account"] == "abc@v100" and params["qos"] == "qos_gpu-dev"
    assert params["time"] == 20 and params["cpus_per_task"] == 4 and params["mem"] == "12GB"
    assert params["setup"] == ["module load python"] and params["additional_parameters"] == {"constraint": "v100"}
    assert params["array_parallelism"] == 3 and opts.array_chunk == 4
    assert _executor(opts, tmp_path, n_tasks=10)._executor.python == "/opt/venv/bin/python"

    # the same SLURM-resources type as the training job: same checks and wording, named by these flags
    for bad, msg in ((["--array-chunk", "0"], "--array-chunk 0"), (["--slurm-extra", "constraint"], "KEY=VALUE"),
                     (["--slurm-time", "0"], "--slurm-time must be >= 1, got 0"),
                     (["--slurm-partition", "gpu;id"], "--slurm-partition = 'gpu;id' holds ';'"),
                     (["--slurm-extra", "mail-user=a b"], r"--slurm-extra\['mail-user'\]"),
                     (["--slurm-mem-gb", "lots"], "--slurm-mem-gb must be an integer")):
        with pytest.raises(ValueError, match=msg):
            slurm_options_from_args(ap.parse_args(bad))
