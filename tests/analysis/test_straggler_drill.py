"""Acceptance drill (issue 10, "Live drills on dedicated cores"): 2 local CPU ranks, one core each,
`--inject-straggler 1:60:2` (rank 1 sleeps 60 ms before the forward pass of every second step), and
the same run without it.

The truth is measured INSIDE the drill run from its step records (tests/helpers.drill_truth): the
median job step time of the drilled steps minus that of the undrilled ones. Drilled and undrilled
steps alternate, so drift of a machine shared with other work cancels; that is why this test needs
neither the busy-machine skip of the 4-rank drill it replaces (which compared two runs
on shared cores: identical pairs differed by -118 to +148 ms/step).

What is compared with the truth (a redesign, see helpers.drill_added_cost): the cost the analysis
gives rank 1 in its drilled profiled steps minus the cost in its undrilled neighbours, within 15% of
the truth; both sides are the same paired statistic over the same steps, the profiled ones (a truth
over the whole run against an estimate over the profiled window failed once, when a burst of
unplanned lateness on rank 1 hit two undrilled profiled steps: 55.1 +/- 5.6 ms over the run,
45.9 +/- 7.3 over the profiled steps, 33.8 estimated as a difference of means). A rank's what-if cost also holds the lateness it has without the drill (in a 2-rank job every
step waits for the later of two noisy ranks: about 5 ms per step on 2 quiet cores), which the truth,
a difference of step times, cancels; the undrilled steps of the same run measure it. Rank 1 must be
named first with cause host_gap (the sleep is in no annotated region), and the console, the report
and the recommendations agree; the healthy run flags nobody whose cores ran alike (see that test).
When other work loads the machine so much that the run cannot resolve its own truth (standard error
above a third of the sleep), the drill check is skipped with the figure (helpers.require_resolved_truth).
"""

from __future__ import annotations

import pytest
from helpers import assert_straggler_drill_verdict, drill_truth, ops_ms_per_step, require_resolved_truth, slower_steps

from hpcprof.analysis import analyze

pytestmark = pytest.mark.alone  # the drill's cost, and a healthy run flagging nobody, are timings of the runs (tests/conftest.py)

# The conftest's pair with 40 steps and a 20-step profiler window (steps 4-23: 10 drilled, 10 not):
# the truth is a median over the drilled profiled steps, and its uncertainty, which must stay under a
# third of the drill or the drill check is skipped (helpers.require_resolved_truth), shrinks with
# their number. The other tests keep the shared pair's 10-step window.
WINDOW = ["--train-steps", "40", "--profiler-active", "20"]


@pytest.fixture(scope="module")
def drill_runs(tmp_path_factory, drill_pair):
    return drill_pair(tmp_path_factory.mktemp("runs"), WINDOW)


@pytest.fixture(scope="module")
def analysed(drill_runs, tmp_path_factory):
    out = {}
    for name, run in drill_runs.items():
        out[name] = analyze(run, out=tmp_path_factory.mktemp(name), workers=2, progress=False)
    return out


def test_healthy_run_flags_nobody_whose_cores_ran_alike(analysed, drill_runs):
    """Nobody is flagged in the healthy run, unless its own trace shows that rank really ran slower.

    Redesigned (issue 10 note): on this VM the two ranks' identical operators run 10-35 ms apart per
    step (of 120-200 ms), at times with the same sign for several steps, with nothing else running
    (10 healthy `make demo` runs: 4 flagged a rank; over 21 stored healthy runs, 9 of 10 flags had
    the flagged rank's operators slower in at least half of the profiled steps). A rank slowed that way in most profiled steps IS what the straggler analysis is for,
    and "flags nobody" cannot be the truth then. So a flag must be backed by the truth measured in
    the traces: the flagged rank's operators (helpers.ops_ms_per_step: the same work on every rank)
    took longer than the other rank's, by at least half of its flag threshold, in at least half of
    the profiled steps; and its cause must be cpu_work. Without such a slowdown nobody may be flagged."""
    s = analysed["healthy"]
    assert s["collectives_matched"] > 0
    for flag in s["stragglers"]:
        run = drill_runs["healthy"]
        mine, other = ops_ms_per_step(run, flag["rank"]), ops_ms_per_step(run, 1 - flag["rank"])
        slower = slower_steps(mine, other, flag["base_threshold_ms"] / 2)
        print(f"healthy run: rank {flag['rank']} flagged ({flag['cost_ms_per_step']} ms/step, {flag['cause']}); "
              f"its operators ran slower in {len(slower)} of {len(mine)} profiled steps")
        assert flag["cause"] == "cpu_work", flag
        assert len(slower) >= len(mine) / 2, (flag, {n: round(mine[n] - other.get(n, 0), 1) for n in mine})
    if not s["stragglers"]:
        assert not any(r["title"].startswith("Straggler") for r in s["recommendations"]), s["recommendations"]


def test_drill_names_rank1_first_with_host_gap_and_its_in_run_cost(analysed, drill_runs):
    truth = drill_truth(drill_runs["drill"] / "steps", profiled_only=True)
    require_resolved_truth(truth, drill_ms=60.0)
    assert truth.drilled_profiled * 2 == truth.profiled, truth  # the window holds as many drilled steps as not
    figure = assert_straggler_drill_verdict(analysed["drill"], truth, rank=1, run=drill_runs["drill"])
    print(f"local drill: {figure}")


def test_the_critical_path_adds_up_to_the_replayed_step_on_the_live_cpu_runs(analysed):
    # the CPU (gloo) chains start segments at the collectives the main thread waited for, unlike the
    # GPU traces of test_critical_path: the walk back must still add up to the replay, step by step
    import pandas as pd
    from pathlib import Path

    for name, s in analysed.items():
        tables = Path(s["outputs"]["tables"])
        links = pd.read_parquet(tables / "critical_path.parquet")
        replayed = pd.read_parquet(tables / "whatif_steps.parquet").set_index("step")["replayed_ms"].sort_index()
        total = links.groupby("step")["dur_ms"].sum().sort_index()
        assert len(total) == len(replayed) == len(s["critical_path"]["steps"]) > 0, name
        # within 10 ns: the links are differences of absolute timestamps in float64, summed link by link
        # (measured: up to 1.5 ns apart)
        pd.testing.assert_series_equal(total, replayed, check_names=False, atol=1e-5, rtol=0)
