"""Map/reduce and the parse cache: per-rank tables, cache hits, --no-cache, changed traces never stale."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from hpcprof.analysis import ANALYSIS_VERSION, analyze, analyze_rank


def _files(d):
    return sorted(p for p in d.iterdir() if p.name.endswith(".json.gz"))


def test_analyze_rank_is_a_plain_function_writing_small_tables(dlrm_copy, tmp_path):
    f = _files(dlrm_copy)[4]
    res = analyze_rank(f, tmp_path / "cache")
    assert res.ok and not res.cached
    assert res.meta["rank"] == 4 and res.meta["analysis_version"] == ANALYSIS_VERSION
    for name in ("steps", "collectives", "busy", "idle", "kernel_type", "kernels_top", "kernels_all"):
        assert name in res.tables
        assert not pd.read_parquet(res.tables[name]).empty
    again = analyze_rank(f, tmp_path / "cache")
    assert again.cached and again.dir == res.dir


def test_second_analyze_reads_the_cache_and_no_cache_forces(dlrm_copy, tmp_path):
    out = tmp_path / "out"
    first = analyze(dlrm_copy, out=out, workers=2, progress=False)
    assert first["cache"]["parsed_ranks"] == list(range(8)) and first["cache"]["cached_ranks"] == []
    assert (out / ".cache").is_dir()
    second = analyze(dlrm_copy, out=out, workers=2, progress=False)
    assert second["cache"]["parsed_ranks"] == [] and second["cache"]["cached_ranks"] == list(range(8))
    assert second["per_rank"] == first["per_rank"]
    assert second["cache"]["outputs_reused"] is True and first["cache"]["outputs_reused"] is False
    subset = analyze(dlrm_copy, out=out, workers=2, ranks=[1, 2], progress=False)  # other options: a new reduce
    assert subset["cache"]["outputs_reused"] is False and subset["ranks_analyzed"] == [1, 2]
    assert subset["cache"]["parsed_ranks"] == []
    forced = analyze(dlrm_copy, out=out, workers=2, use_cache=False, progress=False)
    assert forced["cache"]["parsed_ranks"] == list(range(8))
    assert forced["per_rank"] == first["per_rank"]


def test_changed_trace_is_never_served_stale(dlrm_copy, tmp_path, helpers):
    out = tmp_path / "out"
    first = analyze(dlrm_copy, out=out, workers=2, progress=False)
    f = _files(dlrm_copy)[3]
    doc = helpers.load_trace(f)
    # drop every compute kernel of rank 3: its compute share must change
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("cat") == "kernel" and not e["name"].startswith("nccl"))]
    helpers.write_trace(f, doc)
    second = analyze(dlrm_copy, out=out, workers=2, progress=False)
    assert second["cache"]["parsed_ranks"] == [3]
    r3 = {r["rank"]: r for r in second["per_rank"]}[3]
    assert r3["compute_pct"] == 0.0
    assert {r["rank"]: r for r in first["per_rank"]}[3]["compute_pct"] > 0


def test_outputs_written_and_report_self_contained(dlrm_copy, tmp_path, parse_cache):
    out = tmp_path / "out"
    s = analyze(dlrm_copy, out=out, workers=2, progress=False, cache_dir=parse_cache)
    on_disk = json.loads((out / "summary.json").read_text())
    for key in ("world_size", "ranks_analyzed", "device", "warnings", "per_rank", "kernel_breakdown", "stragglers", "recommendations"):
        assert key in on_disk
    assert on_disk["world_size"] == 8 and on_disk["device"] == "cuda"
    for r in on_disk["per_rank"]:
        assert set(("rank", "node", "step_time_ms", "idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct")) <= set(r)
    for name in ("per_rank", "kernel_breakdown", "kernels_top", "idle_breakdown", "collectives", "waits_per_step"):
        assert (out / "tables" / f"{name}.csv").is_file() and (out / "tables" / f"{name}.parquet").is_file()
    for png in ("stragglers", "idle_time", "step_time_heatmap", "overlap", "kernel_types"):
        assert (out / "plots" / f"{png}.png").stat().st_size > 1000
    html = (out / "report.html").read_text()
    # every chart drawn is embedded (self-contained), none twice
    assert html.count("data:image/png;base64,") == len(list((out / "plots").glob("*.png"))) >= 5
    assert "src=\"http" not in html and "<link" not in html
    # DLRM is communication-bound: the top recommendation says so, with evidence
    assert s["recommendations"] and any("ommunication" in r["title"] for r in s["recommendations"][:2])


def test_kernel_name_with_script_tag_is_escaped(dlrm_copy, tmp_path, helpers):
    evil = "<script>alert('x')</script>volta_sgemm"
    for f in _files(dlrm_copy):  # every rank, so the name is among the top kernels the report shows
        doc = helpers.load_trace(f)
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and e["name"].startswith("volta_sgemm"):
                e["name"] = evil
        helpers.write_trace(f, doc)
    analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False)
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;volta_sgemm" in html


def test_cli_on_plain_folder_prints_console_summary(dlrm_copy, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hpcprof.analyze", str(dlrm_copy), "--out", str(tmp_path / "o"), "--workers", "2"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "top recommendation:" in proc.stdout and "report:" in proc.stdout
    assert "parsing traces" in proc.stderr  # progress bar
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith(tuple(str(i) for i in range(8)))]
    assert len(lines) >= 8


def test_nccl_dev_kernel_names_count_as_communication(dlrm_copy, tmp_path, helpers, parse_cache):
    """Recent NCCL names its kernels ncclDevKernel_*: same breakdown and collectives as ncclKernel_*."""
    before = analyze(dlrm_copy, out=tmp_path / "a", workers=2, progress=False, cache_dir=parse_cache)
    for f in _files(dlrm_copy):
        doc = helpers.load_trace(f)
        for e in doc["traceEvents"]:
            if isinstance(e.get("name"), str) and e["name"].startswith("ncclKernel_"):
                e["name"] = "ncclDevKernel_" + e["name"][len("ncclKernel_"):]
        helpers.write_trace(f, doc)
    after = analyze(dlrm_copy, out=tmp_path / "b", workers=2, progress=False)
    assert after["kernel_breakdown"] == before["kernel_breakdown"]
    assert after["collectives_matched"] == before["collectives_matched"] > 0
    assert [r["comm_comp_overlap_pct"] for r in after["per_rank"]] == [r["comm_comp_overlap_pct"] for r in before["per_rank"]]
