"""The native decode of trace events (decode/native.py, the C extension hpcprof/analysis/_native.c) builds the
same event table as the msgspec decode, value for value and dtype for dtype: on every trace of
tests/data, through both block decodes (in memory and streamed), and on generated events holding
every kind of JSON value in every field, including the inputs it must leave to msgspec (an integer
beyond int64, a number beyond a double, a key given twice or written with escapes, args that are
not an object, elements that are not objects, bad UTF-8) and corrupted text (the same error)."""

from __future__ import annotations

import collections
import json
import math
import random
import shutil
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis import cext
from hpcprof.analysis.decode import native, stream
from hpcprof.analysis.decode.columns import CODED_KEYS, TextCodes, text_codes

from .conftest import TRACES

DATA = Path(__file__).resolve().parents[1] / "data"
needs_native = pytest.mark.skipif(cext._native is None, reason="the C extension hpcprof.analysis._native is not built (no C compiler at install)")


def _decode(path, monkeypatch, on: bool, **kw):
    monkeypatch.setenv(cext.ENV, "1" if on else "0")
    try:
        return stream.read_event_table(path, **kw)
    except Exception as exc:  # compared as (type, message) between both decodes
        return ("error", type(exc).__name__, str(exc))


def _same(a, b):
    if a[0] == "error" or b[0] == "error":
        assert a == b
        return
    assert a[0] == b[0]
    assert a[2:] == b[2:]
    pd.testing.assert_frame_equal(a[1], b[1], check_exact=True)
    assert list(a[1].dtypes) == list(b[1].dtypes)
    for c in a[1].columns:  # pandas finds True == 1 == 1.0 equal: the values' types too
        if a[1][c].dtype == object:
            assert list(map(type, a[1][c])) == list(map(type, b[1][c])), c


def _kept_codes(got) -> int:
    """The codes the native decode keeps (columns.text_codes) are pd.factorize's of the column;
    the number of columns that have them."""
    if got[0] == "error":
        return 0
    kept = 0
    for c in CODED_KEYS:
        codes = text_codes(got[1], c)
        if codes is not None:
            want_codes, want_uniq = pd.factorize(got[1][c], use_na_sentinel=True)
            assert codes[0].tolist() == want_codes.tolist() and codes[1].tolist() == list(want_uniq), c
            assert codes[1].dtype == object and not codes[0].flags.writeable
            kept += 1
    return kept


def _count_native(monkeypatch) -> collections.Counter:
    counts = collections.Counter()
    real = stream.columns_of

    def counted(buf, start, end):
        got = real(buf, start, end)
        if native.available():  # the msgspec-only decode it is compared with is not counted
            counts["native" if got is not None else "msgspec"] += 1
        return got

    monkeypatch.setattr(stream, "columns_of", counted)
    return counts


def test_extension_is_built_where_a_compiler_is():
    """setup.py builds it as optional: a failed build must not pass unseen where it should work."""
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not (shutil.which("cc") or shutil.which("gcc")) or not include.is_file():
        pytest.skip("no C compiler or Python headers here: the msgspec decode is the only one")
    assert cext._native is not None, "a C compiler is here but hpcprof.analysis._native was not built (pip install -e . again)"


def _trace_files():
    files = []
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")) and p.name != "reference_outputs.json":
            files.append(p)
    return files


@needs_native
@pytest.mark.parametrize("min_bytes", [None, 0], ids=["in-memory", "streamed"])
def test_every_shared_trace_decodes_natively_to_the_same_table(monkeypatch, min_bytes):
    files = _trace_files()
    assert len(files) > 30 and any(str(f).startswith(str(TRACES)) for f in files)
    counts = _count_native(monkeypatch)
    for f in files:
        got = _decode(f, monkeypatch, True, min_bytes=min_bytes)
        _same(got, _decode(f, monkeypatch, False, min_bytes=min_bytes))
        counts["codes kept"] += _kept_codes(got)
    assert counts["codes kept"] > 60, counts
    # the real traces never need msgspec: the fast path is the one taken
    assert counts["native"] > 30 and counts["msgspec"] == 0, counts


