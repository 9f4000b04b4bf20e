"""Every recommendation rule has a case where it must fire and one where it must not.

The inputs are the reduce's small tables built by hand (the shapes analyze() passes), so each case
states exactly which number crosses which threshold."""

from __future__ import annotations

import pandas as pd
import pytest

from hpcprof.analysis.reduce import recommend as R
from hpcprof.analysis.reduce.idle_outliers import IDLE_POINTS, IDLE_RATIO, idle_outliers


def _per_rank(idle=(10.0, 10.0), overlap=None, nodes=None):
    n = len(idle)
    return pd.DataFrame({"rank": range(n), "node": nodes or [f"n{r}" for r in range(n)],
                         "idle_pct": list(idle), "comm_comp_overlap_pct": list(overlap or [50.0] * n)})


def _kernels(comm=10.0, gemm=30.0, other=60.0, gemm_name="volta_sgemm_128x64_nn"):
    kall = pd.DataFrame([
        {"rank": 0, "kernel_type": "COMMUNICATION", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "sum": comm},
        {"rank": 0, "kernel_type": "COMPUTATION", "name": gemm_name, "sum": gemm},
        {"rank": 0, "kernel_type": "COMPUTATION", "name": "vectorized_elementwise_kernel", "sum": other},
    ])
    kt = kall.groupby("kernel_type", as_index=False)["sum"].sum()
    return kall, kt


def recs(per_rank=None, steps_trace=None, jsonl=None, kernels=None, stragglers=(), metas=None,
         device="cuda", spread=None, idle=None, comm=None, critical=None):
    kall, kt = kernels if kernels is not None else _kernels()
    return R.recommendations(
        _per_rank() if per_rank is None else per_rank,
        pd.DataFrame() if steps_trace is None else steps_trace,
        pd.DataFrame() if jsonl is None else jsonl,
        kall, kt, list(stragglers), metas or {}, device, spread or {}, idle=idle, comm=comm, critical=critical,
    )


def titles(rs) -> str:
    return "\n".join(r["title"] for r in rs)


# 1. data loading -------------------------------------------------------------------------------
def _jsonl(wait_s):
    return pd.DataFrame([{"rank": r, "step": s, "step_s": 0.1, "data_wait_s": wait_s} for r in (0, 1) for s in range(5)])


def test_data_loading_fires_above_5pct():
    rs = recs(jsonl=_jsonl(0.02))  # 20% of the step
    assert "Input pipeline" in titles(rs)


def test_data_loading_silent_below_5pct():
    assert "Input pipeline" not in titles(recs(jsonl=_jsonl(0.002)))


def test_data_loading_from_trace_when_no_step_records():
    st = pd.DataFrame([{"rank": r, "dur_ms": 100.0, "data_loading_ms": v} for r, v in ((0, 30.0), (1, 30.0))])
    assert "Input pipeline" in titles(recs(steps_trace=st))
    st["data_loading_ms"] = 1.0
    assert "Input pipeline" not in titles(recs(steps_trace=st))


# 2. communication share --------------------------------------------------------------------------
def test_comm_bound_fires_on_gpu():
    assert "Communication-bound" in titles(recs(kernels=_kernels(comm=80, gemm=10, other=10)))


def test_comm_bound_silent_below_20pct():
    assert "Communication-bound" not in titles(recs(kernels=_kernels(comm=10, gemm=45, other=45)))


def _comm(share=60.0, wait_share=0.1, hta=None, waited_for=()):
    """summary.json `communication` as the reduce writes it (reduce/communication.py)."""
    return {"share_pct": share, "hta_share_pct": share if hta is None else hta, "differs": hta is not None and hta != share,
            "reclassified": [{"note": "24 multimem_all_reduce_kernel kernels counted as communication (10.61 ms on 8 ranks): launched by c10d::allreduce_"}] if hta is not None else [],
            "wait_share": wait_share, "transfer_share": None if wait_share is None else 1 - wait_share, "in_collectives_ms_per_step": 48.5,
            "waited_for": list(waited_for)}


