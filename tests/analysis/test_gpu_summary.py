"""The GPU summary (issue 35, item 1) equals the PyTorch profiler TensorBoard plugin's own figures.

The plugin's numbers are computed here, on the same trace files, by the plugin's own parser
(torch-tb-profiler 0.4.3, the [test] extra): `RunProfileData(...).process()` is how a user script
reads a trace with it, without TensorBoard running. Its GPU figures come from its GPU metrics
parser and Tensor Core ratio, its step-time breakdown from its average step costs. hpcprof's come
from summary.json, tables/gpu_summary.csv and report.html of a real `analyze`.
"""

from __future__ import annotations

import functools
import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis import analyze

from .conftest import DLRM, KINETO0, TRACES, load_trace, require, write_trace

KINETO4 = TRACES / "kineto_resnet50_v100_workers4"
CPU_ONLY = TRACES / "hta_tests" / "cpu_only"
TOL_PP = 0.1  # percentage points (the acceptance)
DLRM_RANKS = (0, 4, 7)

plugin_data = pytest.importorskip("torch_tb_profiler.profiler.data", reason="torch-tb-profiler is in the [test] extra")
from torch_tb_profiler.profiler.event_parser import ProfileRole  # noqa: E402  (after the skip above)

BREAKDOWN = {"kernel_pct": ProfileRole.Kernel, "memcpy_pct": ProfileRole.Memcpy, "memset_pct": ProfileRole.Memset,
             "communication_pct": ProfileRole.Communication, "runtime_pct": ProfileRole.Runtime,
             "dataloader_pct": ProfileRole.DataLoader, "cpu_exec_pct": ProfileRole.CpuOp, "other_pct": ProfileRole.Other}


@functools.cache
def plugin_figures(trace: Path) -> dict:
    """(Once per file.) The plugin's overview of one trace file: its GPU figures in percent (None where it shows none)
    and its step-time breakdown as shares of the average step, the roles it shows only."""
    with (gzip.open(trace, "rt") if trace.name.endswith(".gz") else open(trace)) as fh:
        doc = json.load(fh)
    run = plugin_data.RunProfileData("worker", "span", doc)
    run.process()
    g = run.gpu_metrics_parser
    out = {"gpu_utilization_pct": None, "sm_efficiency_pct": None, "achieved_occupancy_pct": None, "tensor_cores_pct": None}
    if g.gpu_ids:
        gpu = sorted(g.gpu_ids)[0]  # the plugin lists the GPUs in id order
        sm, occ, tc = g.avg_approximated_sm_efficiency_per_device[gpu], g.avg_occupancy_per_device[gpu], run.tc_ratio[gpu]
        out.update(gpu_utilization_pct=100 * g.gpu_utilization[gpu], sm_efficiency_pct=None if sm is None else 100 * sm,
                   achieved_occupancy_pct=occ, tensor_cores_pct=None if tc is None else 100 * tc)
    show_gpu = run.has_runtime or run.has_kernel or run.has_memcpy_or_memset  # the plugin's overview columns
    total = run.avg_costs.costs[ProfileRole.Total]
    for field, role in BREAKDOWN.items():
        shown = (show_gpu or role not in (ProfileRole.Kernel, ProfileRole.Memcpy, ProfileRole.Memset, ProfileRole.Runtime)) and \
            (role != ProfileRole.Communication or run.has_communication)
        out[field] = 100 * run.avg_costs.costs[role] / total if shown else None
    out["step_time_ms"] = total / 1e3
    return out


def _copy(src_files: list[Path], dest: Path) -> Path:
    dest.mkdir(parents=True)
    for f in src_files:
        shutil.copy(f, dest / f.name)
    return dest


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, parse_cache) -> dict[str, tuple[Path, dict]]:
    """name -> (trace folder, summary) for the two V100 ResNet-50 traces and the DLRM ranks checked."""
    tmp = tmp_path_factory.mktemp("gpu-summary")
    dlrm = sorted(require(DLRM).glob("*.json.gz"))
    sets = {"kineto0": sorted(require(KINETO0).glob("*.json.gz")), "kineto4": sorted(require(KINETO4).glob("*.json.gz")),
            "dlrm": [dlrm[r] for r in DLRM_RANKS]}
    out = {}
    for name, files in sets.items():
        src = _copy(files, tmp / name)
        out[name] = (src, analyze(src, out=tmp / f"an-{name}", workers=2, progress=False, cache_dir=parse_cache))
    return out


