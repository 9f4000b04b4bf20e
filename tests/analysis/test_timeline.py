"""The merged timeline (analysis/timeline.pt.trace.json.gz) and the one clock it is drawn on.

Known answers: the kernels of the chosen step, counted straight from the raw traces; a clock skew
applied to the real DLRM traces of one "host" (hpcprof.rank.clock_skew, the drill's own code), which
the clock estimator must recover within its reported uncertainty and within 0.1 ms, leaving the
straggler verdict unchanged.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis import analyze
from hpcprof.rank.clock_skew import skew_trace_file

from .conftest import DLRM, DRILL_ARGS, DRILL_RANKS, SAMPLED, load_trace, require, write_trace

NAME_RE = re.compile(r"^rank (\d+) · (.+) · (.+)$")
SKEW_MS = 3.7


def read_timeline(out: Path) -> dict:
    with gzip.open(out / "timeline.pt.trace.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)  # valid JSON, or this raises


def processes(doc: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}


def step_kernels(doc: dict, step: int) -> Counter:
    """Kernels of ProfilerStep#<step> in a raw trace: launched in the step (runtime call inside it,
    matched by correlation id) or, without a launch record, starting inside it."""
    ev = doc["traceEvents"]
    st = next(e for e in ev if e.get("name") == f"ProfilerStep#{step}" and e.get("ph") == "X")
    lo, hi = st["ts"], st["ts"] + st["dur"]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime" and lo <= e["ts"] < hi and "correlation" in e.get("args", {})}
    return Counter(e["name"] for e in ev if e.get("cat") == "kernel" and (e.get("args", {}).get("correlation") in launched or lo <= e["ts"] < hi))


@pytest.fixture(scope="module")
def dlrm_two_hosts(tmp_path_factory) -> dict[str, Path]:
    """The DLRM traces with ranks 0-3 on host n1 and 4-7 on n2, once as recorded and once with
    n2's clock ahead by SKEW_MS."""
    src = require(DLRM)
    out = {}
    for name, skew in (("plain", 0.0), ("skewed", SKEW_MS)):
        d = tmp_path_factory.mktemp(name)
        for p in sorted(src.iterdir()):
            doc = load_trace(p)
            rank = doc["distributedInfo"]["rank"]
            doc["host_name"] = "n1" if rank < 4 else "n2"
            target = write_trace(d / p.name, doc)
            if skew and rank >= 4:
                skew_trace_file(target, skew)
        out[name] = d
    return out


def test_dlrm_timeline_one_process_per_rank_every_kernel_of_the_step(tmp_path, parse_cache):
    out = tmp_path / "an"
    s = analyze(require(DLRM), out=out, progress=False, timeline_steps=[10], cache_dir=parse_cache)
    doc = read_timeline(out)
    names = processes(doc)
    assert sorted(names) == list(range(8))
    for r, n in names.items():
        m = NAME_RE.match(n)
        assert m and int(m.group(1)) == r, n
        assert "V100" in m.group(3)
    assert s["timeline"]["steps"] == [10]
    assert s["timeline"]["dropped"] == {}
    for p in sorted(DLRM.iterdir()):
        raw = load_trace(p)
        r = raw["distributedInfo"]["rank"]
        want = step_kernels(raw, 10)
        got = Counter(e["name"] for e in doc["traceEvents"] if e.get("pid") == r and e.get("cat") == "kernel")
        assert got == want, f"rank {r}: kernels differ"
        assert sum(want.values()) > 200
    # GPU streams and CPU threads are threads of the rank's process, each named
    threads = [e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0]
    assert any(t.startswith("main thread") for t in threads) and any(re.match(r"GPU \d+ stream \d+", t) for t in threads)
    # the latest arrival of the job (the collectives table's largest skew) is annotated, with the waits it caused
    colls = pd.read_csv(out / "tables" / "collectives.csv")
    late = colls.loc[colls["skew_ms"].idxmax()]
    top = int(late["last_rank"])
    assert late["skew_ms"] > 1.0
    assert any(e.get("cat") == "hpcprof" and e["pid"] == top and e["name"].startswith(f"late arrival: rank {top}")
               and abs(e["dur"] / 1e3 - late["skew_ms"]) < 0.01 for e in doc["traceEvents"])
    assert any(e.get("cat") == "hpcprof" and e["name"].startswith(f"waiting for rank {top}") for e in doc["traceEvents"])
    assert s["clock_alignment"]["hosts"] and doc["hpcprof"]["clock_alignment"] == s["clock_alignment"]


