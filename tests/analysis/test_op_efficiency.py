"""Operator efficiency (issue 35, item 3): FLOPs and bytes per call equal the textbook formulas on
hand-made shapes, and achieved TFLOP/s on the real DLRM V100 traces equals a figure computed here from
the trace's own events (shapes and kernel durations linked by correlation id)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis.ranks.flop_formulas import call_cost
from hpcprof.analysis.ranks.peaks import device_peak

F32, F16 = "float", "c10::Half"


def test_gemm_flops_are_2mnk_per_batch_and_bytes_inputs_plus_output():
    c = call_cost("aten::mm", [[64, 32], [32, 16]], [F32, F32])
    assert c.flops == 2 * 64 * 16 * 32
    assert c.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert c.dtype == "fp32" and c.kind == "gemm"
    # addmm: bias, then the two matrices; the bias is an input (bytes) but not a product term
    c = call_cost("aten::addmm", [[16], [64, 32], [32, 16], [], []], [F32, F32, F32, "Scalar", "Scalar"], ["", "", "", "1", "1"])
    assert c.flops == 2 * 64 * 16 * 32
    assert c.bytes == (16 + 64 * 32 + 32 * 16 + 64 * 16) * 4
    # batched, half precision: 8 batches of a 64x32 by 32x16 product
    c = call_cost("aten::bmm", [[8, 64, 32], [8, 32, 16]], [F16, F16])
    assert c.flops == 8 * 2 * 64 * 16 * 32
    assert c.bytes == 8 * (64 * 32 + 32 * 16 + 64 * 16) * 2
    assert c.dtype == "fp16"
    # matmul broadcasts the batch dimensions: (4, 1) with (3,) is 12 products
    c = call_cost("aten::matmul", [[4, 1, 64, 32], [3, 32, 16]], [F32, F32])
    assert c.flops == 12 * 2 * 64 * 16 * 32
    # linear: every leading dimension of the input is a row
    c = call_cost("aten::linear", [[10, 20, 32], [16, 32], [16]], [F32, F32, F32])
    assert c.flops == 2 * (10 * 20) * 16 * 32


def test_convolution_flops_follow_stride_padding_dilation_and_groups():
    n, cin, h, w, cout, groups, k, stride, pad, dil = 2, 8, 33, 30, 16, 2, 3, 2, 1, 2
    hout = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    wout = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    expect = 2 * n * cout * hout * wout * (cin // groups) * k * k
    x, wt = [n, cin, h, w], [cout, cin // groups, k, k]
    out_bytes = n * cout * hout * wout * 4
    in_bytes = (n * cin * h * w + cout * (cin // groups) * k * k + cout) * 4
    # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    c = call_cost("aten::convolution", [x, wt, [cout], [], [], [], [], [], []], [F32] * 3 + ["GenericList"] * 3 + ["Scalar", "GenericList", "Scalar"],
                  ["", "", "", f"[{stride}, {stride}]", f"[{pad}, {pad}]", f"[{dil}, {dil}]", "False", "[0, 0]", str(groups)])
    assert (c.kind, c.flops, c.bytes) == ("conv", expect, in_bytes + out_bytes)
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): another argument order
    c = call_cost("aten::cudnn_convolution", [x, wt, [], [], [], []], [F32, F32, "GenericList", "GenericList", "GenericList", "Scalar"],
                  ["", "", f"[{pad}, {pad}]", f"[{stride}, {stride}]", f"[{dil}, {dil}]", str(groups)])
    assert c.flops == expect
    # convolution_backward: the output size comes from grad_output; one forward's FLOPs per gradient asked for
    c = call_cost("aten::convolution_backward", [[n, cout, hout, wout], x, wt, [], [], [], [], [], [], [], []],
                  [F32] * 3 + ["GenericList"] * 5 + ["Scalar", "Scalar", "GenericList"],
                  ["", "", "", "[16]", "[2, 2]", "[1, 1]", "[2, 2]", "False", "[0, 0]", "2", "[True, True, False]"])
    assert c.flops == 2 * expect


def test_convolution_without_concrete_inputs_says_what_is_missing():
    c = call_cost("aten::conv2d", [[1, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], []], [F32] * 3 + ["GenericList"] * 3 + ["Scalar"])
    assert c.flops is None
    assert "stride, padding, dilation not recorded" in c.reason and "Concrete Inputs" in c.reason


@pytest.mark.parametrize("causal", [False, True])
def test_attention_flops_are_4bhlld_halved_when_causal(causal):
    b, h, lq, lk, d = 2, 8, 128, 96, 64
    q, k = [b, h, lq, d], [b, h, lk, d]
    expect = 4 * b * h * lq * lk * d / (2 if causal else 1)
    # _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask, scale)
    c = call_cost("aten::_scaled_dot_product_flash_attention", [q, k, k, [], [], [], []], [F16] * 3 + ["Scalar"] * 2 + ["Scalar", ""],
                  ["", "", "", "0.", str(causal), "False", ""])
    assert (c.kind, c.flops) == ("attention", expect)
    assert c.bytes == (b * h * lq * d + 2 * b * h * lk * d + b * h * lq * d) * 2
    # scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    c = call_cost("aten::scaled_dot_product_attention", [q, k, k, [], [], [], [], []], [F16] * 3 + ["", "Scalar", "Scalar", "", "Scalar"],
                  ["", "", "", "", "0.", str(causal), "", "False"])
    assert c.flops == expect


def test_attention_without_is_causal_has_no_flops_and_a_reason():
    c = call_cost("aten::scaled_dot_product_attention", [[1, 2, 8, 4]] * 3, [F16] * 3)
    assert c.flops is None and "is_causal" in c.reason


def test_unknown_device_gets_no_peak_and_a_reason():
    peak, why = device_peak("NVIDIA H100 NVL")
    assert peak is None and "H100 NVL" in why
    peak, why = device_peak("Tesla V100-SXM2-32GB")
    assert peak.tflops["fp32"] == 15.7 and why is None


def _gemm_flops(op: str, dims: list) -> int:
    if op == "aten::bmm":
        (bt, m, k), (_, _, n) = dims[:2]
        return 2 * bt * m * n * k
    (m, k), (_, n) = dims[1:3] if op == "aten::addmm" else dims[:2]
    return 2 * m * n * k


def _independent_gemm(trace: Path) -> tuple[float, float]:
    """(FLOPs, kernel us) of the GEMM calls of a DLRM trace (aten::mm, addmm, bmm: the calls that
    do the products; aten::linear and matmul only wrap them): 2*M*N*K per batch from Input Dims, the
    kernels those of the runtime calls on the call's thread during it, matched by correlation id."""
    ev = json.load(gzip.open(trace, "rt"))["traceEvents"]
    kern: dict = {}
    for e in ev:
        if e.get("cat") == "kernel":
            kern[e["args"]["correlation"]] = kern.get(e["args"]["correlation"], 0) + e["dur"]
    launches = [e for e in ev if e.get("cat") == "cuda_runtime"]
    flops = us = 0.0
    for e in ev:
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm", "aten::bmm"):
            flops += _gemm_flops(e["name"], e["args"]["Input Dims"])
            us += sum(kern.get(r["args"].get("correlation"), 0) for r in launches
                      if r["tid"] == e["tid"] and e["ts"] <= r["ts"] < e["ts"] + e["dur"])
    return flops, us


