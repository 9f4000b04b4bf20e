"""Helpers shared by the test modules: running hpcprof's CLIs as a user would (subprocesses of this
interpreter), a small CPU job spec that keeps runs to a few seconds, and the in-run truth of a
straggler drill (`drill_truth`, shared by the local and the SLURM drills). Imported as a plain module
(`from helpers import ...`); fixtures live in conftest.py."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "tests" / "data"
"""The real traces the tests read, carried by the repository (tests/data/README.md: provenance, licences)."""
INPUT_DIRS = (TRACES, REPO / "tests" / "golden")
"""The tests' input folders: read, never written (tests/conftest.py checks them over the session)."""


def input_snapshot(dirs) -> dict[str, str]:
    """Every file and folder under `dirs`: relative path -> content hash (folders: "dir")."""
    import hashlib

    out: dict[str, str] = {}
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            out[str(d)] = "missing"
            continue
        for p in sorted(d.rglob("*")):
            key = str(p.relative_to(d.parent))
            out[key] = "dir" if p.is_dir() else hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
    return out


def snapshot_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What differs between two input_snapshot()s, one line per path."""
    lines = [f"changed: {k}" for k in sorted(before) if k in after and after[k] != before[k]]
    lines += [f"added: {k}" for k in sorted(set(after) - set(before))]
    lines += [f"removed: {k}" for k in sorted(set(before) - set(after))]
    return lines

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


# What a user writes: a small model, a list of batches, the five lines of the README, a counter the
# checkpoint carries (the test reads it back after a requeue), and a region of their own.
USER_SCRIPT = textwrap.dedent('''
    import argparse, json, torch, torch.nn as nn
    import hpcprof
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--metric-sleep", type=float, default=0.0)  # a known time inside the user's region
    args = parser.parse_args()

    with hpcprof.run(batch_size=16) as run:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(run.device)
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
        counter = {"steps_trained": 0, "resumed": False}

        class State:
            def state_dict(self):
                return {"model": model.state_dict(), "opt": opt.state_dict(), "steps_trained": counter["steps_trained"]}

            def load_state_dict(self, s):
                model.load_state_dict(s["model"]); opt.load_state_dict(s["opt"])
                counter["steps_trained"] = s["steps_trained"]; counter["resumed"] = True

        run.checkpoint(State())
        batches = [(torch.randn(16, 64), torch.randint(0, 10, (16,))) for _ in range(6)]
        for x, y in run.steps(batches, total=run.total_steps):  # the launch's --train-steps, over several passes
            with run.region("copy"):
                x, y = x.to(run.device), y.to(run.device)
            with run.region("forward"):
                loss = nn.functional.cross_entropy(ddp(x), y)
            with run.region("backward"):
                loss.backward()
            with run.region("my_metric"), torch.no_grad():
                accuracy = (model(x).argmax(1) == y).float().mean()
                if args.metric_sleep:
                    import time; time.sleep(args.metric_sleep)
            with run.region("optimizer"):
                opt.step(); opt.zero_grad()
            counter["steps_trained"] += 1
            if args.step_sleep:
                import time; time.sleep(args.step_sleep)
        (run.dir / f"user-{run.rank}.json").write_text(json.dumps({**counter, "lr": args.lr, "start": run.start_step}))
''')


# The step-record keys the drill truth reads (hpcprof.rundir.records.StepRecord).
_DRILL_KEYS = ("step", "rank", "step_s", "drill_sleep_s", "profiled")


@dataclass(frozen=True)
class DrillTruth:
    """What a straggler drill (`--inject-straggler RANK:MS:EVERY`) really cost, measured in the
    drill run itself from its step records."""

    truth_ms: float
    """Median over the drilled steps (after warm-up; only the profiled ones with `profiled_only`) of
    the job step time minus the mean of its undrilled neighbour steps."""
    expected_cost_ms: float
    """What the drilled rank costs per profiled step: truth x drilled profiled steps / profiled steps."""
    drilled_profiled: int
    profiled: int
    drilled: int
    undrilled: int
    uncertainty_ms: float = 0.0
    """Standard error of the truth (of a median: 1.25 x the standard deviation of the paired differences / sqrt(n)).
    On a quiet 2-core machine it is a few ms; under heavy load (other jobs) the step times scatter by
    hundreds of ms and the truth is not resolved: a failing drill then says so in its message."""
    drilled_steps: frozenset = frozenset()
    """The global step numbers in which the drilled rank slept (after warm-up)."""
    slept_ms: float = 0.0
    """What the drilled rank really slept, per profiled step (its recorded `drill_sleep_s` summed
    over the profiled steps, divided by their number): the host time the drill put into that rank's
    segments, which the cause must find as host_gap excess. It is not the job-time increase (the
    truth): part of a sleep can overlap time the other ranks would have spent anyway."""


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    """The CLI refused in one line: exit 2, no traceback, exactly one stderr line holding every needle."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def paired_differences(values: dict[int, float], drilled: set | frozenset) -> list[float]:
    """Per drilled step present in `values`, its value minus the mean of its undrilled neighbours
    (the steps just before and after it, when present and undrilled): the in-run drill statistic,
    applied alike to the job's step times (the truth) and to the analysis' per-step costs."""
    diffs = []
    for s in sorted(x for x in values if x in drilled):
        nb = [values[n] for n in (s - 1, s + 1) if n in values and n not in drilled]
        if nb:
            diffs.append(values[s] - sum(nb) / len(nb))
    return diffs