WAITED_FOR = [{"rank": 7, "waited_ms_per_step": 35.6, "last_at": 5, "collectives": 8}]


def test_comm_bound_fires_when_transfer_dominates():
    # 60% of GPU time in collectives, 90% of it transfer: 54% of GPU time is transfer
    rs = recs(comm=_comm(60.0, 0.1, waited_for=WAITED_FOR))
    r = next(x for x in rs if x["title"].startswith("Communication-bound"))
    assert "90% transfer" in r["evidence"] and "transfer alone is 54.0% of GPU kernel time" in r["evidence"]
    assert "mostly waiting" not in titles(rs)


def test_comm_bound_silent_when_waiting_dominates_and_the_waiting_advice_fires():
    # the same 60%, but 90% of it is waiting for the last arrival: transfer is 6% of GPU time
    rs = recs(comm=_comm(60.0, 0.9, waited_for=WAITED_FOR), critical={"steps": [{"step": 10, "total_ms": 20.8, "chain": [
        {"rank": 7, "kind": "start_skew", "dur_ms": 7.51}]}]})
    assert "Communication-bound" not in titles(rs)
    r = next(x for x in rs if x["title"].startswith("Communication is mostly waiting"))
    assert "90% of the ranks' time in the matched collectives is waiting" in r["evidence"]
    assert "rank 7 arrived last at 5 of 8 collectives" in r["evidence"] and "rank 7 entering the step 7.51 ms" in r["evidence"]


def test_waiting_is_the_stragglers_advice_when_one_is_flagged():
    rs = recs(comm=_comm(60.0, 0.9, waited_for=WAITED_FOR), stragglers=[STRAGGLER], spread={"median_of_rank_medians_ms": 100.0})
    assert "mostly waiting" not in titles(rs) and "Communication-bound" not in titles(rs)
    s = next(x for x in rs if x["title"].startswith("Straggler: rank 1"))
    assert "most of the communication time is waiting, not transfer" in s["evidence"]
    # where transfer dominates, the straggler's evidence says nothing about waiting
    rs = recs(comm=_comm(60.0, 0.1), stragglers=[STRAGGLER], spread={"median_of_rank_medians_ms": 100.0})
    assert "waiting, not transfer" not in next(x for x in rs if x["title"].startswith("Straggler"))["evidence"]


def test_waiting_advice_silent_when_communication_is_small():
    rs = recs(comm=_comm(15.0, 0.9, waited_for=WAITED_FOR))  # waiting is 13.5% of GPU time
    assert "mostly waiting" not in titles(rs) and "Communication-bound" not in titles(rs)


def test_comm_share_is_ours_with_htas_beside_it():
    # HTA's name rule sees 0% (symmetric-memory kernels): ours decides, HTA's and the reason are given
    rs = recs(kernels=_kernels(comm=0.0, gemm=45, other=55), comm=_comm(60.0, 0.1, hta=0.0))
    r = next(x for x in rs if x["title"].startswith("Communication-bound"))
    assert "HTA's kernel-name rule: 0.0%" in r["evidence"] and "launched by c10d::allreduce_" in r["evidence"]


def _cpu_steps(exposed):
    return pd.DataFrame([{"rank": r, "dur_ms": 100.0, "data_loading_ms": 0.0, "comm_exposed_ms": exposed, "comm_ms": exposed + 5} for r in (0, 1)])


def test_exposed_comm_fires_on_cpu():
    assert "Exposed communication" in titles(recs(steps_trace=_cpu_steps(50.0), device="cpu", kernels=(pd.DataFrame(), pd.DataFrame())))


def test_exposed_comm_silent_on_cpu_when_small():
    assert "Exposed communication" not in titles(recs(steps_trace=_cpu_steps(5.0), device="cpu", kernels=(pd.DataFrame(), pd.DataFrame())))


# 3. overlap -------------------------------------------------------------------------------------
def test_low_overlap_fires():
    assert "Little overlap" in titles(recs(per_rank=_per_rank(overlap=(5.0, 10.0))))