def test_gemm_tflops_on_the_dlrm_traces_equal_the_traces_own_figures(replayed_sets):
    src, s, _ = replayed_sets["dlrm"]
    per = {r["rank"]: r for r in s["op_efficiency"]["per_rank"]}
    assert set(per) == set(range(8))
    for rank, trace in enumerate(sorted(src.glob("worker*"))):
        flops, us = _independent_gemm(trace)
        gemm = per[rank]["by_kind"]["gemm"]
        assert per[rank]["device_name"] == "Tesla V100-SXM2-32GB"
        # summary.json rounds by unit: whole FLOPs, 0.001 us, 0.001 TFLOP/s (outputs/rounding.py)
        assert gemm["flops"] == pytest.approx(flops, abs=0.5)
        assert gemm["device_us"] == pytest.approx(us, abs=5e-4)
        assert gemm["tflops"] == pytest.approx(flops / (us * 1e6), abs=5e-4)
    assert s["op_efficiency"]["across_ranks"]["mfu_pct"]["ranks"] == 8
    # the table across ranks: V100 fp32 peak (15.7 TFLOP/s, datasheet) and the share of it
    table = pd.read_csv(Path(s["outputs"]["tables"]) / "op_efficiency.csv")
    assert set(table["kind"]) == {"gemm"} and (table["peak_tflops"] == 15.7).all()
    row = table.dropna(subset=["tflops_median"]).iloc[0]
    assert row["peak_pct_median"] == pytest.approx(100 * row["tflops_median"] / 15.7, rel=0.01)
    assert row["calls"] >= 8 and row["ranks"] == 8


