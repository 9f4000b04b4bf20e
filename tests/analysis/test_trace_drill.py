"""Trace-level drills (hpcprof.drills.trace_drill): the written set is a valid trace set, nothing
before the injection point changes, the delay propagates through the collectives, and the truth
equals a hand-computed answer on a tiny synthetic set."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcprof.drills import DrillError, inject, job_times

from .conftest import DLRM, REPO, SAMPLED, load_trace, require


# --- a tiny 2-rank set whose answers are computed by hand (times in us) -----------------------
# rank 0: gemm [100,300], arrives at the all-reduce at 300 (early), relu [600,700], step [0,720]
# rank 1: gemm [100,500], arrives at 500 (last),                  relu [600,700], step [0,900]
# The all-reduce ends at 600 on both (last arrival 500 + transfer 100).

def _rank_doc(rank: int, gemm_end: int, step_end: int) -> dict:
    host, gpu = 100 + rank, 0

    def x(cat, name, pid, tid, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    ev = [
        {"ph": "M", "name": "process_name", "pid": host, "tid": 0, "ts": 0, "args": {"name": "python"}},
        x("user_annotation", "ProfilerStep#1", host, host, 0, step_end),
        x("cpu_op", "aten::mm", host, host, 10, 40),
        x("cuda_runtime", "cudaLaunchKernel", host, host, 20, 10, correlation=1),
        x("cpu_op", "c10d::allreduce_", host, host, 60, 30),
        x("cuda_runtime", "cudaLaunchKernel", host, host, 70, 10, correlation=2),
        x("cuda_runtime", "cudaLaunchKernel", host, host, 95, 4, correlation=3),
        x("cuda_runtime", "cudaDeviceSynchronize", host, host, 100, 610, correlation=4),
        x("kernel", "gemm_kernel", gpu, 7, 100, gemm_end - 100, correlation=1, stream=7),
        x("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", gpu, 13, gemm_end, 600 - gemm_end, correlation=2, stream=13),
        x("kernel", "relu_kernel", gpu, 7, 600, 100, correlation=3, stream=7),
        {"ph": "s", "id": 2, "pid": host, "tid": host, "ts": 70, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 2, "pid": gpu, "tid": 13, "ts": gemm_end, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "deviceProperties": [{"id": 0, "name": "Test GPU"}], "traceEvents": ev}


@pytest.fixture
def tiny(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for rank, gemm_end, step_end in ((0, 300, 720), (1, 500, 900)):
        with gzip.open(src / f"rank-{rank}.pt.trace.json.gz", "wt") as fh:
            json.dump(_rank_doc(rank, gemm_end, step_end), fh)
    return src


def _by_name(doc: dict) -> dict:
    return {e["name"]: e for e in doc["traceEvents"] if e.get("ph") == "X"}


def _read(folder: Path, rank: int) -> dict:
    return load_trace(next(folder.glob(f"rank-{rank}.*")))


def test_tiny_stall_absorbed_by_slack(tiny, tmp_path):
    # rank 0 arrives 200 us early: a 100 us stall is absorbed; rank 0 still ends (820) before rank 1 (900)
    info = inject(tiny, tmp_path / "out", 0, stall_ms=0.1, before_collective=0)
    assert info["job_time_increase_ms"] == pytest.approx(0.0)
    r0 = _by_name(_read(tmp_path / "out", 0))
    assert (r0["ncclKernel_AllReduce_RING_LL_Sum_float"]["ts"], r0["ncclKernel_AllReduce_RING_LL_Sum_float"]["dur"]) == (400, 200)
    assert r0["relu_kernel"]["ts"] == 700 and r0["ProfilerStep#1"]["dur"] == 820
    assert _read(tmp_path / "out", 1) == _rank_doc(1, 500, 900)  # nobody waited for rank 0


def test_tiny_stall_beyond_slack(tiny, tmp_path):
    # 300 us stall: rank 0 arrives at 600, 100 us after rank 1; the all-reduce ends at 700 on both;
    # rank 0's later events move 300 (step ends 1020), rank 1's move 100 (step ends 1000).
    info = inject(tiny, tmp_path / "out", 0, stall_ms=0.3, before_collective=0)
    assert info["job_time_increase_ms"] == pytest.approx(0.12)
    assert info["job_time_before_ms"] == pytest.approx(0.9)
    r0, r1 = _by_name(_read(tmp_path / "out", 0)), _by_name(_read(tmp_path / "out", 1))
    nccl = "ncclKernel_AllReduce_RING_LL_Sum_float"
    assert (r0[nccl]["ts"], r0[nccl]["ts"] + r0[nccl]["dur"]) == (600, 700)
    assert (r1[nccl]["ts"], r1[nccl]["ts"] + r1[nccl]["dur"]) == (500, 700)  # rank 1 waits 100 us longer
    assert r0["relu_kernel"]["ts"] == 900 and r1["relu_kernel"]["ts"] == 700
    assert r0["ProfilerStep#1"]["dur"] == 1020 and r1["ProfilerStep#1"]["dur"] == 1000
    assert r0["cudaDeviceSynchronize"]["ts"] == 100 and r0["cudaDeviceSynchronize"]["dur"] == 910
    assert r0["gemm_kernel"] == _by_name(_rank_doc(0, 300, 720))["gemm_kernel"]  # before the stall: unchanged
    flow_f = [e for e in _read(tmp_path / "out", 0)["traceEvents"] if e.get("ph") == "f"][0]
    assert flow_f["ts"] == r0[nccl]["ts"]  # the flow arrow still lands on its kernel


def test_tiny_stretch(tiny, tmp_path):
    # rank 1's compute x1.5: gemm 400 -> 600 us (arrives 700), all-reduce ends 800 on both;
    # relu starts 800 and takes 150; rank 1's step ends 900 + 250 = 1150.
    info = inject(tiny, tmp_path / "out", 1, stretch=1.5)
    assert info["kernels_stretched"] == 2
    assert info["job_time_increase_ms"] == pytest.approx(0.25)
    r0, r1 = _by_name(_read(tmp_path / "out", 0)), _by_name(_read(tmp_path / "out", 1))
    assert (r1["gemm_kernel"]["ts"], r1["gemm_kernel"]["dur"]) == (100, 600)
    assert (r1["relu_kernel"]["ts"], r1["relu_kernel"]["dur"]) == (800, 150)
    assert r0["ncclKernel_AllReduce_RING_LL_Sum_float"]["dur"] == 500 and r0["relu_kernel"]["ts"] == 800


def test_bad_input_named(tiny, tmp_path):
    with pytest.raises(DrillError, match="rank 5 is not in"):
        inject(tiny, tmp_path / "o", 5, stall_ms=1, before_collective=0)
    with pytest.raises(DrillError, match="1 matched collectives"):
        inject(tiny, tmp_path / "o", 0, stall_ms=1, before_collective=3)
    with pytest.raises(DrillError, match="choose one drill"):
        inject(tiny, tmp_path / "o", 0)
    with pytest.raises(DrillError, match="must differ"):
        inject(tiny, tiny, 0, stretch=2)
    (tiny / "rank-0.pt.trace.json.gz").write_bytes(b"not gzip")
    with pytest.raises(DrillError, match="rank-0.pt.trace.json.gz"):
        inject(tiny, tmp_path / "o", 1, stretch=2)


# --- the shared real sets ---------------------------------------------------------------------

def _check_valid(src: Path, out: Path, t0: float) -> None:
    """Same files, same events and fields; only ts/dur differ; nothing ending before t0 changed;
    kernels on a stream do not overlap; launches precede their kernels."""
    names = sorted(p.name for p in src.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:
        a, b = load_trace(src / name), load_trace(out / name)
        assert {k: v for k, v in a.items() if k != "traceEvents"} == {k: v for k, v in b.items() if k != "traceEvents"}
        assert len(a["traceEvents"]) == len(b["traceEvents"])
        launches, kernels = {}, {}
        for ea, eb in zip(a["traceEvents"], b["traceEvents"]):
            assert {k: v for k, v in ea.items() if k not in ("ts", "dur")} == {k: v for k, v in eb.items() if k not in ("ts", "dur")}
            if "ts" in ea and ea.get("ph") != "M" and ea["ts"] + ea.get("dur", 0) < t0:
                assert (ea["ts"], ea.get("dur")) == (eb["ts"], eb.get("dur")), (name, ea)
            assert eb.get("dur", 0) >= 0
            c = (eb.get("args") or {}).get("correlation")
            if eb.get("cat") == "kernel":
                kernels.setdefault(eb["args"].get("stream"), []).append(eb)
                kernels.setdefault(("corr", c), []).append(eb)
            elif eb.get("cat") == "cuda_runtime":
                launches[c] = eb["ts"]
        for key, ks in kernels.items():
            if isinstance(key, tuple):
                assert key[1] not in launches or all(k["ts"] >= launches[key[1]] for k in ks)
                continue
            ks = sorted(ks, key=lambda k: k["ts"])
            assert all(x["ts"] + x["dur"] <= y["ts"] + 1 for x, y in zip(ks, ks[1:])), (name, key)


@pytest.fixture(scope="module")
def dlrm_stall(tmp_path_factory):
    src = require(DLRM)
    out = tmp_path_factory.mktemp("dlrm_stall")
    step = job_times(src)["window_ms"]
    info = inject(src, out, 4, stall_ms=round(0.2 * step, 3), before_collective=4)
    return src, out, info


def test_dlrm_stall_valid_and_propagates(dlrm_stall):
    src, out, info = dlrm_stall
    _check_valid(src, out, float(info["at_us"]))
    # rank 4 is already the last to arrive at its first all-reduce (its kernel is the shortest):
    # every rank's copy of it ends later, and so does every rank's step
    assert info["collectives_matched"] == 8
    for p in sorted(src.iterdir()):
        a, b = load_trace(p), load_trace(out / p.name)
        ka = [e for e in a["traceEvents"] if e.get("cat") == "kernel" and "AllReduce" in e["name"]]
        kb = [e for e in b["traceEvents"] if e.get("cat") == "kernel" and "AllReduce" in e["name"]]
        assert kb[0]["ts"] + kb[0]["dur"] > ka[0]["ts"] + ka[0]["dur"] + 1000, p.name
        last_a = max(e["ts"] + e.get("dur", 0) for e in a["traceEvents"] if e.get("ph") == "X")
        last_b = max(e["ts"] + e.get("dur", 0) for e in b["traceEvents"] if e.get("ph") == "X")
        assert last_b > last_a + 1000, p.name
    assert 0.5 * info["stall_ms"] < info["job_time_increase_ms"] <= info["stall_ms"] + 1e-6


def test_dlrm_drilled_set_loads_in_hta(dlrm_stall):
    import logging

    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.trace_analysis import TraceAnalysis

    _, out, _ = dlrm_stall
    tb = TraceAnalysis(trace_dir=str(out)).get_temporal_breakdown(visualize=False)
    assert sorted(tb["rank"]) == list(range(8))


def test_sampled_stall_matches_by_end_time(tmp_path):
    src = require(SAMPLED)
    # rank 1 is the last to arrive at its first matched send/recv: the whole 50 ms reaches the job;
    # only the kernels whose ends agree on both ranks are matched (5 of 10 per rank: events are sampled)
    info = inject(src, tmp_path / "out", 1, stall_ms=50, before_collective=0)
    assert info["collectives_matched"] == 5
    assert info["job_time_increase_ms"] == pytest.approx(50.0)
    _check_valid(src, tmp_path / "out", float(info["at_us"]))


def test_cli(tiny, tmp_path):
    r = subprocess.run([sys.executable, "-m", "hpcprof.drills.trace_drill", str(tiny), str(tmp_path / "out"), "--rank", "1", "--stretch", "1.5"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["job_time_increase_ms"] == pytest.approx(0.25)
    assert "injected job-time increase: 0.250 ms" in r.stderr
    r = subprocess.run([sys.executable, "-m", "hpcprof.drills.trace_drill", str(tiny), str(tmp_path / "o2"), "--rank", "9", "--stretch", "2"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and "rank 9 is not in" in r.stderr and "Traceback" not in r.stderr
