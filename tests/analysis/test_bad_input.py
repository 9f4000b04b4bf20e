"""Bad input is named in `warnings` (file and rank) and the remaining ranks are still analysed;
nothing analysable -> a clean error (non-zero exit, no traceback)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from hpcprof.analysis import AnalysisError, analyze


def _files(d):
    return sorted(p for p in d.iterdir() if p.name.endswith(".json.gz"))


def _ranks(summary):
    return sorted(summary["ranks_analyzed"])


def test_no_distributed_info_analysed_as_rank0(tmp_path, traces, helpers, parse_cache):
    src = helpers.require(traces["kineto0"])
    summary = analyze(src, out=tmp_path / "out", workers=1, progress=False, cache_dir=parse_cache)
    assert _ranks(summary) == [0]
    name = _files(src)[0].name
    assert any(name in w and "no distributedInfo" in w and "rank 0" in w for w in summary["warnings"]), summary["warnings"]
    # single GPU trace: HTA's numbers are still there
    assert summary["per_rank"][0]["idle_pct"] is not None
    assert summary["device"] == "cuda"


def test_truncated_gzip_named_and_rest_analysed(dlrm_copy, tmp_path, parse_cache):
    f = _files(dlrm_copy)[3]
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    s = analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    assert _ranks(s) == [0, 1, 2, 4, 5, 6, 7]
    assert any(f.name in w and "truncated or corrupt" in w for w in s["warnings"]), s["warnings"]
    assert any("7 of 8 ranks analysed" in w for w in s["warnings"])


def test_corrupt_json_named_and_rest_analysed(dlrm_copy, tmp_path, parse_cache):
    f = _files(dlrm_copy)[1]
    raw = gzip.decompress(f.read_bytes())
    f.write_bytes(gzip.compress(raw[:-5000] + b"garbage"))
    s = analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    assert 1 not in _ranks(s) and len(_ranks(s)) == 7
    assert any(f.name in w and "not valid JSON" in w for w in s["warnings"]), s["warnings"]


def test_empty_file_named_and_rest_analysed(dlrm_copy, tmp_path, parse_cache):
    f = _files(dlrm_copy)[0]
    f.write_bytes(b"")
    s = analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    assert _ranks(s) == [1, 2, 3, 4, 5, 6, 7]
    assert any(f.name in w and "empty file" in w for w in s["warnings"]), s["warnings"]


def test_duplicate_rank_named_and_rest_analysed(dlrm_copy, tmp_path, parse_cache):
    f = _files(dlrm_copy)[2]
    dup = dlrm_copy / ("zz_copy_of_" + f.name)
    shutil.copy(f, dup)
    s = analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    assert _ranks(s) == list(range(8))
    assert any(dup.name in w and "duplicate rank 2" in w for w in s["warnings"]), s["warnings"]


def test_other_job_world_size_named_and_rest_analysed(dlrm_copy, tmp_path, helpers, parse_cache):
    f = _files(dlrm_copy)[5]
    doc = helpers.load_trace(f)
    doc["distributedInfo"]["world_size"] = 16
    helpers.write_trace(f, doc)
    s = analyze(dlrm_copy, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    assert _ranks(s) == [0, 1, 2, 3, 4, 6, 7]
    assert s["world_size"] == 8
    assert any(f.name in w and "(rank 5)" in w and "world size 16" in w for w in s["warnings"]), s["warnings"]


def test_cpu_only_trace_gpu_fields_null_with_reason(cpu_run, tmp_path, parse_cache):
    s = analyze(cpu_run, out=tmp_path / "out", workers=2, progress=False, cache_dir=parse_cache)
    assert s["device"] == "cpu"
    assert _ranks(s) == list(range(len(list((cpu_run / "traces").glob("rank-*.pt.trace.json.gz")))))
    assert len(_ranks(s)) >= 2
    for r in s["per_rank"]:
        assert r["idle_pct"] is None and r["compute_pct"] is None and r["comm_comp_overlap_pct"] is None
        assert r["step_time_ms"] and r["step_time_ms"] > 0
    assert s["kernel_breakdown"] is None
    assert any("rank-0.pt.trace.json.gz (rank 0)" in w and "no GPU kernels" in w and "null" in w for w in s["warnings"]), s["warnings"]
    assert s["collectives_matched"] > 0


def test_nothing_analysable_is_a_clean_error(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "a.json").write_text("{not json")
    (d / "b.json.gz").write_bytes(b"")
    with pytest.raises(AnalysisError) as exc:
        analyze(d, out=tmp_path / "out", workers=1, progress=False)
    assert "a.json" in str(exc.value) and "b.json.gz" in str(exc.value)
    proc = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(d), "--out", str(tmp_path / "o2")], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "nothing could be analysed" in proc.stderr


def test_missing_path_is_a_clean_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(tmp_path / "nope")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "no such run directory" in proc.stderr


def test_read_only_trace_folder_needs_out(tmp_path, traces, helpers):
    src = tmp_path / "ro"
    shutil.copytree(helpers.require(traces["sampled"]), src)
    src.chmod(0o555)
    try:
        proc = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(src), "--quiet"], capture_output=True, text=True)
        assert proc.returncode == 2 and "read-only; pass --out DIR" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert not (src / "analysis").exists()
    finally:
        src.chmod(0o755)


def _bomb(path, header: bytes, spaces_mb: int) -> None:
    """A .json.gz holding a trace header, then `spaces_mb` MB of spaces (about 1 KB compressed per MB)."""
    chunk = b" " * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(header)
        for _ in range(spaces_mb):
            fh.write(chunk)


# the analysis as a user runs it, its own peak memory printed last (--workers 1: the map runs in it).
# The peak is VmHWM, this process's own high-water mark: getrusage's ru_maxrss carries the peak of the
# process that started it across exec (Linux keeps the larger of the two), so in the full suite it
# read the pytest process's 1.2 GB, not the analysis'.
_PEAK = ("import re, sys\n"
         "from hpcprof.analyze import main\n"
         "rc = main(sys.argv[1:])\n"
         "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())\n"
         "print('peak MB', int(hwm.group(1)) // 1024)\n"
         "sys.exit(rc)\n")


@pytest.mark.parametrize("limit_mb, spaces_mb, said", [
    (16, 1024, "more than 16 MB of JSON text once inflated"),  # the limit, lowered by its setting
    (None, 1024, "without an element ending"),  # the default limit: past what the stream may hold
])
def test_a_gzip_bomb_fails_its_rank_in_one_line_and_the_others_are_analysed(dlrm_copy, tmp_path, limit_mb, spaces_mb, said):
    """Issue 37 item 12: a 14 MB .json.gz (a trace header, then 3 GB of spaces) drove `analyze` past
    10 GB; nothing capped the inflated text. A rank's trace past HPCPROF_MAX_TRACE_MB (default a
    quarter of the machine's memory), or holding more text than the stream decode may hold where a
    trace has events, fails with one line; memory stays well below the inflated size."""
    f = _files(dlrm_copy)[3]
    _bomb(f, b'{"distributedInfo": {"rank": 3, "world_size": 8}, "traceEvents": [', spaces_mb)
    assert f.stat().st_size < spaces_mb * 2048  # a few KB per MB: under the stream decode's size guess
    env = {k: v for k, v in os.environ.items() if k != "HPCPROF_MAX_TRACE_MB"}
    if limit_mb is not None:
        env["HPCPROF_MAX_TRACE_MB"] = str(limit_mb)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(dlrm_copy), "--out", str(out), "--workers", "1", "--quiet"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((out / "summary.json").read_text())
    assert _ranks(s) == [0, 1, 2, 4, 5, 6, 7]
    named = [w for w in s["warnings"] if f.name in w]
    assert len(named) == 1 and said in named[0] and "\n" not in named[0], s["warnings"]
    peak = int(proc.stdout.strip().splitlines()[-1].split()[-1])
    assert peak < 700, peak  # the text inflated is 1 GB
