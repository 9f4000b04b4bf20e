"""Launching real DDP runs with the local executor (CPU ranks on gloo): traces, step files, manifest,
drills, crash reporting, preemption with requeue and resume."""

from __future__ import annotations

import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import FAST_FLAGS, REPO, run_cli
from hpcprof.rundir import RunDir

STEPS = 12  # demo-local.toml: profiler wait 1, warmup 1, active 3 -> active steps 2, 3, 4


def submit(runs_root: Path, name: str, *extra: str):
    proc = run_cli("hpcprof.submit", *FAST_FLAGS, "--runs-dir", str(runs_root), "--name", name, *extra)
    return proc, RunDir(runs_root / name)


def load_trace(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="session")
def healthy(small_cpu_run):
    return small_cpu_run  # FAST_FLAGS, name "healthy" (conftest.py; test_robustness uses it too)


@pytest.fixture(scope="session")
def straggler(runs_root):
    proc, run = submit(runs_root, "straggler", "--inject-straggler", "1:80")
    assert proc.returncode == 0, proc.stdout
    return proc, run


def test_submit_prints_run_directory_and_executor(healthy):
    proc, run = healthy
    assert f"run directory {run.root}" in proc.stdout
    assert "executor local" in proc.stdout
    assert "succeeded on 2 rank(s)" in proc.stdout


def test_one_trace_per_rank_with_distributed_info(healthy):
    _, run = healthy
    traces = sorted(run.traces_dir.glob("*.json.gz"))
    assert [p.name for p in traces] == ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"]
    for rank, path in enumerate(traces):
        info = load_trace(path)["distributedInfo"]
        assert info["rank"] == rank and info["world_size"] == 2 and info["backend"] == "gloo"
    assert not list((run.traces_dir / ".tmp").iterdir()), "no partial trace left behind"


def test_profiler_steps_are_exactly_the_active_steps_with_regions(healthy):
    _, run = healthy
    events = load_trace(run.trace_path(0))["traceEvents"]
    steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    for region in ("hpcprof.data", "hpcprof.copy", "hpcprof.forward", "hpcprof.backward", "hpcprof.optimizer"):
        assert sum(e.get("name") == region for e in events) == 3, region


def test_step_files_cover_every_step_on_every_rank(healthy):
    _, run = healthy
    for rank in (0, 1):
        records = run.read_steps(rank)
        assert [r["step"] for r in records] == list(range(STEPS))
        assert [r["profiled"] for r in records] == [s in (2, 3, 4) for s in range(STEPS)]
        for r in records:
            assert r["t_end"] > r["t_start"] and r["step_s"] > 0 and r["data_wait_s"] >= 0
            assert r["gpu_ms"] is None  # CPU run: no CUDA events
            # the regions cover the step: what is left is the step loop's own bookkeeping between them
            # (tens of microseconds: benchmarks/step_overhead.py), unless this VM's 2 shared cores
            # preempt the process right there for a few milliseconds (seen at load 7: 98.4%)
            parts = r["host_pre_forward_s"] + r["forward_s"] + r["backward_s"] + r["optimizer_s"]
            assert 0.95 * r["step_s"] <= parts <= r["step_s"]
            assert r["data_wait_s"] + r["copy_s"] <= r["host_pre_forward_s"]
            assert r["regions"] == {} and r["trace_export_s"] >= 0
        # the profiler wrote the trace right after the last active step, and only then
        assert [s for s, r in enumerate(records) if r["trace_export_s"] > 0] == [4]


def test_manifest_has_job_versions_and_per_rank_entries(healthy):
    _, run = healthy
    m = run.read_manifest()
    assert m["executor"] == "local" and m["job_id"] and m["world_size"] == 2
    assert m["command_line"][:3] == ["python", "-m", "hpcprof.submit"]
    assert m["spec"]["model"]["arch"] == "resnet18"
    assert {"torch", "cuda", "nccl", "hta", "submitit"} <= set(m["versions"])
    assert m["versions"]["torch"] and m["versions"]["hta"] and m["versions"]["submitit"]
    assert m["drills"] == {"straggler": None, "crash": None, "clock_skew": None, "hang": None, "mismatch": None}
    assert [e["rank"] for e in m["ranks"]] == [0, 1]
    walls = []
    for e in m["ranks"]:
        assert {"local_rank", "node", "device", "device_name", "pid", "slurm", "clock"} <= set(e)
        assert e["device"] == "cpu" and e["node"]
        walls.append(e["clock"]["wall_ns"])
    # Both ranks read their clock right after the same barrier, on one machine: close together.
    assert abs(walls[0] - walls[1]) < 2e9