def _rank_file(summary: dict, rank: int, folder: Path) -> Path:
    return folder / next(r["file"] for r in summary["per_rank"] if r["rank"] == rank)


@pytest.mark.parametrize("name", ["kineto0", "kineto4", "dlrm"])
def test_every_gpu_summary_figure_equals_the_profiler_plugins(analysed, name):
    folder, s = analysed[name]
    ranks = s["gpu_summary"]["per_rank"]
    assert len(ranks) == len(list(folder.glob("*.json.gz")))
    for row in ranks:
        want = plugin_figures(_rank_file(s, row["rank"], folder))
        for field, v in want.items():
            got = row[field]
            assert (got is None) == (v is None), f"{name} rank {row['rank']} {field}: hpcprof {got}, plugin {v}"
            if v is not None:
                tol = 0.01 if field == "step_time_ms" else TOL_PP  # summary.json rounds ms to 0.01
                assert abs(got - v) <= tol, f"{name} rank {row['rank']} {field}: hpcprof {got}, plugin {v}"
            else:
                assert row["null_reasons"][field], f"{name} rank {row['rank']} {field} is null without a reason"


def test_figures_across_ranks_name_the_ranks_holding_the_extremes(analysed):
    _, s = analysed["dlrm"]
    per = {r["rank"]: r for r in s["gpu_summary"]["per_rank"]}
    util = s["gpu_summary"]["across_ranks"]["gpu_utilization_pct"]
    lo = min(per, key=lambda r: (per[r]["gpu_utilization_pct"], r))
    hi = max(per, key=lambda r: (per[r]["gpu_utilization_pct"], -r))
    assert (util["min_rank"], util["max_rank"], util["ranks"]) == (lo, hi, len(DLRM_RANKS))
    assert util["min"] == per[lo]["gpu_utilization_pct"] and util["max"] == per[hi]["gpu_utilization_pct"]
    assert util["median"] == sorted(r["gpu_utilization_pct"] for r in per.values())[1]
    # the plugin ties no DLRM kernel to an operator (its launches are `cuda_runtime`): no Tensor Core share
    tc = s["gpu_summary"]["across_ranks"]["tensor_cores_pct"]
    assert tc["ranks"] == 0 and tc["min"] is None and "cuda_runtime" in tc["null_reason"]


def test_gpu_summary_table_and_report_section(analysed):
    folder, s = analysed["kineto4"]
    table = pd.read_csv(Path(s["outputs"]["tables"]) / "gpu_summary.csv")
    assert list(table["rank"].astype(str)) == [str(r["rank"]) for r in s["gpu_summary"]["per_rank"]] + ["min", "median", "max"]
    want = plugin_figures(next(folder.glob("*.json.gz")))
    assert abs(table["sm_efficiency_pct"].iloc[0] - want["sm_efficiency_pct"]) <= TOL_PP
    html = Path(s["outputs"]["report"]).read_text()
    assert "id='gpu-summary'" in html and "Est. SM Efficiency" in html and "Tesla V100-DGXS-32GB" in html


