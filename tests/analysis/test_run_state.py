"""Issue 13 item 3: `analyze` knows whether the job is running, completed, failed (with the failing
rank), preempted, interrupted or never started, from the manifest, the step files and failures/;
it says so on the first console line, in summary.json `run_state` and in the report, and labels a
partial analysis. A crashed run is not analysed as a normal run.

Real runs: a crash drill (`--inject-crash 0:2`), a job analysed while it is still stepping (before
and after its first trace), and a finished one. Preempted, interrupted and never-started states are
built as run directories the way the launcher and the ranks leave them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hpcprof.rundir.state import run_state

REPO = Path(__file__).resolve().parents[2]
SMALL = [
    "--job", str(REPO / "jobs" / "demo-local.toml"), "--cluster", "local",
    "--model-image-size", "32", "--data-batch-size", "8",
]


def _submit(runs: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcprof.submit", *SMALL, "--name", name, "--runs-dir", str(runs), *extra],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )


def _analyze(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcprof.analyze", str(path), "--quiet", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )


def _summary(run: Path) -> dict:
    return json.loads((run / "analysis" / "summary.json").read_text())


# ------------------------------------------------------------------ real runs
def test_crashed_run_is_labelled_failed_with_the_rank_and_no_cut_off_step(tmp_path):
    proc = _submit(tmp_path, "crash", "--inject-crash", "0:2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = tmp_path / "crash"
    assert (run / "traces" / "rank-0.pt.trace.json.gz").is_file(), "the crash drill leaves its traces"
    a = _analyze(run)
    assert a.returncode == 0, a.stdout + a.stderr
    first = a.stdout.splitlines()[0]
    assert "failed" in first and "rank 0" in first and "step 2" in first and "partial" in first, first
    s = _summary(run)
    st = s["run_state"]
    assert st["state"] == "failed" and st["failed_rank"] == 0 and st["failed_step"] == 2 and st["partial"] is True
    assert any("crashed" in w and "rank 0" in w for w in s["warnings"]), s["warnings"]
    # the step cut off by the crash is not analysed as a step; with no complete profiled step left,
    # no recommendation is derived from it
    import pandas as pd

    trace_steps = pd.read_csv(run / "analysis" / "tables" / "steps_trace.csv")
    assert trace_steps.empty or (trace_steps["step"] < 2).all(), trace_steps
    assert s["recommendations"] == [], s["recommendations"]
    html = (run / "analysis" / "report.html").read_text()
    line = html.split("id='run-state'>", 1)[1].split("</p>", 1)[0]
    assert "failed" in line and "rank 0" in line and "partial analysis" in line, line


@contextlib.contextmanager
def _paused(proc: subprocess.Popen):
    """The job (the launcher and every process under it) stopped with SIGSTOP while the body runs, then
    continued: the analysis then reads a job that is alive (its processes exist, its step files are
    fresh) at a known point, however long its own start-up takes on a loaded machine. The ranks'
    collectives wait far longer than the pause (demo-local.toml: pg_timeout_s 120) and the ranks'
    lifeline counts a stopped launcher as alive (only a zombie or a gone pid is dead)."""
    import psutil

    root = psutil.Process(proc.pid)
    procs = [root, *root.children(recursive=True)]
    for p in procs:  # parents first: none starts a process that escapes the list
        with contextlib.suppress(psutil.NoSuchProcess):
            p.suspend()
    try:
        yield
    finally:
        for p in reversed(procs):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.resume()


def test_job_analysed_while_it_is_still_stepping(tmp_path):
    """Before the first trace: a one-line answer that the job is running. After it: a partial
    analysis labelled as such. The job is left to finish (no orphans).

    Each analysis runs while the job is paused (`_paused`): at its first step record, before any
    trace (the first trace comes at step 40), and once rank 1's trace is written, before the job's
    last step. (Analyses of the job while it ran on, with the trace at step 12 and then 40, read the
    state too late when the full suite or other processes loaded the machine: 17 steps done, or the
    job finished.)"""
    runs = tmp_path
    run = runs / "live"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcprof.submit", *SMALL, "--name", "live", "--runs-dir", str(runs),
         "--train-steps", "90", "--profiler-wait", "40", "--profiler-warmup", "1", "--profiler-active", "2"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        def steps_done() -> int:
            p = run / "steps" / "rank-0.jsonl"
            return len(p.read_text().splitlines()) if p.is_file() else 0

        deadline = time.time() + 300
        while steps_done() < 1 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        with _paused(proc):
            assert steps_done() >= 1 and not any((run / "traces").glob("*.pt.trace.json*")), \
                "the job should be stepping, before its first trace"
            before = _analyze(run)
        assert before.returncode == 2, before.stdout + before.stderr
        msg = before.stderr.strip()
        assert len(msg.splitlines()) == 1 and "running" in msg and "no trace yet" in msg, msg

        while not (run / "traces" / "rank-1.pt.trace.json.gz").exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        with _paused(proc):
            assert proc.poll() is None, "the job finished before it could be analysed while running"
            during = _analyze(run)
        assert during.returncode == 0, during.stdout + during.stderr
        first = during.stdout.splitlines()[0]
        assert "running" in first and "partial" in first, first
        st = _summary(run)["run_state"]
        assert st["state"] == "running" and st["partial"] is True
        assert 0 < st["steps_done"] < st["steps_planned"] == 90
        assert proc.wait(timeout=600) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    after = _analyze(run)
    assert after.returncode == 0, after.stdout + after.stderr
    st = _summary(run)["run_state"]
    assert st["state"] == "completed" and st["partial"] is False
    assert "completed" in after.stdout.splitlines()[0]


# ------------------------------------------------------------------ states built as the tools leave them
def _fake_run(root: Path, steps_planned: int = 10, world: int = 2, done: dict | None = None, **manifest) -> Path:
    root.mkdir(parents=True)
    for d in ("steps", "traces", "logs", "failures"):
        (root / d).mkdir()
    m = {"name": root.name, "executor": "local", "job_id": "1234", "world_size": world,
         "spec": {"train": {"steps": steps_planned}}, "created": "2026-01-01T00:00:00+0000"}
    m.update(manifest)
    (root / "manifest.json").write_text(json.dumps(m))
    old = time.time() - 3600
    for rank, n in (done or {}).items():
        p = root / "steps" / f"rank-{rank}.jsonl"
        p.write_text("".join(json.dumps({"step": s, "rank": rank, "step_s": 0.1}) + "\n" for s in range(n)))
        os.utime(p, (old, old))
    os.utime(root / "manifest.json", (old, old))
    return root


def test_state_completed(tmp_path):
    st = run_state(_fake_run(tmp_path / "r", done={0: 10, 1: 10}))
    assert st.state == "completed" and not st.partial


def test_state_failed_names_the_first_non_peer_failure(tmp_path):
    run = _fake_run(tmp_path / "r", done={0: 4, 1: 5})
    (run / "failures" / "rank-0.json").write_text(json.dumps({"rank": 0, "step": 4, "time": 2.0, "peer_failure": True, "error": "Connection closed by peer"}))
    (run / "failures" / "rank-1.json").write_text(json.dumps({"rank": 1, "step": 5, "time": 1.0, "peer_failure": False, "error": "ValueError: boom"}))
    st = run_state(run)
    assert st.state == "failed" and st.failed_rank == 1 and st.failed_step == 5 and st.partial
    assert "rank 1" in st.describe() and "ValueError: boom" in st.describe()


def test_state_preempted_waiting_for_requeue(tmp_path):
    run = _fake_run(tmp_path / "r", done={0: 6, 1: 6}, attempts=[{"started": "x", "resumed_from_step": None}],
                    preempted={"step": 5, "time": 1.0})
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "latest.pt").write_bytes(b"x")
    st = run_state(run)
    assert st.state == "preempted" and st.partial and "step 5" in st.describe()


def test_state_interrupted_by_the_launcher(tmp_path):
    run = _fake_run(tmp_path / "r", done={0: 3, 1: 3}, outcome={"state": "interrupted", "signal": "SIGINT"})
    st = run_state(run)
    assert st.state == "interrupted" and st.partial and "SIGINT" in st.describe()


def test_state_never_started(tmp_path):
    run = _fake_run(tmp_path / "r", job_id=None, outcome={"state": "never_started", "error": "sbatch: error: invalid partition specified: nope"})
    st = run_state(run)
    assert st.state == "never_started" and "invalid partition" in st.describe()
    a = _analyze(run)
    assert a.returncode == 2 and "never started" in a.stderr and "Traceback" not in a.stderr, a.stderr


def test_state_stopped_early_without_a_failure_note(tmp_path):
    """A job killed from outside (scancel, kill -9 of every rank, node failure): steps stop short,
    nobody wrote a failure note and nothing is running any more."""
    st = run_state(_fake_run(tmp_path / "r", done={0: 4, 1: 4}))
    assert st.state == "stopped" and st.partial and "4 of 10" in st.describe()


def test_state_running_from_a_live_rank_process(tmp_path):
    import socket

    run = _fake_run(tmp_path / "r", done={0: 4, 1: 4},
                    ranks=[{"rank": 0, "node": socket.gethostname(), "pid": os.getpid()}])
    st = run_state(run)
    assert st.state == "running" and st.partial and st.steps_done == 4 and st.steps_planned == 10


def test_plain_trace_folder_has_no_run_state(tmp_path):
    assert run_state(tmp_path).state == "unknown"


def test_state_a_job_that_ended_without_a_step_says_no_optimizer_step_not_stopped_early(tmp_path):
    """The ranks started (an attempt recorded), the launcher saw them end cleanly, and no rank wrote a
    step record: nothing was measured. That is said plainly, never "completed" nor "stopped early"."""
    run = _fake_run(tmp_path / "r", attempts=[{"started": "x", "resumed_from_step": None, "job_id": "1234"}],
                    outcome={"state": "completed", "time": "y"})
    st = run_state(run)
    assert st.state == "no_steps" and st.partial and st.steps_done == 0
    line = st.describe()
    assert "no optimizer step was recorded on any rank" in line and "stopped" not in line and "completed" not in line
    a = _analyze(run)  # no trace either: analyze refuses in one line, saying why
    assert a.returncode == 2 and "no optimizer step was recorded on any rank" in a.stderr and "Traceback" not in a.stderr


def test_state_of_ranks_that_trained_alone_says_so(tmp_path):
    """The latest attempt says the job's ranks shared no process group: every state line says they
    trained alone; an older manifest without the field says nothing of it."""
    alone = [{"started": "x", "resumed_from_step": None, "job_id": "1234", "process_group": "none"}]
    st = run_state(_fake_run(tmp_path / "a", done={0: 10, 1: 10}, attempts=alone))
    assert st.state == "completed" and st.process_group == "none"
    assert "the ranks trained alone: no process group of the job's" in st.describe()
    st = run_state(_fake_run(tmp_path / "b", done={0: 10, 1: 10}, attempts=[{**alone[0], "process_group": "script"}]))
    assert st.process_group == "script" and "alone" not in st.describe()
    st = run_state(_fake_run(tmp_path / "c", done={0: 10, 1: 10}, attempts=[{"started": "x", "resumed_from_step": None}]))
    assert st.process_group is None and "alone" not in st.describe()
