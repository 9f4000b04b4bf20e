"""The merged timeline's event and launch-flow text made natively (analysis/_native_text.c) parses
to the same events as the text Arrow's string kernels make (outputs/timeline_render.py, the path
without the extension): same objects, keys in the same order, the same values, times the same
doubles. On the timeline pieces of every trace of tests/data, on generated events (negative and
huge times, durations with many decimals, zeros, whole numbers, the edges of the exact decimal path,
names with quotes and non-ASCII text), and on whole analyses with and without the extension.

The known answer for the times besides Arrow's text: an event's "ts" is numpy's np.round(ts - shift,
3), its "dur" and a flow's "ts" the unrounded double, exactly.
"""

from __future__ import annotations

import collections
import json
import math
import sys

import msgspec
import numpy as np
import pyarrow as pa
import pytest

from hpcprof.analysis import analyze, cext
from hpcprof.analysis.decode.stream import read_event_table
from hpcprof.analysis.outputs import timeline_render as tr
from hpcprof.analysis.ranks.timeline_piece import timeline_piece

from .conftest import DLRM, SAMPLED, require
from .reference_outputs import canonical_timeline
from .test_native_decode import _trace_files

needs_native = pytest.mark.skipif(cext._native is None, reason="the C extension hpcprof.analysis._native is not built (no C compiler at install)")


def _no_constant(name):
    raise AssertionError(f"not JSON: {name}")


def _parse(text) -> list[dict]:
    """Runs of JSON objects each followed by a comma, as a list (strict JSON: no NaN or Infinity)."""
    text = bytes(text)
    if not text:
        return []
    assert text.endswith(b",")
    return json.loads(b"[" + text[:-1] + b"]", parse_constant=_no_constant)


def _same(native: list[dict], arrow: list[dict]) -> None:
    assert len(native) == len(arrow)
    for a, b in zip(native, arrow):
        assert list(a) == list(b), (a, b)  # the same keys in the same order
        for k in a:
            if k in ("ts", "dur"):  # 12 and 12.0 are one time: compared as doubles, bit for bit
                assert float(a[k]).hex() == float(b[k]).hex(), (k, a, b)
            else:
                assert a[k] == b[k] and type(a[k]) is type(b[k]), (k, a, b)


@pytest.fixture
def calls(monkeypatch) -> collections.Counter:
    """The native functions' calls (so a comparison cannot silently compare Arrow with Arrow)."""
    counts: collections.Counter = collections.Counter()
    real = cext.get

    class Counted:
        def __init__(self, mod):
            self.mod = mod

        def __getattr__(self, name):
            fn = getattr(self.mod, name)

            def call(*a):
                counts[name] += 1
                return fn(*a)
            return call

    monkeypatch.setattr(cext, "get", lambda: (lambda m: Counted(m) if m is not None else None)(real()))
    return counts


def _events(f: pa.Table, r: int, shift: float, tids: np.ndarray, native: bool) -> list[dict]:
    return _parse(b"".join(bytes(t) for t in tr.event_batches(f, r, shift, tids, native=native)))


def _flows(f: pa.Table, r: int, shift: float, threads: dict, tids: np.ndarray, monkeypatch, native: bool):
    monkeypatch.setenv(cext.ENV, "1" if native else "0")
    text, n = tr._flows_json(f, r, shift, threads, tids)
    return _parse(text), n


@needs_native
def test_every_shared_trace_gives_the_same_events_and_flows_natively(monkeypatch, calls):
    monkeypatch.setenv(cext.ENV, "1")
    seen = events = flows = 0
    for path in _trace_files():
        try:
            _, table, _, _ = read_event_table(path)
        except Exception:  # not a Kineto trace (an execution trace): no timeline
            continue
        piece, info = timeline_piece(table)
        if piece is None:
            continue
        threads, tids = tr.thread_ids(piece, info["main_tid"])
        steps = info["steps"]
        # time 0 inside the first step, off the microsecond grid: negative times, and rounding at work
        shift = steps[0][1] + (steps[0][2] - steps[0][1]) / 3 + 0.0004321
        for r in (0, 7):
            native, arrow = _events(piece, r, shift, tids, True), _events(piece, r, shift, tids, False)
            _same(native, arrow)
            ts = piece.column("ts").to_numpy()
            assert [float(e["ts"]) for e in native] == np.round(ts - shift, 3).tolist()  # numpy's rounding, exactly
            fn, fa = _flows(piece, r, shift, threads, tids, monkeypatch, True), _flows(piece, r, shift, threads, tids, monkeypatch, False)
            assert fn[1] == fa[1] == len(fn[0])
            _same(fn[0], fa[0])
            monkeypatch.setenv(cext.ENV, "1")
        seen += 1
        events += len(native)
        flows += fn[1]
    assert seen >= 20 and events > 100_000 and flows > 10_000, (seen, events, flows)
    assert calls["events_json"] >= 2 * seen and calls["flows_json"] >= 20


