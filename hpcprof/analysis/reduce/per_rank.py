"""The per-rank table (tables/per_rank, summary.json per_rank): one row of headline numbers per rank,
and the node each rank ran on."""

from __future__ import annotations

import pandas as pd


def _rank_entry(e) -> bool:
    """A manifest rank entry the analysis can use: an object whose rank is a number >= 0."""
    r = e.get("rank") if isinstance(e, dict) else None
    return isinstance(r, int) and not isinstance(r, bool) and r >= 0


def checked_rank_entries(manifest: dict, warnings: list[str]) -> None:
    """Name in `warnings`, in one line, the manifest's rank entries whose rank is not a number >= 0
    (left out: their ranks' nodes come from the traces). Why: `"rank": "a"` made the analysis fail
    whole (issue 37, item 15)."""
    entries = manifest.get("ranks") if isinstance(manifest.get("ranks"), list) else []
    bad = [e for e in entries if not _rank_entry(e)]
    if bad:
        shown = ", ".join(repr(e.get("rank") if isinstance(e, dict) else e)[:40] for e in bad[:8]) + (", ..." if len(bad) > 8 else "")
        warnings.append(f"manifest.json: {len(bad)} ranks entr{'ies' if len(bad) != 1 else 'y'} without a rank number >= 0 "
                        f"left out (rank {shown}); their nodes come from the traces")


def node_names(manifest: dict, metas: dict[int, dict]) -> dict[int, str | None]:
    """Rank -> node: the manifest's (the launcher knows), else the host name the trace recorded."""
    nodes = {}
    entries = manifest.get("ranks") if isinstance(manifest.get("ranks"), list) else []
    for e in entries:
        if _rank_entry(e):
            node = e.get("node")
            nodes[e["rank"]] = node if isinstance(node, str) else None if node is None else str(node)
    for r, m in metas.items():
        nodes.setdefault(r, m.get("host"))
    return nodes


def job_device(metas: dict[int, dict]) -> str:
    """"cuda" when any rank ran CUDA/ROCm kernels, "accelerator" when a rank shows other device-stream
    activity (MTIA...; ranks.timeline.RankTimeline.device_kind), else "cpu"."""
    kinds = {m.get("device") for m in metas.values()}
    return "cuda" if "cuda" in kinds else "accelerator" if "accelerator" in kinds else "cpu"


def per_rank_table(metas: dict[int, dict], nodes: dict, steps_trace: pd.DataFrame, step_stats: pd.DataFrame) -> pd.DataFrame:
    """Step time (step records, else the trace's ProfilerSteps), HTA's temporal breakdown and
    overlap, the same with our communication kernels (`*_hpcprof`: equal to HTA's where every
    communication kernel is NCCL-named), and the host-side shares of the profiled steps, per rank."""
    rows = []
    # each rank's rows split off once (the same rows in the same order as a mask per rank; with the
    # step total summed once, not four times)
    by_rank = dict(tuple(steps_trace.groupby("rank", sort=False))) if not steps_trace.empty else {}
    stats_by_rank = dict(tuple(step_stats.groupby("rank", sort=False))) if not step_stats.empty else {}
    for r, m in metas.items():
        t = m.get("temporal") or {}
        # ours: communication by what the trace says (ranks/comm_kernels.py); HTA's where they agree
        ours = m.get("hpcprof_temporal") or t
        ours_overlap = m.get("hpcprof_overlap_pct") if m.get("hpcprof_temporal") else m.get("overlap_pct")
        st = by_rank.get(r, pd.DataFrame())
        js = stats_by_rank.get(r, pd.DataFrame())
        trace_step = float(st["dur_ms"].median()) if not st.empty else None
        step_time = float(js["step_median_ms"].iloc[0]) if not js.empty else trace_step
        total = st["dur_ms"].sum() if not st.empty else 0
        rows.append(
            {
                "rank": r,
                "node": nodes.get(r),
                "file": m["file"],
                "step_time_ms": step_time,
                "trace_step_time_ms": trace_step,
                "profiled_steps": int(len(st)),
                "idle_pct": t.get("idle_time_pctg"),
                "compute_pct": t.get("compute_time_pctg"),
                "non_compute_pct": t.get("non_compute_time_pctg"),
                "comm_comp_overlap_pct": m.get("overlap_pct"),
                "compute_pct_hpcprof": ours.get("compute_time_pctg"),
                "non_compute_pct_hpcprof": ours.get("non_compute_time_pctg"),
                "comm_comp_overlap_pct_hpcprof": ours_overlap,
                "idle_time_us": t.get("idle_time(us)"),
                "compute_time_us": t.get("compute_time(us)"),
                "non_compute_time_us": t.get("non_compute_time(us)"),
                "kernel_time_us": t.get("kernel_time(us)"),
                "host_data_loading_pct": float(100 * st["data_loading_ms"].sum() / total) if total else None,
                "host_gap_pct": float(100 * st["host_gap_ms"].sum() / total) if total else None,
            }
        )
    return pd.DataFrame(rows)
