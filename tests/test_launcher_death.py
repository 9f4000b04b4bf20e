"""Issue 23 items 1-3, launch side: whatever stops `submit` or `ladder` (SIGKILL, SIGHUP, SIGTERM,
Ctrl-C), no process they started is left running (the submitit controller and the ranks included,
checked in the process table), the manifest says what happened, and the user reads one line, never
a traceback.

Ctrl-C is played as a terminal plays it: SIGINT to the whole foreground process group. Each test
is a real 2-rank CPU job stopped while it steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import kill_and_name, processes_naming

REPO = Path(__file__).resolve().parents[1]
SMALL = [
    "--job", str(REPO / "jobs" / "demo-local.toml"), "--cluster", "local",
    "--model-image-size", "32", "--data-batch-size", "8", "--train-steps", "5000", "--profiler-wait", "4000",
]


def _start(tmp_path: Path, module: str, *args: str) -> subprocess.Popen:
    """The command in its own session (as `setsid` or a terminal's job would run it), its output in
    files (a pipe would stay open as long as any process that inherited it runs)."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, stdout=open(tmp_path / "stdout", "w"),
                            stderr=open(tmp_path / "stderr", "w"), stdin=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    proc.output_dir = tmp_path
    return proc


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    """Wait for the command; its stdout and stderr."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return (proc.output_dir / "stdout").read_text(), (proc.output_dir / "stderr").read_text()


def _stepping(run: Path, proc: subprocess.Popen, world: int = 2, timeout: float = 300) -> list[psutil.Process]:
    """Once every rank has recorded two steps: every process the command started (its whole tree)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        steps = [run / "steps" / f"rank-{r}.jsonl" for r in range(world)]
        if all(p.is_file() and p.read_text().count("\n") >= 2 for p in steps):
            tree = psutil.Process(proc.pid).children(recursive=True)
            assert len(tree) >= world + 1, f"expected a controller and {world} ranks: {tree}"
            return tree
        time.sleep(0.2)
    for child in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
        child.kill()
    proc.kill()
    raise AssertionError(f"the run did not start stepping: {_finish(proc)}")


def _left_running(tree: list[psutil.Process], timeout: float = 30, folder: Path | None = None) -> list[str]:
    """The processes of `tree`, and those referring to `folder`, still running after `timeout` s
    (then killed, so none stays behind)."""
    gone, alive = psutil.wait_procs(tree, timeout=timeout)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    if folder is not None:
        alive += [p for p in processes_naming(folder) if p.pid not in {a.pid for a in alive}]
    return kill_and_name(alive)


@pytest.fixture
def reap():
    """Processes a test started: whatever the outcome (a failed assertion, a timeout), none of them
    outlives the test."""
    procs: list = []
    yield procs
    for p in procs:
        try:
            if isinstance(p, subprocess.Popen):
                if p.poll() is None:
                    p.kill()
                    p.wait()
            elif p.is_running():
                p.kill()
        except (psutil.NoSuchProcess, OSError):
            pass


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _state(run: Path):
    from hpcprof.rundir.state import run_state

    return run_state(run)


_USER_SCRIPT = """
import time
import torch
import hpcprof

with hpcprof.run(batch_size=8) as run:  # the public step-loop API, as a user's training script uses it
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in run.steps():
        with run.region("forward"):
            loss = model(torch.randn(8, 32)).pow(2).mean()
        with run.region("backward"):
            loss.backward()
        opt.step()
        opt.zero_grad()
        time.sleep(0.02)
"""


def _workload(tmp_path: Path, workload: str) -> list[str]:
    """submit's flags for the built-in trainer, or for a user's script written with hpcprof.run()."""
    if workload == "built-in":
        return SMALL
    script = tmp_path / "train.py"
    script.write_text(_USER_SCRIPT)
    return [*SMALL[:4], "--script", str(script), "--train-steps", "5000", "--profiler-wait", "4000"]


@pytest.mark.parametrize("workload", ["built-in", "hpcprof.run() script"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP], ids=["SIGKILL", "SIGHUP"])
def test_ranks_die_with_submit_and_the_manifest_says_so(tmp_path, sig, workload, reap):
    proc = _start(tmp_path, "hpcprof.submit", *_workload(tmp_path, workload), "--runs-dir", str(tmp_path), "--name", "r")
    reap.append(proc)
    run = tmp_path / "r"
    tree = _stepping(run, proc)
    reap.extend(tree)
    os.kill(proc.pid, sig)
    out, err = _finish(proc)
    left = _left_running(tree, folder=tmp_path)
    assert not left, f"still running after submit died of {sig.name}: {left}"
    outcome = _manifest(run)["outcome"]
    assert outcome and outcome["state"] == "interrupted", outcome
    st = _state(run)
    assert st.state == "interrupted", st
    if sig == signal.SIGKILL:
        # nobody could write it but the ranks: they say their launcher died
        assert "launcher" in outcome["error"] and str(proc.pid) in outcome["error"], outcome
    else:
        assert outcome["signal"] == "SIGHUP", outcome
        assert "Traceback" not in err, err
        assert "interrupted by SIGHUP" in err, err
    assert (run / "steps" / "rank-0.jsonl").read_text().count("\n") >= 2  # what the ranks wrote stays


def _one_line(err: str) -> list[str]:
    """stderr less the progress bar's redraws (tqdm writes \\r-separated frames)."""
    return [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("job ")]


def test_ctrl_c_of_submit_is_one_line_and_leaves_nothing(tmp_path, reap):
    proc = _start(tmp_path, "hpcprof.submit", *SMALL, "--runs-dir", str(tmp_path), "--name", "r")
    reap.append(proc)
    tree = _stepping(tmp_path / "r", proc)
    reap.extend(tree)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    out, err = _finish(proc)
    left = _left_running(tree, folder=tmp_path)
    assert not left, left
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = _one_line(err)
    assert len(lines) == 1 and "interrupted by SIGINT" in lines[0], lines


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C", "SIGKILL"])
def test_stopping_the_ladder_stops_its_rung_and_keeps_the_record(tmp_path, how, reap):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for name in ("01-a.toml", "02-b.toml"):
        (jobs / name).write_text((REPO / "jobs" / "demo-local.toml").read_text())
    out_dir = tmp_path / "ladder"
    proc = _start(tmp_path, "hpcprof.ladder", str(jobs), "--out", str(out_dir), *SMALL[2:])
    reap.append(proc)
    tree = _stepping(out_dir / "01-a", proc)
    reap.extend(tree)
    if how == "SIGTERM":
        os.kill(proc.pid, signal.SIGTERM)
    elif how == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    out, err = _finish(proc)
    left = _left_running(tree, folder=tmp_path)
    assert not left, f"still running after the ladder got {how}: {left}"
    assert not (out_dir / "02-b").exists(), "a rung was launched after the interruption"
    st = _state(out_dir / "01-a")
    assert st.state == "interrupted", st
    if how == "SIGKILL":
        # nothing can write after a SIGKILL but the ranks (checked above through the run state); the
        # ladder's record, written before the rung ran, is whole and leads to that run
        record = json.loads((out_dir / "ladder.json").read_text())
        assert [r["name"] for r in record["rungs"]] == ["01-a", "02-b"], record
        assert record["rungs"][0]["runs"][0]["run_dir"] == str(out_dir / "01-a"), record
        return
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = _one_line(err)
    assert len(lines) == 1 and "interrupted" in lines[0], lines
    assert proc.returncode == (143 if how == "SIGTERM" else 130), (proc.returncode, err)
    record = json.loads((out_dir / "ladder.json").read_text())
    assert [r["status"] for r in record["rungs"]] == ["interrupted", "not launched"], record


_RANK = """
import signal, sys, time
from hpcprof.rank.lifeline import die_with_launcher
die_with_launcher(sys.argv[1], sys.argv[2], int(sys.argv[3]), grace_s=float(sys.argv[4]))
if sys.argv[5] == "stuck":  # as a rank blocked in a collective whose peer is gone: SIGINT never lands
    signal.signal(signal.SIGINT, signal.SIG_IGN)
print("armed", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("stuck", ["python", "stuck"])
def test_the_lifeline_stops_a_rank_whose_launcher_is_killed(tmp_path, stuck, reap):
    """The mechanism alone, in seconds: a stand-in launcher killed by SIGKILL; the rank stops on
    SIGINT, or, when SIGINT cannot stop it, exits after the grace (2 s here); rank 0 writes the
    outcome."""
    from hpcprof.rank.lifeline import launcher_identity
    from hpcprof.rundir import RunDir
    from hpcprof.rundir import manifest as run_manifest

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run_manifest.write(run, run_manifest.Manifest(name="run"))
    launcher = subprocess.Popen(["sleep", "600"])
    rank = subprocess.Popen([sys.executable, "-c", _RANK, launcher_identity(launcher.pid), str(run.root), "0", "2", stuck],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reap.extend([launcher, rank])
    try:
        assert rank.stdout.readline().strip() == "armed"
        time.sleep(1.0)
        assert rank.poll() is None, "the rank stopped while its launcher ran"
        launcher.kill()
        launcher.wait()
        rank.wait(timeout=15)
    finally:
        if rank.poll() is None:
            rank.kill()
    outcome = json.loads(run.manifest_path.read_text())["outcome"]
    assert outcome["state"] == "interrupted" and f"pid {launcher.pid}" in outcome["error"], outcome


def test_a_reused_pid_is_not_the_launcher():
    from hpcprof.rank.lifeline import launcher_alive, launcher_identity

    me = launcher_identity()
    assert launcher_alive(me)
    pid, _, start = me.partition(":")
    assert not launcher_alive(f"{pid}:{int(start) + 1}"), "a process started later with the same pid passed for it"
    p = subprocess.Popen(["true"])
    ident = launcher_identity(p.pid)
    time.sleep(0.3)  # exited, not yet reaped: a zombie
    assert not launcher_alive(ident)
    p.wait()
    assert not launcher_alive(ident)
