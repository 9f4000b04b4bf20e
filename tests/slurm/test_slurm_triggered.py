"""Issue 20 on the emulated 2-node cluster: profiler mode "triggered", 2 nodes x 1 rank (a core
each), rank 1 on n2 turning slow at step 120 (`--inject-straggler 1:400:2@120`, see
tests/test_triggered.py for why every second step, and why the drill is most of a step and the
threshold 20%: this VM's noise makes a rank 10-15% of a step late for seconds; here the step is
400-700 ms, 32 px images, batch 8, one core a node). The same checks as the local run: the baseline
only before step 120, a capture within 20 steps, and its analysis names rank 1 with host_gap and
its in-run cost; here across two hosts' clocks."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import assert_straggler_drill_verdict, drill_truth, require_resolved_truth

from hpcprof.analysis import analyze
from hpcprof.rundir import RunDir

from .test_slurm_jobs import submit_cmd

pytestmark = pytest.mark.alone  # the trigger's threshold and the drill's cost are timings of the run itself (tests/conftest.py)

DRILL_MS = 400
FLAGS = ["--tasks-per-node", "1", "--train-steps", "200", "--data-batch-size", "8", "--model-image-size", "32",
         "--profiler-mode", "triggered", "--profiler-wait", "10", "--profiler-warmup", "1", "--profiler-active", "10",
         "--inject-straggler", f"1:{DRILL_MS}:2@120", "--time-min", "20", "--wait", "--profiler-trigger-threshold-pct", "20",
         "--profiler-trigger-job-pct", "1000"]  # the job-wide trigger off: why in tests/test_triggered.py


def test_a_rank_turning_slow_on_node_n2_is_captured_and_named(slurm_cluster, tmp_path):
    runs = tmp_path / "runs"
    res = subprocess.run(submit_cmd(slurm_cluster, runs, "trig", *FLAGS), env=slurm_cluster.env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run = RunDir(runs / "trig")
    m = run.read_manifest()
    assert sorted((e["rank"], e["node"]) for e in m["ranks"]) == [(0, "n1"), (1, "n2")]
    kinds = [(c["kind"], c["steps"][0]) for c in m["captures"]]
    assert kinds[0] == ("baseline", 10) and len(kinds) == 2, (kinds, run.triggers_path.read_text())
    capture = m["captures"][1]
    assert capture["rank"] == 1 and 120 <= capture["steps"][0] <= 140, capture
    print(f"SLURM detection: capture starts at step {capture['steps'][0]} ({capture['steps'][0] - 120} steps after the "
          f"straggler started), lateness {capture['score_ms']} ms")
    lo, hi = capture["steps"][0] + 1, capture["steps"][1]
    truth = drill_truth({r: [x for x in run.read_steps(r) if lo <= x["step"] <= hi] for r in (0, 1)},
                        warmup_steps=0, profiled_only=True)
    require_resolved_truth(truth, drill_ms=DRILL_MS)
    summary = analyze(run.root, out=tmp_path / "a", workers=2, progress=False)
    assert [c["index"] for c in summary["captures"]] == [0, 1]
    capture_summary = json.loads((tmp_path / "a" / summary["captures"][1]["report"]).with_name("summary.json").read_text())
    figure = assert_straggler_drill_verdict(capture_summary, truth, rank=1, run=run.root, traces=run.root / capture["folder"])
    print(f"SLURM triggered capture: {figure}")
