"""python -m hpcprof.compare on real trace pairs: numbers equal to the per-trace analyses, verdicts,
operator/kernel deltas equal to HTA's own TraceDiff, escaped HTML."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = (REPO / ".." / "shared" / "traces").resolve()


def need(*folders: Path) -> None:
    for f in folders:
        if not f.is_dir():
            pytest.skip(f"{f} not found (shared/ traces must sit beside the repository)")


def test_kineto_workers0_vs_workers4(tmp_path):
    w0, w4 = TRACES / "kineto_resnet50_v100_workers0", TRACES / "kineto_resnet50_v100_workers4"
    need(w0, w4)
    out = tmp_path / "cmp"
    p = subprocess.run([sys.executable, "-m", "hpcprof.compare", str(w0), str(w4), "--out", str(out), "--quiet"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert not (w0 / "analysis").exists() and not (w4 / "analysis").exists()  # read-only inputs stay untouched
    assert "faster" in p.stdout and "176.3" in p.stdout and "126.5" in p.stdout
    res = json.loads((out / "compare.json").read_text())
    base, new = res["runs"]
    # the same numbers as each trace's own analysis (written by compare beside its output)
    for row in (base, new):
        s = json.loads((Path(row["analysis"]) / "summary.json").read_text())["per_rank"][0]
        # summary.json rounds to 2 decimals (outputs/rounding.py)
        assert row["step_ms"] == pytest.approx(s["step_time_ms"], abs=0.006)
        assert row["data_wait_pct"] == pytest.approx(s["host_data_loading_pct"], abs=0.006)
        assert row["gpu_idle_pct"] == pytest.approx(s["idle_pct"], abs=0.006)
    assert base["step_ms"] == pytest.approx(176.3, abs=0.05) and new["step_ms"] == pytest.approx(126.5, abs=0.05)
    assert base["data_wait_pct"] == pytest.approx(39.6, abs=0.05) and new["data_wait_pct"] == pytest.approx(1.0, abs=0.05)
    deltas = {d["metric"]: d for d in res["deltas"]}
    assert deltas["step_ms"]["verdict"] == "faster" and deltas["step_ms"]["ci_pct"][1] < 0
    assert deltas["data_wait_pct"]["verdict"] == "lower"
    assert new["vs_baseline"]["verdict"] == "faster"
    # the single-process loader left, the multi-process one came
    ops = pd.read_csv(out / "tables" / f"ops_{new['label']}.csv")
    removed = ops[ops["change"] == "removed"]["name"]
    assert removed.str.contains("_SingleProcessDataLoaderIter").any()
    for f in ("tables/runs.csv", "tables/deltas.csv", "plots/throughput.png", "plots/step_breakdown.png"):
        assert (out / f).stat().st_size > 0
    page = (out / "compare.html").read_text()
    assert "<script" not in page and "src=\"http" not in page
    # kernel names carry C++ templates: escaped, never raw markup
    assert "&lt;" in page
    stray = re.findall(r"<(?!/?(?:html|head|meta|title|style|body|h1|h2|h3|p|ul|li|table|thead|tbody|tr|th|td|img|code|div|span)\b|!doctype)[^>]{0,30}", page)
    assert stray == []


@pytest.mark.parametrize("pair", [("trace_diff/control", "trace_diff/test"), ("trace_compare/base", "trace_compare/test")])
def test_op_deltas_equal_hta_tracediff(tmp_path, pair):
    from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

    from hpcprof.compare import compare

    base, test = TRACES / "hta_tests" / pair[0], TRACES / "hta_tests" / pair[1]
    need(base, test)
    res = compare([str(base), str(test)], tmp_path / "cmp", progress=False)
    label = res["runs"][1]["label"]
    ours = pd.read_csv(tmp_path / "cmp" / "tables" / f"ops_{label}.csv", keep_default_na=False)
    logging.getLogger("hta").setLevel(logging.ERROR)
    lc, lt = LabeledTrace("c", trace_dir=str(base)), LabeledTrace("t", trace_dir=str(test))
    nb, nt = lc.iterations(), lt.iterations()
    for kind, dev in (("operator", DeviceType.CPU), ("kernel", DeviceType.GPU)):
        h = TraceDiff.compare_traces(lc, lt, control_iteration=nb, test_iteration=nt, device_type=dev)
        h = h[~h.index.str.startswith("ProfilerStep#")]
        mine = ours[ours["kind"] == kind].set_index("name")
        assert set(mine.index) == set(h.index)
        j = mine.join(h)
        assert (j["base_count"] * len(nb)).round(6).tolist() == j["c_counts"].astype(float).tolist()
        assert (j["test_count"] * len(nt)).round(6).tolist() == j["t_counts"].astype(float).tolist()
        assert (j["base_us"] * len(nb) - j["c_total_duration"]).abs().max() < 1e-6
        assert (j["test_us"] * len(nt) - j["t_total_duration"]).abs().max() < 1e-6
        added = set(mine.index[mine["change"] == "added"])
        assert added == set(TraceDiff.ops_diff(lc, lt, control_iteration=nb, test_iteration=nt, device_type=dev)["added"]) - {n for n in added if n.startswith("ProfilerStep#")}


def test_refuses_a_single_run_and_names_a_bad_path(tmp_path):
    p = subprocess.run([sys.executable, "-m", "hpcprof.compare", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "at least two runs" in p.stderr
    missing = tmp_path / "nope"
    p = subprocess.run([sys.executable, "-m", "hpcprof.compare", str(tmp_path), str(missing), "--out", str(tmp_path / "o")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and str(missing) in p.stderr and "Traceback" not in p.stderr


def test_bootstrap_keeps_drift_within_a_run_in_its_interval(monkeypatch):
    """Step times drift within a run (this VM: 260 -> 200 ms over one 30-step run); resampling single
    steps treats that drift as independent noise and gives too narrow an interval. The block
    bootstrap (blocks of ceil(sqrt(n)) consecutive steps) keeps stretches together: on a drifting
    series its interval is wider than the single-step one, on white noise about as wide."""
    import numpy as np

    from hpcprof.compare import stats

    rng = np.random.default_rng(1)
    drift = np.linspace(200.0, 260.0, 25) + rng.normal(0, 2, 25)
    noise = 230.0 + rng.normal(0, 17, 25)

    blocks = stats.block_length

    def width(base, test, block):
        monkeypatch.setattr(stats, "block_length", blocks if block else (lambda n: 1))
        lo, hi = stats.compare_metric("samples_per_s", base, test).ci_pct
        return hi - lo

    assert blocks(25) == 5
    flipped = drift[::-1].copy()
    print("drift:", width(drift, flipped, True), width(drift, flipped, False),
          "noise:", width(noise, noise[::-1].copy(), True), width(noise, noise[::-1].copy(), False))
    assert width(drift, flipped, block=True) > 1.3 * width(drift, flipped, block=False)
    assert width(noise, noise[::-1].copy(), block=True) < 1.5 * width(noise, noise[::-1].copy(), block=False)