def test_low_overlap_silent():
    assert "Little overlap" not in titles(recs(per_rank=_per_rank(overlap=(60.0, 70.0))))


# 4. Tensor Cores --------------------------------------------------------------------------------
def test_no_tensor_cores_fires_when_gemm_is_a_large_share():
    rs = recs(kernels=_kernels(comm=10, gemm=60, other=30))  # fp32 SIMT sgemm: 60% of GPU time
    assert "No Tensor Core kernels" in titles(rs)


def test_no_tensor_cores_silent_when_gemm_under_10pct_of_gpu_time():
    # no Tensor Core kernel, but GEMMs are 5% of GPU time: mixed precision would gain little
    assert "No Tensor Core kernels" not in titles(recs(kernels=_kernels(comm=10, gemm=5, other=85)))


def test_no_tensor_cores_silent_without_gemm():
    assert "No Tensor Core kernels" not in titles(recs(kernels=_kernels(comm=10, gemm=0.0, other=90)))


@pytest.mark.parametrize("name", [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedCooperative> > > >(...)",
    "sm90_gemm_fp8_e4m3_wgmma_tma_128x128",
    "void fbgemm_gpu::f8f8bf16_rowwise_grouped_kernel<cutlass::float_e4m3_t>(...)",
    "_grouped_gemm_fp8_rowwise_kernel",
    "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_NNT",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(...)",  # shipped in cuBLASLt
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
    "cutlass_80_tensorop_s1688gemm_bf16_256x128_32x3_tn_align8",
    "volta_h884gemm_64x64_ldg8_nn",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >",
])
def test_current_tensor_core_names_are_recognised(name):
    assert R.TC_RE.search(name), name
    assert "No Tensor Core kernels" not in titles(recs(kernels=_kernels(comm=10, gemm=60, other=30, gemm_name=name)))


@pytest.mark.parametrize("name", ["volta_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>(...)",
                                  "implicit_convolve_sgemm", "maxwell_scudnn_128x64_relu_interior_nn",
                                  "void cutlass::Kernel<cutlass_simt_sgemm_128x128_8x2_nn_align1>(...)",
                                  "void cublasLt::splitKreduce_kernel<32, 16, int, float, float>(...)"])
def test_simt_kernels_are_not_tensor_core(name):
    assert not R.TC_RE.search(name), name


def test_no_tensor_core_rule_only_for_cuda():
    assert "No Tensor Core kernels" not in titles(recs(kernels=_kernels(comm=10, gemm=60, other=30), device="cpu"))


# 5. memory -------------------------------------------------------------------------------------
def test_low_memory_fires():
    metas = {0: {"gpu_memory_peak_bytes": 2e9, "gpu_memory_total_bytes": 32e9}}
    assert "Low GPU memory use" in titles(recs(metas=metas))


def test_low_memory_silent():
    metas = {0: {"gpu_memory_peak_bytes": 28e9, "gpu_memory_total_bytes": 32e9}}
    assert "Low GPU memory use" not in titles(recs(metas=metas))


# 6. GPU idle (job-wide) ------------------------------------------------------------------------
def test_gpu_idle_fires():
    assert "GPUs are idle much of the time" in titles(recs(per_rank=_per_rank(idle=(60.0, 70.0))))


def test_gpu_idle_silent():
    assert "GPUs are idle much of the time" not in titles(recs(per_rank=_per_rank(idle=(5.0, 8.0))))


# 7. stragglers ----------------------------------------------------------------------------------
STRAGGLER = {"rank": 1, "node": "n1", "cause": "host_gap", "cause_detail": "host-side gap", "cost_ms_per_step": 20.0,
             "threshold_ms": 5.0, "steps_flagged": 3, "steps": 3, "late_in_steps_share": 1.0, "confidence": 0.75}


def test_straggler_fires():
    rs = recs(stragglers=[STRAGGLER], spread={"median_of_rank_medians_ms": 100.0})
    assert "Straggler: rank 1" in titles(rs)


def test_straggler_silent_without_flagged_rank():
    assert "Straggler" not in titles(recs(spread={"median_of_rank_medians_ms": 100.0}))


