"""Acceptance drill (issue 10, "Live drills on dedicated cores"): 2 local CPU ranks, one core each,
`--inject-straggler 1:60:2` (rank 1 sleeps 60 ms before the forward pass of every second step), and
the same run without it.

The truth is measured INSIDE the drill run from its step records (tests/helpers.drill_truth): the
median job step time of the drilled steps minus that of the undrilled ones. Drilled and undrilled
steps alternate, so drift of a machine shared with other work cancels; that is why this test needs
neither the busy-machine skip of the 4-rank drill it replaces (which compared two runs
on shared cores: identical pairs differed by -118 to +148 ms/step). The analysis averages a rank's
cost over the profiled steps, half of which are drilled, so it must report the truth scaled by that
share, within 15%; rank 1 named first with cause host_gap (the sleep is in no annotated region);
the console, the report and the recommendations agree; the healthy run flags nobody.

Both checks are expected to fail for now (helpers.CPU_WHATIF_OPEN says why, with the figures).
"""

from __future__ import annotations

import pytest
from helpers import CPU_WHATIF_OPEN, assert_straggler_drill_verdict, drill_truth

from hpcprof.analysis import analyze


@pytest.fixture(scope="module")
def analysed(drill_runs, tmp_path_factory):
    out = {}
    for name, run in drill_runs.items():
        out[name] = analyze(run, out=tmp_path_factory.mktemp(name), workers=2, progress=False)
    return out


@pytest.mark.xfail(strict=False, reason=CPU_WHATIF_OPEN)
def test_healthy_run_flags_nobody(analysed):
    s = analysed["healthy"]
    assert s["stragglers"] == [], s["stragglers"]
    assert s["collectives_matched"] > 0
    assert not any(r["title"].startswith("Straggler") for r in s["recommendations"]), s["recommendations"]


@pytest.mark.xfail(strict=False, reason=CPU_WHATIF_OPEN)
def test_drill_names_rank1_first_with_host_gap_and_its_in_run_cost(analysed, drill_runs):
    truth = drill_truth(drill_runs["drill"] / "steps")
    assert truth.drilled_profiled * 2 == truth.profiled, truth  # the window holds as many drilled steps as not
    figure = assert_straggler_drill_verdict(analysed["drill"], truth, rank=1)
    print(f"local drill: {figure}")
