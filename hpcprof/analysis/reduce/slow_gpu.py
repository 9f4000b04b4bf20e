"""The slow GPU, named: identical GPU work compared across ranks.

Input: each rank's compute kernels grouped by what identifies identical work (ranks/kernel_work.py:
kernel name, grid and block; communication kernels left out, their duration includes waiting).

Per rank, over the groups present on every analysed rank:
- per group, the rank's time per call over the median of the other ranks' times per call (the
  reference does not hold the rank itself, so a stretched rank does not move its own reference);
- the rank's ratio: the median of those per-group ratios weighted by the group's time (the median
  over ranks of its total time): large kernels weigh most, and a few outlier kernels (one long
  embedding lookup, a kernel that waited for a page fault) cannot move it, as they would a mean.

A rank is named a slow GPU when its ratio exceeds 1 by more than MIN_SLOWER and by more than
SPREAD_K times the other ranks' spread (1.4826 x the median absolute deviation of their ratios from
1, the normal-consistent robust spread): "rank 5: the same kernels 14% slower than the median
rank's: a slow or throttled GPU". Beside it, per rank, its work: total compute-kernel time, and the
part of it from kernels the other ranks lack or from calls beyond the median rank's count of a
kernel ("more work"), so that a `gpu_compute` straggler can be told apart: slower kernels, or more.

summary.json `slow_gpu`, tables/slow_gpu.csv (docs/analysis.md "The slow GPU").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

MIN_SLOWER = 0.05
"""Below 5% slower, identical kernels differ across healthy GPUs of one job (clocks, placement of
the data, timer resolution of a few-µs kernel): not named, whatever the spread."""
SPREAD_K = 3.0
"""How many robust spreads of the other ranks a ratio must exceed to be named."""
MAD_SCALE = 1.4826
RULE = (f"named when the rank's ratio exceeds 1 by more than {100 * MIN_SLOWER:.0f}% and by more than "
        f"{SPREAD_K:g} x the other ranks' spread (1.4826 x their median absolute deviation from 1)")
KEY = "kernel name, grid and block (communication kernels left out)"


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value at which half the weight lies at or below (the lower weighted median)."""
    o = np.argsort(values, kind="stable")
    cw = np.cumsum(weights[o])
    return float(values[o][np.searchsorted(cw, cw[-1] / 2.0)])


def slow_gpu(work: pd.DataFrame) -> dict[str, Any]:
    """summary.json `slow_gpu` from every rank's kernel_work table (with a rank column)."""
    out: dict[str, Any] = {"key": KEY, "rule": RULE, "groups_compared": 0, "per_rank": [], "named": [], "reason": None}
    if work is None or work.empty or "key" not in work:
        out["reason"] = "no compute kernels in the traces (a CPU run, or a trace without kernel activity)"
        return out
    work = work[work["count"] > 0]
    ranks = sorted(int(r) for r in work["rank"].unique())
    if len(ranks) < 2:
        out["reason"] = "compute kernels on one rank only: nothing to compare them with"
        return out
    total = work.pivot_table(index="key", columns="rank", values="total_us", aggfunc="sum")
    count = work.pivot_table(index="key", columns="rank", values="count", aggfunc="sum")
    common = total.dropna().index
    out["groups_compared"] = len(common)
    if not len(common):
        out["reason"] = "no kernel (name, grid, block) ran on every rank: no identical work to compare"
        return out
    t, n = total.loc[common, ranks].to_numpy(float), count.loc[common, ranks].to_numpy(float)
    per_call = t / n
    weight = np.median(t, axis=1)
    med_n = np.median(n, axis=1)
    ratios = {}
    for j, r in enumerate(ranks):
        ref = np.median(np.delete(per_call, j, axis=1), axis=1)
        ok = ref > 0
        ratios[r] = weighted_median(per_call[ok, j] / ref[ok], weight[ok]) if ok.any() else float("nan")
    compute = total.fillna(0.0)[ranks].sum(axis=0)
    same = {r: float((np.minimum(n[:, j], med_n) * per_call[:, j]).sum()) for j, r in enumerate(ranks)}
    other = {r: float(compute[r]) - same[r] for r in ranks}  # kernels the others lack, calls beyond the median count
    med_other, med_compute = float(np.median(list(other.values()))), float(np.median(compute.to_numpy()))
    for r in ranks:
        dev = np.array([ratios[o] - 1.0 for o in ranks if o != r and np.isfinite(ratios[o])])
        spread = MAD_SCALE * float(np.median(np.abs(dev))) if dev.size else 0.0
        threshold = max(MIN_SLOWER, SPREAD_K * spread)
        ratio = ratios[r]
        row = {"rank": r, "ratio": ratio, "slower_pct": 100.0 * (ratio - 1.0), "threshold_pct": 100.0 * threshold,
               "compared_ms": float(t[:, ranks.index(r)].sum()) / 1e3, "compute_ms": float(compute[r]) / 1e3,
               "compute_vs_median_ms": (float(compute[r]) - med_compute) / 1e3, "more_work_ms": (other[r] - med_other) / 1e3}
        row["slow"] = bool(np.isfinite(ratio) and ratio - 1.0 > threshold)
        row["text"] = named_text(row) if row["slow"] else None
        out["per_rank"].append(row)
        if row["slow"]:
            out["named"].append(r)
    return out


def named_text(row: dict) -> str:
    return f"rank {row['rank']}: the same kernels {row['slower_pct']:.0f}% slower than the median rank's: a slow or throttled GPU"


def gpu_compute_evidence(sg: dict | None, rank: int) -> str | None:
    """What the slow-GPU comparison says of a straggler whose cause is `gpu_compute`: its kernels for
    identical work were slower, or it ran more kernel work, or neither; None without a comparison."""
    row = next((x for x in (sg or {}).get("per_rank") or [] if x["rank"] == rank), None)
    if row is None or not np.isfinite(row["ratio"]):
        return None
    if row["slow"]:
        return named_text(row)
    more, extra = row["more_work_ms"], row["compute_vs_median_ms"]
    if extra > 0 and more >= 0.5 * extra:
        return (f"rank {rank} did more GPU work: {extra:.2f} ms more compute-kernel time than the median rank, {more:.2f} ms "
                f"of it from kernels the other ranks lack or more calls (the same kernels {row['slower_pct']:+.0f}% vs the median rank's)")
    return (f"rank {rank}: the same kernels {row['slower_pct']:+.0f}% vs the median rank's (not named a slow GPU: "
            f"threshold {row['threshold_pct']:.0f}%), {extra:+.2f} ms compute-kernel time vs the median rank")


def slow_gpu_table(sg: dict | None) -> pd.DataFrame:
    """tables/slow_gpu: one row per rank."""
    rows = (sg or {}).get("per_rank") or []
    cols = ["rank", "ratio", "slower_pct", "threshold_pct", "slow", "compared_ms", "compute_ms", "compute_vs_median_ms", "more_work_ms", "text"]
    return pd.DataFrame(rows, columns=cols)