def test_the_builtin_demos_report_shows_its_model_and_analyses_its_own_collectives_only(healthy, tmp_path):
    """The built-in trainer's report keeps its model, batch and data; its collectives are DDP's
    all-reduces, hpcprof's control rounds (all-gathers on hpcprof's own groups) are left out."""
    from hpcprof.analysis import analyze

    _, run = healthy
    s = analyze(run.root, out=tmp_path / "a", progress=False)
    config = (tmp_path / "a" / "report.html").read_text().split("<section id='config'>", 1)[1].split("</section>", 1)[0]
    assert "<dt>Model</dt><dd>resnet18 (32 px images)</dd>" in config and "<dt>Batch</dt><dd>8 per rank</dd>" in config
    assert "<dt>Data</dt><dd>synthetic" in config and "Workload" not in config
    assert s["workload"] == {"kind": "builtin", "name": "resnet18", "args": [], "batch_per_rank": {"0": 8.0, "1": 8.0}}
    assert s["job_collectives"] > 0 and s["control_collectives"] > 0 and s["trained_alone"] is None
    import pandas as pd

    kinds = set(pd.read_csv(tmp_path / "a" / "tables" / "collectives.csv")["kind"])
    assert kinds and "all_gather" not in kinds  # DDP all-reduces; the all-gathers are hpcprof's control rounds


@pytest.mark.alone  # its healthy rank's host time is bounded in milliseconds (tests/conftest.py)
def test_straggler_drill_shows_in_step_files(healthy, straggler):
    _, base = healthy
    _, slow = straggler
    assert slow.read_manifest()["drills"]["straggler"] == {"rank": 1, "ms": 80.0, "every": 1, "first_step": 0,
                                                           "last_step": None}
    drilled = [r["host_pre_forward_s"] for r in slow.read_steps(1)]
    other = [r["host_pre_forward_s"] for r in slow.read_steps(0)]
    assert statistics.median(drilled) >= 0.080
    assert statistics.median(other) < 0.02
    # Every rank's step grows because the others wait for the drilled rank in DDP's all-reduce.
    # Within the drill run (load-independent): DDP keeps the ranks in lockstep, so the healthy
    # rank's step is as long as the drilled one's, sleep included, though it never slept itself.
    step0 = statistics.median(r["step_s"] for r in slow.read_steps(0)[2:])
    step1 = statistics.median(r["step_s"] for r in slow.read_steps(1)[2:])
    assert step0 >= 0.080 and step0 >= 0.8 * step1, (step0, step1)
    # Against the healthy run with the same spec: both ranks got slower (by about the sleep on a
    # quiet machine; only the sign is asserted, timings of two separate runs are noisy).
    for rank in (0, 1):
        before = statistics.median(r["step_s"] for r in base.read_steps(rank)[2:])
        after = statistics.median(r["step_s"] for r in slow.read_steps(rank)[2:])
        assert after > before, (rank, before, after)


def test_crash_drill_names_rank_node_and_log_and_keeps_other_ranks_output(runs_root):
    proc, run = submit(runs_root, "crash", "--inject-crash", "1:6")
    assert proc.returncode == 1, proc.stdout
    # a dead peer must not leave the others hanging until the process-group timeout: rank 0 stopped
    # on the peer's failure, which its failure note says (no timing assert: the machine may be busy)
    note = json.loads(run.failure_path(0).read_text())
    assert note.get("peer_failure") is True and "timed out" not in json.dumps(note).lower(), note
    node = run.read_manifest()["ranks"][1]["node"]
    assert f"rank 1 on node {node} failed at step 6" in proc.stdout
    assert "hpcprof crash drill" in proc.stdout
    log_line = next(line for line in proc.stdout.splitlines() if "traceback in" in line)
    log = Path(log_line.split("traceback in", 1)[1].strip())
    assert log.exists() and "DrillCrash" in log.read_text()
    assert "rank(s) 0 stopped after it" in proc.stdout
    assert [r["step"] for r in run.read_steps(0)] == list(range(6))
    assert [r["step"] for r in run.read_steps(1)] == list(range(6))
    assert run.trace_path(0).exists() and run.trace_path(1).exists()  # written at step 4, before the crash