def median_se(values: list[float]) -> float:
    """The standard error of the median of `values` (1.25 x the standard error of their mean, the
    large-sample ratio for a normal sample); 0 for fewer than 2 values."""
    import statistics

    return 1.25 * statistics.pstdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0


def drill_truth(steps: Path | dict[int, list[dict]], warmup_steps: int = 3, profiled_only: bool = False) -> DrillTruth:
    """The known answer of a periodic straggler drill, measured INSIDE one run.

    Why inside one run: the drilled and the undrilled steps alternate in the same run, so drift of
    the machine (other work, frequency, caches) hits both alike and cancels in the difference; two
    runs compared with each other differ by more than the drill on a shared machine. Why each
    drilled step against its own neighbours: this machine's cores change speed by up to 30% over a
    few seconds (step times of one healthy run: 460 to 750 ms), so a difference of two medians over
    the whole run still carried +/-15 ms for a 60 ms drill; neighbours share the drift.

    Per global step, the job's step time is the median over ranks of `step_s` (each rank's record
    of the step; the ranks synchronise in every step, so a late rank lengthens all of them), or of
    `gpu_ms` on a GPU run (the GPU's clock: the host's time is a launch time there). A
    step is drilled when some rank slept in it (`drill_sleep_s` > 0). Steps below `warmup_steps`
    are left out (first iterations allocate and warm caches). The truth is the median, over the
    drilled steps, of the job step time minus the mean of its undrilled neighbours (the steps just
    before and after it); the analysis averages a rank's
    cost over the profiled steps, so what it should report is the truth scaled by the share of
    drilled steps among the profiled ones.

    `profiled_only`: the truth from the profiled steps alone (drilled steps and their neighbours),
    the steps the analysis sees: what its estimate must be compared with. A burst of unplanned
    lateness inside the profiled window then weighs on both alike (a full-suite run: undrilled
    profiled steps 9 and 11 took 213 and 172 ms against 125 typical; the truth over all 27 steps
    was 55.1 +/- 5.6 ms, over the profiled ones 45.9 +/- 7.3).

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
    job: dict[int, float] = {}
    slept_in: dict[int, bool] = {}
    profiled_steps: set[int] = set()
    drilled_profiled, slept_profiled_ms = 0, 0.0
    for step, recs in sorted(by_step.items()):
        if step < warmup_steps:
            continue
        slept_in[step] = any(float(r["drill_sleep_s"]) > 0 for r in recs)
        # on a GPU the step's time is the GPU's (gpu_ms): the host's step_s is a launch time there
        gpu = [float(r["gpu_ms"]) for r in recs if r.get("gpu_ms") is not None]
        job[step] = statistics.median(gpu) if len(gpu) == len(recs) else statistics.median(float(r["step_s"]) for r in recs) * 1e3
        if any(r["profiled"] for r in recs):
            profiled_steps.add(step)
            drilled_profiled += slept_in[step]
            slept_profiled_ms += 1e3 * max(float(r["drill_sleep_s"]) for r in recs)
    profiled = len(profiled_steps)
    drilled = [s for s in job if slept_in[s]]
    undrilled = [s for s in job if not slept_in[s]]
    pool = {s: t for s, t in job.items() if s in profiled_steps} if profiled_only else job
    diffs = paired_differences(pool, set(drilled))
    if not diffs or not profiled:
        raise ValueError(f"the drill truth needs drilled steps next to undrilled ones, and profiled steps, after step "
                         f"{warmup_steps}: {len(drilled)} drilled, {len(undrilled)} undrilled, {profiled} profiled in {steps}")
    truth = statistics.median(diffs)
    se = median_se(diffs)
    drilled_steps = set(drilled)
    return DrillTruth(truth, truth * drilled_profiled / profiled, drilled_profiled, profiled, len(drilled), len(undrilled), se,
                      frozenset(drilled_steps), slept_profiled_ms / profiled)


def require_resolved_truth(truth: DrillTruth, drill_ms: float) -> None:
    """Skip, saying why, when the run could not measure its own truth: the standard error of the
    in-run truth above a third of the injected sleep. That happens only when other work loads the
    machine (measured: 1.6-7 ms on the quiet 2-core VM, 24-73 ms while other test suites ran);
    then no estimate can be checked against it, and a failure would report the machine, not the
    analysis."""
    import pytest

    if truth.uncertainty_ms > drill_ms / 3:
        pytest.skip(f"the drill's in-run truth is not resolved on this loaded machine: {truth.truth_ms:.1f} +/- "
                    f"{truth.uncertainty_ms:.1f} ms for a {drill_ms:.0f} ms sleep (needs +/- {drill_ms / 3:.0f} ms or better)")


def drill_added_cost(per_step_costs: dict[int, float], truth: DrillTruth) -> tuple[float, int, int]:
    """What the analysis says the drill added to the drilled rank's cost, per drilled step: the
    truth's own statistic applied to the rank's what-if cost per profiled step (median over the
    drilled steps of the cost minus the mean of its undrilled neighbours' costs: paired_differences),
    with how many drilled and undrilled profiled steps there are. This, not the rank's mean cost, is
    what the in-run truth (drill_truth(..., profiled_only=True)) measures.

    Why subtract the undrilled steps: the truth is the job-time increase the drill causes (drilled
    minus undrilled job step time). The what-if cost of a rank is larger by the lateness it has
    without the drill: in a 2-rank job each step waits for the later of two noisy ranks, so a
    healthy rank's cost averages about half the per-step noise (a few ms on 2 quiet cores), and a
    rank that has just slept runs its backward a few ms slower (cold caches). Both are real costs of
    that rank, in every step; the undrilled steps of the same run measure them."""
    import statistics

    d = [s for s in per_step_costs if s in truth.drilled_steps]
    u = [s for s in per_step_costs if s not in truth.drilled_steps]
    diffs = paired_differences(per_step_costs, truth.drilled_steps)
    if not diffs:
        raise AssertionError(f"the profiled steps hold no drilled step next to an undrilled one: {len(d)} drilled, "
                             f"{len(u)} undrilled in {sorted(per_step_costs)}")
    return statistics.median(diffs), len(d), len(u)


def per_step_costs(summary: dict, rank: int) -> dict[int, float]:
    """A rank's what-if cost in each profiled step, from the analysis' waits_per_step table."""
    import pandas as pd

    tables = Path(summary["outputs"]["report"]).parent / "tables"
    df = pd.read_parquet(tables / "waits_per_step.parquet")
    df = df[df["rank"] == rank]
    return {int(s): float(c) for s, c in zip(df["step"], df["whatif_cost_ms"])}


def ops_ms_per_step(run: Path, rank: int, traces: Path | None = None) -> dict[int, float]:
    """Per profiled step, the time rank `rank` spent in its top-level `aten::` operators (from its
    trace; per thread, an operator inside another is not counted again): the same operators on the
    same shapes on every rank (one model, one batch size), so a difference between ranks is a
    difference in how fast their cores ran that work. The collectives (c10d, gloo) are not aten
    operators. Measured on the 2-core VM: +/-10-35 ms per step on 120-200 ms of operators, with the
    same sign for several steps at times, while a cache-resident matmul loop pinned to each core
    runs alike (54 ms, spikes under 10%). (The convolutions alone, tried first, miss part of it: a
    flag whose rank ran its operators 7-13 ms slower in 2 steps showed 2-5 ms in its convolutions.)"""
    import gzip
    import json
    import re

    with gzip.open(Path(traces or Path(run) / "traces") / f"rank-{rank}.pt.trace.json.gz", "rt") as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = [(int(m.group(1)), e["ts"], e["ts"] + e["dur"]) for e in ev if (m := re.match(r"ProfilerStep#(\d+)$", e["name"]))]
    ops = sorted((e for e in ev if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("aten::")),
                 key=lambda e: (str(e.get("tid")), e["ts"], -e["dur"]))
    top, open_until = [], {}
    for e in ops:
        if e["ts"] >= open_until.get(str(e.get("tid")), float("-inf")):
            top.append(e)
            open_until[str(e.get("tid"))] = e["ts"] + e["dur"]
    return {n: sum(e["dur"] for e in top if a <= e["ts"] < b) / 1e3 for n, a, b in steps}


def base_threshold_ms(summary: dict) -> float:
    """The median over the profiled steps of the base straggler threshold max(1 ms, 5% of the step)."""
    import pandas as pd

    tables = Path(summary["outputs"]["report"]).parent / "tables"
    return float(pd.read_csv(tables / "whatif_steps.csv")["threshold_ms"].median())


def slower_steps(mine: dict[int, float], other: dict[int, float], by_ms: float) -> list[int]:
    """The profiled steps in which `mine` (ops_ms_per_step of one rank) is at least `by_ms` above `other`."""
    return [n for n in mine if n in other and mine[n] - other[n] >= by_ms]


def unplanned_straggler(run: Path, summary: dict, drilled: int, traces: Path | None = None) -> str | None:
    """Whether the drill run holds a second straggler that the drill did not plant, measured in its
    traces: another rank whose operators (ops_ms_per_step: the same work on every rank) took longer
    than the drilled rank's by more than the base threshold on average over the profiled steps, and
    by at least half of it in at least half of them (the flag rule's two conditions, on operator
    times instead of the what-if costs). Returns the figure, or None.

    Why: "the drilled rank is the one straggler" is the known answer only when no other rank was
    slower too. On this VM a core slows down by 20-30% for seconds at a time; when that hits the
    other rank for most of the window (seen once in 12 drill runs, right after a test suite was
    killed: rank 0's convolutions 9-33 ms slower in 9 of 10 steps, 21 ms on average, what-if cost
    27.9 ms/step against the drilled rank's 32.6), the run has two real stragglers, and with two
    ranks the flag rule holds each against the other (docs/analysis.md, "Straggler flag": two ranks
    that are both late look like two ranks that jitter). Then the flag is no known answer; the
    drilled rank's cost still is, and is checked. Symmetric jitter (+/-10-35 ms per step) rarely
    meets both conditions: the mean of 10 differences has a standard error of about 5 ms.
    `traces`: the folder of the traces `summary` analysed when it is not the run's traces/ (a
    triggered capture's folder)."""
    base = base_threshold_ms(summary)
    mine = ops_ms_per_step(run, drilled, traces)
    for r in summary["ranks_analyzed"]:
        if r == drilled:
            continue
        other = ops_ms_per_step(run, r, traces)
        diffs = [other[n] - mine[n] for n in other if n in mine]
        if not diffs:
            continue
        mean = sum(diffs) / len(diffs)
        slow = len(slower_steps(other, mine, base / 2))
        if mean > base and slow >= len(diffs) / 2:
            return (f"rank {r}'s operators ran {mean:.1f} ms slower than rank {drilled}'s on average (base threshold "
                    f"{base:.1f} ms), at least {base / 2:.1f} ms slower in {slow} of {len(diffs)} profiled steps: a second "
                    "straggler the drill did not plant")
    return None


def skip_if_the_drill_freed_cpu(run: Path, summary: dict, drilled: int, truth: DrillTruth, added: float, band: float,
                                tolerance: float, traces: Path | None, figure: str) -> None:
    """Skip, with the figures, a drill run whose in-run truth is no known answer for the what-if:
    one where the other ranks ran their operators faster in the drilled steps than in their
    undrilled neighbours, by more than the tolerance of the truth and by at least half of the
    disagreement.

    Why: the truth (the job's step time, drilled minus neighbours) equals the drilled rank's what-if
    cost only if the drill leaves the other ranks' work alone. On this 2-core VM, a process outside
    the job that wants CPU (another test suite, a leftover process: seen in a CI run) time-shares the
    core of one pinned rank and moves to the sleeping rank's core during the drill; that rank then
    runs up to twice as fast in the drilled steps (measured: operators 25 ms faster per drilled step,
    47-59 ms against 69-81 ms; the what-if, which puts the drilled rank at the others' pace in the
    same step, said 67.6 ms per drilled step against a job-time truth of 37.5 for a 60 ms sleep).
    A quiet run shows 1-2 ms. The speed-up is measured in the traces (ops_ms_per_step), with the
    truth's own statistic (paired_differences), so this skip cannot hide a wrong analysis on a
    quiet machine, and it is only consulted once the band check has failed."""
    import statistics

    import pytest

    if added <= truth.truth_ms:  # a freed core makes the what-if larger than the truth, never smaller
        return
    for r in summary["ranks_analyzed"]:
        if r == drilled:
            continue
        diffs = paired_differences(ops_ms_per_step(run, r, traces), truth.drilled_steps)
        speedup = -statistics.median(diffs) if diffs else 0.0
        if speedup > tolerance * truth.truth_ms and speedup >= (added - truth.truth_ms) / 2:
            pytest.skip(f"the drill freed CPU for rank {r}: its operators ran {speedup:.1f} ms faster per drilled step "
                        f"than in its undrilled neighbours (another process shares these cores), so the job-time truth "
                        f"is no known answer for the what-if here: {figure} (band {band:.1f} ms)")


def assert_straggler_drill_verdict(summary: dict, truth: DrillTruth, rank: int, run: Path, cause: str = "host_gap",
                                   tolerance: float = 0.15, traces: Path | None = None) -> str:
    """The checks of issue 10's live drills, one definition for the local and the SLURM drill.

    Always: the cost the analysis adds in the drilled steps (`drill_added_cost`) is within
    `tolerance` of the in-run truth (the band widened by two standard errors of the truth, which is
    measured too). Then the flag checks, whose failure counts unless the traces show a second
    straggler the drill did not plant (`unplanned_straggler`: then the failure is given as a warning
    with that figure, as the run holds no known answer for the flag): the drilled rank is named first,
    the excess in `cause` matches the sleep it recorded (see the comment below), the reported cost
    per step is at least (1 - tolerance) x the truth scaled to the profiled steps, and the console's
    top straggler, the report's first straggler row and the first recommendation name that rank.
    Returns a one-line figure."""
    import warnings

    strag = summary["stragglers"]
    figure = (f"truth {truth.truth_ms:.1f} +/- {truth.uncertainty_ms:.1f} ms on drilled steps, expected cost {truth.expected_cost_ms:.1f} ms/step "
              f"({truth.drilled_profiled} of {truth.profiled} profiled steps drilled), estimated "
              f"{strag[0]['cost_ms_per_step'] if strag else 0.0:.1f} ms/step for rank {strag[0]['rank'] if strag else None}")
    assert truth.expected_cost_ms > 0, figure
    costs = per_step_costs(summary, rank)
    added, n_d, n_u = drill_added_cost(costs, truth)
    added_se = median_se(paired_differences(costs, truth.drilled_steps))
    figure += (f"; drill-added cost {added:.1f} +/- {added_se:.1f} ms per drilled step (median over {n_d} drilled profiled "
               f"steps of the what-if cost minus its undrilled neighbours', {n_u} undrilled) against the truth {truth.truth_ms:.1f}")
    # Both sides are measured over the same few drilled steps, each with its own noise: the band is
    # widened by 2 standard errors of their difference. (Widened by the truth's alone, a full-suite
    # run failed at 51.4 against 66.0 +/- 1.8 ms, band 13.5 ms, with a mean cost of 34.4 ms/step
    # against the expected 33.0: the 5 per-step costs scattered, as the job's 5 step times did not.)
    band = tolerance * truth.truth_ms + 2 * math.hypot(truth.uncertainty_ms, added_se)
    if abs(added - truth.truth_ms) > band:
        skip_if_the_drill_freed_cpu(run, summary, rank, truth, added, band, tolerance, traces, figure)
    assert abs(added - truth.truth_ms) <= band, f"{figure} (band {band:.1f} ms)"
    try:
        figure = _assert_drilled_rank_named(summary, truth, rank, cause, tolerance, figure)
    except AssertionError as exc:
        second = unplanned_straggler(run, summary, rank, traces)
        if second is None:
            raise
        figure = f"{exc}; flag checks not applicable: {second}; flagged {[(s['rank'], s['cost_ms_per_step']) for s in strag]}"
        warnings.warn(figure)
    return figure


def _assert_drilled_rank_named(summary: dict, truth: DrillTruth, rank: int, cause: str, tolerance: float, figure: str) -> str:
    """The flag checks of assert_straggler_drill_verdict (named first, cause, cost per step, console,
    report and recommendation agree); returns the figure with the cause added."""
    import re

    from hpcprof.analysis.outputs.console import console_summary

    strag = summary["stragglers"]
    assert strag, f"no straggler flagged in the drill run; {figure}; per rank: " + str(
        [(r["rank"], r.get("whatif_cost_ms_per_step")) for r in summary["per_rank"]])
    top = strag[0]
    assert top["rank"] == rank, (figure, strag)
    # The cause. Its measurable truth is where the drill put its time: the sleep is un-annotated host
    # time, and the step records say how long the rank really slept (truth.slept_ms, per profiled
    # step). The host_gap excess the analysis finds in the windows before rank 1's late arrivals must
    # match that sleep, not the job-time increase: a sleep can overlap time the other rank spent
    # anyway (CI, full suite: 60 ms slept, 42.2 +/- 5.1 ms job-time increase, host_gap excess 59.6 ms
    # per drilled step: the excess was right and the old comparison with the increase was the wrong
    # truth). A core that slows down for a while on the drilled rank puts cpu_work beside the sleep:
    # the named cause may then be "mixed", accepted only with `cause` among the top two.
    excess = top["cause_excess_ms_per_step"]
    in_cause = excess.get(cause, 0.0)
    figure += (f"; {cause} excess {in_cause:.1f} ms/step (slept {truth.slept_ms:.1f} ms per profiled step); "
               f"named cause {top['cause']} {top['cause_shares']}")
    assert abs(in_cause - truth.slept_ms) <= tolerance * truth.slept_ms, figure
    ranked = sorted(excess, key=excess.get, reverse=True)
    assert top["cause"] == cause or cause in ranked[:2], figure
    share = truth.drilled_profiled / truth.profiled
    assert top["cost_ms_per_step"] >= (1 - tolerance) * truth.expected_cost_ms - 2 * truth.uncertainty_ms * share, figure
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


def processes_naming(folder: Path) -> list:
    """Every process of the machine (psutil.Process) whose command line or working folder names
    `folder`, this one and zombies left out: what a command run for a test under `folder` still has
    running (the submitit controller and the ranks name their run's folder; a process started
    after the test listed the command's tree, a DataLoader worker say, is caught too)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            text = " ".join(p.info["cmdline"] or []) + " " + (p.info["cwd"] or "")
            if str(folder) in text and p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def left_running(folder: Path, timeout: float = 30) -> list[str]:
    """The processes naming `folder` (:func:`processes_naming`) still running after up to `timeout`
    s, as "pid command"; they are then killed, so that none outlives the test."""
    import time

    deadline = time.time() + timeout
    while (procs := processes_naming(folder)) and time.time() < deadline:
        time.sleep(0.2)
    return kill_and_name(procs)


def kill_and_name(procs) -> list[str]:
    """Kill each process still there (so none outlives the test) and name it as "pid command"."""
    import psutil

    left = []
    for p in procs:
        try:
            left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return left
