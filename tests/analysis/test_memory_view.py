"""The memory view per rank (issue 35, item 2) equals the PyTorch profiler TensorBoard plugin's, and
a known allocation shows at its step on its rank.

The plugin's numbers are computed here, on the same trace files, by the plugin's own parser
(torch-tb-profiler 0.4.3, the [test] extra): `RunProfileData(...).process()`, then its memory
snapshot's operator statistics and peaks, as its Memory View shows them. hpcprof's come from
summary.json, tables/ and report.html of a real `analyze`, and of a real 2-rank CPU run launched
with `hpcprof.submit --cluster local --profiler-profile-memory --analyze`.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis import analyze

from .conftest import REPO, TRACES, require

KINETO4 = TRACES / "kineto_resnet50_v100_workers4"
CPU_ONLY = TRACES / "hta_tests" / "cpu_only"

plugin_data = pytest.importorskip("torch_tb_profiler.profiler.data", reason="torch-tb-profiler is in the [test] extra")
from torch_tb_profiler.profiler.memory_parser import MemoryMetrics  # noqa: E402  (after the skip above)
from torch_tb_profiler.profiler.trace import DeviceType  # noqa: E402


@functools.cache
def plugin_run(trace: Path):
    """(Once per file.) The plugin's processed profile of one trace file."""
    with (gzip.open(trace, "rt") if trace.name.endswith(".gz") else open(trace)) as fh:
        doc = json.load(fh)
    run = plugin_data.RunProfileData("worker", "span", doc)
    run.process()
    return run


def plugin_operators(trace: Path, device: str) -> list[dict]:
    """The plugin's Memory View rows of one device, largest self allocation size first (name on a tie)."""
    run = plugin_run(trace)
    stats = run.memory_snapshot.get_memory_statistics(run.tid2tree)[device]
    rows = [{"operator": name, "self_allocation_bytes": v[MemoryMetrics.SelfAllocationSize],
             "self_allocations": v[MemoryMetrics.SelfAllocationCount], "self_increase_bytes": v[MemoryMetrics.SelfIncreaseSize],
             "allocation_bytes": v[MemoryMetrics.AllocationSize], "allocations": v[MemoryMetrics.AllocationCount],
             "increase_bytes": v[MemoryMetrics.IncreaseSize]} for name, v in stats.items()]
    rows.sort(key=lambda r: (-r["self_allocation_bytes"], r["operator"]))
    return [r for r in rows if r["self_allocation_bytes"] > 0]


@pytest.fixture(scope="module")
def kineto4(tmp_path_factory, parse_cache) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("memory-view")
    src = tmp / "kineto4"
    src.mkdir()
    for f in sorted(require(KINETO4).glob("*.json.gz")):
        (src / f.name).write_bytes(f.read_bytes())
    return src, analyze(src, out=tmp / "an", workers=1, progress=False, cache_dir=parse_cache)


def test_top_allocating_operators_equal_the_profiler_plugins_memory_view(kineto4):
    folder, s = kineto4
    row = s["memory_view"]["per_rank"][0]
    trace = next(folder.glob("*.json.gz"))
    assert row["device"] == "GPU0"
    want = plugin_operators(trace, "GPU0")[: len(row["top_operators"])]
    assert len(row["top_operators"]) == 10
    assert row["top_operators"] == want
    table = pd.read_csv(Path(s["outputs"]["tables"]) / "memory_operators.csv")
    assert list(table["operator"]) == [w["operator"] for w in want]
    assert list(table["self_allocation_bytes"]) == [w["self_allocation_bytes"] for w in want]


