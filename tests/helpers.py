"""Helpers shared by the test modules: running hpcprof's CLIs as a user would (subprocesses of this
interpreter), a small CPU job spec that keeps runs to a few seconds, and the in-run truth of a
straggler drill (`drill_truth`, shared by the local and the SLURM drills). Imported as a plain module
(`from helpers import ...`); fixtures live in conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"

# A fast CPU job: 2 ranks, resnet18 on 32 px synthetic images.
FAST_FLAGS = [
    "--job", str(REPO / "jobs" / "demo-local.toml"),
    "--cluster", "local",
    "--model-image-size", "32",
    "--data-batch-size", "8",
]


def run_cli(module: str, *args: str, timeout: float = 300, env: dict | None = None, cwd: Path | None = None):
    """Run ``python -m <module> args`` and return the CompletedProcess (stdout+stderr merged)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd or REPO,
    )


# The step-record keys the drill truth reads (hpcprof.rundir.records.StepRecord).
_DRILL_KEYS = ("step", "rank", "step_s", "drill_sleep_s", "profiled")


@dataclass(frozen=True)
class DrillTruth:
    """What a straggler drill (`--inject-straggler RANK:MS:EVERY`) really cost, measured in the
    drill run itself from its step records."""

    truth_ms: float
    """Job step time of the drilled steps minus that of the undrilled steps (medians, after warm-up)."""
    expected_cost_ms: float
    """What the drilled rank costs per profiled step: truth x drilled profiled steps / profiled steps."""
    drilled_profiled: int
    profiled: int
    drilled: int
    undrilled: int
    uncertainty_ms: float = 0.0
    """Standard error of the truth (of two medians: 1.25 x the standard deviation / sqrt(n) each).
    On a quiet 2-core machine it is a few ms; under heavy load (other jobs) the step times scatter by
    hundreds of ms and the truth is not resolved: a failing drill then says so in its message."""


