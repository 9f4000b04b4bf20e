"""Issue 37 item 20: arms run apart in time. `submit --repeat 3` of one spec, then again under another
name, then `compare` of the two arms said "faster +10.3% [+4.0, +17.0]" for one spec: the interval
held the spread within each arm, not the drift of the machine between two sets run at different
times. Runs are built by hand (tests/handmade_runs.py) with chosen levels and launch times, so the
expected interval is worked here from the formula of docs/compare.md."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from handmade_runs import make_run, make_set

from hpcprof.compare.student import t_ppf

REPO = Path(__file__).resolve().parents[1]


def _compare(*args, out):
    return subprocess.run([sys.executable, "-m", "hpcprof.compare", *map(str, args), "--out", str(out), "--quiet", "--no-op-deltas"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def _step_delta(out: Path, arm: int = 1) -> dict:
    res = json.loads((out / "compare.json").read_text())
    return {d["metric"]: d for d in res["deltas"] if d["arm"] == res["arms"][arm]["label"]}["step_ms"]


def _row(stdout: str, label: str) -> str:
    return next(ln for ln in stdout.splitlines() if ln.startswith(label + " "))


def test_two_sets_run_one_after_the_other_get_no_faster_verdict(tmp_path):
    """Set b (10% shorter steps) ran 30 minutes after set a: its within-arm interval excludes zero,
    yet the verdict is "not comparable in time", and the line says when each arm ran."""
    a = make_set(tmp_path, "a", [100.0, 101.0, 99.5], [0, 5, 10])
    b = make_set(tmp_path, "b", [90.5, 91.0, 90.0], [30, 35, 40])
    p = _compare(*a, *b, out=tmp_path / "c")
    assert p.returncode == 0, p.stderr
    d = _step_delta(tmp_path / "c")
    assert d["change_pct"] == pytest.approx(100 * (math.exp(np.mean(np.log([90.5, 91, 90])) - np.mean(np.log([100, 101, 99.5]))) - 1))
    assert d["ci_pct"][1] < 0  # the within-arm interval alone would have said "faster"
    assert d["verdict"].startswith("not comparable in time: b ran after a")
    assert "faster" not in d["verdict"] and "slower" not in d["verdict"]
    assert "10:30" in d["note"] and "10:14" in d["note"] and "drift" in d["note"] and "--noise" in d["note"]
    line = _row(p.stdout, "b")
    assert "not comparable in time" in line and "faster" not in line


def test_single_runs_one_after_the_other_with_a_given_spread_get_no_faster_verdict(tmp_path):
    """One run each with --noise 1 (a run-to-run SD given by hand): a spread says nothing about the
    drift between two moments either."""
    a = make_run(tmp_path, "a", 100.0, 0)
    b = make_run(tmp_path, "b", 80.0, 20)
    p = _compare(a, b, "--noise", "1", out=tmp_path / "c")
    assert p.returncode == 0, p.stderr
    d = _step_delta(tmp_path / "c")
    assert d["basis"] == "calibration" and d["verdict"].startswith("not comparable in time")


def test_interleaved_sets_keep_their_verdict(tmp_path):
    """The ladder's order (a b a b a b): the drift falls on both arms alike, the verdict stands."""
    a = make_set(tmp_path, "a", [100.0, 101.0, 99.5], [0, 10, 20])
    b = make_set(tmp_path, "b", [90.5, 91.0, 90.0], [5, 15, 25])
    p = _compare(*a, *b, out=tmp_path / "c")
    assert p.returncode == 0, p.stderr
    d = _step_delta(tmp_path / "c")
    assert d["verdict"] == "faster" and "not comparable" not in _row(p.stdout, "b")


CAL = {"c": 100.0, "d": 101.0, "e": 99.0, "f": 100.5}
"""Four healthy sets of one spec, 2 runs each, launched 30 minutes apart: their levels drift."""


def _calibration(root: Path) -> tuple[list[Path], float]:
    runs = []
    for k, (g, ms) in enumerate(CAL.items()):
        runs += make_set(root, g, [ms * 0.995, ms / 0.995], [100 + 30 * k, 105 + 30 * k])
    set_means = [np.mean(np.log([ms * 0.995, ms / 0.995])) for ms in CAL.values()]
    return runs, float(np.std(set_means, ddof=1))


def test_a_calibration_of_sets_launched_apart_measures_their_drift(tmp_path):
    """compare --group-by spec of sets of one spec launched apart (the user says: one configuration)
    writes, besides the run-to-run SD, the drift: the SD of a set's level between the sets."""
    runs, drift = _calibration(tmp_path)
    p = _compare(*runs, "--group-by", "spec", out=tmp_path / "cal")
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "cal" / "noise.json").read_text())["metrics"]["step_ms"]
    assert m["drift"]["sd"] == pytest.approx(drift, rel=1e-9) and m["drift"]["df"] == 3
    assert "4 sets launched apart" in m["drift"]["source"]
    assert "drift" in p.stdout


def test_arms_apart_with_a_drift_calibration_get_a_verdict_that_says_so(tmp_path):
    """With a calibration that measured drift, the interval of arms run apart holds it:
    SE^2 = SD^2 (1/3 + 1/3) + 2 drift^2, on Welch-Satterthwaite degrees of freedom, and the verdict
    line says the arms ran apart."""
    runs, drift = _calibration(tmp_path / "cal-runs")
    assert _compare(*runs, "--group-by", "spec", out=tmp_path / "cal").returncode == 0
    levels_a, levels_b = [100.0, 101.0, 99.5], [90.5, 91.0, 90.0]
    a = make_set(tmp_path, "a", levels_a, [0, 5, 10])
    b = make_set(tmp_path, "b", levels_b, [30, 35, 40])
    p = _compare(*a, *b, "--noise", tmp_path / "cal", out=tmp_path / "c")
    assert p.returncode == 0, p.stderr
    ya, yb = np.log(levels_a), np.log(levels_b)
    sd2 = (((ya - ya.mean()) ** 2).sum() + ((yb - yb.mean()) ** 2).sum()) / 4
    va, vb = sd2 * (2 / 3), 2 * drift ** 2
    df = (va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 3)
    h = t_ppf(0.975, df) * math.sqrt(va + vb)
    diff = yb.mean() - ya.mean()
    d = _step_delta(tmp_path / "c")
    assert d["ci_pct"] == pytest.approx([100 * math.expm1(diff - h), 100 * math.expm1(diff + h)], rel=1e-6)
    assert d["verdict"] == "faster" and d["ci_pct"][1] < 0
    assert "ran apart" in d["note"] and str(tmp_path / "cal" / "noise.json") in d["note"]
    line = _row(p.stdout, "b")
    assert "faster" in line and "ran apart in time" in line
