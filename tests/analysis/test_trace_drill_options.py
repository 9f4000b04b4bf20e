"""Issue 23 items 14 and 15, `python -m hpcprof.drills.trace_drill`: a value that makes no sense
(nan, inf, negative, absurdly large) is one line naming the option and its valid range, exit 2, and
nothing is written; before, `--stretch nan|inf` and `--stall-ms inf` ended in tracebacks and
`--stall-ms nan` exited 0 with an undrilled copy presented as the drill."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import REPO
from . import test_trace_drill

tiny = test_trace_drill.tiny  # the fixture: a 2-rank set with hand-computed answers

BAD = [
    (["--stall-ms", "nan", "--before-collective", "0"], "--stall-ms"),
    (["--stall-ms", "inf", "--before-collective", "0"], "--stall-ms"),
    (["--stall-ms", "-inf", "--before-collective", "0"], "--stall-ms"),
    (["--stall-ms", "1e30", "--before-collective", "0"], "--stall-ms"),
    (["--stall-ms", "-3", "--before-collective", "0"], "--stall-ms"),
    (["--stretch", "nan"], "--stretch"),
    (["--stretch", "inf"], "--stretch"),
    (["--stretch", "1e30"], "--stretch"),
    (["--stretch", "0.5"], "--stretch"),
    (["--stretch", "2", "--match-tol-us", "-1"], "--match-tol-us"),
    (["--stretch", "2", "--match-tol-us", "nan"], "--match-tol-us"),
    (["--stretch", "2", "--match-tol-us", "0"], "--match-tol-us"),
    (["--stretch", "2", "--match-tol-us", "inf"], "--match-tol-us"),
]


@pytest.mark.parametrize("args,option", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_value_that_makes_no_sense_is_one_line_and_writes_nothing(tiny, tmp_path, args, option):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "hpcprof.drills.trace_drill", str(tiny), str(out), "--rank", "1", *args],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and option in lines[0], lines
    assert not out.exists(), "a drilled set was written for a refused value"
    assert r.stdout == ""


def test_the_largest_accepted_values_still_drill(tiny, tmp_path):
    """The bounds are not a wall for real uses: a 10-minute stall and a 1000x stretch drill."""
    from hpcprof.drills import inject

    info = inject(tiny, tmp_path / "a", 1, stall_ms=600_000, before_collective=0)
    assert info["job_time_increase_ms"] == pytest.approx(600_000, rel=1e-6)
    info = inject(tiny, tmp_path / "b", 1, stretch=1000)
    assert info["job_time_increase_ms"] > 0