def _train_on_cpu(trace: Path) -> None:
    """A user's small CPU training loop (a strided convolution, a linear layer, causal attention),
    profiled with record_shapes as the PyTorch profiler tutorial does."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y, q = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)), torch.randn(2, 4, 16, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for step in range(2):
            with record_function(f"ProfilerStep#{step}"):
                loss = F.cross_entropy(model(x), y) + F.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
    prof.export_chrome_trace(str(trace))


def test_cpu_training_loop_counts_flops_from_its_recorded_shapes(tmp_path):
    """Real PyTorch shapes and Concrete Inputs (conv2d -> mkldnn_convolution, convolution_backward,
    addmm/mm, sdpa -> _scaled_dot_product_flash_attention_for_cpu): the FLOPs of the model by hand."""
    from hpcprof.analysis.ranks.mapper import analyze_rank

    _train_on_cpu(tmp_path / "rank0.pt.trace.json")
    res = analyze_rank(tmp_path / "rank0.pt.trace.json", tmp_path / "cache")
    rank = res.meta["op_efficiency"]
    # forward conv: 2*N*Cout*Hout*Wout*Cin*Kh*Kw with Hout = (16 + 2 - 3)//2 + 1 = 8; its backward asks
    # for the weight gradient only (the input needs none): once more
    conv = 2 * 4 * 8 * 8 * 8 * 3 * 3 * 3
    linear = 2 * 4 * 10 * 512  # forward addmm; backward: grad input (4x10 @ 10x512) and grad weight (10x4 @ 4x512)
    attention = 4 * 2 * 4 * 16 * 16 * 8 / 2  # causal
    steps = 2
    assert rank["calls_with_flops"] == rank["calls"]
    assert rank["by_kind"]["conv"]["flops"] == steps * 2 * conv
    assert rank["by_kind"]["gemm"]["flops"] == steps * 3 * linear
    assert rank["by_kind"]["attention"]["flops"] == steps * attention
    assert rank["tflops"] is None and "CPU run" in rank["null_reasons"]["tflops"]


def test_cpu_run_report_says_in_one_line_why_there_is_no_efficiency(tmp_path, parse_cache):
    import shutil

    from hpcprof.analysis import analyze

    from .conftest import TRACES

    src = tmp_path / "cpu"
    src.mkdir()
    for f in sorted((TRACES / "hta_tests" / "cpu_only").glob("*.json.gz")):
        shutil.copy(f, src / f.name)
    s = analyze(src, out=tmp_path / "an", workers=1, progress=False, cache_dir=parse_cache)
    why = s["op_efficiency"]["null_reason"]
    assert why.startswith("CPU run: no GPU kernels") and "\n" not in why
    html = Path(s["outputs"]["report"]).read_text()
    assert f"No operator efficiency: {why}." in html
    assert "efficiency" not in s["outputs"]["plots"]


def test_report_shows_the_efficiency_table_and_chart_for_a_gpu_set(replayed_sets):
    _src, s, _ = replayed_sets["dlrm"]
    chart = Path(s["outputs"]["plots"]["efficiency"])
    assert chart.name == "op_efficiency.png" and chart.stat().st_size > 0
    html = Path(s["outputs"]["report"]).read_text()
    section = html[html.index("<section id='efficiency'>"):]
    section = section[:section.index("</section>")]
    assert "Per operator and shape" in section and "aten::addmm" in section and "Tesla V100-SXM2-32GB" in section
    assert "<img" in section and "MFU over the profiled steps: median" in section