def drill_truth(steps: Path | dict[int, list[dict]], warmup_steps: int = 3) -> DrillTruth:
    """The known answer of a periodic straggler drill, measured INSIDE one run.

    Why inside one run: the drilled and the undrilled steps alternate in the same run, so drift of
    the machine (other work, frequency, caches) hits both alike and cancels in the difference; two
    runs compared with each other differ by more than the drill on a shared machine.

    Per global step, the job's step time is the median over ranks of `step_s` (each rank's record
    of the step; the ranks synchronise in every step, so a late rank lengthens all of them). A
    step is drilled when some rank slept in it (`drill_sleep_s` > 0). Steps below `warmup_steps`
    are left out (first iterations allocate and warm caches). The truth is the median job step
    time over drilled steps minus the median over undrilled steps; the analysis averages a rank's
    cost over the profiled steps, so what it should report is the truth scaled by the share of
    drilled steps among the profiled ones.

    `steps` is a run's steps/ folder (rank-<r>.jsonl) or {rank: [step records]}; lines that are
    not JSON objects with the step-record keys are skipped, as the analysis skips them."""
    import json
    import statistics

    if isinstance(steps, (str, Path)):
        records: dict[int, list[dict]] = {}
        for path in sorted(Path(steps).glob("rank-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and all(k in rec for k in _DRILL_KEYS):
                    records.setdefault(int(rec["rank"]), []).append(rec)
    else:
        records = steps
    if not records:
        raise ValueError(f"no step records in {steps}")
    by_step: dict[int, list[dict]] = {}
    for recs in records.values():
        last = {int(r["step"]): r for r in recs}  # a requeued run may repeat a step: its last record
        for step, rec in last.items():
            by_step.setdefault(step, []).append(rec)
    drilled, undrilled, profiled, drilled_profiled = [], [], 0, 0
    for step, recs in sorted(by_step.items()):
        if step < warmup_steps:
            continue
        slept = any(float(r["drill_sleep_s"]) > 0 for r in recs)
        (drilled if slept else undrilled).append(statistics.median(float(r["step_s"]) for r in recs) * 1e3)
        if any(r["profiled"] for r in recs):
            profiled += 1
            drilled_profiled += slept
    if not drilled or not undrilled or not profiled:
        raise ValueError(f"the drill truth needs drilled, undrilled and profiled steps after step {warmup_steps}: "
                         f"{len(drilled)} drilled, {len(undrilled)} undrilled, {profiled} profiled in {steps}")
    truth = statistics.median(drilled) - statistics.median(undrilled)
    se = 1.25 * sum((statistics.pstdev(v) ** 2) / len(v) for v in (drilled, undrilled)) ** 0.5
    return DrillTruth(truth, truth * drilled_profiled / profiled, drilled_profiled, profiled, len(drilled), len(undrilled), se)


def assert_straggler_drill_verdict(summary: dict, truth: DrillTruth, rank: int, cause: str = "host_gap",
                                   tolerance: float = 0.15) -> str:
    """The checks of issue 10's live drills, one definition for the local and the SLURM drill: the
    drilled rank is named first with `cause`, its cost per step is within `tolerance` of the in-run
    truth scaled to the profiled steps, and the console's top straggler, the report's first
    straggler row and the first recommendation name that rank. Returns a one-line figure."""
    import re

    from hpcprof.analysis.outputs.console import console_summary

    strag = summary["stragglers"]
    figure = (f"truth {truth.truth_ms:.1f} +/- {truth.uncertainty_ms:.1f} ms on drilled steps, expected cost {truth.expected_cost_ms:.1f} ms/step "
              f"({truth.drilled_profiled} of {truth.profiled} profiled steps drilled), estimated "
              f"{strag[0]['cost_ms_per_step'] if strag else 0.0:.1f} ms/step for rank {strag[0]['rank'] if strag else None}")
    assert strag, f"no straggler flagged in the drill run; {figure}; per rank: " + str(
        [(r["rank"], r.get("whatif_cost_ms_per_step")) for r in summary["per_rank"]])
    top = strag[0]
    assert top["rank"] == rank, (figure, strag)
    assert top["cause"] == cause, (top["cause"], top.get("cause_detail"))
    assert truth.expected_cost_ms > 0, figure
    assert abs(top["cost_ms_per_step"] - truth.expected_cost_ms) <= tolerance * truth.expected_cost_ms, figure

    console = re.search(r"top straggler: rank (\d+)", console_summary(summary))
    report = Path(summary["outputs"]["report"]).read_text()
    section = report[report.index("<section id='stragglers'>"):]
    section = section[:section.index("</section>")]
    first_row = re.search(r"<tbody><tr><td[^>]*>(\d+)</td>", section)
    first_rec = summary["recommendations"][0]["title"] if summary["recommendations"] else ""
    named = {"console": console and int(console.group(1)), "report row": first_row and int(first_row.group(1)),
             "recommendation": first_rec}
    assert named["console"] == rank and named["report row"] == rank, named
    assert first_rec.startswith(f"Straggler: rank {rank}"), named
    return figure


# The live CPU drills are a known open item of issue 10, kept running (not skipped) so that the day
# the model sees them they pass; `strict=False` because on a quiet machine they sometimes do.
CPU_WHATIF_OPEN = (
    "open (issue 10): the what-if replay does not yet model a gloo collective that blocks the main "
    "thread (DDP's buffer broadcast at the start of forward): CPU segments all start at the step "
    "start, so the other rank's wait inside that broadcast stays in its later segments and replaying "
    "rank 1 at the median saves almost nothing (measured: drill5 truth 36 +/- 26 ms, expected cost "
    "18 ms/step, estimate 1.7; SLURM 2x1 drill truth 61 +/- 32 ms, expected 30, estimate 16, nobody "
    "flagged). Chaining CPU segments at every collective end instead flags rank 1 (32 ms, host_gap) "
    "but also flags 2 of 2 stored healthy demo runs (1 of 2 without it); on 2 busy cores the 2-rank healthy demo "
    "flagged a straggler (cpu_work) in 4 and 7 of 10 demo runs. Needs a CPU model of which "
    "collectives the main thread waits on."
)
