"""Issue 19: a user's own training code, written here as a user would write it (it imports
``hpcprof`` and nothing of its internals), gets the whole loop: launched by ``hpcprof.submit
--script`` / ``--entry`` with 2 local ranks and by plain ``torchrun``, step records on every rank,
its regions (user-named ones by name), drills, preemption with its state restored, and a failure
that stops every rank within seconds; ``analyze`` reads every run directory it leaves.

The SLURM launches of the same script (submitit on 2 emulated nodes, a rendered sbatch script) are
in tests/slurm/test_user_code.py; the GPT example (DDP, FSDP2 and a straggler drill) in
tests/analysis/test_gpt_example.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import USER_SCRIPT
from hpcprof.analysis import analyze
from hpcprof.rundir import RunDir

ENTRY_MODULE = textwrap.dedent('''
    import hpcprof

    def train():
        with hpcprof.run(batch_size=4) as run:
            for step in run.steps():
                with run.region("forward"):
                    sum(range(10000))
''')


def _submit(tmp: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", str(tmp / "runs"),
                           *args], cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))


METRIC_SLEEP_S = 0.02
"""The user script sleeps this long inside its own region "my_metric": the region's known lower bound."""


@pytest.fixture(scope="module")
def user_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    tmp = tmp_path_factory.mktemp("user")
    (tmp / "train.py").write_text(USER_SCRIPT)
    proc = _submit(tmp, "--script", "train.py", "--name", "mine", "--train-steps", "14", "--profiler-wait", "2",
                   "--profiler-warmup", "1", "--profiler-active", "4", "--", "--lr", "0.05",
                   "--metric-sleep", str(METRIC_SLEEP_S))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp / "runs" / "mine", proc