def _members(raw: bytes) -> list[bytes]:
    """The texts of the gzip members in `raw`, one by one (gzip.decompress joins them silently)."""
    import zlib

    out = []
    while raw:
        d = zlib.decompressobj(31)  # gzip wrapper
        out.append(d.decompress(raw) + d.flush())
        assert d.eof
        raw = d.unused_data
    return out


def test_timeline_file_is_one_gzip_member(tmp_path, parse_cache):
    """Perfetto reads only the first member of a multi-member gzip (google/perfetto#872), so the
    whole document must be ONE member: the file of a real analysis, parsed member by member."""
    analyze(require(DLRM), out=tmp_path / "an", progress=False, cache_dir=parse_cache)
    members = _members((tmp_path / "an" / "timeline.pt.trace.json.gz").read_bytes())
    assert len(members) == 1 and json.loads(members[0])["traceEvents"]


@pytest.mark.parametrize("isal", ["1", "0"])
def test_timeline_gzip_writer_is_one_member_of_the_exact_text(tmp_path, monkeypatch, isal):
    """The writer of the timeline's file, against the library it uses: python-isal's threaded writer
    where installed (several threads, the text many times its block size) and Python's gzip
    (HPCPROF_ISAL=0) each write ONE gzip member holding the text written, byte for byte (CRC and size
    of the trailer checked by the readers), its header without a time or a name; which writer was
    used is asserted, so the ISA-L path cannot silently go unused. A failed write leaves no file."""
    import random

    from hpcprof.analysis.outputs.timeline.gzip_out import gzip_out

    monkeypatch.setenv("HPCPROF_ISAL", isal)
    rng = random.Random(7)
    words = [f'{{"name": "kernel_{i}", "ts": {i * 1.5:.3f}}},'.encode() for i in range(300)]
    parts = [b"".join(rng.choice(words) for _ in range(rng.randint(0, 4000))) for _ in range(200)] + [b""]
    path = tmp_path / "t.json.gz"
    with gzip_out(path) as gz:
        for p in parts:
            gz.write(memoryview(p))
    if isal == "1" and importlib.util.find_spec("isal") is not None:
        assert type(gz).__module__ == "isal.igzip_threaded"
    else:
        assert isinstance(gz, gzip.GzipFile)
    text = b"".join(parts)
    assert len(text) > 8 << 20  # many blocks of the threaded writer
    raw = path.read_bytes()
    assert gzip.decompress(raw) == text and _members(raw) == [text]
    assert raw[3] == 0 and raw[4:8] == bytes(4)  # no name or other flag, mtime 0
    assert not (tmp_path / "t.json.gz.tmp").exists()

    with pytest.raises(RuntimeError), gzip_out(tmp_path / "failed.json.gz") as gz:
        gz.write(text[: 3 << 20])
        raise RuntimeError("disk full")
    assert not list(tmp_path.glob("failed*"))


def test_clock_skew_is_recovered_and_leaves_the_verdict(dlrm_two_hosts, tmp_path):
    plain = analyze(dlrm_two_hosts["plain"], out=tmp_path / "plain", progress=False)
    skewed = analyze(dlrm_two_hosts["skewed"], out=tmp_path / "skewed", progress=False)
    hosts = {h["host"]: h for h in skewed["clock_alignment"]["hosts"]}
    base = {h["host"]: h for h in plain["clock_alignment"]["hosts"]}
    assert skewed["clock_alignment"]["reference_host"] == "n1"
    n2 = hosts["n2"]
    # the recovered skew is the offset change the drill caused (the recorded job had its own tiny one)
    recovered = n2["offset_ms"] - base["n2"]["offset_ms"]
    assert abs(recovered - SKEW_MS) <= n2["uncertainty_ms"], (recovered, n2)
    assert abs(n2["offset_ms"] - SKEW_MS) < 0.1 and n2["uncertainty_ms"] < 0.1
    assert not n2["suspect"]
    # same verdict: same flagged ranks, same costs (the skew is removed before anything is measured)
    assert [s["rank"] for s in skewed["stragglers"]] == [s["rank"] for s in plain["stragglers"]]
    for a, b in zip(skewed["stragglers"], plain["stragglers"]):
        assert a["cost_ms_per_step"] == pytest.approx(b["cost_ms_per_step"], abs=0.05)
    # on the merged timeline the skewed ranks sit where they sat without the skew
    ta, tb = read_timeline(tmp_path / "skewed"), read_timeline(tmp_path / "plain")
    first = lambda doc, r: min(e["ts"] for e in doc["traceEvents"] if e.get("pid") == r and e.get("cat") == "kernel")  # noqa: E731
    for r in (0, 5):
        assert abs(first(ta, r) - first(tb, r)) <= 1e3 * n2["uncertainty_ms"] + 1.0


