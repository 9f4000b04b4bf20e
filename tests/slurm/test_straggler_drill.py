"""The live straggler drill on the emulated 2-node cluster (issue 10, "Live drills on dedicated
cores"): 2 nodes x 1 rank, one CPU each (so the two ranks do not share a core), rank 1 on n2
sleeping 60 ms before the forward pass of every second step (`--inject-straggler 1:60:2`).

The same known answer and checks as the local drill (tests/analysis/test_straggler_drill.py): the
truth is measured inside the run from its step records (tests/helpers.drill_truth: drilled minus
undrilled median job step time, scaled by the share of drilled profiled steps), so drift of the
shared machine cancels. Rank 1 must be named first with cause host_gap, the cost the analysis adds
in its drilled steps (over its undrilled ones: helpers.drill_added_cost) within 15% of that truth, and the console, the report and the first recommendation must name it. Here the two
ranks sit on different nodes, so the analysis also aligns two hosts' clocks (one physical clock).
"""

from __future__ import annotations

import subprocess

import pytest
from helpers import assert_straggler_drill_verdict, drill_truth, require_resolved_truth

from hpcprof.analysis import analyze

from .test_slurm_jobs import manifest, submit_cmd

pytestmark = pytest.mark.alone  # the drill's cost is checked against a truth timed in the run (tests/conftest.py)

# 40 steps; the profiler window (steps 4-23) holds 20 steps, 10 drilled and 10 not: the truth is a
# median over the drilled steps, and its uncertainty, which must stay under a third of the drill or
# the test is skipped (helpers.require_resolved_truth), shrinks with their number.
DRILL_FLAGS = ["--tasks-per-node", "1", "--train-steps", "40", "--data-batch-size", "8",
               "--profiler-wait", "3", "--profiler-warmup", "1", "--profiler-active", "20",
               "--inject-straggler", "1:60:2", "--wait"]


def test_straggler_drill_on_two_nodes_names_rank1_with_its_in_run_cost(slurm_cluster, tmp_path):
    runs = tmp_path / "runs"
    res = subprocess.run(submit_cmd(slurm_cluster, runs, "drill", *DRILL_FLAGS), env=slurm_cluster.env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=500)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run = runs / "drill"
    m = manifest(run)
    assert sorted((e["rank"], e["node"]) for e in m["ranks"]) == [(0, "n1"), (1, "n2")]
    assert m["drills"]["straggler"] == {"rank": 1, "ms": 60.0, "every": 2, "first_step": 0, "last_step": None}

    truth = drill_truth(run / "steps", profiled_only=True)
    require_resolved_truth(truth, drill_ms=60.0)
    assert truth.drilled_profiled * 2 == truth.profiled, truth
    summary = analyze(run, out=tmp_path / "analysis", workers=2, progress=False)
    figure = assert_straggler_drill_verdict(summary, truth, rank=1, run=run)
    print(f"SLURM drill: {figure}")