# ------------------------------------------------------------------------------------ generated

EDGE_TS = [0.0, -0.0, 1.0, -1.0, 0.0005, -0.0005, 0.0015, 0.0025, -0.0025, 1e-7, -1e-7, 5e-324, 1.005, 2.675, 123456.7895,
           -123456.7895, 1e6, 2**53 / 1000, -(2**53) / 1000, 2**53 / 1000 + 0.001, 9007199254740.993, 9007199254741.5,
           -9007199254741.5, 1e13, 1.7e15 + 0.125, -1.7e15, 1e16, 3e16, -5e16, 2.0**63 / 1000, 1e20, 1e300, -1e300]
EDGE_DUR = [0.0, -0.0, 1.0, 12.0, 0.001, 1.005, 0.1 + 0.2, 1 / 3, 2 / 3 * 1e6, 1e-7, 5e-324, 123.456, 9007199254740.991,
            9007199254740.993, 2**53 / 1000, 1e13 + 0.5, 1e16, 1e20, 1e300, -2.5]
NAMES = ["", "aten::mm", "Ω·μ", "名前 (カーネル)", "emoji 🚀", 'quote " and \\ backslash', "tab\tnew\nline", "\x01ctl",
         "ProfilerStep#3", "x" * 300]


def _generated(rng: np.random.Generator, n: int) -> tuple[pa.Table, np.ndarray]:
    kind = rng.integers(0, 6, n)
    ts = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
        [rng.integers(-10**9, 10**9, n) / 1000,  # on the nanosecond grid, as Kineto writes them
         (rng.random(n) - 0.5) * 10.0 ** rng.integers(-3, 17, n),  # many decimals, every magnitude
         rng.integers(-10**6, 10**6, n) + 0.0005,  # ties of the rounding (half to even)
         rng.integers(-10**12, 10**12, n).astype(float),  # whole numbers
         rng.choice(EDGE_TS, n)],
        rng.integers(0, 2**53, n) / 1000 * rng.choice([-1, 1], n))  # up to the limit of the exact path
    dur = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3],
        [rng.integers(0, 10**7, n) / 1000, rng.random(n) * 10.0 ** rng.integers(-4, 14, n), rng.integers(0, 10**6, n).astype(float),
         rng.choice(EDGE_DUR, n)],
        rng.random(n) * 1e4)
    is_x = rng.random(n) < 0.8
    gpu = rng.random(n) < 0.3
    corr = np.where(rng.random(n) < 0.3, -1.0, rng.choice([0.0, 1.0, 3.7, 2.0**40, 123456789.0], n))
    cats = ["kernel", "cpu_op", "cuda_runtime", "", "Ω cat"]

    def dictionary(values):
        return pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, len(values), n).astype(np.int32)),
                                              pa.array([msgspec.json.encode(v).decode() for v in values], pa.string()))

    f = pa.table({"is_x": is_x, "cat_json": dictionary(cats), "name_json": dictionary(NAMES), "ts": ts,
                  "dur": np.where(is_x, dur, 0.0), "gpu": gpu, "runtime": ~gpu & (rng.random(n) < 0.5), "corr": corr})
    tids = rng.choice([1, 2, 1_000_001, 1_000_007, 2**40, 0], n).astype(np.int64)
    return f, tids


