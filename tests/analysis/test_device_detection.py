"""Issue 23 item 12: a GPU run whose trace holds no kernel activity is still a GPU run.

hta_tests/cupti_profiler is an A100 trace taken with the CUPTI profiler: 77 cudaLaunchKernel calls
and per-kernel counter ranges (`cuda_profiler_range`), but no `kernel` events. It was reported as
"CPU-only run, e.g. gloo backend", device cpu. The answer known independently: the trace's own
deviceProperties (8 NVIDIA A100) and its runtime calls. hta_tests/cpu_only (HTA's CPU-only trace)
stays a CPU run."""

from __future__ import annotations

import gzip
import json

import pytest

from hpcprof.analysis import analyze

from .conftest import TRACES, require


def test_a_cupti_profiler_trace_is_a_cuda_run_without_kernel_activity(tmp_path):
    folder = require(TRACES / "hta_tests" / "cupti_profiler")
    doc = json.load(gzip.open(next(folder.glob("*.json.gz")), "rt"))
    assert all("A100" in d["name"] for d in doc["deviceProperties"])
    assert sum(e.get("name") == "cudaLaunchKernel" for e in doc["traceEvents"]) == 77
    assert not any(e.get("cat") == "kernel" for e in doc["traceEvents"])

    s = analyze(folder, out=tmp_path / "out", workers=1, progress=False)
    assert s["device"] == "cuda", s["device"]
    text = " ".join(s["warnings"]) + " ".join(s.get("charts_left_out", {}).values())
    assert "CPU-only" not in text and "gloo" not in text, text
    assert any("no GPU kernel activity" in w for w in s["warnings"]), s["warnings"]
    assert "CPU-only run" not in (tmp_path / "out" / "report.html").read_text()


def test_a_cpu_only_trace_stays_a_cpu_run(tmp_path):
    folder = require(TRACES / "hta_tests" / "cpu_only")
    s = analyze(folder, out=tmp_path / "out", workers=1, progress=False)
    assert s["device"] == "cpu"
    assert any("CPU-only" in w for w in s["warnings"]), s["warnings"]


@pytest.mark.parametrize("runtime", ["cudaLaunchKernel", "hipLaunchKernel"])
def test_kernel_launches_alone_make_a_gpu_run(tmp_path, runtime):
    from hpcprof.analysis.decode.columns import event_table
    from hpcprof.analysis.decode.load import read_trace
    from hpcprof.analysis.ranks.timeline import build_timeline

    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    assert build_timeline(event_table(read_trace(path))).device_kind == "cpu"
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": 1, "tid": 1, "ts": 20, "dur": 5})
    path.write_text(json.dumps({"traceEvents": ev}))
    assert build_timeline(event_table(read_trace(path))).device_kind == "cuda"
