"""Operator and kernel-launch views against their sources: the launch statistics equal HTA's own
`TraceAnalysis.get_cuda_kernel_launch_stats` on the shared GPU traces; operator calls and host
times equal the sums over the raw trace events."""

from __future__ import annotations

import contextlib
import io
from collections import defaultdict

import pandas as pd
import pytest

from hpcprof.analysis import analyze

from .conftest import DLRM, SAMPLED, load_trace, require

GPU_SETS = [DLRM, SAMPLED]


@pytest.mark.parametrize("folder", GPU_SETS, ids=lambda p: p.name)
def test_launch_stats_equal_hta(folder, tmp_path, parse_cache):
    from hta.trace_analysis import TraceAnalysis

    s = analyze(require(folder), out=tmp_path / "an", progress=False, cache_dir=parse_cache)
    ours = pd.read_parquet(tmp_path / "an" / "tables" / "kernel_launches.parquet")
    with contextlib.redirect_stdout(io.StringIO()):
        ta = TraceAnalysis(trace_dir=str(folder))
        theirs = ta.get_cuda_kernel_launch_stats(ranks=s["ranks_analyzed"], visualize=False)
    cols = ["correlation", "cpu_duration", "gpu_duration", "launch_delay"]
    for r in s["ranks_analyzed"]:
        a = ours[ours["rank"] == r][cols].sort_values("correlation", ignore_index=True)
        b = theirs[r][cols].sort_values("correlation", ignore_index=True)
        assert len(a) > 0
        pd.testing.assert_frame_equal(a, b, check_dtype=False)
    summ = pd.read_parquet(tmp_path / "an" / "tables" / "launch_summary.parquet").set_index("rank")  # exact: the CSV is rounded
    for r in s["ranks_analyzed"]:
        b = theirs[r]
        assert summ.loc[r, "launches"] == len(b)
        assert summ.loc[r, "short_kernel_share"] == pytest.approx((b["gpu_duration"] < b["cpu_duration"]).mean())
        assert summ.loc[r, "launch_delay_median_us"] == pytest.approx(b["launch_delay"].median())


def test_operator_calls_and_host_time_equal_the_raw_events(tmp_path, parse_cache):
    s = analyze(require(DLRM), out=tmp_path / "an", progress=False, cache_dir=parse_cache)
    ops = pd.read_parquet(tmp_path / "an" / "tables" / "operators.parquet")
    assert set(ops["rank"]) == set(s["ranks_analyzed"])
    for p in sorted(DLRM.iterdir()):
        doc = load_trace(p)
        r = doc["distributedInfo"]["rank"]
        calls, total = defaultdict(int), defaultdict(float)
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") == "cpu_op":
                calls[e["name"]] += 1
                total[e["name"]] += e["dur"]
        mine = ops[ops["rank"] == r].set_index("name")
        assert len(mine) >= 20
        for name, row in mine.iterrows():
            assert row["calls"] == calls[name] and row["host_total_us"] == pytest.approx(total[name]), name
            assert 0 <= row["host_self_us"] <= row["host_total_us"] + 1e-6
            assert 0 <= row["device_self_us"] <= row["device_total_us"] + 1e-6
        # the operators that launch the most GPU time: on this communication-bound job, the NCCL ops
        top = mine["device_self_us"].idxmax()
        assert top in ("record_param_comms", "nccl:all_reduce", "nccl:all_to_all") or "nccl" in top.lower() or "comm" in top.lower(), top


def test_operator_walk_in_chunks_gives_the_table_of_one_walk(monkeypatch):
    """The operator walk turns its inputs into Python values WALK_CHUNK events at a time (the memory
    of a large rank); each thread's stack of open operators carries from one chunk to the next, so
    chunks of 3 events give every figure of the walk in one chunk, to the last bit."""
    from hpcprof.analysis.decode.stream import read_event_table
    from hpcprof.analysis.ranks import operators

    trace = sorted(require(DLRM).iterdir())[0]
    table = read_event_table(trace)[1]
    whole = operators.operator_table(table)
    monkeypatch.setattr(operators, "WALK_CHUNK", 3)
    chunked = operators.operator_table(table)
    assert len(whole) >= 20 and whole["device_self_us"].gt(0).any() and whole["host_self_us"].lt(whole["host_total_us"]).any()
    pd.testing.assert_frame_equal(chunked, whole, check_exact=True)


def test_operator_device_times_equal_the_raw_events_launches():
    """Device time per operator from the raw events, by the definition (docs/analysis.md): each GPU
    event is tied by its correlation id to the runtime call that launched it, and that call to every
    cpu_op on its thread whose span contains its start (device total) and to the innermost of them,
    the one that started last (device self)."""
    from hpcprof.analysis.decode.stream import read_event_table
    from hpcprof.analysis.ranks.operators import GPU_CATS, RUNTIME_CATS, operator_table

    trace = sorted(require(DLRM).iterdir())[0]
    events = [e for e in load_trace(trace)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    gpu = defaultdict(float)
    for e in events:
        if e.get("cat") in GPU_CATS and e.get("args", {}).get("correlation", -1) >= 0:
            gpu[e["args"]["correlation"]] += e["dur"]
    ops_by_tid = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            ops_by_tid[str(e["tid"])].append(e)
    total, self_ = defaultdict(float), defaultdict(float)
    for r in events:
        g = gpu.get(r.get("args", {}).get("correlation", -1), 0.0) if r.get("cat") in RUNTIME_CATS else 0.0
        if not g:
            continue
        open_ = [o for o in ops_by_tid[str(r["tid"])] if o["ts"] <= r["ts"] < o["ts"] + o["dur"]]
        for o in open_:
            total[o["name"]] += g
        if open_:
            self_[max(open_, key=lambda o: (o["ts"], -o["dur"]))["name"]] += g
    ops = operator_table(read_event_table(trace)[1]).set_index("name")
    assert (ops["device_total_us"] > 0).sum() >= 10
    for name, row in ops.iterrows():
        assert row["device_total_us"] == pytest.approx(total[name], rel=1e-9, abs=1e-6), name
        assert row["device_self_us"] == pytest.approx(self_[name], rel=1e-9, abs=1e-6), name
