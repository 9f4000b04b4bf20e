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
GPU_CLOCK, HOST_CLOCK = "gpu_clock", "host_clock"


def step_time_source(records: pd.DataFrame) -> str:
    """Where a run's step times come from: the GPU's clock when its records carry ``gpu_ms`` (a CUDA
    run: the host's times are launch times there, the host running ahead of the device), else the
    host's clock (``step_s``)."""
    if "gpu_ms" in records and pd.to_numeric(records["gpu_ms"], errors="coerce").notna().any():
        return GPU_CLOCK
    return HOST_CLOCK


def step_seconds(records: pd.DataFrame, source: str | None = None) -> pd.Series:
    """Each record's step time in seconds from `source` (default: :func:`step_time_source`); NaN
    where a GPU run's record has no GPU time (steps of a failing rank whose events never completed)."""
    source = source or step_time_source(records)
    if source == GPU_CLOCK:
        return pd.to_numeric(records["gpu_ms"], errors="coerce") / 1e3
    return pd.to_numeric(records["step_s"], errors="coerce")


def read_step_records(run: RunDir, problems: list[str] | None = None, max_step: int | None = None) -> pd.DataFrame:
    """The usable step records of a run (RunDir.usable_steps: torn last lines, lines that are not
    step records, and records no figure can use, such as another rank's or a step_s of NaN, are
    skipped and named in `problems`); empty frame when there are none. `max_step`: the planned step
    count."""
    rows = [rec for r in run.step_ranks() for rec in run.usable_steps(r, max_step, problems)]
    df = pd.DataFrame(rows)
    if df.empty or "rank" not in df or "step" not in df:
        return pd.DataFrame()
    return flatten_regions(df)


USER_REGION_PREFIX = "region_"
"""Column prefix of user-named regions: ``region_<name>_s`` in the records, ``region_<name>_median_ms``
in the per-rank statistics."""


def flatten_regions(df: pd.DataFrame) -> pd.DataFrame:
    """The records' ``regions`` dicts (user-named regions, hpcprof.rundir.records.StepRecord) as one
    column per name, ``region_<name>_s`` (0 in steps that did not enter it)."""
    if "regions" not in df:
        return df
    regions = df["regions"].apply(lambda v: v if isinstance(v, dict) else {})
    names = sorted({k for d in regions for k in d if isinstance(k, str)})
    out = df.drop(columns="regions")
    for name in names:
        out[f"{USER_REGION_PREFIX}{name}_s"] = [float(d.get(name, 0.0) or 0.0) for d in regions]
    return out


def user_regions(df: pd.DataFrame) -> list[str]:
    """The user-named regions present in flattened records."""
    return [c[len(USER_REGION_PREFIX):-2] for c in df.columns if c.startswith(USER_REGION_PREFIX) and c.endswith("_s")]


def per_rank_step_stats(df: pd.DataFrame, skip_first: int = 1) -> pd.DataFrame:
    """Per rank: median/p90/max of each timing (ms) of the step records, over every step except the
    first `skip_first` (start-up, allocator warm-up) when there are enough steps. ``step_*`` is the
    step time from :func:`step_time_source` (on a GPU the GPU's clock; the host's launch time is then
    ``host_step_*``); the region columns are host times (on a GPU: launch times)."""
    if df.empty:
        return pd.DataFrame()
    source = step_time_source(df)
    d = df.sort_values(["rank", "step"])
    if d.groupby("rank").size().min() > skip_first + 2:
        d = d[d.groupby("rank").cumcount() >= skip_first]
    out = []
    for r, g in d.groupby("rank"):
        row = {"rank": int(r), "n_steps": int(len(g))}
        columns = {c: c[:-2] for c in STEP_TIMES}
        columns.update({f"{USER_REGION_PREFIX}{n}_s": f"{USER_REGION_PREFIX}{n}" for n in user_regions(g)})
        if source == GPU_CLOCK:  # the step's own time is the GPU's; the host's is its launch time
            columns["step_s"] = "host_step"
        for c, base in columns.items():
            if c in g and pd.to_numeric(g[c], errors="coerce").notna().any():
                v = pd.to_numeric(g[c], errors="coerce").dropna() * 1e3
                row[f"{base}_median_ms"] = float(v.median())
                row[f"{base}_p90_ms"] = float(np.percentile(v, 90))
                row[f"{base}_max_ms"] = float(v.max())
        if source == GPU_CLOCK:
            v = step_seconds(g, GPU_CLOCK).dropna() * 1e3
            if len(v):
                row["step_median_ms"] = float(v.median())
                row["step_p90_ms"] = float(np.percentile(v, 90))
                row["step_max_ms"] = float(v.max())
        row["step_time_source"] = source
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
    """Every usable step record of the analysed ranks (tables/steps_all); empty without steps files."""
    stats: pd.DataFrame
    """per_rank_step_stats of `records` (tables/steps_stats)."""
    spread: dict = field(default_factory=dict)
    """summary.json `step_time`: from the records, else from the traces' ProfilerStep durations."""
    job_records: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Every usable step record of every rank of the job, whatever ranks are analysed: the job's
    throughput is the whole job's (with --ranks 0, or a rank whose trace is unusable, it used to be
    one rank's figure labelled as the job's)."""

    @property
    def median_ms(self) -> float | None:
        """The median of the per-rank median step times (the straggler threshold scales with it)."""
        return self.spread.get("median_of_rank_medians_ms")


def step_times(run: RunDir, ranks: Iterable[int], steps_trace: pd.DataFrame, problems: list[str] | None = None,
               max_step: int | None = None) -> StepTimes:
    job_records = read_step_records(run, problems, max_step)
    records = job_records
    if not records.empty:
        records = records[records["rank"].isin(list(ranks))]
    stats = per_rank_step_stats(records)
    sp = spread(stats) if not stats.empty else {}
    if not sp and not steps_trace.empty:
        tstats = steps_trace.groupby("rank")["dur_ms"].median().rename("step_median_ms").reset_index()
        sp = spread(tstats)
    return StepTimes(records, stats, sp, job_records)