# values of every JSON kind, each with what the native parser does with it
PLAIN = [0, -1, 7, 2 ** 53 + 1, -(2 ** 63), 2 ** 63 - 1, 1.5, -0.0, 0.0, 1e300, 3e-320, 1e-7, "x", "", "é ü 中", 'q"}, {"', "a\\nb\u2028", "\u00e9",
         None, True, False, [], [[1, 2], []], ["float", "int"], {"a": [1, {"b": None}]}, {}]
FALLBACK = [2 ** 64, -(2 ** 63) - 1, 10 ** 30]  # integers msgspec keeps exact: beyond int64
KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s", "other"]
ARGS = ["stream", "correlation", "bytes", "memory bandwidth (GB/s)", "wait_on_stream", "wait_on_cuda_event_record_corr_id", "Input Dims",
        "Input type", "Input Strides", "External id", "Process Group Name", "Seq", "seq", "Total Allocated", "Device Type", "Collective name",
        "Comms Id", "In msg nelems", "dtype", "unknown arg"]


def _event(rng: random.Random, values: list) -> dict:
    e = {}
    for k in rng.sample(KEYS, rng.randint(0, len(KEYS))):
        e[k] = rng.choice(values)
    r = rng.random()
    if r < 0.7:
        e["args"] = {k: rng.choice(values) for k in rng.sample(ARGS, rng.randint(0, len(ARGS)))}
    elif r < 0.8:
        e["args"] = None
    return e


def _write(tmp_path: Path, name: str, events, raw_events: str | None = None, indent=None) -> Path:
    p = tmp_path / name
    body = raw_events if raw_events is not None else ",".join(json.dumps(e, indent=indent, ensure_ascii=False) for e in events)
    p.write_text('{"schemaVersion": 1, "traceEvents": [' + body + '], "traceName": "t"}', encoding="utf-8")
    return p


def _both_paths_same(p: Path, monkeypatch):
    for min_bytes in (None, 0):
        for block in (64, 4096):  # many blocks: guessed ends (split) and found ends (stream)
            monkeypatch.setattr(stream, "SPLIT_BLOCK", block)
            monkeypatch.setattr(stream, "BLOCK", block)
            monkeypatch.setattr(stream.split_table, "__defaults__", (block,))
            got = _decode(p, monkeypatch, True, min_bytes=min_bytes)
            _same(got, _decode(p, monkeypatch, False, min_bytes=min_bytes))
            _kept_codes(got)


@needs_native
@pytest.mark.parametrize("seed", range(6))
def test_generated_events_of_every_kind_give_the_same_table(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    # one column at a time of a single kind too: all ints, all numbers, all texts, all None
    kinds = [PLAIN, [1, 2, 3], [1, 2.5], ["a", "b"], [None], [True, 1], [1, None], ["a", 1.0]]
    events = [_event(rng, rng.choice(kinds)) for _ in range(300)]
    p = _write(tmp_path, "t.json", events, indent=rng.choice([None, 2]))
    counts = _count_native(monkeypatch)
    _both_paths_same(p, monkeypatch)
    assert counts["native"] > 0


@needs_native
@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(lambda rng: json.dumps({"ph": "X", "ts": rng.choice(FALLBACK), "args": {"stream": 1}}), id="int-beyond-int64"),
        pytest.param(lambda rng: '{"ph": "X", "ts": 1e400}', id="number-beyond-double"),
        pytest.param(lambda rng: '{"ph": "X", "ts": 1, "ts": 2.5}', id="top-key-twice"),
        pytest.param(lambda rng: '{"ph": "X", "args": {"stream": 1, "stream": "s"}}', id="arg-key-twice"),
        pytest.param(lambda rng: '{"ph": "X", "args": {"a": 1}, "args": {"stream": 3}}', id="args-twice"),
        pytest.param(lambda rng: '{"p\\u0068": "X", "ts": 3}', id="key-with-escape"),
        pytest.param(lambda rng: '{"ph": "X", "args": [1, 2]}', id="args-not-object"),
        pytest.param(lambda rng: '{"ph": "X", "args": 5}', id="args-number"),
        pytest.param(lambda rng: '3', id="element-number"),
        pytest.param(lambda rng: '[{"ph": "X"}]', id="element-array"),
        pytest.param(lambda rng: '"text"', id="element-text"),
    ],
)
def test_what_the_native_parser_leaves_to_msgspec_gives_the_same_table(tmp_path, monkeypatch, odd):
    rng = random.Random(1)
    events = [json.dumps(_event(rng, PLAIN)) for _ in range(40)]
    events.insert(20, odd(rng))
    p = _write(tmp_path, "t.json", None, raw_events=",\n".join(events))
    counts = _count_native(monkeypatch)
    _both_paths_same(p, monkeypatch)
    assert counts["msgspec"] > 0  # the run holding it was left to msgspec


