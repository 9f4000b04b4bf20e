"""Issue 13, adversarial findings on the analysis side, one regression test each:

- one bad rank never aborts the analysis, whatever the worker count (a `pg_config` that is not a
  list, raw non-UTF-8 bytes in event names; a single bad file is a clean error naming it);
- a steps line that is not a JSON object (`42`) is skipped with a warning naming the file;
- a host name with `$...$` never reaches matplotlib's mathtext parser;
- the whole-analysis memo checks that its outputs still exist (deleted tables/PNGs come back);
- a truncated parse-cache file is a cache miss, not a failure of every re-run;
- ranks outside [0, world_size) are rejected with a warning naming the file;
- a stale same-rank trace from another run does not displace the run's own trace;
- two ranks naming one host with clocks far apart are warned about, and no straggler may cost more
  than a whole step (such a verdict is withheld with a warning).
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcprof.analysis import analyze

REPO = Path(__file__).resolve().parents[2]


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith(".json.gz"))


def _load(p: Path) -> dict:
    with gzip.open(p, "rt") as fh:
        return json.load(fh)


def _write(p: Path, doc: dict) -> None:
    with gzip.open(p, "wt") as fh:
        json.dump(doc, fh)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcprof.analyze", *args, "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )


def _break(f: Path, kind: str) -> None:
    doc = _load(f)
    if kind == "pg_config":
        doc["distributedInfo"]["pg_config"] = 5  # not a list of groups
        _write(f, doc)
    elif kind == "raw_bytes":
        raw = json.dumps(doc).encode()
        i = raw.index(b'"name": "') + len(b'"name": "')
        f.write_bytes(gzip.compress(raw[:i] + b"\xff\xfe\x80" + raw[i:]))  # not UTF-8
    else:
        raise ValueError(kind)


# ------------------------------------------------------------------ one bad rank, any worker count
@pytest.mark.parametrize("workers", [1, 2])
def test_one_bad_rank_is_skipped_whatever_the_worker_count(dlrm_copy, tmp_path, workers, parse_cache):
    bad = _files(dlrm_copy)[1]
    _break(bad, "raw_bytes")
    proc = _cli(str(dlrm_copy), "--out", str(tmp_path / "out"), "--workers", str(workers), "--cache-dir", str(parse_cache))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["ranks_analyzed"] == [0, 2, 3, 4, 5, 6, 7]
    assert any(bad.name in w for w in s["warnings"]), s["warnings"]


@pytest.mark.parametrize("workers", [1, 2])
def test_malformed_optional_metadata_does_not_cost_the_rank(dlrm_copy, tmp_path, workers, parse_cache):
    """pg_config / deviceProperties that are not lists of objects (5, a string) are ignored: the
    analysis never reads them for a number, so the rank is analysed (it aborted everything with
    --workers 1)."""
    bad = _files(dlrm_copy)[1]
    doc = _load(bad)
    doc["distributedInfo"]["pg_config"] = 5
    doc["deviceProperties"] = "x"
    _write(bad, doc)
    proc = _cli(str(dlrm_copy), "--out", str(tmp_path / "out"), "--workers", str(workers), "--cache-dir", str(parse_cache))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["ranks_analyzed"] == list(range(8))


def test_single_bad_file_is_a_clean_error_naming_it(dlrm_copy, tmp_path):
    kind = "raw_bytes"
    folder = tmp_path / "one"
    folder.mkdir()
    bad = shutil.copy(_files(dlrm_copy)[1], folder)
    _break(Path(bad), kind)
    proc = _cli(str(folder), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert Path(bad).name in proc.stderr and "nothing could be analysed" in proc.stderr, proc.stderr


def test_raw_bytes_are_named_as_not_utf8(dlrm_copy, tmp_path, parse_cache):
    bad = _files(dlrm_copy)[1]
    _break(bad, "raw_bytes")
    s = analyze(dlrm_copy, out=tmp_path / "out", workers=1, progress=False, cache_dir=parse_cache)
    assert any(bad.name in w and "UTF-8" in w for w in s["warnings"]), s["warnings"]


# ------------------------------------------------------------------ ranks outside the world
def test_ranks_outside_the_world_are_rejected_with_the_file_named(dlrm_copy, tmp_path, parse_cache):
    files = _files(dlrm_copy)
    for f, rank in ((files[1], -3), (files[2], 10**30)):
        doc = _load(f)
        doc["distributedInfo"]["rank"] = rank
        _write(f, doc)
    for workers in (1, 2):
        s = analyze(dlrm_copy, out=tmp_path / f"out{workers}", workers=workers, progress=False, cache_dir=parse_cache)
        assert s["ranks_analyzed"] == [0, 3, 4, 5, 6, 7]
        for f, rank in ((files[1], -3), (files[2], 10**30)):
            assert any(f.name in w and str(rank) in w and "outside" in w for w in s["warnings"]), s["warnings"]


# ------------------------------------------------------------------ mathtext in host names
def test_dollar_signs_in_host_names_do_not_break_the_charts(dlrm_copy, tmp_path):
    for i, f in enumerate(_files(dlrm_copy)):
        doc = _load(f)
        doc["host_name"] = "$\\frac{a}{$" if i % 2 else "node$x^2$"
        _write(f, doc)
    proc = _cli(str(dlrm_copy), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {r["node"] for r in s["per_rank"]} == {"$\\frac{a}{$", "node$x^2$"}
    for png in s["outputs"]["plots"].values():
        assert Path(png).stat().st_size > 1000, png


# ------------------------------------------------------------------ the output memo and the cache
def test_memo_regenerates_deleted_tables_and_charts(dlrm_copy, tmp_path, parse_cache):
    out = tmp_path / "out"
    first = analyze(dlrm_copy, out=out, workers=2, progress=False, cache_dir=parse_cache)
    pngs = [Path(p) for p in first["outputs"]["plots"].values()]
    csvs = sorted((out / "tables").glob("*.csv"))
    assert pngs and csvs
    shutil.rmtree(out / "tables")
    for p in pngs:
        p.unlink()
    again = analyze(dlrm_copy, out=out, workers=2, progress=False, cache_dir=parse_cache)
    assert again["cache"]["outputs_reused"] is False
    assert all(p.is_file() for p in pngs)
    assert sorted((out / "tables").glob("*.csv")) == csvs
    # everything in place: the memo serves the outputs again
    third = analyze(dlrm_copy, out=out, workers=2, progress=False, cache_dir=parse_cache)
    assert third["cache"]["outputs_reused"] is True


@pytest.mark.parametrize("victim", ["parquet", "meta"])
def test_truncated_cache_file_is_a_miss(dlrm_copy, tmp_path, victim):
    out = tmp_path / "out"
    first = analyze(dlrm_copy, out=out, workers=2, progress=False)
    cache = out / ".cache"
    pattern = "*/*.parquet" if victim == "parquet" else "*/meta.json"
    for f in sorted(cache.glob(pattern))[:3]:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    (out / "summary.json").unlink()  # force a new reduce (the memo is tested above)
    proc = _cli(str(dlrm_copy), "--out", str(out), "--workers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["ranks_analyzed"] == first["ranks_analyzed"]
    assert s["cache"]["parsed_ranks"], "the damaged entries must be parsed again"


# ------------------------------------------------------------------ a real CPU run, altered
@pytest.fixture(scope="module")
def small_run(small_cpu_run) -> Path:
    """A finished 2-rank CPU run (both ranks on this host): the session's run of jobs/demo-local.toml
    with 32 px images and batch 8 (tests/conftest.py), which the tests below only copy, never alter."""
    proc, run = small_cpu_run
    if not (run.root / "traces" / "rank-1.pt.trace.json.gz").is_file():
        raise AssertionError(f"submit left no rank-1 trace:\n{proc.stdout[-3000:]}")
    return run.root


def _copy_run(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst, ignore=shutil.ignore_patterns("analysis"))
    return dst


def _shift(trace: Path, dst: Path, us: float) -> None:
    doc = _load(trace)
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
            e["ts"] += us
    _write(dst, doc)


def test_steps_lines_that_are_not_objects_are_skipped_with_a_warning(small_run, tmp_path):
    run = _copy_run(small_run, tmp_path / "run")
    steps = run / "steps" / "rank-1.jsonl"
    n = len(steps.read_text().splitlines())
    with steps.open("a") as fh:
        fh.write("42\n[1, 2]\n{\"no_step\": true}\n")
    proc = _cli(str(run))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = json.loads((run / "analysis" / "summary.json").read_text())
    assert any("rank-1.jsonl" in w and "line" in w and "skipped" in w for w in s["warnings"]), s["warnings"]
    import pandas as pd

    stats = pd.read_csv(run / "analysis" / "tables" / "steps_stats.csv")
    assert set(stats["rank"]) == {0, 1}
    assert n >= 12


def test_stale_same_rank_trace_does_not_displace_the_runs_own(small_run, tmp_path):
    run = _copy_run(small_run, tmp_path / "run")
    own = run / "traces" / "rank-1.pt.trace.json.gz"
    # a trace of rank 1 from an older run of the same job, sorted before the run's own
    _shift(own, run / "traces" / "a-old-rank-1.pt.trace.json.gz", -3 * 86400e6)
    s = analyze(run, workers=2, progress=False)
    r1 = next(r for r in s["per_rank"] if r["rank"] == 1)
    assert r1["file"] == own.name
    assert any("a-old-rank-1.pt.trace.json.gz" in w and "rank 1" in w for w in s["warnings"]), s["warnings"]
    step_ms = s["step_time"]["median_of_rank_medians_ms"]
    assert all(x["cost_ms_per_step"] < step_ms for x in s["stragglers"]), s["stragglers"]


def test_stale_trace_in_a_plain_folder_loses_to_the_one_in_time_with_the_others(small_run, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    for r in (0, 1):
        shutil.copy(small_run / "traces" / f"rank-{r}.pt.trace.json.gz", folder / f"r{r}.json.gz")
    _shift(folder / "r1.json.gz", folder / "a-stale.json.gz", -3 * 86400e6)
    s = analyze(folder, out=tmp_path / "out", workers=1, progress=False)
    assert next(r for r in s["per_rank"] if r["rank"] == 1)["file"] == "r1.json.gz"
    assert any("a-stale.json.gz" in w for w in s["warnings"]), s["warnings"]


@pytest.mark.parametrize("offset_us", [2e6, 1e15])
def test_inconsistent_clocks_on_one_host_are_warned_and_no_cost_exceeds_the_step(small_run, tmp_path, offset_us):
    run = _copy_run(small_run, tmp_path / "run")
    t = run / "traces" / "rank-1.pt.trace.json.gz"
    _shift(t, t, offset_us)
    proc = _cli(str(run))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = json.loads((run / "analysis" / "summary.json").read_text())
    host = s["per_rank"][0]["node"]
    assert any("clock" in w and str(host) in w and "0" in w and "1" in w for w in s["warnings"]), s["warnings"]
    step_ms = s["step_time"]["median_of_rank_medians_ms"]
    assert all(x["cost_ms_per_step"] < step_ms for x in s["stragglers"]), s["stragglers"]
    assert not any("Straggler" in r["title"] for r in s["recommendations"]), s["recommendations"]


# ------------------------------------------------------------------ SIGKILL of analyze
def test_sigkill_of_analyze_takes_its_worker_processes_with_it(dlrm_copy, tmp_path):
    """The chart workers (forked when the reduce starts) and the map workers die with analyze."""
    import os
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "hpcprof.analyze", str(dlrm_copy), "--out", str(tmp_path / "out"),
                             "--workers", "2", "--quiet", "--no-cache"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: set[int] = set()
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not children:
        try:
            children = {int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()}
        except OSError:
            pass
        time.sleep(0.05)
    assert children, "analyze finished before it started a worker"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 3  # a worker mid-task would go on for much longer without PDEATHSIG
    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
        except OSError:
            return False

    alive = children
    while alive and time.time() < deadline:
        alive = {p for p in alive if running(p)}
        time.sleep(0.2)
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, f"workers left running after analyze was killed: {alive}"