def test_size_budget_drops_low_value_events_first_and_says_so(tmp_path, parse_cache):
    s = analyze(require(DLRM), out=tmp_path / "an", progress=False, timeline_max_events=6000, cache_dir=parse_cache)
    tl = s["timeline"]
    assert tl["dropped"], "nothing dropped under a 6000-event budget"
    assert list(tl["dropped"])[0] == "launch_flows"  # the lowest value goes first
    doc = read_timeline(tmp_path / "an")
    assert doc["hpcprof"]["dropped"] == tl["dropped"]
    kernels = sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert kernels == sum(sum(step_kernels(load_trace(p), 10).values()) for p in DLRM.iterdir())
    assert tl["events"] <= 6000


def test_steps_beyond_the_budget_are_left_out_whole_and_said(tmp_path, parse_cache):
    """The sampled set's GPU activity alone (2 steps) is above a 1,500-event budget: the second
    step is left out, whole (every kernel of the first step is there), with a warning."""
    s = analyze(require(SAMPLED), out=tmp_path / "an", progress=False, timeline_max_events=1500, cache_dir=parse_cache)
    whole = analyze(require(SAMPLED), out=tmp_path / "whole", progress=False, cache_dir=parse_cache)["timeline"]
    tl = s["timeline"]
    first, second = whole["steps"]
    assert tl["steps"] == [first] and tl["steps_left_out"] == [second]
    assert any("left out" in w and str(second) in w for w in s["warnings"])
    doc = read_timeline(tmp_path / "an")
    kernels = sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert kernels == sum(sum(step_kernels(load_trace(p), first).values()) for p in SAMPLED.iterdir())
    assert doc["hpcprof"]["steps_left_out"] == [second]


def test_unknown_timeline_step_names_the_profiled_steps(tmp_path, parse_cache):
    s = analyze(require(DLRM), out=tmp_path / "an", progress=False, timeline_steps=[999], cache_dir=parse_cache)
    assert "error" in s["timeline"] and "profiled steps: [10]" in s["timeline"]["error"]
    assert any("timeline" in w and "999" in w for w in s["warnings"])
    assert (tmp_path / "an" / "report.html").is_file()