# 8. imbalance -----------------------------------------------------------------------------------
SPREAD = {"median_of_rank_medians_ms": 100.0, "min_rank_median_ms": 95.0, "max_rank_median_ms": 120.0, "spread_pct": 25.0, "slowest_rank": 3}


def test_imbalance_fires_without_straggler():
    assert "Step time differs across ranks" in titles(recs(spread=SPREAD))


def test_imbalance_silent_when_small_or_explained():
    assert "Step time differs across ranks" not in titles(recs(spread={**SPREAD, "spread_pct": 3.0}))
    assert "Step time differs across ranks" not in titles(recs(spread=SPREAD, stragglers=[STRAGGLER]))


# 9. GPU idle outliers (issue 10, item 5) ---------------------------------------------------------
def _idle(rank_causes: dict[int, dict[str, float]]) -> pd.DataFrame:
    rows = []
    for r, causes in rank_causes.items():
        for stream in (7, 20):  # summed over streams
            rows += [{"rank": r, "stream": stream, "idle_category": c, "idle_time": v / 2} for c, v in causes.items()]
    return pd.DataFrame(rows)


EIGHT = (2.5, 2.0, 35.0, 3.0, 2.4, 30.0, 2.6, 2.5)  # the A100 job of issue 10: two ranks idle ~1/3 of the time
IDLE = _idle({r: {"host_wait": 10.0, "kernel_wait": 80.0, "other": 10.0} for r in range(8)} | {2: {"host_wait": 700.0, "kernel_wait": 100.0, "other": 200.0}})


def test_idle_outliers_named_with_cause_and_straggler_status():
    rs = recs(per_rank=_per_rank(idle=EIGHT), idle=IDLE, stragglers=[{**STRAGGLER, "rank": 5}], spread={"median_of_rank_medians_ms": 100.0})
    out = [r for r in rs if r["title"].startswith("GPU idle outlier")]
    assert [r["title"].split("rank ")[1].split(" ")[0] for r in out] == ["2", "5"]
    r2, r5 = out
    assert "host wait" in r2["title"] and "host_wait 70%" in r2["evidence"] and "not a flagged straggler" in r2["evidence"]
    assert "35.0%" in r2["evidence"] and "median of 2.5%" in r2["evidence"]
    assert "kernel wait" in r5["title"] and "also a flagged straggler" in r5["evidence"]
    # the job-wide median rule stays silent here: this is what only the outlier rule catches
    assert "GPUs are idle much of the time" not in titles(rs)


def test_idle_outlier_two_ranks():
    o = idle_outliers(_per_rank(idle=(2.0, 40.0)), _idle({1: {"other": 1.0}}), [])
    assert [x["rank"] for x in o] == [1] and o[0]["cause"] == "other"


@pytest.mark.parametrize("idle", [
    (20.0, 22.0, 25.0, 36.0),  # 36 vs 22: 14 points above but not 2x
    (1.0, 1.2, 0.8, 9.0),      # 9 vs 1: 9x but not 10 points above
    (30.0, 31.0, 29.0, 30.5),  # healthy, all alike
])
def test_idle_outlier_silent(idle):
    assert idle_outliers(_per_rank(idle=idle), pd.DataFrame(), []) == []
    assert "GPU idle outlier" not in titles(recs(per_rank=_per_rank(idle=idle)))


def test_idle_outlier_thresholds_are_the_documented_ones():
    assert (IDLE_RATIO, IDLE_POINTS) == (2.0, 10.0)
    # exactly at both thresholds: flagged
    assert [x["rank"] for x in idle_outliers(_per_rank(idle=(10.0, 10.0, 20.0)), pd.DataFrame(), [])] == [2]


def test_outlier_without_node_is_unknown():
    rs = recs(per_rank=_per_rank(idle=(2.0, 40.0), nodes=[None, None]))
    t = [r["title"] for r in rs if r["title"].startswith("GPU idle outlier")][0]
    assert "node unknown" in t and "None" not in t
