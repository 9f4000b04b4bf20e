"""docs/summary-json.md against real summary.json files: every ``Name = {...}`` block of the page lists
exactly the keys that the analysis writes at that place, and every block is checked somewhere.

Two real analyses cover every block: hta_sampled_2of128 with its NCCL kernels re-tagged as DeepEP
and symmetric-memory kernels (retag.py: communication HTA's name rule misses) and rank 1 stalled for a
whole step before its second collective in both profiled steps (hpcprof.drills.trace_drill; a flagged
straggler, GPU fields, clock alignment, a critical path, a merged timeline), and the run directory of test_throughput_outputs (a
real trace next to step records: run_state from step files, throughput). A field added to the code
without the page (or the reverse) fails here, naming the block and the keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpcprof.analysis import analyze

from .conftest import REPO, SAMPLED, require
from . import test_throughput_outputs

run_with_steps = test_throughput_outputs.run_with_steps  # the fixture: a run directory with step records
SCHEMA = REPO / "docs" / "summary-json.md"

#: Block name -> the objects of a summary that the block describes (every item of a list).
WHERE = {
    "Summary": lambda s: [s],
    "RunState": lambda s: [s["run_state"]],
    "Workload": lambda s: [s["workload"]],
    "PerRank": lambda s: s["per_rank"],
    "KernelType": lambda s: s["kernel_breakdown"] or [],
    "Straggler": lambda s: s["stragglers"],
    "CollectiveMatching": lambda s: [s["collective_matching"]] if s["collective_matching"] else [],
    "Communication": lambda s: [s["communication"]],
    "Reclassified": lambda s: s["communication"]["reclassified"],
    "WaitedFor": lambda s: s["communication"]["waited_for"],
    "CriticalPath": lambda s: [s["critical_path"]] if s["critical_path"] else [],
    "CriticalStep": lambda s: s["critical_path"]["steps"] if s["critical_path"] else [],
    "CriticalLink": lambda s: [x for st in s["critical_path"]["steps"] for x in st["chain"]] if s["critical_path"] else [],
    "Recommendation": lambda s: s["recommendations"],
    "StepTime": lambda s: [s["step_time"]],
    "Throughput": lambda s: [s["throughput"]] if s["throughput"] else [],
    "ThroughputJob": lambda s: [s["throughput"]["job"]] if s["throughput"] else [],
    "ThroughputRank": lambda s: s["throughput"]["per_rank"] if s["throughput"] else [],
    "StepPhases": lambda s: ([s["throughput"]["job"]["steps"]] + [r["steps"] for r in s["throughput"]["per_rank"]])
    if s["throughput"] else [],
    "GpuSummary": lambda s: [s["gpu_summary"]],
    "GpuSummaryRank": lambda s: s["gpu_summary"]["per_rank"],
    "GpuSummaryFigure": lambda s: list(s["gpu_summary"]["across_ranks"].values()),
    "OpEfficiency": lambda s: [s["op_efficiency"]],
    "OpEfficiencyRank": lambda s: s["op_efficiency"]["per_rank"],
    "OpEfficiencyFigure": lambda s: list(s["op_efficiency"]["across_ranks"].values()),
    "SlowGpu": lambda s: [s["slow_gpu"]],
    "SlowGpuRank": lambda s: s["slow_gpu"]["per_rank"],
    "MemoryView": lambda s: [s["memory_view"]],
    "MemoryViewRank": lambda s: s["memory_view"]["per_rank"],
    "MemoryOperator": lambda s: [o for r in s["memory_view"]["per_rank"] for o in r["top_operators"]],
    "MemoryStep": lambda s: [st for r in s["memory_view"]["per_rank"] for st in r["steps"]],
    "MemoryCurve": lambda s: [r["curve"] for r in s["memory_view"]["per_rank"] if r["curve"]],
    "MemoryPeaks": lambda s: [s["memory_view"]["across_ranks"]],
    "MemorySnapshot": lambda s: s["memory_view"]["snapshots"],
    "MemoryBlock": lambda s: [b for v in s["memory_view"]["snapshots"] for b in v["largest_blocks"]],
    "MemoryOom": lambda s: [o for v in s["memory_view"]["snapshots"] for o in v["oom"]],
    "Outputs": lambda s: [s["outputs"]],
    "ClockAlignment": lambda s: [s["clock_alignment"]],
    "ClockHost": lambda s: s["clock_alignment"]["hosts"],
    "Timeline": lambda s: [s["timeline"]] if "error" not in s["timeline"] else [],
    "Cache": lambda s: [s["cache"]],
    "Capture": lambda s: s.get("captures") or [],
    "CaptureFinding": lambda s: [f for c in (s.get("captures") or []) for f in c["stragglers"]],
    "CaptureChange": lambda s: [c["vs_baseline"] for c in (s.get("captures") or []) if c["vs_baseline"]],
}


def blocks(text: str) -> dict[str, list[str]]:
    """``Name = {...}`` blocks (one line, or up to a closing brace ending a line) -> their keys."""
    out = {}
    for m in re.finditer(r"^(\w+) = \{(.*?)\}$(?=\n(?:\w+ = |```|\s*$))", text, re.M | re.S):
        assert m.group(1) not in out, f"docs/summary-json.md: {m.group(1)} described twice"
        out[m.group(1)] = re.findall(r'"(\w+)"\s*:', m.group(2))
    return out


@pytest.fixture(scope="module")
def straggler_summary(tmp_path_factory) -> dict:
    from hpcprof.drills import inject, job_times

    from .retag import SYMMETRIC_AND_EXPERT_PARALLEL, retag_set

    tmp = tmp_path_factory.mktemp("schema")
    src = retag_set(require(SAMPLED), tmp / "retagged", SYMMETRIC_AND_EXPERT_PARALLEL)
    cur = src
    for i, (step, step_ms) in enumerate(sorted(job_times(src)["steps_ms"].items())):
        inject(cur, tmp / f"drilled-{i}", 1, step=step, stall_ms=step_ms, before_collective=1)
        cur = tmp / f"drilled-{i}"
    s = analyze(cur, out=tmp / "analysis", progress=False, workers=2)
    assert s["stragglers"] and s["stragglers"][0]["rank"] == 1, "the drill must give a straggler to check"
    assert s["communication"]["reclassified"], "the re-tagged kernels must be counted as communication HTA misses"
    return s


def test_every_block_of_the_page_is_checked_and_every_summary_key_is_documented():
    doc = blocks(SCHEMA.read_text())
    assert sorted(doc) == sorted(WHERE), "blocks of docs/summary-json.md differ from the ones this test checks"


@pytest.fixture(scope="module")
def triggered_summary(straggler_summary, tmp_path_factory) -> dict:
    """A triggered run's analysis, built from real traces: the sampled set as its baseline window
    (traces/) and its drilled copy (rank 1 stalled) as capture 1, with the manifest's captures."""
    import json
    import shutil

    tmp = tmp_path_factory.mktemp("triggered")
    run = tmp / "run"
    shutil.copytree(require(SAMPLED), run / "traces")
    shutil.copytree(Path(straggler_summary["source"]), run / "traces" / "capture-1")
    steps = [1, 2]
    manifest = {"name": "run", "spec": {"profiler": {"warmup": 0}}, "captures": [
        {"index": 0, "kind": "baseline", "steps": steps, "folder": "traces"},
        {"index": 1, "kind": "rank", "rank": 1, "score_ms": 50.0, "threshold_ms": 5.0, "history_ms": 0.0,
         "window": [40, 44], "steps": steps, "folder": "traces/capture-1"}]}
    (run / "manifest.json").write_text(json.dumps(manifest))
    s = analyze(run, out=tmp / "analysis", progress=False, workers=2)
    assert [c["index"] for c in s["captures"]] == [0, 1] and s["captures"][1]["stragglers"]
    return s


