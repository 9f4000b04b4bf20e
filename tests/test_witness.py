"""The witness between submitit's local controller and a rank (hpcprof.witness), on its own: it
ends as its child ended, records an abnormal end where submit reads it, forwards each signal once,
and takes the command submitit builds from it apart correctly whatever the run directory is called.
The whole path (a real job whose rank calls os._exit) is tests/test_rank_failures.py."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE

from hpcprof.rundir import RunDir
from hpcprof.witness import EXIT_FILE, REQUEUE_CODE, witness_python


def _witness(run: Path, code: str, rank: str = "1", **kw) -> subprocess.Popen:
    cmd = shlex.split(witness_python(run)) + ["-c", textwrap.dedent(code)]
    return subprocess.Popen(cmd, env=dict(os.environ, SUBMITIT_LOCAL_GLOBALID=rank), **kw)


def test_the_constants_agree_with_submitit_and_the_run_directory():
    assert REQUEUE_CODE == LOCAL_REQUEUE_RETURN_CODE
    assert Path("/r") / EXIT_FILE.format(rank=3) == RunDir("/r").exit_path(3)


def test_an_os_exit_is_recorded_with_its_code_and_passed_on(tmp_path):
    p = _witness(tmp_path, "import os; os._exit(7)")
    assert p.wait(timeout=60) == 7
    entry = RunDir(tmp_path).read_exit(1)
    assert entry["rank"] == 1 and entry["exit_code"] == 7 and abs(entry["time"] - time.time()) < 60
    assert RunDir(tmp_path).read_failures() == []  # an exit record is not a failure note


def test_a_rank_killed_by_sigkill_ends_its_witness_the_same_way(tmp_path):
    p = _witness(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", rank="0")
    assert p.wait(timeout=60) == -signal.SIGKILL
    entry = RunDir(tmp_path).read_exit(0)
    assert entry["signal"] == signal.SIGKILL and entry["signal_name"] == "SIGKILL"


@pytest.mark.parametrize("code", [0, REQUEUE_CODE])
def test_a_clean_end_or_a_requeue_leaves_no_record(tmp_path, code):
    p = _witness(tmp_path, f"import os; os._exit({code})")
    assert p.wait(timeout=60) == code
    assert RunDir(tmp_path).read_exit(1) is None


def test_each_signal_reaches_the_rank_once(tmp_path):
    # the rank counts SIGTERMs for 3 s after saying it is ready, then exits with the count
    p = _witness(tmp_path, f"""
        import signal, sys, time
        n = 0
        def on(*_):
            global n
            n += 1
        signal.signal(signal.SIGTERM, on)
        open({str(tmp_path / 'ready')!r}, 'w').close()
        end = time.time() + 3
        while time.time() < end:
            time.sleep(0.05)
        sys.exit(n)
    """)
    deadline = time.time() + 60
    while not (tmp_path / "ready").exists() and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 2
    assert RunDir(tmp_path).read_exit(1)["exit_code"] == 2


def test_the_command_survives_a_run_directory_with_spaces_and_quotes(tmp_path):
    run = tmp_path / "my run's \"dir\" $HOME"
    run.mkdir()
    # what submitit does with it: python + " -u -m submitit.core._submit " + folder, then shlex.split
    line = witness_python(run) + " -c " + shlex.quote("import os; os._exit(3)")
    p = subprocess.run(shlex.split(line), env=dict(os.environ, SUBMITIT_LOCAL_GLOBALID="2"), timeout=60)
    assert p.returncode == 3
    assert json.loads((run / EXIT_FILE.format(rank=2)).read_text())["exit_code"] == 3


def test_started_by_hand_it_says_what_it_is_for():
    p = subprocess.run([sys.executable, "-m", "hpcprof.witness"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "started by hpcprof.submit" in p.stderr
