"""What-if replay of each profiled step: what every rank costs the job, the job's straggler slowdown,
and whether collective instances matched across ranks can be trusted.

Why a replay: "the others waited X ms for rank s" is not what s costs the job. Waits overlap, a
rank that is late at one collective may be early at the next, and the delay a late rank causes
propagates through every later collective. The question a user acts on is "how much faster would
the step be if s behaved like the others?"; a replay of the step's dependency graph answers it.

The step graph and its replay (the model) are in reduce/step_graph.py, the cause of a straggler's
cost in reduce/cause.py; this module asks the replay what each rank costs and flags the stragglers.

Flag rule: a rank is a straggler when its cost exceeds max(NOISE_FLOOR_MS, REL_THRESHOLD x that
step's time) PLUS the other ranks' typical cost (over the other ranks, the median of their median
cost over the profiled steps), in at least MIN_STEP_SHARE of the profiled steps; stragglers are
ordered by their mean cost. Why the others' cost is added: the
replay puts s at the others' median, which removes s's step-to-step noise as well as any lateness,
so in a job whose ranks jitter every rank has a positive cost (2 ranks with independent jitter of
standard deviation sd per segment: about 0.56 sd per segment each; measured on the 2-rank CPU
demo: both ranks 15-55 ms in a 550 ms step). What the others typically cost is that noise level;
a straggler costs more than it, a healthy rank of a jittery job does not. Typical, not the same
step's: in a step where another rank was itself late elsewhere (a core slowing down for a moment),
its cost is its own lateness, not jitter, and must not hide the straggler's (a live drill missed
one of its 5 drilled steps that way). A real straggler
among ranks that do not jitter (8-rank GPU jobs, the trace drills) meets others' costs near zero,
so the threshold is unchanged there. The same holds across steps: where the late rank changes
from step to step (2 ranks whose cores slow down in turn), each is above the threshold in about
half of the steps; so a straggler must also cost more than the other ranks over the profiled
steps: its mean cost minus the median of the other ranks' mean costs above the (median) base
threshold. The price of holding each rank against the others: with two ranks that are both late
through most steps (each at its own point of the step), each is held against the other and
neither may be flagged; their costs still show in per_rank (docs/analysis.md, "Straggler flag").
NOISE_FLOOR_MS (1 ms): below it scheduling and clock jitter dominate, and nothing a user
could fix is that small per step; REL_THRESHOLD (5%): a rank costing less than a twentieth of the
step is not worth chasing before the job's other recommendations; MIN_STEP_SHARE (0.5, at least
half): a straggler is late persistently or periodically (a rank late every second step, as a
periodic checkpoint, GC or slow shard causes, costs the job its mean cost every step), not once.

Matching: see hpcprof.analysis.reduce.matching (only trusted instances reach the replay).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..ranks.categories import CAUSE_CATEGORIES
from .cause import CAUSE_TEXT, ClockIndex, cause_clock, name_cause, window_excesses
from .matching import Matching, match_collectives
from .step_graph import build_graphs, replay, scenarios

MAX_REPLAY_ERROR_PCT = 3.0  # above it the replay does not reproduce the step: the costs get a warning
NOISE_FLOOR_MS = 1.0
REL_THRESHOLD = 0.05
MIN_STEP_SHARE = 0.5
BASE_THRESHOLD_TEXT = f"max({NOISE_FLOOR_MS:g} ms, {100 * REL_THRESHOLD:g}% of the step)"
"""The base straggler threshold in words, for the report and the recommendations (one definition)."""
NO_STRAGGLER_TEXT = (f"no rank costs the job more than the threshold ({BASE_THRESHOLD_TEXT}, plus what the other "
                     "ranks cost from their own jitter) in most profiled steps")


# --------------------------------------------------------------------------------------- result
@dataclass
class WhatIf:
    steps: pd.DataFrame  # step, measured_ms, replayed_ms, replay_error_pct, ideal_ms, threshold_ms
    costs: pd.DataFrame  # rank, step, cost_ms, wait_ms, others_cost_ms, threshold_ms, above
    per_rank: pd.DataFrame  # rank, whatif_cost_ms_per_step, whatif_cost_ms_per_step_median, steps_above_share
    stragglers: list
    collectives: pd.DataFrame
    matching: Matching | None
    straggler_slowdown: float | None
    replay_error_pct: float | None  # largest |error| over the profiled steps
    warnings: list = field(default_factory=list)
    # every rank's window excess per category (ms per profiled step, before netting): what its cause
    # would be read from, flagged or not; {} without category data
    excess_ms_per_step: dict = field(default_factory=dict)
    graphs: list = field(default_factory=list)
    """The replayed step graphs (StepGraph), for the critical path (reduce/critical_path.py)."""


def analyze(colls: pd.DataFrame, steps: pd.DataFrame | None, hosts: dict) -> WhatIf:
    """The what-if analysis of a job from the per-rank collectives and steps tables (module docstring).

    `colls`: rank, group, kind, seq, step, idx, arrival_us, end_us and, for the cause, the
    cumulative category columns cum_<category>_{arrival,end}_ms. `steps`: rank, step, ts_us, end_us
    [, device_end_us, cum_<category>_{start,stop}_ms]. `hosts`: rank -> host (one clock per host)."""
    empty = WhatIf(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), [], pd.DataFrame(), None, None, None, [])
    if colls is None or colls.empty or colls["rank"].nunique() < 2:
        return empty
    mt = match_collectives(colls, hosts)
    graphs = [g for g in build_graphs(mt.df, steps, mt.offsets) if g.member.shape[1] > 0]
    if not graphs:
        empty.matching, empty.warnings = mt, list(mt.warnings)
        return empty
    step_rows, cost_rows = [], []
    excess_sum: dict[int, np.ndarray] = {}
    index = ClockIndex(mt.df, steps)
    have_cause = True
    for g in graphs:
        seg, tail = scenarios(g)
        t = replay(g, seg, tail)
        thr = max(NOISE_FLOOR_MS, REL_THRESHOLD * g.measured_ms)
        step_rows.append({"step": g.step, "measured_ms": g.measured_ms, "replayed_ms": t[0], "ideal_ms": t[-1],
                          "replay_error_pct": 100 * (t[0] - g.measured_ms) / g.measured_ms if g.measured_ms else 0.0,
                          "threshold_ms": thr, "collectives": g.member.shape[1]})
        last_arr = np.nanmax(g.arrival, axis=0)
        step_costs = t[0] - t[1:1 + len(g.ranks)]
        excess = window_excesses(g, cause_clock(g, mt.df, steps, index))
        have_cause = have_cause and excess is not None
        for i, r in enumerate(g.ranks):
            cost = float(step_costs[i])
            # a rank's time in the matched collectives: waiting for the last arrival, then the transfer
            wait = float(np.nansum(np.where(g.member[i], last_arr - g.arrival[i], 0.0))) / 1e3
            inside = float(np.nansum(np.where(g.member[i], g.coll_end[i] - g.arrival[i], 0.0))) / 1e3
            cost_rows.append({"rank": int(r), "step": g.step, "cost_ms": cost, "wait_ms": wait, "in_collectives_ms": inside,
                              "transfer_ms": max(0.0, inside - wait), "base_threshold_ms": thr})
            if excess is not None:
                excess_sum[int(r)] = excess_sum.get(int(r), np.zeros(len(CAUSE_CATEGORIES))) + excess[i]
    st = pd.DataFrame(step_rows)
    costs = pd.DataFrame(cost_rows)
    # the jitter level each rank is held against: the median, over the other ranks, of their median
    # cost over the profiled steps (see the module docstring, "Flag rule")
    typical = costs.groupby("rank")["cost_ms"].median()
    noise = {r: max(0.0, float(typical.drop(r).median())) if len(typical) > 1 else 0.0 for r in typical.index}
    costs["others_cost_ms"] = costs["rank"].map(noise)
    costs["threshold_ms"] = costs["base_threshold_ms"] + costs["others_cost_ms"]
    costs["above"] = costs["cost_ms"] > costs["threshold_ms"]
    costs = costs.drop(columns="base_threshold_ms")
    g = costs.groupby("rank")
    n_steps = len(graphs)
    per_rank = pd.DataFrame({
        "whatif_cost_ms_per_step": g["cost_ms"].mean(),
        "whatif_cost_ms_per_step_median": g["cost_ms"].median(),
        "steps_above_share": g["above"].sum() / n_steps,
        "wait_ms_per_step": g["wait_ms"].mean(),
        "transfer_ms_per_step": g["transfer_ms"].mean(),
        "in_collectives_ms_per_step": g["in_collectives_ms"].mean(),
    }).reset_index()
    excess_per_step = {r: {c: round(float(v) / n_steps, 3) for c, v in zip(CAUSE_CATEGORIES, e)}
                       for r, e in sorted(excess_sum.items())} if have_cause else {}
    stragglers = []
    base_thr = float(st["threshold_ms"].median())
    for row in per_rank.sort_values(["whatif_cost_ms_per_step", "rank"], ascending=[False, True]).itertuples():
        others_mean = per_rank.loc[per_rank["rank"] != row.rank, "whatif_cost_ms_per_step"]
        excess = row.whatif_cost_ms_per_step - max(0.0, float(others_mean.median()) if len(others_mean) else 0.0)
        if not (row.steps_above_share >= MIN_STEP_SHARE and excess > base_thr):
            continue
        mine = costs[costs["rank"] == row.rank]
        total = float(mine["cost_ms"].clip(lower=0).sum())
        ex = dict(zip(CAUSE_CATEGORIES, excess_sum[row.rank].tolist())) if have_cause else None
        cause, shares = name_cause(ex, total)
        flagged = int(mine["above"].sum())
        stragglers.append({
            "rank": int(row.rank),
            "cost_ms_per_step": round(float(row.whatif_cost_ms_per_step), 3),
            "cost_ms_per_step_median": round(float(row.whatif_cost_ms_per_step_median), 3),
            "steps_flagged": flagged,
            "steps": n_steps,
            "late_in_steps_share": round(float(row.steps_above_share), 3),
            # the share of profiled steps above the threshold, x n/(n+1): one profiled step gives at most 0.5
            "confidence": round(flagged / n_steps * n_steps / (n_steps + 1), 3),
            "cause": cause,
            "cause_detail": CAUSE_TEXT.get(cause, cause) if cause != "mixed" else
            "mixed: " + ", ".join(f"{c} {100 * v:.0f}%" for c, v in shares.items()) + " of the cost",
            "cause_shares": shares,
            "cause_excess_ms_per_step": excess_per_step.get(int(row.rank), {}),
            "threshold_ms": round(float(mine["threshold_ms"].median()), 3),
            "base_threshold_ms": round(base_thr, 3),
            "excess_over_others_ms_per_step": round(float(excess), 3),
            "others_cost_ms_per_step": round(float(mine["others_cost_ms"].median()), 3),
            "others_wait_ms_per_step": round(float(per_rank.loc[per_rank["rank"] != row.rank, "wait_ms_per_step"].median()), 3),
        })
    ideal = float(st["ideal_ms"].sum())
    slowdown = float(st["replayed_ms"].sum()) / ideal if ideal > 0 else None
    err = float(st["replay_error_pct"].abs().max())
    warnings = list(mt.warnings)
    return WhatIf(st, costs, per_rank, stragglers, _collectives_table(mt.df), mt, slowdown, err, warnings, excess_per_step, graphs)


def _collectives_table(m: pd.DataFrame) -> pd.DataFrame:
    """One row per matched collective: who arrived last, the skew and the transfer time."""
    if m.empty:
        return pd.DataFrame()
    g = m.groupby("key")
    last = m.loc[g["arrival"].idxmax(), ["key", "rank"]].set_index("key")["rank"]
    out = pd.DataFrame({
        "group": g["group"].first(), "kind": g["kind"].first(), "step": g["step"].max(), "n_ranks": g["rank"].nunique(),
        "first_arrival_us": g["arrival"].min(), "last_arrival_us": g["arrival"].max(), "end_us": g["end"].median(),
        "last_rank": last,
    })
    out["skew_ms"] = (out["last_arrival_us"] - out["first_arrival_us"]) / 1e3
    out["transfer_ms"] = (out["end_us"] - out["last_arrival_us"]) / 1e3
    # what the others spent waiting for the last arrival, summed over the ranks
    out["waited_ms"] = (m["key"].map(out["last_arrival_us"]) - m["arrival"]).clip(lower=0).groupby(m["key"]).sum() / 1e3
    for col in ("msg_bytes", "comms_id", "seq", "comm_reason"):
        if col in m:
            out[col] = g[col].median() if col == "msg_bytes" else g[col].first()
    return out.reset_index().sort_values("first_arrival_us", ignore_index=True)
