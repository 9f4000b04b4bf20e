"""Issue 37: the step-loop API (``hpcprof.run()``) used and misused the way a user's script does,
run as users run it (``python train.py`` in its folder: one rank, the run directory under
./runs), each read back from what the user sees: the step records, the exit status and the last
line of the error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpcprof.rundir import RunDir


def _python(tmp: Path, script: str, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` in `tmp`, the way a user starts a one-rank run."""
    (tmp / "train.py").write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, "train.py", *args], cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))


def _only_run(tmp: Path) -> RunDir:
    (root,) = list((tmp / "runs").iterdir())
    return RunDir(root)


NESTED_REGIONS = '''
    import time
    import hpcprof

    with hpcprof.run(batch_size=8) as run:
        for step in run.steps():
            with run.region("train_step"):
                with run.region("forward"):
                    time.sleep(0.03)      # blocked, as a rank waiting in a collective is
                with run.region("backward"):
                    time.sleep(0.03)
'''


def test_a_region_around_other_regions_keeps_only_its_own_time_so_regions_never_exceed_the_step(tmp_path):
    """Issue 37 item 3: ``run.region("train_step")`` around forward and backward counted their time
    twice: the regions (and the blocked time the triggered profiler subtracts) added up to more
    than the step, and the rank's own time went negative. Nested time counts for the innermost
    region only."""
    proc = _python(tmp_path, NESTED_REGIONS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = _only_run(tmp_path).read_steps(0)
    assert len(recs) == 20
    for r in recs:
        assert r["forward_s"] >= 0.03 and r["backward_s"] >= 0.03, r  # the sleeps stay in the inner regions
        assert r["forward_s"] + r["backward_s"] + r["regions"]["train_step"] <= r["step_s"], r
        assert 0.06 <= r["blocked_s"] <= r["step_s"], r  # own time (step_s - blocked_s) is never negative


def _last_line(proc: subprocess.CompletedProcess) -> str:
    """The error's line, as the user reads it (torch prefixes a rank's lines with "[rank0]: ")."""
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return last.removeprefix("[rank0]: ")


@pytest.mark.parametrize("value", ["-4", "0", "'abc'", "float('nan')", "1e30", "True", "2.5"])
def test_a_batch_size_that_is_not_a_count_of_samples_is_refused_in_one_line_naming_it(tmp_path, value):
    """Issue 37 item 4: -4, 0, "abc", NaN were recorded with every step (analyze then called the
    finished run "still running (0 of 5 steps)"), 1e30 gave 4.7e33 samples/s; a bool is not a count."""
    proc = _python(tmp_path, f'''
        import hpcprof

        with hpcprof.run(batch_size={value}) as run:
            for step in run.steps():
                pass
    ''')
    assert proc.returncode == 1
    assert _last_line(proc).startswith("hpcprof.rank.steploop.HpcprofUsageError: hpcprof.run(batch_size=...): batch_size "), proc.stderr
    assert "whole number" in _last_line(proc)
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_a_batch_size_set_to_nonsense_between_steps_stops_the_run_with_a_note_naming_it(tmp_path):
    proc = _python(tmp_path, '''
        import hpcprof

        with hpcprof.run(batch_size=8) as run:
            for step in run.steps():
                if step == 3:
                    run.batch_size = float("nan")
    ''')
    assert proc.returncode == 1
    assert _last_line(proc).startswith("hpcprof.rank.steploop.HpcprofUsageError: run.batch_size = ...: batch_size nan"), proc.stderr
    run = _only_run(tmp_path)
    assert [(r["step"], r["batch_size"]) for r in run.read_steps(0)] == [(s, 8) for s in range(3)]
    (note,) = run.read_failures()
    assert note["step"] == 3 and "batch_size nan" in note["error"] and note["kind"] == "error"


class _Payload:
    """A pickle that calls a function when it is loaded (what a planted checkpoint would do)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


COUNTING = '''
    import hpcprof

    with hpcprof.run(batch_size=8, steps=6) as run:
        for step in run.steps():
            pass
'''


@pytest.fixture(scope="module")
def finished_slurm_run(tmp_path_factory) -> Path:
    """The folder of a one-rank run of job 4242 (runs/train-job4242), as SLURM's first start left it."""
    tmp = tmp_path_factory.mktemp("job4242")
    proc = _python(tmp, COUNTING, env={"SLURM_JOB_ID": "4242"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp


@pytest.mark.parametrize("content", ["code", "garbage", "truncated"])
def test_a_checkpoint_that_runs_code_or_is_damaged_is_refused_in_one_line_with_a_failure_note(
        finished_slurm_run, tmp_path, content):
    """Issue 37 item 11: checkpoint/latest.pt was loaded with weights_only=False, so a pickle in the
    run directory ran its payload as soon as hpcprof.run() started; a damaged one gave a
    UnicodeDecodeError traceback and no failure note. The requeued start (same job id) refuses it."""
    import shutil

    import torch

    shutil.copytree(finished_slurm_run, tmp_path, dirs_exist_ok=True)
    run = _only_run(tmp_path)
    run.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
    marker = tmp_path / "payload-ran"
    if content == "code":
        torch.save({"step": 2, "epoch": 0, "state": _Payload(marker)}, run.checkpoint_path)
    else:
        torch.save({"step": 2, "epoch": 0, "state": {"w": torch.ones(1000)}}, run.checkpoint_path)
        data = run.checkpoint_path.read_bytes()
        run.checkpoint_path.write_bytes(b"\x80\xff\xfe" + data[3:] if content == "garbage" else data[: len(data) // 2])
    proc = _python(tmp_path, COUNTING, env={"SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": "1"})
    assert proc.returncode == 1
    assert not marker.exists(), "the checkpoint's code ran"
    line = _last_line(proc)
    said = "RunDirError: checkpoint runs/train-job4242/checkpoint/latest.pt cannot be resumed from ("
    assert line.startswith("hpcprof.rundir.layout." + said) and "weights_only=True" in line, proc.stderr
    (note,) = run.read_failures()
    assert note["rank"] == 0 and note["step"] is None and note["error"].startswith(said) and note["kind"] == "error"
    assert [r["step"] for r in run.read_steps(0)] == list(range(6))  # the first start's records are kept


LOOP = '''
    import hpcprof

    with hpcprof.run(batch_size=8, runs_dir="runs") as run:
        for step in run.steps():
            pass
'''


def _runs_a_file(tmp: Path) -> None:
    (tmp / "runs").write_text("my notes\n")


def _runs_a_dangling_link(tmp: Path) -> None:
    (tmp / "runs").symlink_to(tmp / "scratch-that-was-removed")


def _runs_a_link_loop(tmp: Path) -> None:
    (tmp / "runs").symlink_to("runs")


@pytest.mark.parametrize("setup, env, said", [
    (_runs_a_file, {}, "RunDirError: cannot create the run directory runs/train-"),
    (_runs_a_dangling_link, {}, "RunDirError: cannot create the run directory runs/train-"),
    (_runs_a_link_loop, {}, "RunDirError: cannot create the run directory runs/train-"),
    (None, {"SLURM_JOB_ID": "7" * 300}, "RunDirError: the run name train-job77"),
], ids=["runs_dir-a-file", "runs_dir-a-dangling-symlink", "runs_dir-a-symlink-loop", "SLURM_JOB_ID-of-300-characters"])
def test_a_run_directory_that_cannot_be_created_is_one_line_saying_why(tmp_path, setup, env, said):
    """Issue 37 item 16: raw NotADirectoryError, FileExistsError, ELOOP and ENAMETOOLONG tracebacks
    where submit says it in one line; nothing in the way is changed."""
    if setup is not None:
        setup(tmp_path)
    before = sorted(os.listdir(tmp_path))
    proc = _python(tmp_path, LOOP, env=env)
    line = _last_line(proc)
    assert proc.returncode == 1 and line.startswith("hpcprof.rundir.layout." + said), proc.stderr[-3000:]
    assert ("runs_dir" in line) if setup else ("hpcprof.run(name=...)" in line)
    assert sorted(os.listdir(tmp_path)) == sorted(before + ["train.py"])
    if setup is _runs_a_file:
        assert (tmp_path / "runs").read_text() == "my notes\n"


MISUSES = {
    "run.steps([])": ('''
        with hpcprof.run(batch_size=8) as run:
            for batch in run.steps([]):
                pass
    ''', "HpcprofUsageError: run.steps(): a pass over the list gave no batch at all (it is empty)"),
    "run.steps() in run.steps()": ('''
        with hpcprof.run(batch_size=8) as run:
            for epoch in run.steps(total=2):
                for step in run.steps():
                    pass
    ''', "HpcprofUsageError: run.steps() inside step 0, which is still running: steps do not nest"),
    "run.step() in run.steps()": ('''
        with hpcprof.run(batch_size=8) as run:
            for step in run.steps():
                with run.step():
                    pass
    ''', "HpcprofUsageError: run.step() inside step 0, which is still running: steps do not nest"),
    "run.region(None)": ('''
        with hpcprof.run(batch_size=8) as run:
            for step in run.steps():
                with run.region(None):
                    pass
    ''', "HpcprofUsageError: run.region(None): a region name is a string"),
    "run.rank before the block": ('''
        run = hpcprof.run(batch_size=8)
        print(run.rank)
    ''', "SessionNotStarted: run.rank: the session has not started yet; use it inside the block"),
    "run.steps() after the block": ('''
        with hpcprof.run(batch_size=8) as run:
            for step in run.steps():
                if step == 3:
                    break
        for step in run.steps():
            pass
    ''', "HpcprofUsageError: run.steps() after the `with hpcprof.run(...) as run:` block ended"),
    "hpcprof.run() in hpcprof.run()": ('''
        with hpcprof.run(batch_size=8) as run:
            with hpcprof.run(batch_size=8) as again:
                for step in again.steps():
                    pass
    ''', "HpcprofUsageError: hpcprof.run() inside the block of another hpcprof.run() in the same process"),
}


@pytest.mark.parametrize("case", list(MISUSES))
def test_a_misused_step_loop_api_is_one_line_naming_the_call(tmp_path, case):
    """Issue 37 item 16: "generator raised StopIteration", "NoneType + int", AttributeError 'renv',
    "I/O operation on closed file", and a second hpcprof.run() in the block taken for a requeue
    (one directory, two attempts). Misuse inside the block leaves a failure note saying it."""
    body, said = MISUSES[case]
    proc = _python(tmp_path, "import hpcprof\n" + textwrap.dedent(body))
    line = _last_line(proc)
    assert proc.returncode == 1 and re.sub(r"^hpcprof\.rank\.\w+\.", "", line).startswith(said), proc.stderr[-3000:]
    if case == "run.rank before the block":
        assert not (tmp_path / "runs").exists()
        return
    run = _only_run(tmp_path)
    assert len(run.read_manifest()["attempts"]) == 1
    if case == "run.steps() after the block":  # the session ended cleanly: its records stand, no note
        assert [r["step"] for r in run.read_steps(0)] == [0, 1, 2, 3] and run.read_failures() == []
        return
    (note,) = run.read_failures()
    assert note["error"] == re.sub(r"^hpcprof\.rank\.\w+\.", "", line).replace("SessionNotStarted", "HpcprofUsageError")
