"""Issue 37: how a job of a user's script ends when one rank does something other than raise: hangs,
exits with a code, or leaves a child process behind. Each is a real 2-rank job of a script written
as users write them, launched with ``python -m hpcprof.submit --cluster local --script`` (or
``torchrun``), and read back from what the user sees: what submit says, the manifest's outcome,
the failure notes, the processes left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpcprof.rundir import RunDir


def _submit(tmp: Path, script: str, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    (tmp / "train.py").write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", str(tmp / "runs"),
                           "--script", "train.py", *args], cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))


def _blame_line(proc: subprocess.CompletedProcess) -> str:
    """submit's line naming the rank held responsible."""
    return next(ln for ln in proc.stdout.splitlines() if ln.startswith("hpcprof: rank") and "at step" in ln)


HUNG_RANK = '''
    import time, torch, torch.nn as nn
    import hpcprof
    from torch.nn.parallel import DistributedDataParallel as DDP

    with hpcprof.run(batch_size=4) as run:
        ddp = DDP(nn.Linear(8, 8).to(run.device))
        for step in run.steps():
            if run.rank == 1 and step == 3:
                time.sleep(3600)  # hung: never reaches the all-reduce its peer waits in
            ddp(torch.randn(4, 8)).sum().backward()
'''


def test_a_hung_rank_is_named_not_the_healthy_rank_that_timed_out_waiting_for_it(tmp_path):
    """Issue 37 item 1: rank 1 sleeps forever at step 3; rank 0 waits in DDP's all-reduce until the
    process group's timeout (20 s) and raises gloo's "Timed out waiting 20000ms for recv". That was
    filed as rank 0's own error ("rank 0 failed at step 3", rank 1 "stopped after it"). Rank 0 is a
    peer timeout; rank 1, which never timed out, is the one that did not answer."""
    proc = _submit(tmp_path, HUNG_RANK, "--name", "hung", "--train-steps", "8", "--train-pg-timeout-s", "20")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    blame = _blame_line(proc)
    assert blame.startswith("hpcprof: rank 1 on node") and "did not answer" in blame and "at step 3" in blame, proc.stdout
    assert "rank 0 timed out waiting" in blame, blame
    run = RunDir(tmp_path / "runs" / "hung")
    notes = {n["rank"]: n for n in run.read_failures()}
    assert notes[0]["kind"] == "peer_timeout" and notes[0]["peer_failure"] is True and notes[0]["step"] == 3
    assert "Timed out waiting" in notes[0]["error"]
    assert notes[1]["kind"] == "peer_stopped" and notes[1]["step"] == 3
    first = run.read_manifest()["outcome"]["first_failure"]
    assert first["rank"] == 1 and first["step"] == 3 and "did not answer" in first["error"]


EXITING_RANK = '''
    import os, sys, torch, torch.nn as nn
    import hpcprof
    from torch.nn.parallel import DistributedDataParallel as DDP

    with hpcprof.run(batch_size=4) as run:
        ddp = DDP(nn.Linear(8, 8).to(run.device))
        for step in run.steps():
            if run.rank == 1 and step == 3:
                {exit}
            ddp(torch.randn(4, 8)).sum().backward()
'''


def test_a_rank_that_calls_sys_exit_is_named_with_its_exit_code_and_leaves_a_note(tmp_path):
    """Issue 37 item 2: sys.exit(3) on one rank was reported as SIGKILL ("killed by a signal it cannot
    catch ... OOM killer or kill -9"), with no failure note and no exit code."""
    proc = _submit(tmp_path, EXITING_RANK.replace("{exit}", "sys.exit(3)"), "--name", "exit3", "--train-steps", "8",
                   "--train-pg-timeout-s", "60")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    blame = _blame_line(proc)
    assert blame.startswith("hpcprof: rank 1 on node") and "at step 3" in blame, proc.stdout
    assert "exited with code 3 (sys.exit(3))" in blame and "SIGKILL" not in blame, blame
    notes = {n["rank"]: n for n in RunDir(tmp_path / "runs" / "exit3").read_failures()}
    assert notes[1]["kind"] == "error" and notes[1]["peer_failure"] is False and notes[1]["step"] == 3
    assert notes[0]["peer_failure"] is True
    assert RunDir(tmp_path / "runs" / "exit3").read_manifest()["outcome"]["first_failure"]["rank"] == 1


