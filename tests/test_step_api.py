"""Issue 37: the step-loop API (``hpcprof.run()``) used and misused the way a user's script does,
run as users run it (``python train.py`` in its folder: one rank, the run directory under
./runs), each read back from what the user sees: the step records, the exit status and the last
line of the error.
"""

from __future__ import annotations

import os
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
    assert _last_line(proc).startswith("hpcprof.rank.session.HpcprofUsageError: hpcprof.run(batch_size=...): batch_size "), proc.stderr
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
    assert _last_line(proc).startswith("hpcprof.rank.session.HpcprofUsageError: run.batch_size = ...: batch_size nan"), proc.stderr
    run = _only_run(tmp_path)
    assert [(r["step"], r["batch_size"]) for r in run.read_steps(0)] == [(s, 8) for s in range(3)]
    (note,) = run.read_failures()
    assert note["step"] == 3 and "batch_size nan" in note["error"] and note["kind"] == "error"
