"""Checks that keep impossible cross-rank numbers from being reported as findings.

Why (issue 13): two ranks naming the same host with one clock 2 s ahead gave "rank 1 costs
1513.1 ms/step" on 500 ms steps (9.99e16 ms/step with a larger offset), and nothing said so. Two
facts make such numbers detectable without knowing the truth:

- ranks that name one host read one clock, and DDP keeps the ranks in lock step: the same profiled
  step starts on all of them within about one step time. A larger gap means their traces do not
  share a clock (a trace from another run or machine, a host name reused, a clock stepped while
  tracing); the clock estimator (reduce/clocks.py) cannot correct it, since it assumes one clock per
  host name.
- a straggler's cost is time the job loses per step because of it, which is part of the step: a
  cost above the time of the steps it is averaged over cannot be true, whatever caused it. Those
  steps, not the run's median step: a rank that turns slow late in a run is captured in its slow
  steps (a triggered capture, steps of 540 ms in a run whose median step is 211 ms), and its true
  cost of 207 ms/step was withheld as impossible against the run's median (issue 33's CI run).
  Each step's time here is the longest of the ranks' own step durations: each rank's start and end
  are shifted by the same clock offset, so the clock errors this check is there to catch cannot
  inflate it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ENDED_BADLY = ("failed", "hung")
"""Run states whose last step was cut off (a rank crashed in it, or hung in it and the watchdog ended the job)."""


def same_host_clock_warnings(steps_trace: pd.DataFrame, hosts: dict[int, str | None], step_ms: float | None) -> tuple[list[str], set[int]]:
    """(warnings, ranks whose clock disagrees with the first rank of their host).

    `steps_trace`: the profiled steps of every rank (columns rank, step, ts_us, dur_ms)."""
    if steps_trace is None or steps_trace.empty or not {"rank", "step", "ts_us"} <= set(steps_trace.columns):
        return [], set()
    by_host: dict[str, list[int]] = {}
    for r, h in sorted(hosts.items()):
        if h is not None:
            by_host.setdefault(h, []).append(r)
    starts = steps_trace.pivot_table(index="step", columns="rank", values="ts_us", aggfunc="first")
    durs = steps_trace.groupby("rank")["dur_ms"].median() if "dur_ms" in steps_trace else pd.Series(dtype=float)
    warnings, suspect = [], set()
    for host, ranks in by_host.items():
        ranks = [r for r in ranks if r in starts.columns]
        if len(ranks) < 2:
            continue
        ref = ranks[0]
        off = []
        for r in ranks[1:]:
            d = (starts[r] - starts[ref]).dropna()
            if d.empty:
                continue
            skew_ms = float(d.median()) / 1e3
            step = max([x for x in (step_ms, durs.get(ref), durs.get(r)) if x is not None and x == x] or [0.0])
            if abs(skew_ms) > max(step, 1.0):
                off.append((r, skew_ms))
                suspect.add(r)
        if off:
            gaps = ", ".join(f"rank {r} {skew:+.1f} ms" for r, skew in off)
            warnings.append(
                f"clocks disagree on host {host}: ranks {', '.join(map(str, [ref] + [r for r, _ in off]))} name this host, "
                f"but the same profiled step starts far apart on them (relative to rank {ref}: {gaps}; a step takes "
                f"about {max(step_ms or 0.0, 0.0):.1f} ms); their traces do not share one clock (a trace from another "
                "run or machine, or a clock stepped while tracing): straggler and wait numbers involving them are not reliable"
            )
    return warnings, suspect


def profiled_step_ms(graphs: list, fallback: float | None) -> float | None:
    """The mean time of the profiled steps a straggler's cost is averaged over: per step graph of the
    what-if (reduce.step_graph.StepGraph: `step`, and each rank's `start` and `end`, the step's end
    being its last kernel's on a GPU), the longest of the ranks' own durations; `fallback` where the
    traces hold no step markers (one graph over the whole trace, step -1)."""
    durations = [float(np.max(g.end - g.start)) / 1e3 for g in graphs if g.step != -1]
    return float(np.mean(durations)) if durations else fallback


def plausible_stragglers(stragglers: list[dict], step_ms: float | None) -> tuple[list[dict], list[str]]:
    """(stragglers whose cost fits in a step, a warning for each one withheld); `step_ms`: the
    time of the steps the costs are averaged over (profiled_step_ms)."""
    if not step_ms or step_ms != step_ms:
        return stragglers, []
    kept, warnings = [], []
    for s in stragglers:
        cost = s.get("cost_ms_per_step")
        if isinstance(cost, (int, float)) and cost >= step_ms:
            warnings.append(
                f"straggler verdict on rank {s.get('rank')} withheld: its cost, {cost:.1f} ms/step, exceeds the whole "
                f"step ({step_ms:.1f} ms), which is impossible; the ranks' clocks are probably inconsistent "
                "(see the clock warnings) or the traces are not from one run"
            )
        else:
            kept.append(s)
    return kept, warnings


def cut_failed_steps(state, steps_trace: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """A crashed run: drop the profiled steps from the failing step on (their collectives:
    cut_failed_collectives).

    Why: the step a rank crashed in is cut off (its ProfilerStep ends at the crash: a 0.51 ms step,
    or the survivors' step that only waited), and a recommendation derived from it is wrong. `state`:
    hpcprof.rundir.state.RunState."""
    if state is None or state.state not in ENDED_BADLY:
        return steps_trace
    step = state.failed_step
    how = "hung" if state.state == "hung" else "crashed"
    warnings.insert(0, f"the run {how} ({state.describe()}); this is not the analysis of a normal run"
                       + (f": profiled steps from step {step} on are cut off and left out" if step is not None else ""))
    if step is None:
        return steps_trace
    if not steps_trace.empty and "step" in steps_trace:
        steps_trace = steps_trace[steps_trace["step"] < step].reset_index(drop=True)
    if steps_trace.empty:
        warnings.insert(1, f"no profiled step completed before the {'hang' if how == 'hung' else 'crash'} at step {step}: "
                           "no straggler verdict and "
                           "no recommendation (they would come from a cut-off step)")
    return steps_trace


def cut_failed_collectives(state, colls: pd.DataFrame) -> pd.DataFrame:
    """The collectives of the steps cut_failed_steps keeps (a separate step: the reduce reads the
    collectives only after the charts of per-rank numbers have started)."""
    step = state.failed_step if state is not None and state.state in ENDED_BADLY else None
    if step is None or colls.empty or "step" not in colls:
        return colls
    return colls[(colls["step"] >= 0) & (colls["step"] < step)].reset_index(drop=True)
