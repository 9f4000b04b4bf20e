"""Recommendations with the evidence behind each.

The TensorBoard profiler plugin's rules are the floor (data-loader share of the step, communication
share, no Tensor Core use, low memory use); the straggler, overlap and idle-time findings add to
them. Each recommendation carries `score` (roughly: share of step time at stake, %) for ordering.
Every rule has a test where it must fire and one where it must not (tests/analysis/test_recommend.py).

The GPU-side rules run for any device with stream activity (CUDA, ROCm, MTIA: `device != "cpu"`);
the Tensor Core rule only for CUDA kernel names. It fires only when GEMM/convolution kernels take
at least GEMM_MIN_GPU_PCT of the GPU time (below that, mixed precision has little to speed up) and
Tensor Core kernels take under 1% of the compute time. TC_RE recognises Tensor Core kernels by
name: Volta-Ampere mma shapes (884, 1688, 16816, hmma, s161616), cuBLAS xmma/`tensorop`, Hopper
wgmma/gmma and sm90 GEMMs, CUTLASS kernels other than its SIMT ones, cuBLAS 12.8+ `nvjet`,
cuBLASLt GEMMs, FP8 (e4m3/e5m2, f8f8) and grouped GEMMs, FlashAttention and fused MHA.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .communication import comm_share_pct
from .idle_outliers import idle_outliers, outlier_recommendation
from .step_stats import GPU_CLOCK, step_seconds, step_time_source
from .whatif import BASE_THRESHOLD_TEXT

DATA_SHARE_PCT = 5.0  # TensorBoard plugin: DataLoader above 5% of the step
COMM_SHARE_PCT = 20.0
WAIT_DOMINATES = 0.5  # above this share of the time in collectives spent waiting, the advice is the late ranks'
LOW_OVERLAP_PCT = 30.0
GPU_IDLE_PCT = 30.0
LOW_MEMORY_PCT = 50.0
GEMM_MIN_GPU_PCT = 10.0  # the Tensor Core rule needs GEMM/conv kernels to matter
TC_RE = re.compile(
    r"(?:884|1688|16816|161616|hmma|wgmma|gmma|tensorop|xmma|wmma|_mma|nvjet|flash_fwd|flash_bwd|fmha"
    r"|sm_?9\d.*(?:gemm|mma)|cutlass(?!.*simt)|cublaslt.*gemm|e4m3|e5m2|f8f8|fp8.*(?:gemm|mm)|grouped_gemm|bf16.*gemm)",
    re.I,
)
GEMM_RE = re.compile(r"gemm|conv|matmul|cudnn|winograd|xmma|cutlass|nvjet|wgmma|gmma|mma|fmha|flash_(?:fwd|bwd)|dgrad|wgrad|fprop", re.I)


def _matches(names: pd.Series, rx: re.Pattern) -> np.ndarray:
    """`names.str.contains(rx)` as a mask (a missing name: False), the pattern tried once per distinct
    name: kernel names repeat on every rank, and pandas tries a compiled pattern in Python per row."""
    codes, uniq = pd.factorize(names)  # a missing name: -1, the last slot
    return np.array([isinstance(n, str) and rx.search(n) is not None for n in uniq] + [False], dtype=bool)[codes]


def _fmt(v: float, d: int = 1) -> str:
    return f"{v:.{d}f}"


def recommendations(
    per_rank: pd.DataFrame,
    steps_trace: pd.DataFrame,
    jsonl: pd.DataFrame,
    kernels_all: pd.DataFrame,
    kernel_type: pd.DataFrame,
    stragglers: list[dict],
    metas: dict[int, dict],
    device: str,
    spread: dict,
    idle: pd.DataFrame | None = None,
    comm: dict | None = None,
    critical: dict | None = None,
) -> list[dict]:
    """The recommendations, highest score first; `idle`: HTA's idle-time breakdown per rank and stream
    (for the idle outliers); `comm`: summary.json `communication` (reduce.communication: our share,
    HTA's, and the replay's split of the time in collectives into waiting and transfer);
    `critical`: summary.json `critical_path` (reduce.critical_path)."""
    recs: list[dict] = []
    gpu = device != "cpu"

    # 1. data loading share of the step
    share, src = None, ""
    if not jsonl.empty and "data_wait_s" in jsonl and "step_s" in jsonl:
        # the loader's host time over the step's time (on a GPU, the GPU clock's: the host's step
        # time is a launch time there); the copy to the device is apart (the copy region)
        source = step_time_source(jsonl)
        d = jsonl.assign(_step=step_seconds(jsonl, source), _data=pd.to_numeric(jsonl["data_wait_s"], errors="coerce"))
        g = d.groupby("rank")
        per = (g["_data"].sum() / g["_step"].sum() * 100).dropna()
        if len(per):
            what = "gpu_ms" if source == GPU_CLOCK else "step_s"
            share, src, worst = float(per.median()), f"steps/*.jsonl data_wait_s / {what}", int(per.idxmax())
    if share is None and not steps_trace.empty:
        g = steps_trace.groupby("rank")
        per = (g["data_loading_ms"].sum() / g["dur_ms"].sum() * 100).dropna()
        if len(per):
            share, src, worst = float(per.median()), "trace: time in hpcprof.data / DataLoader ops / ProfilerStep", int(per.idxmax())
    if share is not None and share > DATA_SHARE_PCT:
        recs.append(
            {
                "title": "Input pipeline: data loading takes a large share of each step; use more DataLoader workers, pin_memory and prefetching",
                "evidence": f"median data-loading share {_fmt(share)}% of the step across ranks (rank {worst} highest; source: {src}); TensorBoard profiler threshold {DATA_SHARE_PCT:.0f}%",
                "score": share,
            }
        )

    # 2. communication share: transfer, or waiting for the last arrival (the stragglers' advice)
    waiting_note = None
    if gpu and (not kernel_type.empty or (comm or {}).get("share_pct") is not None):
        waiting_note = _gpu_communication(recs, kernel_type, comm or {}, bool(stragglers), critical)
    elif not steps_trace.empty and "comm_exposed_ms" in steps_trace:
        g = steps_trace.groupby("rank")
        pct = float((g["comm_exposed_ms"].sum() / g["dur_ms"].sum() * 100).median())
        flight = float((g["comm_ms"].sum() / g["dur_ms"].sum() * 100).median())
        step_med = float(g["dur_ms"].median().median())
        strag_pct = 100 * sum(x["cost_ms_per_step"] for x in stragglers) / step_med if step_med else 0.0
        pct_raw, pct = pct, pct - strag_pct  # waiting for a flagged straggler is reported there
        if pct > COMM_SHARE_PCT:
            recs.append(
                {
                    "title": "Exposed communication: the main thread sits in gloo collectives (or waits for other ranks) for a large share of the step; use larger batches or gradient accumulation, or NCCL on GPUs",
                    "evidence": f"median {_fmt(pct_raw)}% of the step has a collective in flight while no operator runs on the main thread ({_fmt(pct)}% after removing the waits for flagged stragglers; {_fmt(flight)}% with a collective in flight at all; trace, gloo ops)",
                    "score": pct,
                }
            )

    # 3. overlap (ours: with every communication kernel the trace shows; HTA's where they agree)
    ov_col = "comm_comp_overlap_pct_hpcprof" if "comm_comp_overlap_pct_hpcprof" in per_rank else "comm_comp_overlap_pct"
    if gpu and ov_col in per_rank and per_rank[ov_col].notna().any():
        ov = float(per_rank[ov_col].median())
        if ov < LOW_OVERLAP_PCT:
            how = "HTA's computation with hpcprof's communication kernels" if (comm or {}).get("differs") else "HTA"
            recs.append(
                {
                    "title": "Little overlap of communication with computation; let DDP overlap all-reduce with backward (smaller buckets, avoid syncs in backward), overlap all-to-all with compute",
                    "evidence": f"median comm/comp overlap {_fmt(ov)}% across ranks ({how}), min {_fmt(float(per_rank[ov_col].min()))}%",
                    "score": (100 - ov) / 5,
                }
            )

    # 4. Tensor Cores
    if device == "cuda" and not kernels_all.empty:
        comp = kernels_all[kernels_all["kernel_type"] == "COMPUTATION"]
        tot = comp["sum"].sum()
        gpu_tot = kernels_all["sum"].sum()
        tc = comp[_matches(comp["name"], TC_RE)]["sum"].sum()
        gemm = comp[_matches(comp["name"], GEMM_RE)]["sum"].sum()
        gemm_gpu_pct = 100 * gemm / gpu_tot if gpu_tot else 0.0
        if tot > 0 and tc / tot < 0.01 and gemm_gpu_pct >= GEMM_MIN_GPU_PCT:
            recs.append(
                {
                    "title": "No Tensor Core kernels: enable mixed precision (torch.autocast bf16/fp16) or TF32, and channels_last for convolutions",
                    "evidence": f"{_fmt(100 * tc / tot, 2)}% of compute kernel time in Tensor Core kernels (by kernel name); GEMM/conv kernels take {_fmt(gemm_gpu_pct)}% of GPU kernel time (the rule needs at least {GEMM_MIN_GPU_PCT:.0f}%)",
                    "score": gemm_gpu_pct / 3,
                }
            )

    # 5. memory
    mem = [(r, m.get("gpu_memory_peak_bytes"), m.get("gpu_memory_total_bytes")) for r, m in metas.items()]
    mem = [(r, p, t) for r, p, t in mem if p and t]
    if mem:
        pct = max(100 * p / t for _, p, t in mem)
        if pct < LOW_MEMORY_PCT:
            recs.append(
                {
                    "title": "Low GPU memory use: increase the batch size per GPU to use the GPU better",
                    "evidence": f"peak allocated memory at most {_fmt(pct)}% of device memory on any rank (profile_memory events)",
                    "score": (LOW_MEMORY_PCT - pct) / 5,
                }
            )

    # 6. GPU idle
    if gpu and "idle_pct" in per_rank and per_rank["idle_pct"].notna().any():
        idle_med = float(per_rank["idle_pct"].median())
        if idle_med > GPU_IDLE_PCT:
            recs.append(
                {
                    "title": "GPUs are idle much of the time; the host does not feed them fast enough (larger batches, fewer small kernels, CUDA graphs / torch.compile, faster input)",
                    "evidence": f"median GPU idle {_fmt(idle_med)}% of the profiled time across ranks (HTA temporal breakdown); see the idle-time breakdown by cause",
                    "score": idle_med / 2,
                }
            )

    # 7. stragglers (the first carries the waiting share of the communication time, when it dominates)
    step_ms = spread.get("median_of_rank_medians_ms")
    for n, s in enumerate(stragglers):
        advice = {
            "data_loading": "check its input pipeline (local disk / file system, DataLoader workers, CPU binding)",
            "host_gap": "look for host-side work outside the profiled regions on that rank/node (other processes, GC, sleeps, slow I/O, CPU frequency)",
            "cpu_work": "check CPU binding and contention on its node (cpus-per-task, other jobs)",
            "gpu_compute": "check that GPU (clocks, thermals, ECC errors, other processes) or its node",
            "memcpy": "check pinned memory and PCIe/NVLink topology on its node",
            "comm": "check its links and the collectives it runs with ranks outside the analysed set",
        }.get(s["cause"], "inspect its trace around the late collectives")
        pct = f" ({_fmt(100 * s['cost_ms_per_step'] / step_ms)}% of the median step)" if step_ms else ""
        recs.append(
            {
                "title": f"Straggler: rank {s['rank']} (node {s.get('node') or 'unknown'}) makes the others wait; {advice}",
                "evidence": f"costs the job {_fmt(s['cost_ms_per_step'])} ms per step{pct} (what-if replay: the step replayed with this rank at the other ranks' median is that much shorter); above the threshold of {_fmt(s['threshold_ms'])} ms{_noise(s)} in {s['steps_flagged']} of {s['steps']} profiled steps; cause: {s['cause_detail']}"
                + (f"; {waiting_note}" if waiting_note and n == 0 else ""),
                "score": 100 * s["cost_ms_per_step"] / step_ms if step_ms else 50.0,
            }
        )

    # 8. GPU idle outliers (reduce/idle_outliers.py), with their idle cause and straggler status
    if gpu:
        recs += [outlier_recommendation(o) for o in idle_outliers(per_rank, idle, [s["rank"] for s in stragglers])]

    # 9. imbalance without a flagged straggler
    if not stragglers and spread.get("spread_pct") and spread["spread_pct"] > 10:
        recs.append(
            {
                "title": "Step time differs across ranks; check load balance and node health",
                "evidence": f"median step time ranges {_fmt(spread['min_rank_median_ms'])}-{_fmt(spread['max_rank_median_ms'])} ms across ranks (slowest rank {spread['slowest_rank']})",
                "score": spread["spread_pct"] / 2,
            }
        )
    recs.sort(key=lambda r: -r["score"])
    for r in recs:
        r["score"] = round(float(r["score"]), 2)
    return recs


def _gpu_communication(recs: list[dict], kernel_type: pd.DataFrame, comm: dict, stragglers: bool, critical: dict | None) -> str | None:
    """The communication rules of a GPU job (rule 2). A collective kernel's time is its rank's wait
    for the last arrival plus the transfer (reduce.communication); only the transfer is what a
    faster interconnect, bigger buckets or fewer collectives shorten.
    - "Communication-bound" fires when the TRANSFER share of GPU kernel time (communication share x
      transfer share of the time in matched collectives; all of it where no collective was matched)
      is above COMM_SHARE_PCT.
    - When waiting is at least WAIT_DOMINATES of the time in collectives and the waiting share of GPU
      kernel time is above COMM_SHARE_PCT, the advice is the late ranks': with flagged stragglers the
      returned line is added to the first straggler's evidence (no recommendation of its own);
      without, a "mostly waiting" recommendation names the ranks the others waited for.
    Returns the waiting line for the straggler evidence, or None."""
    share = comm.get("share_pct")
    if share is None:
        share = comm_share_pct(kernel_type)
    if share is None:
        return None
    hta = comm.get("hta_share_pct")
    ws = comm.get("wait_share")
    src = (f"{_fmt(share)}% of GPU kernel time (all ranks) is communication"
           + (f" (HTA's kernel-name rule: {_fmt(hta or 0.0)}%; " + "; ".join(x["note"] for x in comm.get("reclassified", [])[:3]) + ")"
              if comm.get("differs") else " (HTA kernel breakdown)"))
    transfer_pct = share * (1 - ws) if ws is not None else share
    split = (f"; of the ranks' time in the matched collectives ({_fmt(comm['in_collectives_ms_per_step'])} ms per step over all ranks), "
             f"{100 * ws:.0f}% is waiting for the last rank to arrive and {100 * (1 - ws):.0f}% transfer (what-if replay)") if ws is not None else ""
    if transfer_pct > COMM_SHARE_PCT:
        recs.append({
            "title": "Communication-bound: collective transfers dominate GPU time; increase per-GPU batch, use gradient accumulation / no_sync, tune DDP bucket_cap_mb, or check the interconnect",
            "evidence": f"{src}{split}; transfer alone is {_fmt(transfer_pct)}% of GPU kernel time",
            "score": transfer_pct,
        })
    if ws is None or ws < WAIT_DOMINATES or share * ws <= COMM_SHARE_PCT:
        return None
    line = (f"most of the communication time is waiting, not transfer: {src}; {100 * ws:.0f}% of the ranks' time in the matched "
            f"collectives is waiting for the last rank to arrive, {100 * (1 - ws):.0f}% transfer (what-if replay)")
    if stragglers:
        return line
    who = comm.get("waited_for") or []
    late = "; ".join(f"rank {w['rank']} arrived last at {w['last_at']} of {w['collectives']} collectives and the others waited "
                     f"{_fmt(w['waited_ms_per_step'])} ms per step for it" for w in who[:3])
    skew = _start_skew(critical)
    recs.append({
        "title": "Communication is mostly waiting, not transfer: ranks wait inside collectives for the last one to arrive; "
                 "even out the work before the collectives (and the ranks' step starts) rather than tuning the interconnect or bucket sizes",
        "evidence": line + (f"; {late}" if late else "") + (f"; {skew}" if skew else ""),
        "score": share * ws,
    })
    return None


def _start_skew(critical: dict | None) -> str:
    """Where the critical path starts late: a rank that entered the step after the others."""
    steps = (critical or {}).get("steps") or []
    skews = [(x["rank"], x["dur_ms"], s["step"], s["total_ms"]) for s in steps for x in s.get("chain", [])[:1] if x["kind"] == "start_skew"]
    if not skews:
        return ""
    r, d, step, tot = max(skews, key=lambda x: x[1])
    return (f"the critical path of step {step} begins with rank {r} entering the step {_fmt(d, 2)} ms after the first rank "
            f"({100 * d / tot:.0f}% of the step: lateness brought from before the profiled step)")


def _noise(s: dict) -> str:
    """How the straggler threshold was made of a base and the other ranks' jitter (reduce.whatif)."""
    base, noise = s.get("base_threshold_ms"), s.get("others_cost_ms_per_step")
    if base is None or not noise:
        return ""
    return f" ({BASE_THRESHOLD_TEXT} = {_fmt(base)} ms, plus {_fmt(noise)} ms that the other ranks cost from their own jitter)"