def test_memory_peak_operator_and_step_are_those_of_the_plugins_records(kineto4):
    """This trace's [memory] events (PyTorch 1.9) carry no Total Allocated and no Addr: the plugin
    draws no curve and names no peak; hpcprof's curve is then the running sum of the events' Bytes,
    said in the summary. Its peak, the operator the plugin ties the event reaching it to, and the
    ProfilerStep holding it, are computed here from the plugin's own parsed records."""
    folder, s = kineto4
    trace = next(folder.glob("*.json.gz"))
    run = plugin_run(trace)
    assert not run.memory_snapshot.get_peak_memory()  # the plugin has no peak on this trace
    recs = [r for r in run.memory_snapshot.memory_records if r.device_type == DeviceType.CUDA and r.device_id == 0]
    running = np.cumsum([r.bytes for r in recs])
    k = int(np.argmax(running))
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    step = next(n for n, a, b in steps if a <= recs[k].ts < b)
    row = s["memory_view"]["per_rank"][0]
    assert row["basis"] == "bytes_since_start" and "Total Allocated" in row["null_reasons"]["basis"]
    assert row["peak_allocated_bytes"] == running[k]
    assert row["peak_operator"] == recs[k].op_name
    assert row["peak_step"] == step
    assert row["peak_reserved_bytes"] is None and row["null_reasons"]["peak_reserved_bytes"]
    assert row["device_total_bytes"] == doc["deviceProperties"][0]["totalGlobalMem"]
    html = Path(s["outputs"]["report"]).read_text()
    assert "id='memory'" in html and "no <code>Total Allocated</code>" in html
    assert Path(s["outputs"]["plots"]["memory"]).is_file()
    assert "memory_ranks" not in s["outputs"]["plots"]  # one rank: no chart of all ranks, and the report says why
    assert "the chart of all ranks needs two or more" in html


def test_trace_recorded_without_profile_memory_says_so_in_one_line(tmp_path, parse_cache):
    src = tmp_path / "cpu"
    src.mkdir()
    for f in sorted(require(CPU_ONLY).glob("*.json.gz")):
        (src / f.name).write_bytes(f.read_bytes())
    s = analyze(src, out=tmp_path / "an", workers=1, progress=False, cache_dir=parse_cache)
    row = s["memory_view"]["per_rank"][0]
    assert row["events"] == 0 and row["peak_allocated_bytes"] is None
    assert row["reason"].startswith("recorded without profile_memory")
    html = Path(s["outputs"]["report"]).read_text()
    assert "No memory view: recorded without profile_memory" in html
    assert "memory" not in s["outputs"]["plots"]


# A user's training script: a small DDP model over a list of batches; at one step rank 1 builds a
# large lookup table (48,000,000 bytes) and drops it at the end of the step.
TABLE_STEP, TABLE_BYTES = 3, 48_000_000
TRAIN = textwrap.dedent(f'''
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import hpcprof

    with hpcprof.run(batch_size=8) as run:
        model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = [(torch.randn(8, 32), torch.randn(8, 1)) for _ in range(8)]
        for step, (x, y) in enumerate(run.steps(batches)):
            table = torch.ones({TABLE_BYTES // 4}) if step == {TABLE_STEP} and dist.get_rank() == 1 else None
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            del table
''')


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory) -> tuple[Path, dict]:
    """One 2-rank CPU run (gloo) of TRAIN with profile_memory, profiled steps 2-4, analysed."""
    tmp = tmp_path_factory.mktemp("memory-run")
    (tmp / "train.py").write_text(TRAIN)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", "--cluster", "local", "--runs-dir", "runs",
                           "--name", "mem", "--script", "train.py", "--profiler-profile-memory", "--analyze"],
                          cwd=tmp, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp / "runs" / "mem"
    return run_dir, json.loads((run_dir / "analysis" / "summary.json").read_text())