def test_preemption_checkpoints_requeues_and_resumes_with_continuous_steps(runs_root):
    name = "preempt"
    run = RunDir(runs_root / name)
    # Profile steps 10-12, after the signal: their ProfilerStep numbers must continue the job's.
    args = [*FAST_FLAGS, "--runs-dir", str(runs_root), "--name", name, "--train-steps", "16",
            "--profiler-wait", "8", "--profiler-warmup", "2", "--profiler-active", "3"]
    proc = subprocess.Popen([sys.executable, "-m", "hpcprof.submit", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    signalled = None
    while proc.poll() is None and time.time() < deadline:
        if signalled is None and len(run.read_steps(0)) >= 4 and len(run.read_steps(1)) >= 4:
            pids = [e["pid"] for e in run.read_manifest()["ranks"]]
            for pid in pids:  # what SLURM does on preemption: signal every task
                os.kill(pid, signal.SIGUSR2)
            signalled = pids
        time.sleep(0.1)
    out = proc.communicate(timeout=60)[0]
    assert signalled, out
    assert proc.returncode == 0, out
    attempts = run.read_manifest()["attempts"]
    assert len(attempts) == 2 and attempts[0]["resumed_from_step"] is None
    resumed = attempts[1]["resumed_from_step"]
    assert 4 <= resumed < 16
    assert run.checkpoint_path.exists()
    assert {e["pid"] for e in run.read_manifest()["ranks"]}.isdisjoint(signalled)  # new processes
    for rank in (0, 1):
        assert [r["step"] for r in run.read_steps(rank)] == list(range(16)), "no gaps, no repeats"
    names = sorted(e["name"] for e in load_trace(run.trace_path(0))["traceEvents"]
                   if e.get("name", "").startswith("ProfilerStep#"))
    assert names == ["ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#12"]


def test_existing_run_directory_is_never_overwritten(healthy):
    _, run = healthy
    before = run.manifest_path.read_text()
    proc = run_cli("hpcprof.submit", *FAST_FLAGS, "--runs-dir", str(run.root.parent), "--name", run.name, timeout=60)
    assert proc.returncode == 2 and "holds a run" in proc.stdout and "nothing was changed" in proc.stdout
    assert run.manifest_path.read_text() == before


def test_visible_gpus_is_torchs_count_without_importing_torch_where_no_gpu_can_be():
    """The launcher's GPU count (slurm.geometry.visible_gpus skips the 2-3 s torch import where no GPU
    device node exists) is the count the ranks' torch sees."""
    import torch

    from hpcprof.slurm.geometry import visible_gpus

    assert visible_gpus() == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_submit_analyze_prints_what_the_analyze_command_prints(tmp_path, capsys):
    """`submit --analyze` runs the analysis through the library (the launcher imports no command
    module): the user sees the lines `python -m hpcprof.analyze RUN_DIR` prints, and its exit code,
    both for a folder it analyses and for one it refuses. (The command runs second, on the
    outputs the first analysis left: one analysis, and the same summary either way.)"""
    import shutil

    from hpcprof.analyze import main as analyze_main
    from hpcprof.launch.submit import analyze_run

    run = tmp_path / "run"
    shutil.copytree(REPO / "tests" / "data" / "hta_sampled_2of128", run)
    empty = tmp_path / "empty"
    empty.mkdir()
    seen = []
    for call in (analyze_run, lambda d: analyze_main([str(d)])):
        codes = (call(run), call(empty))
        out, err = capsys.readouterr()
        seen.append((codes, out, [ln for ln in err.splitlines() if "hpcprof.analyze:" in ln]))
    assert seen[0][0] == (0, 2)
    assert f"report: {run / 'analysis' / 'report.html'}" in seen[0][1], seen[0][1]
    (error,) = seen[0][2]
    assert error.startswith(f"hpcprof.analyze: error: {empty}: no trace files"), error
    assert seen[1] == seen[0]
