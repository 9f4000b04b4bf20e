"""The in-memory block decode (decode/stream.split_table, what read_event_table uses for traces
below the streaming size) builds the same event table as the whole-file decode, wherever its
guesses of element and array ends could be fooled: "}," and "]" inside strings, nested objects,
args before other keys, Kineto's log lines (with ']') after the events, odd elements, and blocks
as small as one element. Where a guess cannot be confirmed it gives up (None) and read_event_table
decodes the whole text, with the same table and the same errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hpcprof.analysis.decode.columns import event_table
from hpcprof.analysis.decode.load import TraceError, read_bytes, read_trace
from hpcprof.analysis.decode.stream import read_event_table, split_table

from .conftest import TRACES, require

TRICKY = [
    {"ph": "X", "name": 'a "}, {" name }]', "ts": 1, "dur": 2, "pid": 1, "tid": "t", "args": {"Input Dims": [[1, 2], []], "x": {"y": [{"z": 1}, {"w": 2}]}}},
    {"args": {"correlation": 9, "Seq": "x"}, "ph": "i", "name": "b}, {", "ts": 3.5, "pid": "s", "tid": 2},
    {"ph": "X", "name": "c", "ts": 2 ** 70, "dur": 1.5, "pid": 1, "tid": 1, "args": [1]},
    {"ph": "X", "cat": "kernel", "name": "k", "ts": 7, "dur": 0, "pid": 0, "tid": 3, "args": {"stream": 7, "correlation": 4, "External id": True}},
    {"ph": "X", "name": "d", "ts": -0.0, "dur": 0.0, "pid": 2, "tid": None},
]


def _whole(path):
    d = read_trace(path)
    return d.meta, event_table(d), len(d), d.skipped


def _same(got, want):
    assert got[0] == want[0]
    assert got[2:] == want[2:]
    pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("logs", [False, True])
def test_blocks_equal_whole_decode_on_tricky_text(tmp_path, indent, logs):
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "x]"}], "traceEvents": TRICKY * 3, "traceName": "t]"}
    if logs:  # Kineto writes its log lines after the events; they hold ']' and '}]'
        doc.update({"INFO": ["a.cpp:1] x", "b}]"], "WARNING": [], "displayTimeUnit": "ms"})
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=indent))
    want = _whole(p)
    for block in (1, 40, 300, 1 << 20):
        got = split_table(read_bytes(p), block)
        assert got is not None, block
        _same(got, want)
    _same(read_event_table(p), want)


def test_odd_elements_and_arrays_after_the_events(tmp_path):
    """Non-object elements are skipped and counted as by the whole decode; an array of objects
    after traceEvents is a ']' after a '}' that is not the end: the guess fails, the whole text is
    decoded, same table."""
    doc = {"traceEvents": [7, TRICKY[0], "text, [x]", TRICKY[1], None, TRICKY[2]], "traceName": "x"}
    p = tmp_path / "odd.json"
    p.write_text(json.dumps(doc))
    want = _whole(p)
    assert want[2:] == (3, 3)
    for block in (1, 64):
        _same(split_table(read_bytes(p), block), want)
    q = tmp_path / "after.json"
    q.write_text(json.dumps({"traceEvents": TRICKY, "deviceProperties": [{"id": 0}]}))
    assert split_table(read_bytes(q), 1) is None
    # the text handed over in a list is let go once decoded (not alive beside the table), kept for the fallback
    box = [read_bytes(p)]
    _same(split_table(box, 64), want)
    assert box == []
    box = [read_bytes(q)]
    assert split_table(box, 1) is None and box == [read_bytes(q)]
    _same(read_event_table(q), _whole(q))


@pytest.mark.parametrize("text", [
    '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}, {"ph": "X"',
    '{"traceEvents": [{"ph": "X", "name": "a"}, {"ph": "X", "name": "b}, {"}]',
    '{"traceEvents": []}',
    '{"traceEvents": [  ], "traceName": "]"}',
    '{"events": []}',
    '[{"ph": "X"}]',
    '{"traceEvents": [{"ph": "X"}], "traceEvents": []}',
])
def test_bad_text_gives_the_whole_decode_error(tmp_path, text):
    p = tmp_path / "bad.json"
    p.write_text(text)
    try:
        want = _whole(p)
    except TraceError as exc:
        with pytest.raises(TraceError) as got:
            read_event_table(p)
        assert str(got.value) == str(exc)
    else:
        _same(read_event_table(p), want)


def test_real_traces_split_without_falling_back():
    """Every real trace of tests/data takes the block path (no fallback to the whole decode)."""
    root = require(TRACES)
    files = [p for p in sorted(root.rglob("*.json*")) if p.name != "reference_outputs.json"]
    done = 0
    for p in files:
        try:
            want = _whole(p)
        except TraceError:
            continue
        got = split_table(read_bytes(p), 1 << 16)
        assert got is not None, p
        _same(got, want)
        done += 1
    assert done >= 30
