"""Step statistics: per rank and profiled step from the traces, every step from steps/*.jsonl."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..run import RunDir

JSONL_TIMES = ("step_s", "data_wait_s", "host_pre_forward_s", "drill_sleep_s", "forward_s", "backward_s", "optimizer_s")


def read_steps_jsonl(run: RunDir) -> pd.DataFrame:
    """All step records of a run (torn last lines skipped); empty frame when there are none."""
    rows = [rec for r in run.step_ranks() for rec in run.read_steps(r)]
    df = pd.DataFrame(rows)
    if df.empty or "rank" not in df or "step" not in df:
        return pd.DataFrame()
    return df


def jsonl_stats(df: pd.DataFrame, skip_first: int = 1) -> pd.DataFrame:
    """Per rank: median/p90/max of each timing (ms), over every step except the first `skip_first`
    (start-up, allocator warm-up) when there are enough steps."""
    if df.empty:
        return pd.DataFrame()
    d = df.sort_values(["rank", "step"])
    if d.groupby("rank").size().min() > skip_first + 2:
        d = d[d.groupby("rank").cumcount() >= skip_first]
    out = []
    for r, g in d.groupby("rank"):
        row = {"rank": int(r), "n_steps": int(len(g))}
        for c in JSONL_TIMES:
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