def test_a_user_script_gets_step_records_and_regions_on_every_rank(user_run):
    run_dir, proc = user_run
    run = RunDir(run_dir)
    manifest = run.read_manifest()
    assert manifest["spec"]["workload"]["script"].endswith("train.py") and manifest["spec"]["workload"]["args"] == ["--lr", "0.05", "--metric-sleep", str(METRIC_SLEEP_S)]
    for rank in (0, 1):
        recs = run.read_steps(rank)
        assert [r["step"] for r in recs] == list(range(14))
        assert all(r["batch_size"] == 16 for r in recs)
        assert all(METRIC_SLEEP_S <= r["regions"]["my_metric"] <= r["step_s"] and r["forward_s"] > 0 and r["copy_s"] >= 0
                   for r in recs)
        assert [r["epoch"] for r in recs] == [s // 6 for s in range(14)]  # 6 batches per pass
        assert [r["profiled"] for r in recs] == [3 <= s <= 6 for s in range(14)]
        user = json.loads((run_dir / f"user-{rank}.json").read_text())
        assert user == {"steps_trained": 14, "resumed": False, "lr": 0.05, "start": 0}  # -- ARGS reached the script
    names = {e.get("name") for e in _trace_events(run.trace_path(0))}
    assert {"hpcprof.data", "hpcprof.copy", "hpcprof.forward", "hpcprof.my_metric", "ProfilerStep#3"} <= names


def _trace_events(path: Path) -> list[dict]:
    import gzip

    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def test_analyze_reads_a_user_run_with_throughput_hta_fields_and_the_user_region(user_run, tmp_path):
    run_dir, _ = user_run
    s = analyze(run_dir, out=tmp_path / "a", progress=False)
    assert s["ranks_analyzed"] == [0, 1]
    assert s["throughput"]["job"]["median_samples_per_s"] > 0 and s["throughput"]["job"]["batch"] == 32
    for row in s["per_rank"]:  # HTA's per-rank breakdowns: present, null on a CPU run (said in a warning)
        assert {"idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct"} <= set(row)
    assert any("CPU-only run" in w for w in s["warnings"])
    import pandas as pd

    stats = pd.read_csv(tmp_path / "a" / "tables" / "steps_stats.csv")
    # the region's time is at least the sleep the script did inside it, and at most the step's
    assert (stats["region_my_metric_median_ms"] >= 1e3 * METRIC_SLEEP_S).all()
    assert (stats["region_my_metric_median_ms"] <= stats["step_median_ms"]).all()
    assert "my_metric" in (tmp_path / "a" / "report.html").read_text()
    # the report names the script, its arguments and the batch its step records hold, not the built-in trainer's
    config = (tmp_path / "a" / "report.html").read_text().split("<section id='config'>", 1)[1].split("</section>", 1)[0]
    assert f"script {run_dir.parents[1] / 'train.py'} --lr 0.05 --metric-sleep {METRIC_SLEEP_S}" in config
    assert "<dt>Batch</dt><dd>16 per rank (as the step records say)</dd>" in config and "resnet" not in config


def test_an_entry_function_runs_the_same_way(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "job.py").write_text(ENTRY_MODULE)
    proc = _submit(tmp_path, "--entry", "mypkg.job:train", "--name", "e", "--train-steps", "6",
                   env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(tmp_path / "runs" / "e")
    for rank in (0, 1):
        recs = run.read_steps(rank)
        assert [r["step"] for r in recs] == list(range(6)) and all(r["batch_size"] == 4 for r in recs)
        assert all(r["data_wait_s"] is None and r["forward_s"] > 0 for r in recs)


@pytest.mark.parametrize("args, needle", [
    (["--entry", "nosuchpkg.job:train"], "workload.entry 'nosuchpkg.job:train': no module 'nosuchpkg'"),
    (["--entry", "not a function"], "workload.entry must look like package.module:function"),
    (["--script", "missing.py"], "workload.script 'missing.py': no such file"),
    (["--script", "train.py", "--entry", "a.b:c"], "exclusive"),
])
def test_a_workload_that_cannot_run_is_refused_in_one_line_before_anything_starts(tmp_path, args, needle):
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    proc = _submit(tmp_path, *args, "--name", "x")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "runs" / "x").exists()


def test_torchrun_without_hpcprof_gives_a_run_directory_analyze_reads(tmp_path):
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    assert run_dir.name.startswith("train-")
    m = RunDir(run_dir).read_manifest()
    assert m["executor"] == "torchrun" and m["world_size"] == 2 and len(m["attempts"]) == 1
    assert m["spec"]["workload"]["script"] == str((tmp_path / "train.py").resolve()) and "model" not in m["spec"]  # the script, not a ResNet
    assert (run_dir / "spec.toml").is_file()
    for rank in (0, 1):
        assert len(RunDir(run_dir).read_steps(rank)) == 20  # train.steps' default
    s = analyze(run_dir, out=tmp_path / "a", progress=False)
    assert s["ranks_analyzed"] == [0, 1] and s["throughput"]["job"]["median_samples_per_s"] > 0


def test_a_preempted_user_script_resumes_with_continuous_steps_and_its_state(tmp_path):
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    run = RunDir(tmp_path / "runs" / "p")
    proc = subprocess.Popen([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", str(tmp_path / "runs"),
                             "--script", "train.py", "--name", "p", "--train-steps", "24", "--", "--step-sleep", "0.05"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    signalled, deadline = None, time.time() + 240
    while proc.poll() is None and time.time() < deadline:
        if signalled is None and min(len(run.read_steps(0)), len(run.read_steps(1))) >= 4:
            signalled = [e["pid"] for e in run.read_manifest()["ranks"]]
            for pid in signalled:  # what SLURM does on preemption: signal every task
                os.kill(pid, signal.SIGUSR2)
        time.sleep(0.05)
    out = proc.communicate(timeout=60)[0]
    assert signalled and proc.returncode == 0, out
    attempts = run.read_manifest()["attempts"]
    assert len(attempts) == 2 and attempts[1]["resumed_from_step"] >= 4, attempts
    for rank in (0, 1):
        assert [r["step"] for r in run.read_steps(rank)] == list(range(24)), "no gaps, no repeats"
        user = json.loads((run.root / f"user-{rank}.json").read_text())
        # the counter came back from the checkpoint: the second start trained 24 - start steps on top of it
        assert user["resumed"] is True and user["start"] == attempts[1]["resumed_from_step"]
        assert user["steps_trained"] == 24


def test_a_crash_in_user_code_names_the_rank_and_its_peer_stops_within_seconds(tmp_path):
    """The acceptance line "a rank that raises while its peers wait in a collective gets its failure
    note and the others stop within seconds, not the process-group timeout": rank 1 raises at step 5
    (the crash drill acts inside run.steps), rank 0 is then waiting in DDP's all-reduce. The bound
    is a quarter of the process-group timeout (120 s), far from both outcomes."""
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    proc = _submit(tmp_path, "--script", "train.py", "--name", "c", "--train-steps", "12", "--inject-crash", "1:5",
                   "--train-pg-timeout-s", "120")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout.split("hpcprof: rank 1")[0], proc.stdout
    assert "rank 1 on node" in proc.stdout and "failed at step 5" in proc.stdout
    run = RunDir(tmp_path / "runs" / "c")
    notes = {n["rank"]: n for n in run.read_failures()}
    assert notes[1]["kind"] == "drill" and notes[1]["peer_failure"] is False and notes[1]["step"] == 5
    assert notes[0]["peer_failure"] is True and notes[0]["step"] == 5
    assert notes[0]["time"] - notes[1]["time"] < 30, notes


STUCK_SCRIPT = textwrap.dedent('''
    import os, time, torch, torch.nn as nn
    import hpcprof
    from torch.nn.parallel import DistributedDataParallel as DDP

    try:
        with hpcprof.run(batch_size=4) as run:
            ddp = DDP(nn.Linear(8, 8).to(run.device))
            for step in run.steps():
                if run.rank == 1 and step == 4:
                    raise RuntimeError("user bug on rank 1")
                ddp(torch.randn(4, 8)).sum().backward()
    except RuntimeError:
        # like a rank whose process cannot exit (a CUDA/NCCL teardown that hangs): it stays alive, so
        # its peers' collective never fails by itself; it leaves once they are gone
        deadline = time.time() + 90
        while time.time() < deadline and not os.path.exists(os.path.join(os.environ.get("STUCK_DIR", "."), "failures", "rank-0.json")):
            time.sleep(0.2)
        raise
''')


def test_a_peer_that_neither_dies_nor_answers_stops_the_job_within_seconds(tmp_path):
    """The NCCL case, played on gloo: rank 1 fails but its process stays alive, so rank 0's
    all-reduce would wait for the whole process-group timeout (120 s here). hpcprof's peer watch sees
    rank 1's failure note and stops rank 0 a few seconds later, with a note saying why."""
    (tmp_path / "train.py").write_text(STUCK_SCRIPT)
    runs = tmp_path / "runs"
    proc = _submit(tmp_path, "--script", "train.py", "--name", "s", "--train-steps", "12", "--train-pg-timeout-s", "120",
                   env={"STUCK_DIR": str(runs / "s")})
    assert proc.returncode == 1, proc.stdout
    notes = {n["rank"]: n for n in RunDir(runs / "s").read_failures()}
    assert notes[1]["kind"] == "error" and "user bug on rank 1" in notes[1]["error"]
    assert notes[0]["kind"] == "peer_stopped" and "rank 1 failed at step 4" in notes[0]["error"]
    assert notes[0]["time"] - notes[1]["time"] < 30, notes
    assert "rank 1 on node" in proc.stdout and "user bug on rank 1" in proc.stdout


ABORT_SCRIPT = textwrap.dedent('''
    import os, torch, torch.nn as nn
    import hpcprof
    from torch.nn.parallel import DistributedDataParallel as DDP

    with hpcprof.run(batch_size=4) as run:
        ddp = DDP(nn.Linear(8, 8).to(run.device))
        for step in run.steps():
            if run.rank == 1 and step == 3:
                os.abort()  # what the NCCL watchdog does after a collective timed out
            ddp(torch.randn(4, 8)).sum().backward()
''')


def test_a_rank_that_dies_of_sigabrt_is_named_with_how_it_died(tmp_path):
    """Item 16: a rank killed in native code writes no note; faulthandler's record of the signal
    names it (a SIGABRT was reported as "OOM killer or node lost")."""
    (tmp_path / "train.py").write_text(ABORT_SCRIPT)
    proc = _submit(tmp_path, "--script", "train.py", "--name", "abrt", "--train-steps", "8")
    assert proc.returncode == 1, proc.stdout
    assert "rank 1 on node" in proc.stdout and "aborted (SIGABRT)" in proc.stdout, proc.stdout
    assert "OOM" not in proc.stdout
    run = RunDir(tmp_path / "runs" / "abrt")
    assert "Fatal Python error: Aborted" in run.read_fatal(1)
    assert run.read_fatal(0) is None  # rank 0 stopped on the closed connection, with its note