@needs_native
def test_bad_utf8_and_corrupted_text_give_the_same_table_or_error(tmp_path, monkeypatch):
    rng = random.Random(7)
    good = ",".join(json.dumps(_event(rng, PLAIN), ensure_ascii=False) for _ in range(60)).encode()
    cases = [good.replace("é".encode(), b"\xc3\x28", 1), good.replace(b'"x"', b'"x\x01"', 1)]
    for _ in range(40):  # random damage: a byte changed, removed or added
        b = bytearray(good)
        i = rng.randrange(len(b))
        op = rng.choice(["set", "del", "ins"])
        if op == "set":
            b[i] = rng.choice(b'{}[],:"\\ 0-.eE1tfn\x00\xff')
        elif op == "del":
            del b[i]
        else:
            b.insert(i, rng.choice(b'{}[],:"\\ 0-.eE1'))
        cases.append(bytes(b))
    for k, body in enumerate(cases):
        p = tmp_path / f"c{k}.json"
        p.write_bytes(b'{"schemaVersion": 1, "traceEvents": [' + body + b'], "traceName": "t"}')
        for min_bytes in (None, 0):
            got = _decode(p, monkeypatch, True, min_bytes=min_bytes)
            _same(got, _decode(p, monkeypatch, False, min_bytes=min_bytes))
            _kept_codes(got)


@needs_native
def test_columns_of_refuses_a_run_that_is_not_whole_elements():
    """What decode/stream.split_table relies on: a block end guessed inside a string or an element
    is not accepted (the decode moves the end on), and a trailing comma is not JSON."""
    text = b'{"ph": "X", "name": "a}, {b", "ts": 1}, {"ph": "i", "ts": 2}'
    inside = text.index(b"}, {b") + 1
    assert native.columns_of(text, 0, inside) is None
    assert native.columns_of(text + b",", 0, len(text) + 1) is None
    n, cols, has = native.columns_of(text, 0, len(text))
    assert n == 2
    assert isinstance(cols["name"], TextCodes)  # texts as codes into the distinct texts
    name = cols["name"].values()
    assert name[0] == "a}, {b" and math.isnan(name[1])  # a missing top-level key is NaN
    assert cols["ts"].tolist() == [1, 2] and not has.any()


@needs_native
def test_kept_name_and_category_codes_are_pandas_factorization(tmp_path, monkeypatch):
    """Texts that appear first in other columns (a block numbers its texts in order of first
    appearance anywhere), names missing in places, many blocks: the codes kept for the name and
    category columns are still pd.factorize's (first appearance in the column, -1 where missing)."""
    rng = random.Random(7)
    texts = ["a", "b", "c", "d", "é", ""]
    events = []
    for i in range(400):
        e = {"ph": "X", "ts": i, "dur": 1, "pid": rng.choice(texts), "tid": 1, "args": {"Collective name": rng.choice(texts)}}
        if rng.random() < 0.9:
            e["name"] = rng.choice(texts[i % 3:])
        e["cat"] = rng.choice(texts[::-1])
        events.append(e)
    p = _write(tmp_path, "t.json", events)
    kept = 0
    for min_bytes in (None, 0):
        for block in (64, 4096, 1 << 20):
            monkeypatch.setattr(stream, "SPLIT_BLOCK", block)
            monkeypatch.setattr(stream, "BLOCK", block)
            monkeypatch.setattr(stream.split_table, "__defaults__", (block,))
            got = _decode(p, monkeypatch, True, min_bytes=min_bytes)
            _same(got, _decode(p, monkeypatch, False, min_bytes=min_bytes))
            n = _kept_codes(got)  # checked at every block size
            kept += n if block > 64 else 0  # (a block of 64 bytes may have no name: no codes kept)
    assert kept == 8
