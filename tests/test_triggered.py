"""Issue 20: catching the straggler in the act. 2 local CPU ranks in profiler mode "triggered":

- a healthy job that turns slow at step 120 (``--inject-straggler 1:D:2@120``: rank 1 sleeps D ms
  in every second step from step 120): no capture before step 120 other than the baseline; one
  capture starting within 20 steps of 120 (the delay is printed); its analysis names rank 1 first
  with cause host_gap and its drill-added cost within 15% (plus two standard errors) of the truth
  measured in the run over the captured steps; the baseline window flags nobody or says why.
  Why every second step: the truth of a drill is measured inside the run, each drilled step against
  its undrilled neighbours (tests/helpers.drill_truth), so the capture must hold both; a drill in
  every step is the next case.
- a straggler that comes and goes (``1:D@120-160``, every step) gets one capture, not one per window.
- a healthy 300-step job captures the baseline only (10 such runs: benchmarks/README.md).

The drill's size and the threshold follow this machine's step time, measured in the healthy run
first: the drill sleeps twice that step, the threshold is 30% of the step (the default is 10%).
Why twice: a rank late by L in every second step scores about L/2 (the window's trimmed mean),
while the threshold, 30% of the window's median step, grows with the drilled steps (about
0.3 x (S + L/2)); a drill of one step S (L about 0.92 S once the other rank's own blocked time is
netted) scored 65 ms against a threshold of 84 ms in a CI run, and no capture was taken. At 2 S
the score is about S against 0.6 S. Why 30%: on this 2-core VM a core slows down by 10-15% for seconds, so noise alone made one rank 12-15%
of a step late for 8 steps running (2026-11-28: rank scores of 35-46 ms against 300 ms steps, in
the healthy, the drilled and a CI run); a fixed 60 ms drill was 40% of the 150 ms step these runs
had when the test was written, and 20% of today's 300 ms step, inside that noise; in a full-suite
run noise alone made rank 0 23% of a step late for 8 steps (79 ms against 347 ms steps).

The decision rule itself, on timings with a known answer (the budget when a rank stays slow, the
gap, the job-wide trigger, a rank that was always late), is tests/test_trigger_policy.py.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAST_FLAGS, REPO, assert_straggler_drill_verdict, drill_truth, require_resolved_truth

from hpcprof.analysis import analyze
from hpcprof.rundir import RunDir

pytestmark = pytest.mark.alone  # the trigger's threshold and the drill's cost are timings of the run itself (tests/conftest.py)

# The job-wide trigger is off here (a 1000% rise): on this VM's 2 shared cores, other processes can
# double every rank's step time for seconds, which that trigger rightly captures (benchmarks/README.md,
# 2 of 10 healthy runs); these runs check the rank trigger against a drill. The job-wide trigger's
# rule is checked on timings with a known answer in tests/test_trigger_policy.py.
TRIGGERED = [*FAST_FLAGS, "--tasks-per-node", "2", "--profiler-mode", "triggered", "--profiler-warmup", "1",
             "--profiler-active", "10", "--profiler-wait", "3", "--profiler-trigger-job-pct", "1000",
             "--profiler-trigger-threshold-pct", "30"]


def _submit(runs: Path, name: str, *extra: str) -> RunDir:
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", *TRIGGERED, "--runs-dir", str(runs), "--name", name,
                           *extra], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return RunDir(runs / name)


def _triggers(run: RunDir) -> list[dict]:
    return [json.loads(line) for line in run.triggers_path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def triggered_runs(tmp_path_factory) -> dict:
    runs = tmp_path_factory.mktemp("triggered")
    healthy = _submit(runs, "healthy", "--train-steps", "300")
    step_ms = statistics.median(r["step_s"] * 1e3 for rank in (0, 1) for r in healthy.read_steps(rank) if r["step"] >= 20)
    drill_ms = max(60, round(2 * step_ms))
    print(f"healthy step {step_ms:.0f} ms: the drills sleep {drill_ms} ms (two steps)")
    return {
        "healthy": healthy,
        "drill_ms": drill_ms,
        "turns_slow": _submit(runs, "turns-slow", "--train-steps", "200", "--inject-straggler", f"1:{drill_ms}:2@120"),
        "comes_and_goes": _submit(runs, "comes-and-goes", "--train-steps", "200", "--inject-straggler",
                                  f"1:{drill_ms}@120-160"),
    }


def test_a_job_that_turns_slow_is_captured_within_20_steps_and_nowhere_before(triggered_runs):
    run = triggered_runs["turns_slow"]
    captures = run.read_manifest()["captures"]
    assert captures[0]["kind"] == "baseline" and captures[0]["steps"][0] == 10 and captures[0]["folder"] == "traces"
    later = captures[1:]
    assert later, _triggers(run)
    first = later[0]
    assert first["steps"][0] >= 120, f"a capture before the straggler started: {captures}"
    delay = first["steps"][0] - 120
    print(f"detection: capture {first['index']} of rank {first['rank']} starts at step {first['steps'][0]}, "
          f"{delay} steps after the straggler started (lateness {first['score_ms']} ms, threshold {first['threshold_ms']} ms)")
    assert delay <= 20 and first["kind"] == "rank" and first["rank"] == 1
    assert len(later) == 1  # the slowdown lasts to the end: one episode, one capture
    assert (run.root / first["folder"] / "rank-0.pt.trace.json.gz").is_file()
    assert (run.root / first["folder"] / "rank-1.pt.trace.json.gz").is_file()
    # every rank traced the same steps
    for rank in (0, 1):
        profiled = [r["step"] for r in run.read_steps(rank) if r["profiled"]]
        lo, hi = first["steps"][0] + 1, first["steps"][1]
        assert [s for s in profiled if s >= 100] == list(range(lo, hi + 1))


def test_the_captures_analysis_names_rank1_with_host_gap_and_its_in_run_cost(triggered_runs, tmp_path):
    run = triggered_runs["turns_slow"]
    capture = run.read_manifest()["captures"][1]
    lo, hi = capture["steps"][0] + 1, capture["steps"][1]
    records = {r: [x for x in run.read_steps(r) if lo <= x["step"] <= hi] for r in (0, 1)}
    truth = drill_truth(records, warmup_steps=0, profiled_only=True)
    require_resolved_truth(truth, drill_ms=triggered_runs["drill_ms"])
    top = analyze(run.root, out=tmp_path / "a", progress=False)  # the baseline, and each capture apart
    entry = top["captures"][1]
    assert entry["index"] == 1
    # the capture's step time against the baseline's: given with its within-run interval; its sign is no
    # known answer here (the drill adds half a step on average, the VM's speed drifts by 10-30% between
    # the two windows), the per-rank analysis below is
    vs = entry["vs_baseline"]
    assert vs["metric"] == "step_ms" and vs["ci_pct"][0] <= vs["change_pct"] <= vs["ci_pct"][1], vs
    summary = json.loads((tmp_path / "a" / entry["report"]).with_name("summary.json").read_text())
    # rank 1 named first with cause host_gap, its cost against the truth; the flag checks give way only
    # to a second straggler the capture's own traces show (a CI run named rank 0 first, cause unknown)
    figure = assert_straggler_drill_verdict(summary, truth, rank=1, run=run.root, traces=run.root / capture["folder"])
    print(f"triggered capture: {figure}; step time {entry['vs_baseline']['change_pct']:+.1f}% vs the baseline")
    report = (tmp_path / "a" / "report.html").read_text()
    assert report.index("id='captures'") < report.index("id='stragglers'")  # the report opens with the whole run
    assert "run_timeline" in top["outputs"]["plots"]


def test_the_baseline_window_flags_nobody_or_says_why(triggered_runs, tmp_path):
    run = triggered_runs["turns_slow"]
    summary = analyze(run.root, out=tmp_path / "baseline", progress=False)  # its top level is the baseline's
    for flag in summary["stragglers"]:  # a real slowdown of a core in the baseline: its cause says which
        assert flag["cause"] == "cpu_work", flag


def test_a_straggler_that_comes_and_goes_gets_one_capture(triggered_runs):
    run = triggered_runs["comes_and_goes"]
    captures = run.read_manifest()["captures"]
    assert [c["kind"] for c in captures] == ["baseline", "rank"], _triggers(run)
    assert 120 <= captures[1]["steps"][0] <= 140 and captures[1]["rank"] == 1
    decided = [t for t in _triggers(run) if t["kind"] != "baseline"]
    assert [t["decision"] for t in decided] == ["capture"], decided


def test_a_healthy_job_captures_the_baseline_only(triggered_runs):
    run = triggered_runs["healthy"]
    captures = run.read_manifest()["captures"]
    assert [c["kind"] for c in captures] == ["baseline"], _triggers(run)
    assert sorted(p.name for p in run.traces_dir.iterdir() if p.is_dir() and p.name != ".tmp") == []
    assert [t["kind"] for t in _triggers(run)] == ["baseline"]  # not even a suppressed decision