def test_a_tensor_allocated_at_one_step_on_rank_1_shows_at_that_step_on_that_rank_only(memory_run):
    _, s = memory_run
    per = {r["rank"]: r for r in s["memory_view"]["per_rank"]}
    assert sorted(per) == [0, 1] and all(r["device"] == "CPU" and r["basis"] == "total_allocated" for r in per.values())
    one = {st["step"]: st for st in per[1]["steps"]}
    assert TABLE_STEP in one and len(one) == 3  # the profiled steps
    assert one[TABLE_STEP]["largest_allocation_bytes"] == TABLE_BYTES
    assert one[TABLE_STEP]["largest_allocation_operator"] == "aten::empty"  # torch.ones allocates in aten::empty
    assert per[1]["peak_step"] == TABLE_STEP and per[1]["peak_allocated_bytes"] >= TABLE_BYTES
    for rank, row in per.items():
        for st in row["steps"]:
            if (rank, st["step"]) != (1, TABLE_STEP):
                assert st["largest_allocation_bytes"] < TABLE_BYTES / 100, (rank, st)
                assert st["peak_allocated_bytes"] < TABLE_BYTES / 100, (rank, st)
    assert per[0]["peak_allocated_bytes"] < TABLE_BYTES / 100
    across = s["memory_view"]["across_ranks"]
    assert [d["rank"] for d in across["differs"]] == [1]
    assert set(across["differs"][0]) == {"rank", "peak_allocated_bytes", "vs_median_pct", "peak_operator", "peak_step"}  # docs/summary-json.md MemoryPeaks


def test_memory_peaks_of_a_real_run_equal_the_plugins_and_the_report_draws_every_rank(memory_run):
    run_dir, s = memory_run
    for row in s["memory_view"]["per_rank"]:
        trace = run_dir / "traces" / next(r["file"] for r in s["per_rank"] if r["rank"] == row["rank"])
        peaks = plugin_run(trace).memory_snapshot.get_peak_memory()
        assert row["peak_allocated_bytes"] == peaks[(DeviceType.CPU, -1)]
        assert row["top_operators"] == plugin_operators(trace, "CPU")[: len(row["top_operators"])]
    table = pd.read_csv(run_dir / "analysis" / "tables" / "memory_view.csv")
    assert list(table["rank"]) == [0, 1] and list(table["peak_differs"]) == [False, True]
    html = (run_dir / "analysis" / "report.html").read_text()
    assert "id='memory'" in html and "rank 1: peak" in html
    assert {"memory", "memory_ranks"} <= set(s["outputs"]["plots"])
    assert all((run_dir / "analysis" / "plots" / f).is_file() for f in ("memory.png", "memory_ranks.png"))


def test_a_rank_whose_peak_is_20_percent_higher_is_named_and_one_5_percent_higher_is_not(tmp_path):
    """70 ranks holding the V100 trace's memory view, rank 5's curve raised by 20% and rank 9's by 5%:
    only rank 5 is named (tolerance 10%), with +20% from the median; with over 64 ranks each curve
    in summary.json keeps 100 points and its peak."""
    import copy

    from hpcprof.analysis.decode.stream import read_event_table
    from hpcprof.analysis.ranks.memory_view import memory_view as rank_view
    from hpcprof.analysis.reduce.memory_view import memory_view

    meta, table, _, _ = read_event_table(next(require(KINETO4).glob("*.json.gz")))
    view = rank_view(table, meta.get("deviceProperties"))
    metas = {r: {"memory_view": copy.deepcopy(view)} for r in range(70)}
    for rank, factor in ((5, 1.2), (9, 1.05)):
        v = metas[rank]["memory_view"]
        v["peak_allocated_bytes"] *= factor
        v["curve"]["allocated_bytes"] = [a * factor for a in v["curve"]["allocated_bytes"]]
    s = memory_view(metas)
    differs = s["across_ranks"]["differs"]
    assert [d["rank"] for d in differs] == [5] and differs[0]["vs_median_pct"] == pytest.approx(20.0)
    assert s["across_ranks"]["max_rank"] == 5 and s["across_ranks"]["median"] == view["peak_allocated_bytes"]
    for r in s["per_rank"]:
        assert len(r["curve"]["time_ms"]) == 100 and max(r["curve"]["allocated_bytes"]) == r["peak_allocated_bytes"]
