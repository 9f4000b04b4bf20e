"""Operator and kernel-launch views across ranks: the per-rank tables of the map
(ranks/operators.py) gathered, and the launch statistics (hta/launches.py) summarised per rank, with the
recommendation when the GPU waits on launches.

Why a recommendation here and not in recommend.py: it reads only these tables, and its rule is
stated next to the numbers it uses:
- the GPU waits on launches on a rank when more than SHORT_SHARE of its GPU events are shorter than
  the launch call that started them (the CPU cannot issue work as fast as the GPU finishes it) and
  at least HOST_WAIT_PCT of that rank's GPU time (first to last kernel) is idle in HTA's
  `host_wait` category (HTA's GPU idle % split by the categories' shares of the idle-time
  breakdown, summed over streams: the GPU idle because the host had not launched the next kernel);
- its score is the host-wait share of GPU time, like the other recommendations' scores (the share of
  the step a fix could win).
"""

from __future__ import annotations

import pandas as pd

from ..hta.launches import launch_summary
from ..ranks.result import rank_arrow, read_rank_tables

SHORT_SHARE = 0.5
HOST_WAIT_PCT = 10.0


def gather(tables: dict[int, str | None]) -> pd.DataFrame:
    """Rank -> parquet path (or None) into one frame with a `rank` column."""
    return read_rank_tables(sorted(tables.items()))


class RankParts:
    """A table kept as its per-rank Parquet files (rank -> path) and written out a few ranks at a
    time (outputs/tables.write_table): the per-launch table is thousands of rows per rank (1.6
    million at 256 ranks), and the parent holds at most BATCH_ROWS rows of it, never all."""

    BATCH_ROWS = 50_000
    """Rows handed out at once by `frames` (consecutive ranks joined up to this many)."""

    def __init__(self, parts: dict[int, str | None]):
        self.parts = {r: p for r, p in sorted(parts.items()) if p}

    def frames(self):
        """The non-empty ranks' rows, with their `rank` column, in rank order: consecutive ranks
        whose tables have the same columns and types joined, up to BATCH_ROWS rows a frame (one
        frame a rank made the writing grow with the ranks: benchmarks/README.md; the same frames as
        concatenating each rank's, as the joined tables have one schema)."""
        import pyarrow as pa

        batch, rows = [], 0
        for r, p in self.parts.items():
            t = rank_arrow(r, p)
            if t is None:
                continue
            if batch and (rows + t.num_rows > self.BATCH_ROWS or not t.schema.equals(batch[0].schema, check_metadata=True)):
                yield pa.concat_tables(batch).to_pandas().reset_index(drop=True)
                batch, rows = [], 0
            batch.append(t)
            rows += t.num_rows
        if batch:
            yield pa.concat_tables(batch).to_pandas().reset_index(drop=True)

    def rank_frames(self):
        """Each non-empty rank's rows, with its `rank` column, in rank order (index 0..n-1)."""
        for f in self.frames():
            for _, g in f.groupby("rank", sort=False):
                yield g.reset_index(drop=True)

    @property
    def empty(self) -> bool:
        return not any(rank_arrow(r, p) is not None for r, p in self.parts.items())


def launch_table(launches) -> pd.DataFrame:
    """One row per rank: launch_summary of its launches (empty without launches); `launches`: a
    frame with a rank column, or RankParts (read one rank at a time)."""
    groups = launches.rank_frames() if isinstance(launches, RankParts) else (g for _, g in launches.groupby("rank"))
    rows = [{"rank": int(g["rank"].iloc[0]), **launch_summary(g)} for g in groups]
    return pd.DataFrame(rows)


def launch_recommendation(summary: pd.DataFrame, idle: pd.DataFrame, per_rank: pd.DataFrame) -> dict | None:
    """The 'GPU waits on kernel launches' recommendation, or None (see the module docstring)."""
    if summary.empty or idle is None or idle.empty or "idle_category" not in idle:
        return None
    # HTA's GPU idle % of the rank, split by the idle-time breakdown's category shares (summed over
    # streams), as the idle chart shows it
    by_cat = idle.groupby(["rank", "idle_category"])["idle_time"].sum().unstack(fill_value=0.0)
    idle_pct = per_rank.set_index("rank")["idle_pct"] if "idle_pct" in per_rank else pd.Series(dtype=float)
    hits = []
    for row in summary.itertuples(index=False):
        total = float(by_cat.loc[row.rank].sum()) if row.rank in by_cat.index else 0.0
        share = float(by_cat.loc[row.rank].get("host_wait", 0.0)) / total if total else 0.0
        hw = float(idle_pct.get(row.rank, 0.0) or 0.0) * share
        if row.short_kernel_share > SHORT_SHARE and hw >= HOST_WAIT_PCT:
            hits.append((hw, row))
    if not hits:
        return None
    hw, worst = max(hits, key=lambda x: x[0])
    return {
        "title": "The GPU waits on kernel launches: launch fewer, larger kernels (larger batch, fused ops, CUDA graphs or "
                 "torch.compile(mode='reduce-overhead'))",
        "evidence": (f"on {len(hits)} rank(s) most GPU events are shorter than their launch call; rank {worst.rank}: "
                     f"{100 * worst.short_kernel_share:.0f}% of {worst.launches:,} launches, launch call median "
                     f"{worst.cpu_launch_median_us:.1f} µs vs GPU median {worst.gpu_median_us:.1f} µs, GPU idle waiting "
                     f"for the host {hw:.1f}% of its GPU time (HTA kernel-launch statistics and idle-time breakdown)"),
        "score": hw / 100,
    }


def rank_views(keep: dict) -> dict:
    """The tables `operators`, `kernel_launches` (RankParts) and `launch_summary` of the selected ranks
    (`keep`: rank -> RankResult). They need nothing of the cross-rank reduce, so the pipeline makes
    them while it runs (the charts of them start drawing before the what-if replay ends)."""
    ops = gather({r: v.tables.get("operators") for r, v in keep.items()})
    launches = RankParts({r: v.tables.get("launch_stats") for r, v in keep.items()})
    return {"operators": ops, "kernel_launches": launches, "launch_summary": launch_table(launches)}


def add_launch_recommendation(views: dict, idle: pd.DataFrame, per_rank: pd.DataFrame, recommendations: list[dict]) -> None:
    """The launch recommendation, when it applies, added to `recommendations` in score order
    (`views`: rank_views)."""
    rec = launch_recommendation(views["launch_summary"], idle, per_rank)
    if rec is not None:
        recommendations.append(rec)
        recommendations.sort(key=lambda r: -float(r.get("score") or 0.0))