@needs_native
@pytest.mark.parametrize("seed", range(6))
def test_generated_events_give_the_same_text_natively(seed, calls):
    rng = np.random.default_rng(seed)
    f, tids = _generated(rng, 50_000)
    for r, shift in ((0, 0.0), (3, 1234.5678), (255, -0.0005), (2**31, 1e9 + 0.123), (1, 1.7e15)):
        native, arrow = _events(f, r, shift, tids, True), _events(f, r, shift, tids, False)
        _same(native, arrow)
        ts, dur, is_x = f.column("ts").to_numpy(), f.column("dur").to_numpy(), f.column("is_x").to_numpy(zero_copy_only=False)
        # the known answers: numpy's rounding of the shifted time; the duration as it was
        assert [float(e["ts"]).hex() for e in native] == [float(v).hex() for v in np.round(ts - shift, 3) + 0.0]
        assert [float(e["dur"]) for e in native if "dur" in e] == dur[is_x].tolist()
        assert [e["name"] for e in native[:len(NAMES) * 3]] == [json.loads(v) for v in
                                                                 f.column("name_json").to_pylist()[:len(NAMES) * 3]]
    assert calls["events_json"] == 5 * 4  # 50,000 events: four batches


@needs_native
def test_text_written_into_a_kept_buffer_is_the_text_returned(calls):
    """event_batches with a TextBuffer (the timeline's way: one buffer for every batch of every rank)
    gives the text of the fresh-bytes way, batch by batch; the buffer grows where a batch needs more
    (the extension returns minus its bound and writes nothing), and a batch's view is the text."""
    rng = np.random.default_rng(11)
    f, tids = _generated(rng, 40_000)
    small = f.slice(0, 100)
    scratch = tr.TextBuffer()
    for t, r, shift in ((small, 2, 5.5), (f, 0, 1234.5678), (small, 7, -0.0005)):
        fresh = [bytes(b) for b in tr.event_batches(t, r, shift, tids[:len(t)])]
        kept = [bytes(b) for b in tr.event_batches(t, r, shift, tids[:len(t)], scratch=scratch)]
        assert kept == fresh and len(kept) == -(-len(t) // tr.BATCH)
    assert len(scratch.buf) > len(max(kept, key=len))
    nat = cext.get()
    z = np.zeros(2, dtype=np.int64)
    args = [np.ones(2, bool), z, np.array([0, 3], dtype=np.int64), b'"a"', z, np.array([0, 3], dtype=np.int64), b'"a"',
            np.zeros(2), np.zeros(2), z, z, np.ones(2, bool), 0, 0.0]
    too_small = bytearray(b"x" * 10)
    bound = -nat.events_json(*args, too_small)
    assert bound > 10 and too_small == bytearray(b"x" * 10)  # nothing written
    out = bytearray(bound)
    n = nat.events_json(*args, out)
    assert bytes(out[:n]) == nat.events_json(*args)
    with pytest.raises(BufferError):
        nat.events_json(*args, b"read-only" * 100)


@pytest.mark.parametrize("seed", range(6))
def test_unique_inverse_is_numpys(seed):
    """decode.native.unique_inverse (a block's object ids, a rank's timeline threads) against np.unique."""
    from hpcprof.analysis.decode.native import unique_inverse

    rng = np.random.default_rng(seed)
    space = int(rng.integers(1, 5000))
    key = rng.integers(0, space, int(rng.integers(0, 3000))).astype(np.int64)
    got, want = unique_inverse(key, space), np.unique(key, return_inverse=True)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[1].dtype == np.int64


@needs_native
def test_generated_flows_give_the_same_text_natively(monkeypatch, calls):
    rng = np.random.default_rng(7)
    n = 20_000
    f, _ = _generated(rng, n)
    corr = rng.integers(0, n // 3, n).astype(float)
    runtime = rng.random(n) < 0.5
    f = f.set_column(f.schema.get_field_index("corr"), "corr", pa.array(corr)).set_column(
        f.schema.get_field_index("runtime"), "runtime", pa.array(runtime))
    tids = np.where(runtime, rng.integers(1, 4, n), tr.GPU_TID_BASE + rng.integers(1, 4, n)).astype(np.int64)
    for r, shift in ((0, 0.0), (5, 1234.5678), (9, -7.0000001)):
        (native, nn), (arrow, na) = (_flows(f, r, shift, {}, tids, monkeypatch, on) for on in (True, False))
        assert nn == na == len(native) > 1000
        _same(native, arrow)
    assert calls["flows_json"] == 3


@needs_native
def test_times_that_are_not_finite_are_still_json():
    """No piece holds one (timeline_piece keeps finite times only); if one came, the text stays
    JSON: NaN as null, infinities as 1e999 (read back as infinities)."""
    nat = cext.get()
    one = np.zeros(4, dtype=np.int64)
    blob, offs = b'"c""n"', np.array([0, 3, 6], dtype=np.int64)
    ts = np.array([np.nan, np.inf, -np.inf, 1e306])  # the last overflows when multiplied by 1000
    dur = np.array([np.nan, np.inf, -np.inf, 1.0])
    text = nat.events_json(np.ones(4, bool), one, offs, blob, one + 1, offs, blob, ts, dur, one, one, np.ones(4, bool), 0, 0.0)
    got = _parse(text)
    assert [e["ts"] for e in got] == [None, math.inf, -math.inf, math.inf]
    assert [e["dur"] for e in got] == [None, math.inf, -math.inf, 1]
    flows = _parse(nat.flows_json(one[:1], one[:1], np.array([np.nan]), one[:1], np.array([-np.inf]), 0, 0.0))
    assert [e["ts"] for e in flows] == [None, -math.inf]


@needs_native
def test_bad_arguments_are_errors_not_crashes():
    nat = cext.get()
    z = np.zeros(2, dtype=np.int64)
    ok = dict(blob=b'"a"', offs=np.array([0, 3], dtype=np.int64))
    args = [np.ones(2, bool), z, ok["offs"], ok["blob"], z, ok["offs"], ok["blob"], np.zeros(2), np.zeros(2), z, z, np.ones(2, bool), 0, 0.0]
    assert _parse(nat.events_json(*args))[0]["cat"] == "a"
    bad_code = list(args)
    bad_code[1] = np.array([0, 1], dtype=np.int64)  # a dictionary of one value
    with pytest.raises(IndexError, match="cat: code 1"):
        nat.events_json(*bad_code)
    short = list(args)
    short[7] = np.zeros(1)
    with pytest.raises(ValueError, match="ts: 1 items, not 2"):
        nat.events_json(*short)
    beyond = list(args)
    beyond[5] = np.array([0, 4], dtype=np.int64)
    with pytest.raises(ValueError, match="name: offsets"):
        nat.events_json(*beyond)
    with pytest.raises(TypeError):
        nat.flows_json(z, z, np.zeros(2, np.float32), z, np.zeros(2), 0, 0.0)


@needs_native
def test_without_the_functions_or_with_a_null_text_the_arrow_path_writes(monkeypatch):
    """An extension built before these functions (an editable install not rebuilt) has none: Arrow
    writes the text. A null name or category (no piece has one) leaves the rank to Arrow too."""
    f, tids = _generated(np.random.default_rng(3), 2000)
    expected = _events(f, 2, 10.0, tids, False)
    monkeypatch.setattr(cext, "get", lambda: object())  # a module without events_json or flows_json
    assert _events(f, 2, 10.0, tids, True) == expected
    assert tr._flows_json(f, 2, 10.0, {}, tids)[1] >= 0
    monkeypatch.undo()
    names = f.column("name_json").combine_chunks()
    with_null = pa.DictionaryArray.from_arrays(pa.array([None] + names.indices.to_pylist()[1:], pa.int32()), names.dictionary)
    g = f.set_column(f.schema.get_field_index("name_json"), "name_json", with_null)
    assert _events(g, 2, 10.0, tids, True) == _events(g, 2, 10.0, tids, False) == expected[1:]


# ------------------------------------------------------------------------------------ whole analyses


@needs_native
@pytest.mark.parametrize("folder", [DLRM, SAMPLED], ids=["dlrm", "sampled"])
def test_an_analysis_writes_the_same_timeline_with_and_without_the_extension(folder, tmp_path, parse_cache, monkeypatch, calls):
    require(folder)
    got, n_calls = {}, {}
    for on in ("1", "0"):
        monkeypatch.setenv(cext.ENV, on)
        calls.clear()
        analyze(folder, out=tmp_path / on, progress=False, cache_dir=parse_cache)
        got[on] = canonical_timeline(tmp_path / on / "timeline.pt.trace.json.gz")
        n_calls[on] = calls["events_json"]
    assert n_calls["1"] > 0 and n_calls["0"] == 0
    assert got["1"] == got["0"]
    assert got["1"]["n_events"] > 10_000
    assert any(c.get("s/launch") for c in got["1"]["per_pid"].values()) or folder != DLRM  # DLRM's flows are on it


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
