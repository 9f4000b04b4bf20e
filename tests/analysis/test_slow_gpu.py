"""The slow GPU, named (issue 35, items 4 and 5): a drill that makes one rank's GPU F times slower in
a copy of the 8-rank DLRM set (8 real V100 ranks), and the analysis that must name that rank with
the factor it was given. The answer is known by construction: every compute kernel of the rank
takes F times as long, so its kernels for identical work are (F - 1) x 100% slower than the median
rank's (the other ranks are untouched)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from hpcprof.analysis import analyze, console_summary
from hpcprof.drills.slow_gpu import slow_gpu

from .conftest import DLRM, REPO, SAMPLED, load_trace, require

DRILLS = ((5, 1.10), (1, 1.20), (6, 1.40))
"""(rank, factor): a 10%, 20% and 40% slower GPU, each on another rank."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The analyses (workers=2) of the unstretched DLRM set, of the three drilled copies and of the
    2-of-128 sample: {name: (summary, drill truth or None, drilled folder or None)}."""
    base = tmp_path_factory.mktemp("slow_gpu")
    out = {"dlrm": (analyze(require(DLRM), out=base / "dlrm", workers=2, progress=False), None, None),
           "sampled": (analyze(require(SAMPLED), out=base / "sampled", workers=2, progress=False), None, None)}
    for rank, factor in DRILLS:
        folder = base / f"set-{rank}"
        truth = slow_gpu(DLRM, folder, rank, factor)
        out[rank] = (analyze(folder, out=base / f"an-{rank}", workers=2, progress=False), truth, folder)
    return out


@pytest.mark.parametrize("rank,factor", DRILLS)
def test_a_gpu_made_slower_is_named_with_its_factor(runs, rank, factor):
    summary, truth, _ = runs[rank]
    assert truth["kernels_stretched"] > 100
    assert summary["slow_gpu"]["named"] == [rank], summary["slow_gpu"]
    row = next(x for x in summary["slow_gpu"]["per_rank"] if x["rank"] == rank)
    assert row["slower_pct"] == pytest.approx(100 * (factor - 1), abs=2.0)
    assert f"rank {rank}: the same kernels {100 * (factor - 1):.0f}% slower than the median rank's" in row["text"]
    # where the user looks: the console, the table and the report
    assert f"slow GPU: rank {rank}: the same kernels" in console_summary(summary)
    tables = summary["outputs"]["tables"]
    assert f"\n{rank}," in (Path(tables) / "slow_gpu.csv").read_text()
    report = Path(summary["outputs"]["report"]).read_text()
    assert f"rank {rank}: the same kernels" in report


@pytest.mark.parametrize("name", ["dlrm", "sampled"])
def test_unstretched_traces_name_no_slow_gpu(runs, name):
    summary, _, _ = runs[name]
    sg = summary["slow_gpu"]
    assert sg["reason"] is None and sg["groups_compared"] > 50, sg
    assert sg["named"] == [], sg
    assert "slow GPU:" not in console_summary(summary)


def test_the_drill_stretches_kernels_exactly_and_keeps_each_stream_in_order(runs):
    """The drilled rank's compute kernels are F times as long, to the µs fraction (the DLRM set's
    durations are whole µs: rounded, a 3 µs kernel stretched 10% would not change); no two kernels
    on one of its streams overlap; the source folder is unchanged."""
    _, truth, folder = runs[5]
    assert truth["compute_ms_after"] == pytest.approx(1.10 * truth["compute_ms_before"], rel=1e-9)
    src = load_trace(next(require(DLRM).glob("worker5_*")))
    new = load_trace(folder / next(require(DLRM).glob("worker5_*")).name)
    before = [e for e in src["traceEvents"] if e.get("cat") == "kernel" and not e["name"].startswith("nccl")]
    after = [e for e in new["traceEvents"] if e.get("cat") == "kernel" and not e["name"].startswith("nccl")]
    assert [e["name"] for e in after] == [e["name"] for e in before]
    assert all(a["dur"] == pytest.approx(1.10 * b["dur"], abs=1e-9) for a, b in zip(after, before))
    streams = defaultdict(list)
    for e in new["traceEvents"]:
        if e.get("cat") == "kernel":
            streams[e["args"]["stream"]].append((e["ts"], e["ts"] + e["dur"]))
    for spans in streams.values():
        spans.sort()
        assert all(s2 >= e1 for (_, e1), (s2, _) in pairwise(spans))
    with gzip.open(next(require(DLRM).glob("worker5_*")), "rt") as fh:
        assert json.load(fh) == src  # the input is never written


def test_slow_gpu_drill_cli_refuses_a_factor_below_one_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hpcprof.drills.slow_gpu", str(DLRM), str(tmp_path / "o"), "--rank", "1", "--factor", "0.9"],
                       capture_output=True, text=True, cwd=REPO, check=False)
    assert r.returncode == 2 and "--factor 0.9" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def _work(rows):
    import pandas as pd

    return pd.DataFrame(rows, columns=["rank", "key", "name", "grid", "block", "count", "total_us"])


def test_a_gpu_compute_straggler_that_ran_more_kernels_is_said_to_do_more_work():
    """Four ranks run the same two kernels at the same speed; rank 2 also runs 30 extra calls of a
    third kernel (900 µs) and 10 more calls of the first: its ratio stays 1 (not a slow GPU) and the
    evidence names the extra work, 0.9 + 0.1 ms above the median rank."""
    from hpcprof.analysis.reduce.slow_gpu import gpu_compute_evidence
    from hpcprof.analysis.reduce.slow_gpu import slow_gpu as compare

    rows = []
    for r in range(4):
        rows += [(r, "gemm|8x1x1|256x1x1", "gemm", "8x1x1", "256x1x1", 100 + (10 if r == 2 else 0), 1000.0 + (100.0 if r == 2 else 0)),
                 (r, "relu|4x1x1|128x1x1", "relu", "4x1x1", "128x1x1", 50, 250.0)]
    rows.append((2, "extra|1x1x1|32x1x1", "extra", "1x1x1", "32x1x1", 30, 900.0))
    sg = compare(_work(rows))
    assert sg["named"] == [] and sg["groups_compared"] == 2
    row = next(x for x in sg["per_rank"] if x["rank"] == 2)
    assert row["ratio"] == pytest.approx(1.0) and row["more_work_ms"] == pytest.approx(1.0)
    assert gpu_compute_evidence(sg, 2).startswith("rank 2 did more GPU work: 1.00 ms more compute-kernel time")


def test_a_gpu_compute_straggler_on_a_slow_gpu_carries_the_verdict():
    from hpcprof.analysis.reduce.slow_gpu import gpu_compute_evidence
    from hpcprof.analysis.reduce.slow_gpu import slow_gpu as compare

    rows = [(r, "gemm|8x1x1|256x1x1", "gemm", "8x1x1", "256x1x1", 100, 1000.0 * (1.25 if r == 3 else 1.0)) for r in range(4)]
    sg = compare(_work(rows))
    assert sg["named"] == [3]
    assert gpu_compute_evidence(sg, 3) == "rank 3: the same kernels 25% slower than the median rank's: a slow or throttled GPU"
