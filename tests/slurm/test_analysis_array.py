"""`hpcprof.analyze --executor slurm`: the per-rank map as a submitit job array on the local cluster.

The real DLRM traces (8 ranks) are analysed once by the local process pool and once by a SLURM
array; summary.json must agree, and sacct must show one COMPLETED array task per rank (or chunk).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcprof.analysis import analyze
from hpcprof.launch.analysis_array import SlurmOptions, array_resources, map_on_slurm

REPO = Path(__file__).resolve().parents[2]
DLRM = REPO / "tests" / "data" / "param_dlrm_8x_v100"

# summary.json keys that must be equal whichever executor ran the map (paths and cache info differ)
SAME_KEYS = ("world_size", "ranks_analyzed", "device", "warnings", "per_rank", "kernel_breakdown",
             "stragglers", "recommendations", "step_time", "clock_offsets_us", "collectives_matched")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    assert DLRM.is_dir(), f"{DLRM} not found: tests/data is part of the repository"
    d = tmp_path_factory.mktemp("dlrm") / "traces"
    d.mkdir()
    for f in sorted(DLRM.iterdir()):
        shutil.copy(f, d / f.name)
    return d


def _timeline_events(out: Path) -> list[str]:
    import gzip

    with gzip.open(out / "timeline.pt.trace.json.gz", "rb") as fh:
        return sorted(json.dumps(e, sort_keys=True) for e in json.loads(fh.read())["traceEvents"])


def _sacct_tasks(cluster, array_id: str) -> dict[str, tuple[str, str]]:
    """{array task id: (state, node list)} of the allocations (-X) of one array job."""
    res = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State,NodeList", "-j", array_id],
                         env=cluster.env, capture_output=True, text=True, timeout=30)
    out = {}
    for line in res.stdout.splitlines():  # lines, not words: "CANCELLED by 0" has spaces
        if not line.strip():
            continue
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
        [sys.executable, "-m", "hpcprof.analyze", str(traces), "--out", str(out), "--quiet",
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
    assert summary["cache"]["parsed_ranks"] == list(range(8))  # parsed on the cluster (a new output folder: its cache is empty)
    # the tables the reduce read are the ones the array tasks wrote into the shared cache
    assert len(list((out / ".cache").glob("*-v*/meta.json"))) == 8
    # the merged timeline is built from the pieces the array tasks cached with each rank's result
    # (the parent decodes no trace): the same events as the local pool's
    assert len(list((out / ".cache").glob("*-v*/timeline.parquet"))) == 8
    assert summary["timeline"]["events"] == local["timeline"]["events"] > 8000
    assert _timeline_events(out) == _timeline_events(tmp_path / "local")

    m = re.search(r"analysis array (\d+): 8 task\(s\) x 1 rank\(s\)", proc.stderr)
    assert m, proc.stderr[-2000:]
    tasks = _wait_accounted(slurm_cluster, m.group(1), 8)
    assert sorted(tasks) == sorted(f"{m.group(1)}_{i}" for i in range(8))
    assert all(state == "COMPLETED" for state, _ in tasks.values()), tasks
    assert {nodes for _, nodes in tasks.values()} <= set(slurm_cluster.node_names)

    # --no-cache writes nothing into the parse cache: the tasks write the tables into a scratch
    # folder of the output folder, removed at the end (issue 37, item 18); one task for all ranks
    out = tmp_path / "slurm-no-cache"
    proc = subprocess.run(
        [sys.executable, "-m", "hpcprof.analyze", str(traces), "--out", str(out), "--no-cache", "--quiet",
         "--executor", "slurm", "--array-chunk", "8", "--slurm-partition", slurm_cluster.partition,
         "--slurm-time", "5", "--slurm-cpus", "1", "--slurm-mem-gb", "2"],
        env=slurm_cluster.env, capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((out / "summary.json").read_text())
    for key in SAME_KEYS:
        assert again[key] == local[key], key
    assert again["cache"]["dir"] is None and not list(out.glob(".cache/*-v*"))
    assert not [p for p in out.iterdir() if p.name.startswith(".parse-")]


def test_an_exception_in_one_file_of_a_chunk_costs_only_that_file(traces, tmp_path, monkeypatch):
    """run_chunk, as an array task runs it: analyze_rank reports bad input itself, so what it catches
    is the unexpected rest (a bug, a full disk), here an error raised for one file of the chunk."""
    from hpcprof.launch import analysis_array as slurm_array

    real = slurm_array.analyze_rank

    def analyze_rank(path, cache_dir, use_cache):
        if os.path.basename(path).startswith("worker1_"):
            raise ValueError("injected failure")
        return real(path, cache_dir, use_cache)

    monkeypatch.setattr(slurm_array, "analyze_rank", analyze_rank)
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    monkeypatch.setenv("SLURMD_NODENAME", "n9")
    files = [str(f) for f in sorted(traces.iterdir())[:3]]
    results = slurm_array.run_chunk(files, str(tmp_path / "cache"), False)
    assert [r.path for r in results] == files
    assert [r.ok for r in results] == [True, False, True]
    assert [r.meta["rank"] for r in results if r.ok] == [0, 2]
    err = results[1].error
    assert err.startswith(Path(files[1]).name) and "SLURM array task 77_4 on n9" in err and "injected failure" in err


def _cancel_task_when_running(cluster, job_name: str, task: int, timeout: float = 300) -> str:
    """scancel one task of the array named `job_name` as soon as it runs; returns the array id.
    (Running, not queued: a queued array task cancelled before it starts leaves no accounting
    record; that case is test_a_task_cancelled_before_the_array_started_is_reported_not_awaited.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = subprocess.run(["squeue", "-h", "-r", "-t", "R", "-n", job_name, "-o", "%i"], env=cluster.env,
                             capture_output=True, text=True, timeout=30).stdout.split()
        hit = next((i for i in ids if i.endswith(f"_{task}")), None)
        if hit:
            subprocess.run(["scancel", hit], env=cluster.env, check=True, timeout=30)
            return hit.split("_")[0]
        time.sleep(0.2)
    raise AssertionError(f"array task _{task} of {job_name} never ran")


def test_slurm_array_chunks_and_a_task_that_dies_costs_its_chunk(slurm_cluster, slurm_env, traces, tmp_path, capfd):
    files = sorted(traces.iterdir())
    # one task at a time; the last task (worker6, worker7) is cancelled while it analyses its two
    # ranks (each takes seconds), as an operator's scancel or a node failure would end it
    opts = SlurmOptions(array_resources(partition=slurm_cluster.partition, time_min=5, mem_gb=2, job_name="dying-array"),
                        array_chunk=3, array_parallelism=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        mapped = pool.submit(map_on_slurm, files, tmp_path / "cache", True, opts, log_dir=tmp_path / "logs",
                             progress=False)
        cancelled = _cancel_task_when_running(slurm_cluster, "dying-array", 2)
        results = mapped.result(timeout=600)

    assert [r.path for r in results] == [str(f) for f in files]  # same shape and order as executors.local.map_local
    by_worker = {Path(r.path).name.split("_")[0]: r for r in results}
    ok = sorted(w for w, r in by_worker.items() if r.ok)
    assert ok == [f"worker{i}" for i in range(6)]
    assert all(by_worker[w].meta["rank"] == int(w[-1]) for w in ok)

    array_id = re.search(r"analysis array (\d+): 3 task\(s\) x 3 rank\(s\)", capfd.readouterr().err).group(1)
    assert array_id == cancelled
    # a task that dies costs its whole chunk, each file named with the task and its log
    for w in ("worker6", "worker7"):
        err = by_worker[w].error
        assert err.startswith(Path(by_worker[w].path).name), err
        assert f"SLURM array task {array_id}_2 ended CANCELLED" in err and "log: " in err, err

    tasks = _wait_accounted(slurm_cluster, array_id, 3)
    states = [tasks[f"{array_id}_{i}"][0] for i in range(3)]
    assert states[:2] == ["COMPLETED", "COMPLETED"] and states[2].startswith("CANCELLED"), states


def test_a_task_cancelled_before_the_array_started_is_reported_not_awaited(slurm_cluster, slurm_env, traces, tmp_path,
                                                                           capfd, monkeypatch):
    """`scancel <array>_1` while the whole array is one pending job: SLURM keeps no record of that
    task (neither squeue nor sacct list it), so submitit reports it UNKNOWN forever and the analysis
    used to wait forever. It must come back with that rank failed and saying why, the other done."""
    import hpcprof.launch.analysis_array as sa

    monkeypatch.setattr(sa, "GONE_S", 4.0)
    files = sorted(traces.iterdir())[:2]
    env = slurm_cluster.env
    # both nodes taken by another job: the array cannot start, and stays one pending job
    blocker = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "-N", str(len(slurm_cluster.node_names)), "--exclusive",
                              f"--partition={slurm_cluster.partition}", "--time=2", "--wrap", "sleep 120"],
                             env=env, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while slurm_cluster.job_state(blocker) != "RUNNING":
            assert time.monotonic() < deadline, "the blocking job never started"
            time.sleep(0.2)
        opts = SlurmOptions(array_resources(partition=slurm_cluster.partition, time_min=5, mem_gb=2,
                                            job_name="pending-array"), array_parallelism=1)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            mapped = pool.submit(map_on_slurm, files, tmp_path / "cache", True, opts, log_dir=tmp_path / "logs",
                                 progress=False)
            deadline = time.monotonic() + 60
            while not (m := re.search(r"analysis array (\d+):", capfd.readouterr().err)):
                assert time.monotonic() < deadline and not mapped.done(), "the array was not submitted"
                time.sleep(0.2)
            array_id = m.group(1)
            queued = subprocess.run(["squeue", "-h", "-j", array_id, "-o", "%i %T"], env=env, capture_output=True,
                                    text=True, timeout=30).stdout.split()
            assert queued == [f"{array_id}_[0-1%1]", "PENDING"], queued  # one pending job, not yet split
            subprocess.run(["scancel", f"{array_id}_1"], env=env, check=True, timeout=30)
            subprocess.run(["scancel", blocker], env=env, check=True, timeout=30)
            results = mapped.result(timeout=300)
    finally:
        subprocess.run(["scancel", blocker], env=env, timeout=30)
    assert [r.ok for r in results] == [True, False], [(r.path, r.error) for r in results]
    err = results[1].error
    assert err.startswith(files[1].name) and f"SLURM array task {array_id}_1 is neither queued" in err, err
    assert "cancelled before it started?" in err, err


def test_slurm_options_from_the_command_line_reach_the_sbatch_parameters(tmp_path):
    import argparse

    from hpcprof.launch.analysis_array import _executor, add_slurm_arguments, slurm_options_from_args

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


def test_analyze_on_slurm_without_array_options_says_what_to_pass(traces, tmp_path):
    """The analysis runs its map on SLURM through the array it is given (the analysis imports nothing
    of the launcher): a library call that asks for the slurm executor without one is one line
    saying what to pass, before any trace is analysed."""
    from hpcprof.analysis import AnalysisError

    with pytest.raises(AnalysisError, match=r"no SLURM array options given; pass slurm=hpcprof\.launch\.analysis_array"):
        analyze(traces, out=tmp_path / "out", executor="slurm", progress=False)
    assert not list((tmp_path / "out").glob("summary.json"))
