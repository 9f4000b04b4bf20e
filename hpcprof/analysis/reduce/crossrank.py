"""The cross-rank reduce: from the per-rank tables the map left, the job's numbers in one object.

It reads only the small Parquet tables of each RankResult, never a trace, and writes nothing: the
outputs package turns a :class:`Reduced` into tables, charts, summary.json and the report. Each step
(step times, per-rank table, kernels, stragglers, recommendations) lives in its own module here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...rundir import RunDir
from ...rundir.state import planned_steps, run_state
from ..progress import Stages
from ..ranks.result import RankResult, read_rank_tables
from . import whatif
from .communication import comm_share_pct, communication, ours_kernel_types
from .critical_path import CriticalPath, critical_paths
from .gpu_summary import gpu_summary
from .op_efficiency import op_efficiency, op_efficiency_table
from .memory_view import memory_view, snapshot_views
from .kernels import kernel_breakdown, kernels_across_ranks
from .per_rank import job_device, node_names, per_rank_table
from .recommend import recommendations
from .sanity import (
    ENDED_BADLY,
    cut_failed_collectives,
    cut_failed_steps,
    plausible_stragglers,
    profiled_step_ms,
    same_host_clock_warnings,
)
from .slow_gpu import gpu_compute_evidence, slow_gpu
from .step_stats import StepTimes, step_times
from .throughput import throughput
from .workload import collective_counts, trained_alone, workload


@dataclass
class RankNumbers:
    """The part of the reduce known before the matching and the what-if replay: what the charts of
    per-rank numbers need (reduce_ranks' `on_ranks`). In a Reduced, `per_rank` also has the columns
    the what-if adds (whatif_cost_ms_per_step, comm_*)."""

    metas: dict[int, dict]
    """Rank -> meta.json of its parse-cache entry."""
    nodes: dict[int, str | None]
    device: str
    steps_trace: pd.DataFrame
    """Every rank's profiled steps (ProfilerStep#N) with the time per category."""
    steps: StepTimes
    per_rank: pd.DataFrame
    kernel_breakdown: pd.DataFrame
    idle: pd.DataFrame
    """HTA's idle-time breakdown per rank and stream."""
    throughput_steps: pd.DataFrame | None
    """Every step record with its phase and samples/s (tables/throughput_steps); None without step records."""


@dataclass
class Reduced(RankNumbers):
    """Everything the outputs need from the reduce."""

    kernels_top: pd.DataFrame
    kernels_all: pd.DataFrame
    kernels_across_ranks: pd.DataFrame
    collectives: pd.DataFrame
    """Per matched collective across ranks: who arrived last, skew, transfer (reduce.whatif)."""
    waits_per_step: pd.DataFrame
    """Per rank and profiled step: its what-if cost and its waiting in collectives (reduce.whatif)."""
    stragglers: list[dict]
    clock_offsets_us: dict[int, float]
    recommendations: list[dict]
    run_state: dict | None = None
    """hpcprof.rundir.state.RunState.to_dict() of the run (summary.json `run_state`)."""
    whatif: whatif.WhatIf | None = None
    """The what-if replay: per-step replay error, straggler slowdown, per-rank costs, matching."""
    throughput: dict | None = None
    """summary.json `throughput` (reduce.throughput): samples/s over steady-state steps; None without step records."""
    communication: dict | None = None
    """summary.json `communication` (reduce.communication): HTA's and our communication share, the
    kernels we count that HTA does not, transfer and waiting in the collectives."""
    critical_path: CriticalPath | None = None
    """The cross-rank critical path of each profiled step (reduce.critical_path)."""
    workload: dict | None = None
    """summary.json `workload` (reduce.workload): what ran, and the batch size the step records hold."""
    job_collectives: int | None = None
    """The job's own collectives in the analysed traces (hpcprof's control rounds left out); None: unknown."""
    control_collectives: int = 0
    """hpcprof's own control collectives in the analysed traces (never analysed as the job's)."""
    trained_alone: str | None = None
    """Why the ranks trained alone (reduce.workload.trained_alone), or None."""
    gpu_summary: dict | None = None
    """summary.json `gpu_summary` (reduce.gpu_summary): the profiler plugin's GPU figures per rank and across ranks."""
    op_efficiency: dict | None = None
    """summary.json `op_efficiency` (reduce.op_efficiency): FLOPs, TFLOP/s, share of peak and MFU per rank and across ranks."""
    op_efficiency_table: pd.DataFrame | None = None
    """tables/op_efficiency: per operator, input shapes and dtype, achieved TFLOP/s across ranks."""
    slow_gpu: dict | None = None
    """summary.json `slow_gpu` (reduce.slow_gpu): identical kernels compared across ranks, slow GPUs named."""
    memory_view: dict | None = None
    """summary.json `memory_view` (reduce.memory_view): the profiler plugin's memory view per rank, peaks across ranks."""


def rank_table(keep: dict[int, RankResult], name: str) -> pd.DataFrame:
    """One of the map's per-rank tables (ranks.mapper.TABLES) for every rank, with a rank column."""
    return read_rank_tables((r, v.tables.get(name)) for r, v in keep.items())


STAGES = ["per-rank tables", "step times", "matching and what-if replay", "critical path", "recommendations"]
"""The reduce's stages, as its progress bar names them."""


def reduce_ranks(src: Path, keep: dict[int, RankResult], manifest: dict, warnings: list[str],
                 progress: bool = False, on_ranks: Callable[[RankNumbers], None] | None = None) -> Reduced:
    """Reduce the selected ranks; what keeps a cross-rank result from being computed is appended to
    `warnings`. `progress`: a bar of the stages (STAGES), once the reduce takes more than a second
    (256 ranks: seconds). `on_ranks`: called with the RankNumbers once they are known, before the
    matching and the what-if replay (the pipeline starts the charts of per-rank numbers there)."""
    with Stages("hpcprof: cross-rank analysis", STAGES, progress) as stages:
        return _reduce(src, keep, manifest, warnings, stages, on_ranks)


def _reduce(src: Path, keep: dict[int, RankResult], manifest: dict, warnings: list[str], stages: Stages,
            on_ranks: Callable[[RankNumbers], None] | None = None) -> Reduced:
    metas = {r: v.meta for r, v in keep.items()}
    nodes = node_names(manifest, metas)
    device = job_device(metas)
    skew = ((manifest.get("drills") or {}).get("clock_skew") or {}) if isinstance(manifest.get("drills"), dict) else {}
    if isinstance(skew, dict) and skew.get("node") is not None and nodes and skew["node"] not in set(nodes.values()):
        warnings.append(f"the clock-skew drill names node {skew['node']!r}, where no analysed rank ran (nodes: "
                        f"{', '.join(sorted({str(n) for n in nodes.values()}))}): it shifted no trace")

    # only what the charts of per-rank numbers need is read before on_ranks (the other four tables
    # after it, so the charts start sooner)
    steps_trace = rank_table(keep, "steps")
    idle = rank_table(keep, "idle")
    ktype = rank_table(keep, "kernel_type")
    stages.step("step times")
    state = run_state(src)
    steps_trace = cut_failed_steps(state, steps_trace, warnings)
    if state.partial and state.state not in ENDED_BADLY:
        warnings.insert(0, f"partial analysis: {state.describe()}")

    steps = step_times(RunDir(src), keep, steps_trace, problems=warnings, max_step=_planned_steps(manifest))
    world = _world_size(manifest)
    # the job's throughput is the whole job's, whatever traces are analysed (--ranks, an unusable trace)
    tp, tp_steps, _ = throughput(steps.job_records, _profiler_warmup(manifest), _attempt_starts(manifest),
                                 world_ranks=range(world) if world else None)
    if tp is not None and tp["job"]["missing_ranks"]:
        miss = ", ".join(map(str, tp["job"]["missing_ranks"]))
        warnings.append(f"no job throughput: rank(s) {miss} of the {len(tp['job']['ranks'])} have no usable step record "
                        f"(steps/rank-<r>.jsonl); one rank's samples/s is not the job's: see the per-rank figures")
    per_rank = per_rank_table(metas, nodes, steps_trace, steps.stats)
    kb = kernel_breakdown(ktype)
    if on_ranks is not None:
        on_ranks(RankNumbers(metas=metas, nodes=nodes, device=device, steps_trace=steps_trace, steps=steps, per_rank=per_rank,
                             kernel_breakdown=kb, idle=idle, throughput_steps=tp_steps))
    colls = cut_failed_collectives(state, rank_table(keep, "collectives"))
    ktype_ours = rank_table(keep, "kernel_type_hpcprof")
    ktop = rank_table(keep, "kernels_top")
    kall = rank_table(keep, "kernels_all")
    kx = kernels_across_ranks(kall)

    hosts = {r: nodes.get(r) for r in metas}
    stages.step("matching and what-if replay")
    wi = whatif.analyze(colls, steps_trace, hosts)
    strag = wi.stragglers
    for s in strag:
        s["node"] = nodes.get(s["rank"])
    clock_warnings, _ = same_host_clock_warnings(steps_trace, hosts, steps.median_ms)
    warnings.extend(clock_warnings)
    strag, withheld = plausible_stragglers(strag, profiled_step_ms(wi.graphs, steps.median_ms))
    sg = slow_gpu(rank_table(keep, "kernel_work"))
    for s in strag:  # slower kernels for the same work, or more work (reduce.slow_gpu)
        s["gpu_compute_evidence"] = gpu_compute_evidence(sg, s["rank"]) if s.get("cause") == "gpu_compute" else None
    warnings.extend(withheld)
    warnings.extend(wi.warnings)
    alone = trained_alone(manifest, metas)
    job_colls, control_colls = collective_counts(metas)
    if len(metas) < 2:
        warnings.append("only one rank analysed: no cross-rank (straggler) analysis")
    elif alone:
        warnings.insert(0, alone)
    elif wi.collectives.empty:
        warnings.append("no collectives matched across ranks: straggler analysis skipped")
    elif wi.replay_error_pct is not None and wi.replay_error_pct > whatif.MAX_REPLAY_ERROR_PCT:
        warnings.append(
            f"the what-if replay reproduces the measured step time only within {wi.replay_error_pct:.1f}% "
            f"(more than {whatif.MAX_REPLAY_ERROR_PCT:.0f}%): treat the straggler costs with caution"
        )
    cost = wi.per_rank[["rank", "whatif_cost_ms_per_step"]] if not wi.per_rank.empty else None
    per_rank = per_rank.merge(cost, on="rank", how="left") if cost is not None else per_rank.assign(whatif_cost_ms_per_step=float("nan"))
    per_rank = _add_comm_columns(per_rank, ktype, ktype_ours, wi, device)
    per_step = wi.costs.rename(columns={"cost_ms": "whatif_cost_ms", "above": "above_threshold"})
    offsets = wi.matching.offsets if wi.matching is not None else {}
    comm = communication(metas, ktype, ktype_ours, wi, device)
    stages.step("critical path")
    crit = critical_paths(wi.graphs, wi.matching.df if wi.matching is not None else None, steps_trace)

    stages.step("recommendations")
    recs = recommendations(per_rank, steps_trace, steps.records, kall, kb, strag, metas, device, steps.spread, idle=idle,
                           comm=comm, critical=crit.summary())
    if state.state in ENDED_BADLY and steps_trace.empty:
        recs = []  # nothing but a cut-off step to derive them from (warned above)
    eff_rows = rank_table(keep, "op_efficiency")
    return Reduced(
        run_state=state.to_dict(), metas=metas, nodes=nodes, device=device, steps_trace=steps_trace, steps=steps, per_rank=per_rank,
        kernel_breakdown=kb, kernels_top=ktop, kernels_all=kall, kernels_across_ranks=kx, idle=idle,
        collectives=wi.collectives, waits_per_step=per_step, stragglers=strag, clock_offsets_us=offsets, recommendations=recs,
        whatif=wi,
        throughput=tp, throughput_steps=tp_steps, communication=comm, critical_path=crit,
        workload=workload(manifest, steps.job_records), job_collectives=job_colls, control_collectives=control_colls,
        trained_alone=alone, gpu_summary=gpu_summary(metas), slow_gpu=sg,
        memory_view=memory_view(metas, snapshot_views(src, metas, warnings)),
        op_efficiency=op_efficiency(metas, eff_rows), op_efficiency_table=op_efficiency_table(eff_rows),
    )


def _add_comm_columns(per_rank: pd.DataFrame, ktype: pd.DataFrame, ktype_ours: pd.DataFrame, wi, device: str) -> pd.DataFrame:
    """Per rank: the communication share of its GPU kernel time by HTA's rule and by ours, and its
    time in the matched collectives split into waiting for the last arrival and transfer."""
    out = per_rank.copy()
    ours = ours_kernel_types(ktype, ktype_ours)
    for col, kt in (("comm_kernel_pct_hta", ktype), ("comm_kernel_pct", ours)):
        if device == "cpu" or kt is None or kt.empty:
            out[col] = float("nan")
            continue
        share = {int(r): comm_share_pct(g) for r, g in kt.groupby("rank")}
        out[col] = out["rank"].map(share).astype(float)
    cols = ["rank", "wait_ms_per_step", "transfer_ms_per_step", "in_collectives_ms_per_step"]
    if wi.per_rank is not None and not wi.per_rank.empty and set(cols) <= set(wi.per_rank.columns):
        split = wi.per_rank[cols].rename(columns={"wait_ms_per_step": "comm_wait_ms_per_step",
                                                  "transfer_ms_per_step": "comm_transfer_ms_per_step",
                                                  "in_collectives_ms_per_step": "in_collectives_ms_per_step"})
        out = out.merge(split, on="rank", how="left")
    else:
        out = out.assign(comm_wait_ms_per_step=float("nan"), comm_transfer_ms_per_step=float("nan"), in_collectives_ms_per_step=float("nan"))
    return out


def _world_size(manifest: dict) -> int | None:
    """The manifest's world size when it is a positive integer (else the ranks of the step files count)."""
    w = manifest.get("world_size") if isinstance(manifest, dict) else None
    return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None


def _planned_steps(manifest: dict) -> int | None:
    """The job's step count when known (hpcprof.rundir.state.planned_steps): step records beyond it
    are not of this run."""
    if not isinstance(manifest, dict):
        return None
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    return planned_steps(manifest, spec)


def _profiler_warmup(manifest: dict) -> int:
    """The spec's profiler.warmup (steps traced and discarded before the active ones); 0 unknown."""
    prof = ((manifest.get("spec") or {}).get("profiler") or {}) if isinstance(manifest, dict) else {}
    return int(prof.get("warmup") or 0) if prof.get("enabled", True) else 0


def _attempt_starts(manifest: dict) -> list[int]:
    """First steps of resumed attempts (manifest attempts[].resumed_from_step)."""
    return [int(a["resumed_from_step"]) for a in (manifest.get("attempts") or [])
            if isinstance(a, dict) and a.get("resumed_from_step") is not None]