def test_trace_without_kernel_args_gives_null_figures_with_reasons(tmp_path, parse_cache):
    """A trace whose kernels lack `blocks per SM` and `est. achieved occupancy %`, its GPU named
    `<script>...` in deviceProperties (escaped in the report)."""
    src = next(iter(sorted(require(DLRM).glob("*.json.gz"))))
    doc = load_trace(src)
    for ev in doc["traceEvents"]:
        (ev.get("args") or {}).pop("blocks per SM", None)
        (ev.get("args") or {}).pop("est. achieved occupancy %", None)
    doc["deviceProperties"] = [{**p, "name": "<script>alert(1)</script>"} for p in doc["deviceProperties"]]
    d = tmp_path / "stripped"
    d.mkdir()
    write_trace(d / src.name, doc)
    s = analyze(d, out=tmp_path / "an", workers=1, progress=False, cache_dir=parse_cache)
    row = s["gpu_summary"]["per_rank"][0]
    want = plugin_figures(d / src.name)
    assert want["sm_efficiency_pct"] is None and want["achieved_occupancy_pct"] is None
    assert row["sm_efficiency_pct"] is None and "blocks per SM" in row["null_reasons"]["sm_efficiency_pct"]
    assert row["achieved_occupancy_pct"] is None and "occupancy" in row["null_reasons"]["achieved_occupancy_pct"]
    assert abs(row["gpu_utilization_pct"] - want["gpu_utilization_pct"]) <= TOL_PP
    html = Path(s["outputs"]["report"]).read_text()
    assert "blocks per SM" in html  # the report says why the figure is absent
    assert row["gpu_name"] == "<script>alert(1)</script>"
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_trace_without_device_properties_names_no_gpu_and_keeps_the_figures(tmp_path):
    """deviceProperties only names the GPU: without it the figures are the plugin's still, the name
    null with its reason (checked on the map's per-rank record, what meta.json keeps)."""
    from hpcprof.analysis.decode.stream import read_event_table
    from hpcprof.analysis.ranks.gpu_summary import rank_gpu_summary

    src = next(iter(sorted(require(DLRM).glob("*.json.gz"))))
    doc = load_trace(src)
    del doc["deviceProperties"]
    path = write_trace(tmp_path / src.name, doc)
    meta, table, _, _ = read_event_table(path)
    rec = rank_gpu_summary(table, meta.get("deviceProperties"))
    want = plugin_figures(path)
    assert rec["gpu_name"] is None and "deviceProperties" in rec["null_reasons"]["gpu_name"]
    for field in ("gpu_utilization_pct", "sm_efficiency_pct", "achieved_occupancy_pct", "kernel_pct", "other_pct"):
        assert abs(rec[field] - want[field]) <= TOL_PP, field


def test_cpu_run_has_null_gpu_figures_with_the_reason(tmp_path, parse_cache):
    src = _copy(sorted(require(CPU_ONLY).glob("*.json.gz")), tmp_path / "cpu")
    s = analyze(src, out=tmp_path / "an", workers=1, progress=False, cache_dir=parse_cache)
    want = plugin_figures(next(src.glob("*.json.gz")))
    for field in ("gpu_utilization_pct", "sm_efficiency_pct", "achieved_occupancy_pct", "tensor_cores_pct",
                  "kernel_pct", "memcpy_pct", "memset_pct", "runtime_pct"):
        assert want[field] is None  # the plugin shows none of these on a CPU run either
        for row in s["gpu_summary"]["per_rank"]:
            assert row[field] is None, field
            reason = row["null_reasons"][field]
            assert reason and "\n" not in reason and ("CPU" in reason or "no GPU" in reason), (field, reason)
        across = s["gpu_summary"]["across_ranks"][field]
        assert across["ranks"] == 0 and across["null_reason"]
    html = Path(s["outputs"]["report"]).read_text()
    assert "GPU Utilization: no GPU kernels in the trace" in html


def test_tensor_core_share_equals_the_plugins_on_tensor_core_kernels(tmp_path):
    """The V100 ResNet-50 trace (FP32: no Tensor Core kernel, a share of 0) with every other kernel
    renamed with one of the plugin's Tensor Core patterns (`xmma_gemm`): the plugin's share then lies
    strictly between 0 and 100, and ours equals it, as do the other figures."""
    from hpcprof.analysis.decode.stream import read_event_table
    from hpcprof.analysis.ranks.gpu_summary import rank_gpu_summary

    src = next(require(KINETO0).glob("*.json.gz"))
    doc = load_trace(src)
    kernels = 0
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "Kernel":
            kernels += 1
            if kernels % 2:
                ev["name"] = "xmma_gemm_" + ev["name"]
    path = tmp_path / src.name.removesuffix(".gz")  # plain JSON: quicker to write than gzip's
    path.write_text(json.dumps(doc))
    want = plugin_figures(path)
    assert want["tensor_cores_pct"] is not None and 1 < want["tensor_cores_pct"] < 99
    meta, table, _, _ = read_event_table(path)
    rec = rank_gpu_summary(table, meta.get("deviceProperties"))
    for field, v in want.items():
        if field == "step_time_ms":
            assert abs(rec["step_time_us"] / 1e3 - v) <= 1e-6
        elif v is None:
            assert rec[field] is None and rec["null_reasons"][field], field
        else:
            assert abs(rec[field] - v) <= TOL_PP, (field, rec[field], v)
