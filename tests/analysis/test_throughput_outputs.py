"""Throughput in every analysis: summary.json `throughput`, the console line, the report section and
tables/throughput_steps, on a run directory whose step records have a known answer (the records of
test_throughput.py next to a real single-rank trace)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis import analyze, console_summary

from .conftest import KINETO0, require
from .test_throughput import N_STEPS, make_steps


@pytest.fixture
def run_with_steps(tmp_path) -> Path:
    run = tmp_path / "tp-run"
    (run / "traces").mkdir(parents=True)
    (run / "steps").mkdir()
    trace = next(require(KINETO0).glob("*.json.gz"))
    shutil.copy(trace, run / "traces" / "rank-0.pt.trace.json.gz")
    steps = make_steps(ranks=(0,))
    with open(run / "steps" / "rank-0.jsonl", "w") as fh:
        for rec in steps.to_dict("records"):
            fh.write(json.dumps(rec) + "\n")
    (run / "manifest.json").write_text(json.dumps({"name": "tp-run", "world_size": 1, "spec": {"profiler": {"warmup": 2, "enabled": True}}}))
    return run


def test_summary_console_report_and_table_show_throughput(run_with_steps):
    s = analyze(run_with_steps, progress=False)
    tp = s["throughput"]
    steady = [st for st in range(N_STEPS) if st not in (0, 16, 32, 11, 12, 13, 14, 15)]
    expected = sorted(32 / (0.1 + ((st * 7) % 37) / 10_000) for st in steady)
    assert tp["job"]["median_samples_per_s"] == pytest.approx((expected[15] + expected[16]) / 2)
    assert tp["job"]["ci95_samples_per_s"] == pytest.approx([expected[9], expected[22]])
    assert tp["job"]["steps"] == {"total": 40, "warmup": 1, "epoch_boundary": 2, "trace_export": 0, "profiled": 3, "profiler_warmup": 2, "steady": 32}
    assert tp["job"]["profiled_median_samples_per_s"] == pytest.approx(80.0)
    line = console_summary(s)
    assert f"throughput: {tp['job']['median_samples_per_s']:.1f} samples/s" in line
    assert "epoch boundary 2" in line and "profiled 3 (those ran at 80.0 samples/s)" in line
    report = (run_with_steps / "analysis" / "report.html").read_text()
    assert "<h2>Throughput and step time</h2>" in report  # the report's own section (outputs/report.py)
    assert f"{tp['job']['median_samples_per_s']:.1f} samples/s" in report
    t = pd.read_csv(run_with_steps / "analysis" / "tables" / "throughput_steps.csv")
    assert len(t) == 40 and t.set_index("step")["phase"][16] == "epoch_boundary"
    assert t.set_index("step")["samples_per_s"][13] == pytest.approx(80.0)


def test_trace_folder_without_step_records_says_throughput_is_unknown(tmp_path, parse_cache):
    s = analyze(require(KINETO0), out=tmp_path / "a", progress=False, cache_dir=parse_cache)
    assert s["throughput"] is None
    assert "throughput: - samples/s (no step records" in console_summary(s)