@pytest.fixture(scope="module")
def snapshot_summary(tmp_path_factory) -> dict:
    """The sampled set with a CUDA memory snapshot of rank 0 (tests/analysis/test_memory_snapshots.py)."""
    import pickle
    import shutil

    from .test_memory_snapshots import snapshot

    folder = tmp_path_factory.mktemp("snap") / "traces"
    shutil.copytree(require(SAMPLED), folder)
    (folder / "memory").mkdir()
    (folder / "memory" / "rank-0.oom.pickle").write_bytes(pickle.dumps(snapshot()))
    return analyze(folder, out=folder.parent / "out", progress=False)


def test_documented_keys_are_exactly_those_written(straggler_summary, triggered_summary, run_with_steps, snapshot_summary):
    written = [straggler_summary, analyze(run_with_steps, progress=False), triggered_summary, snapshot_summary]
    assert written[1]["throughput"], "the run with step records must give a throughput to check"
    doc = blocks(SCHEMA.read_text())
    for name, keys in doc.items():
        objects = [o for s in written for o in WHERE[name](s)]
        assert objects, f"no summary.json here holds a {name}: the test cannot check it"
        for o in objects:
            missing, extra = sorted(set(o) - set(keys)), sorted(set(keys) - set(o))
            assert not missing and not extra, (
                f"docs/summary-json.md {name}: written but not documented {missing}, documented but not written {extra}")
