"""Step-time statistics: per rank over every step of the step records (steps/rank-<r>.jsonl), and
the spread of the per-rank medians across ranks (from the records, else from the traces'
ProfilerStep durations). The step time the straggler threshold scales with comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from ...rundir import STEP_TIME_KEYS, RunDir

STEP_TIMES = STEP_TIME_KEYS
"""The host timings of a step record (seconds), as the rank side writes them (hpcprof.rundir.records)."""


def read_step_records(run: RunDir, problems: list[str] | None = None) -> pd.DataFrame:
    """All step records of a run (torn last lines skipped; other lines that are not step records are
    skipped and named in `problems`); empty frame when there are none."""
    rows = [rec for r in run.step_ranks() for rec in run.read_steps(r, problems)]
    df = pd.DataFrame(rows)
    if df.empty or "rank" not in df or "step" not in df:
        return pd.DataFrame()
    return df


def per_rank_step_stats(df: pd.DataFrame, skip_first: int = 1) -> pd.DataFrame:
    """Per rank: median/p90/max of each timing (ms) of the step records, over every step except the
    first `skip_first` (start-up, allocator warm-up) when there are enough steps."""
    if df.empty:
        return pd.DataFrame()
    d = df.sort_values(["rank", "step"])
    if d.groupby("rank").size().min() > skip_first + 2:
        d = d[d.groupby("rank").cumcount() >= skip_first]
    out = []
    for r, g in d.groupby("rank"):
        row = {"rank": int(r), "n_steps": int(len(g))}
        for c in STEP_TIMES:
            if c in g and g[c].notna().any():
                v = g[c].astype(float) * 1e3
                base = c[:-2]
                row[f"{base}_median_ms"] = float(v.median())
                row[f"{base}_p90_ms"] = float(np.percentile(v, 90))
                row[f"{base}_max_ms"] = float(v.max())
        if "gpu_ms" in g and g["gpu_ms"].notna().any():
            row["gpu_median_ms"] = float(g["gpu_ms"].astype(float).median())
        out.append(row)
    return pd.DataFrame(out)


def spread(stats: pd.DataFrame, col: str = "step_median_ms") -> dict:
    """How far the per-rank medians of `col` are apart (summary.json `step_time`)."""
    if stats.empty or col not in stats:
        return {}
    v = stats[col]
    return {
        "median_of_rank_medians_ms": float(v.median()),
        "min_rank_median_ms": float(v.min()),
        "max_rank_median_ms": float(v.max()),
        "spread_ms": float(v.max() - v.min()),
        "spread_pct": float(100 * (v.max() - v.min()) / v.median()) if v.median() else None,
        "slowest_rank": int(stats.loc[v.idxmax(), "rank"]),
    }


@dataclass
class StepTimes:
    """The step-time part of the reduce."""

    records: pd.DataFrame
    """Every step record of the analysed ranks (tables/steps_all); empty without steps files."""
    stats: pd.DataFrame
    """per_rank_step_stats of `records` (tables/steps_stats)."""
    spread: dict = field(default_factory=dict)
    """summary.json `step_time`: from the records, else from the traces' ProfilerStep durations."""

    @property
    def median_ms(self) -> float | None:
        """The median of the per-rank median step times (the straggler threshold scales with it)."""
        return self.spread.get("median_of_rank_medians_ms")


def step_times(run: RunDir, ranks: Iterable[int], steps_trace: pd.DataFrame, problems: list[str] | None = None) -> StepTimes:
    records = read_step_records(run, problems)
    if not records.empty:
        records = records[records["rank"].isin(list(ranks))]
    stats = per_rank_step_stats(records)
    sp = spread(stats) if not stats.empty else {}
    if not sp and not steps_trace.empty:
        tstats = steps_trace.groupby("rank")["dur_ms"].median().rename("step_median_ms").reset_index()
        sp = spread(tstats)
    return StepTimes(records, stats, sp)
