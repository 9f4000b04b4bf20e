"""Map/reduce and the parse cache: per-rank tables, cache hits, --no-cache, changed traces never stale."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from hpcprof.analysis import ANALYSIS_VERSION, analyze, analyze_rank

from .conftest import DLRM, require


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


def test_a_first_analysis_hashes_no_trace_before_the_map_and_is_served_again(dlrm_copy, tmp_path, monkeypatch):
    """With nothing in its output folder for the memo to serve, an analysis does not read every trace
    once more to hash it before the map: its memo key is made of the bytes the map decoded, and the
    next analysis, which hashes the traces to look for the memo, finds it, also with a trace that
    cannot be analysed among them."""
    from hpcprof.analysis import memo

    (dlrm_copy / "broken.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", ')  # cut off
    calls = []
    real = memo.trace_digests

    def counted(files, **kwargs):
        calls.append(len(files))
        return real(files, **kwargs)

    monkeypatch.setattr(memo, "trace_digests", counted)
    out = tmp_path / "out"
    first = analyze(dlrm_copy, out=out, workers=2, use_cache=False, progress=False)
    assert calls == [] and first["cache"]["outputs_reused"] is False
    assert any("broken.pt.trace.json" in w for w in first["warnings"]), first["warnings"]
    second = analyze(dlrm_copy, out=out, workers=2, progress=False)
    assert calls == [9] and second["cache"]["outputs_reused"] is True
    assert second["per_rank"] == first["per_rank"]


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


@pytest.mark.parametrize("decode", ["whole", "stream"])
def test_a_trace_replaced_while_it_is_read_is_never_served_for_the_one_put_back(dlrm_copy, tmp_path, helpers, monkeypatch, decode):
    """Issue 37 item 10: the cache key was the file's hash taken before the parse. A trace replaced
    while `analyze` read it and put back afterwards was served from the cache (and the outputs'
    memo) with the swapped file's numbers. The swap happens deterministically inside the decode of
    rank 3 (a wrapper around the map's read: the first read of that file sees the other content),
    read whole or as a stream (the decode of large traces, here asked for every size)."""
    from hpcprof.analysis.ranks import mapper

    victim = _files(dlrm_copy)[3]
    original = tmp_path / "original.json.gz"
    swapped = tmp_path / "swapped.json.gz"
    original.write_bytes(victim.read_bytes())
    doc = helpers.load_trace(victim)  # the swapped content: rank 3 without its compute kernels
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("cat") == "kernel" and not e["name"].startswith("nccl"))]
    helpers.write_trace(swapped, doc)
    real, swaps = mapper.read_event_table, []

    def read_while_swapped(path, *args, **kwargs):
        if decode == "stream":
            kwargs["min_bytes"] = 0
        if path == victim and not swaps:
            swaps.append(path)
            os.replace(swapped, victim)
            try:
                return real(path, *args, **kwargs)
            finally:
                os.replace(original, victim)  # put back: the same bytes as when analyze began
        return real(path, *args, **kwargs)

    monkeypatch.setattr(mapper, "read_event_table", read_while_swapped)
    out, cache = tmp_path / "out", tmp_path / "cache"
    first = analyze(dlrm_copy, out=out, workers=1, progress=False, cache_dir=cache)
    assert swaps == [victim]
    assert {r["rank"]: r for r in first["per_rank"]}[3]["compute_pct"] == 0.0  # what it read
    assert any(victim.name in w and "changed while" in w for w in first["warnings"]), first["warnings"]
    monkeypatch.undo()
    truth = analyze(dlrm_copy, out=tmp_path / "truth", workers=2, progress=False, use_cache=False)
    r3 = {r["rank"]: r for r in truth["per_rank"]}[3]
    assert r3["compute_pct"] > 0
    again = analyze(dlrm_copy, out=out, workers=2, progress=False, cache_dir=cache)  # the same output folder: no memo
    assert again["cache"]["outputs_reused"] is False and 3 in again["cache"]["parsed_ranks"]
    assert again["per_rank"] == truth["per_rank"]
    elsewhere = analyze(dlrm_copy, out=tmp_path / "elsewhere", workers=2, progress=False, cache_dir=cache)
    assert 3 in elsewhere["cache"]["cached_ranks"] and elsewhere["per_rank"] == truth["per_rank"]


@pytest.fixture(scope="module")
def dlrm_reference(tmp_path_factory, parse_cache) -> dict:
    """The analysis of the DLRM set as it is: the numbers an analysis of a copy must give."""
    return analyze(require(DLRM), out=tmp_path_factory.mktemp("ref") / "out", workers=2, progress=False, cache_dir=parse_cache)


@pytest.mark.parametrize("how", ["a path under a file", "a regular file"])
@pytest.mark.parametrize("no_cache", [True, False], ids=["--no-cache", "cache"])
def test_a_cache_dir_that_cannot_be_written_is_one_line_and_the_ranks_are_analysed(dlrm_copy, tmp_path, dlrm_reference, how, no_cache):
    """Issue 37 item 18: a --cache-dir that cannot be written made every rank fail with a
    PermissionError and "nothing could be analysed", even with --no-cache. The tests run as root,
    whom permission bits do not stop: the cache dir is a path no one can create a folder at."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    cache = blocker / "cache" if how == "a path under a file" else blocker
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(dlrm_copy), "--out", str(out), "--cache-dir", str(cache),
                           "--workers", "2", "--quiet", *(["--no-cache"] if no_cache else [])], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["ranks_analyzed"] == list(range(8)) and s["per_rank"] == dlrm_reference["per_rank"]
    said = [w for w in s["warnings"] if str(cache) in w]
    assert blocker.read_text() == "a file" and not [p for p in out.iterdir() if p.name.startswith(".parse")]
    assert "Traceback" not in proc.stderr
    if no_cache:  # nothing needed writing there: nothing said
        assert said == []
    else:
        assert len(said) == 1 and "not writable" in said[0] and "without the parse cache" in said[0], s["warnings"]
