"""Per-rank numbers from the map/reduce equal HTA's own TraceAnalysis on the whole folder."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from hpcprof.analysis import analyze



@pytest.fixture(scope="module", params=["dlrm", "sampled"], ids=["param_dlrm_8x_v100", "hta_sampled_2of128"])
def both(request, tmp_path_factory, traces, helpers, parse_cache):
    folder = helpers.require(traces[request.param])
    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=str(folder))
    out = tmp_path_factory.mktemp("out")
    summary = analyze(folder, out=out, workers=2, progress=False, cache_dir=parse_cache)
    return ta, summary, out


def test_temporal_breakdown_equals_hta(both):
    ta, summary, _ = both
    hta = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    ours = {r["rank"]: r for r in summary["per_rank"]}
    assert sorted(ours) == sorted(hta.index)
    for rank, row in hta.iterrows():
        assert ours[rank]["idle_pct"] == pytest.approx(row["idle_time_pctg"], abs=0.1)
        assert ours[rank]["compute_pct"] == pytest.approx(row["compute_time_pctg"], abs=0.1)
        assert ours[rank]["non_compute_pct"] == pytest.approx(row["non_compute_time_pctg"], abs=0.1)


def test_overlap_equals_hta(both):
    ta, summary, _ = both
    hta = ta.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]
    ours = {r["rank"]: r["comm_comp_overlap_pct"] for r in summary["per_rank"]}
    for rank, v in hta.items():
        assert ours[rank] == pytest.approx(v, abs=0.1)


def test_kernel_breakdown_totals_equal_hta(both):
    ta, summary, out = both
    kt, kall = ta.get_gpu_kernel_breakdown(visualize=False)
    hta = dict(zip(kt["kernel_type"], kt["sum"]))
    ours = {k["kernel_type"]: k["time_us"] for k in summary["kernel_breakdown"]}
    assert ours == pytest.approx(hta)
    assert {k["kernel_type"]: k["pct"] for k in summary["kernel_breakdown"]} == pytest.approx(dict(zip(kt["kernel_type"], kt["percentage"])))
    # top kernels per rank (HTA's own aggregation) equal too
    top = pd.read_parquet(out / "tables" / "kernels_top.parquet")
    a = kall.sort_values(["rank", "kernel_type", "name"]).reset_index(drop=True)
    b = top.sort_values(["rank", "kernel_type", "name"]).reset_index(drop=True)
    assert list(a["name"]) == list(b["name"])
    assert list(a["sum (us)"].astype(float)) == pytest.approx(list(b["sum (us)"].astype(float)))


def test_idle_time_breakdown_equals_hta(both):
    ta, summary, out = both
    ours = pd.read_parquet(out / "tables" / "idle_breakdown.parquet")
    for rank in summary["ranks_analyzed"]:
        hta, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
        a = hta.sort_values(["stream", "idle_category"]).reset_index(drop=True)
        b = ours[ours["rank"] == rank].sort_values(["stream", "idle_category"]).reset_index(drop=True)
        assert list(a["idle_category"]) == list(b["idle_category"])
        assert list(a["idle_time"]) == pytest.approx(list(b["idle_time"]))


def test_device_and_device_name(both):
    _, summary, _ = both
    assert summary["device"] == "cuda"
    # the DLRM traces record their GPU in deviceProperties; the sampled ones record none
    assert summary["device_name"] == ("Tesla V100-SXM2-32GB" if summary["world_size"] == 8 else None)


# Every folder of HTA's own test traces: tests/analysis/test_hta_tests_folders.py (same checks, parametrised).