def test_a_rank_that_calls_os_exit_is_named_with_its_exit_code(tmp_path):
    """Issue 37 item 2, os._exit(7): no Python runs, so no failure note; the exit code reaches submit
    through the witness that started the rank (hpcprof.witness), and SIGKILL is not given as a cause.
    Such a rank leaves submitit no result file: submit reports once the last rank has ended, not after
    submitit's 15 s wait for that file (a behaviour bound, 10 s: the report itself takes under one)."""
    proc = _submit(tmp_path, EXITING_RANK.replace("{exit}", "os._exit(7)"), "--name", "exit7", "--train-steps", "8",
                   "--train-pg-timeout-s", "60")
    returned = time.time()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    blame = _blame_line(proc)
    assert blame.startswith("hpcprof: rank 1 on node") and "at step 3" in blame, proc.stdout
    assert "exited with code 7 without a failure note: os._exit(7)" in blame and "SIGKILL" not in blame, blame
    run = RunDir(tmp_path / "runs" / "exit7")
    assert run.read_exit(1)["exit_code"] == 7
    last_exit = max(run.read_exit(r)["time"] for r in (0, 1))
    assert returned - last_exit < 10, f"submit returned {returned - last_exit:.1f} s after the last rank ended"
    first = run.read_manifest()["outcome"]["first_failure"]
    assert first["rank"] == 1 and "exited with code 7" in first["error"]


def test_drills_naming_ranks_outside_a_torchrun_world_are_refused_at_start_up_and_not_recorded(tmp_path):
    """Issue 37 item 8: under torchrun, drills on ranks 9 and 7 of a world of 2 were silently ignored
    (submit refuses them) yet recorded in the manifest as drills of the run."""
    (tmp_path / "train.py").write_text(textwrap.dedent('''
        import hpcprof

        with hpcprof.run(batch_size=8, drills={"straggler": "9:60:2", "crash": "7:3"}) as run:
            for step in run.steps():
                pass
    '''))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = "HpcprofUsageError: hpcprof.run(): drills.straggler: rank 9 does not exist (world size 2)"
    assert said in proc.stderr, proc.stderr[-3000:]  # the first rank to say it; torchrun then stops the other
    assert not (tmp_path / "runs").exists()  # no run directory, no manifest recording the drills


FORKING_RANK = '''
    import os, time, torch, torch.nn as nn
    import hpcprof
    from torch.nn.parallel import DistributedDataParallel as DDP

    with hpcprof.run(batch_size=4) as run:
        ddp = DDP(nn.Linear(8, 8).to(run.device))
        for step in run.steps():
            if run.rank == 0 and step == 2:
                pid = os.fork()
                if pid == 0:  # the child: stuck, as one hung in a library's destructor is
                    time.sleep(3600)
                    os._exit(0)
                (run.dir / "child.pid").write_text(str(pid))
            if run.rank == 0 and step == 3 and {exit_early}:
                os._exit(5)
            ddp(torch.randn(4, 8)).sum().backward()
'''


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("ending", ["rank ends normally", "rank ends by os._exit"])
def test_a_child_a_rank_forked_does_not_outlive_the_job(tmp_path, ending):
    """Issue 37 item 13: a forked child of a rank was left running after the job (parent PID 1) and,
    holding the rank's sockets, made its peer wait for the process group's timeout. Rank 0 forks a
    child that never ends; when submit returns it is gone. When rank 0 ends by os._exit (nothing
    of it runs to end the child), rank 1 sees the connection close (a peer_closed note) instead of
    waiting out the timeout (120 s here)."""
    early = ending == "rank ends by os._exit"
    proc = _submit(tmp_path, FORKING_RANK.replace("{exit_early}", str(early)), "--name", "fork", "--train-steps", "8",
                   "--train-pg-timeout-s", "120")
    run = RunDir(tmp_path / "runs" / "fork")
    child = int((run.root / "child.pid").read_text())
    try:
        assert not _running(child), f"rank 0's child {child} outlived the job"
    finally:
        if _running(child):
            os.kill(child, signal.SIGKILL)
    if not early:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    notes = {n["rank"]: n for n in run.read_failures()}
    assert list(notes) == [1] and notes[1]["kind"] == "peer_closed", notes
    assert _blame_line(proc).startswith("hpcprof: rank 0 on node"), proc.stdout