def test_cpu_run_timeline(cpu_run, tmp_path, parse_cache):
    s = analyze(cpu_run, out=tmp_path / "an", workers=2, progress=False, cache_dir=parse_cache)
    doc = read_timeline(tmp_path / "an")
    names = processes(doc)
    assert sorted(names) == list(range(DRILL_RANKS))
    assert all(NAME_RE.match(n) and n.endswith("· cpu") for n in names.values())
    prof = sorted({int(x) for x in s["timeline"]["steps"]})
    steps = {int(e["name"].split("#")[1]) for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == set(prof) and len(prof) == int(DRILL_ARGS[DRILL_ARGS.index("--profiler-active") + 1])
    assert any(e.get("name", "").startswith("gloo:") for e in doc["traceEvents"])
    # one clock: on one host the offset is exactly 0
    assert [h["offset_ms"] for h in s["clock_alignment"]["hosts"]] == [0.0]


def test_a_rank_whose_piece_fails_is_analysed_and_left_off_the_timeline(tmp_path, monkeypatch):
    """The timeline piece is built in the rank's map task: a failure there is a warning naming the
    file, and the rank's own analysis and the other ranks' timeline stand."""
    from hpcprof.analysis.ranks import mapper

    real = mapper.timeline_piece
    names = {p.name for p in require(DLRM).iterdir()}

    def piece(table, *args):  # the map passes the table's factorized names and categories too
        if len(piece.calls) == 3:
            piece.calls.append(1)
            raise ValueError("broken piece")
        piece.calls.append(1)
        return real(table, *args)

    piece.calls = []
    monkeypatch.setattr(mapper, "timeline_piece", piece)
    s = analyze(DLRM, out=tmp_path / "an", workers=1, progress=False, use_cache=False)
    assert s["ranks_analyzed"] == list(range(8))
    hit = [w for w in s["warnings"] if "not on the merged timeline (ValueError: broken piece)" in w]
    assert len(hit) == 1 and hit[0].split(": ")[0] in names
    assert len(s["timeline"]["ranks"]) == 7 and len(s["timeline"]["ranks_without_steps"]) == 1


def test_correlation_lookup_is_numpys_isin():
    """The selection's correlation-id lookup (timeline_piece.is_in) answers as np.isin does, NaN,
    -1, duplicates and ids beyond either end included."""
    import numpy as np

    from hpcprof.analysis.ranks.timeline_piece import is_in

    rng = np.random.default_rng(7)
    for n, m in ((0, 5), (5, 0), (1, 1), (2000, 300), (300, 2000)):
        values = rng.integers(-3, 400, n).astype(float)
        of = rng.integers(-3, 400, m).astype(float)
        values[rng.random(n) < 0.05] = np.nan
        of[rng.random(m) < 0.05] = np.nan
        for o in (of, of[~np.isnan(of)].astype(np.int64)):  # floats with NaN; ints (the flows' ids)
            assert (is_in(values, o) == np.isin(values, o)).all()


def test_a_piece_selected_in_its_own_window_keeps_every_row(tmp_path, parse_cache):
    """write_timeline does not select again in a rank's piece when all its steps are chosen: the
    piece holds what the window of all its steps selects, and selecting in it again keeps it all."""
    from hpcprof.analysis.outputs.timeline.render import SELECT_COLUMNS, read_piece, window_rows

    for src in (DLRM, SAMPLED):
        cache = tmp_path / f"cache-{src.name}"
        analyze(require(src), out=tmp_path / f"an-{src.name}", progress=False, cache_dir=cache)
        metas = sorted(cache.rglob("meta.json"))
        assert metas
        for meta in metas:
            steps = json.loads(meta.read_text())["timeline"]["steps"]
            piece = read_piece(str(meta.parent / "timeline.parquet"), SELECT_COLUMNS)
            lo, hi = min(a for _, a, _ in steps), max(b for _, _, b in steps)
            assert piece.num_rows and window_rows(piece, lo, hi).all(), meta


def test_timeline_events_are_json_on_the_job_clock_rounded_to_the_nanosecond():
    """A rank's events as the merged timeline writes them (timeline/render.event_batches): strict
    JSON whatever the names hold (quotes, backslashes, control characters, non-ASCII), each event's
    "ts" the trace's time minus the shift rounded to 3 decimals (numpy's np.round), "dur" the
    duration as it was, name, pid and tid those given; across several batches."""
    import numpy as np
    import pyarrow as pa

    from hpcprof.analysis.outputs.timeline import render as tr

    rng = np.random.default_rng(5)
    n = tr.BATCH + 1000
    names = ["aten::mm", 'quote " and \\ backslash', "tab\tnew\nline", "\x01ctl", "名前 🚀", ""]
    half = n // 2  # times on the nanosecond grid as Kineto writes them; then many decimals, every magnitude
    ts = np.concatenate([rng.integers(-10**9, 10**9, half) / 1000, (rng.random(n - half) - 0.5) * 10.0 ** rng.integers(-3, 13, n - half)])
    dur = rng.integers(0, 10**7, n) / 1000
    is_x = rng.random(n) < 0.8
    corr = np.where(rng.random(n) < 0.5, -1.0, rng.integers(0, 10**6, n).astype(float))
    name_code = rng.integers(0, len(names), n).astype(np.int32)
    f = pa.table({"is_x": is_x, "cat_json": pa.array(['"kernel"'] * n).dictionary_encode(),
                  "name_json": pa.DictionaryArray.from_arrays(pa.array(name_code), pa.array([json.dumps(s) for s in names])),
                  "ts": ts, "dur": np.where(is_x, dur, 0.0), "gpu": rng.random(n) < 0.3, "runtime": rng.random(n) < 0.3, "corr": corr})
    tids = rng.choice([1, 2, 1_000_001], n).astype(np.int64)
    shift = 1234.5678
    text = b"".join(bytes(b) for b in tr.event_batches(f, 3, shift, tids))
    events = json.loads(b"[" + text[:-1] + b"]", parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert len(events) == n
    assert [float(e["ts"]) for e in events] == np.round(ts - shift, 3).tolist()
    assert [float(e["dur"]) for e in events if "dur" in e] == dur[is_x].tolist()
    assert [e["ph"] for e in events] == ["X" if x else "i" for x in is_x]
    assert [e["name"] for e in events] == [names[c] for c in name_code]
    assert {e["pid"] for e in events} == {3} and [e["tid"] for e in events] == tids.tolist()
