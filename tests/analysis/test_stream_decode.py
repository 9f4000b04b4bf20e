"""The streaming decode of large traces (decode/stream.py) builds the same event table as the
whole-file decode, column by column (values and dtypes), on every shared trace; split into small
blocks, so that element boundaries, strings and escapes fall across blocks. And its errors name the
file as read_trace's do."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from hpcprof.analysis.decode.columns import event_table
from hpcprof.analysis.decode.load import TraceError, read_trace
from hpcprof.analysis.decode.stream import read_event_table, stream_table

from .conftest import TRACES, require


def _shared_traces():
    root = TRACES
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.json*") if p.is_file() and p.suffix in (".json", ".gz") and p.stat().st_size < 20e6)


def _whole(path):
    d = read_trace(path)
    return d.meta, event_table(d), len(d), d.skipped


@pytest.mark.parametrize("path", _shared_traces(), ids=lambda p: str(p.relative_to(TRACES)))
def test_stream_equals_whole_decode(path):
    try:
        want = _whole(path)
    except TraceError as exc:
        with pytest.raises(TraceError) as got:
            read_event_table(path, min_bytes=0)
        assert str(got.value).split(":")[0] == str(exc).split(":")[0]
        return
    opener = gzip.open if path.name.endswith(".gz") else open
    # 64 KiB less 15 (a prime): hundreds of cuts a trace, at offsets that drift through every
    # alignment; the cuts of a few bytes are the synthetic tests below
    with opener(path, "rb") as fh:
        got = stream_table(fh, block=65521)
    assert got[0] == want[0]
    assert got[2:] == want[2:]
    pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)


def test_stream_keeps_odd_elements_and_escapes(tmp_path):
    ev = [{"ph": "X", "name": 'a "quoted" \\ name, with [brackets] {and} commas\\', "ts": 1, "dur": 2, "pid": 1, "tid": "t"},
          7, "text, [x]", {"ph": "i", "name": "b", "ts": 3.5, "pid": "s", "tid": 2, "args": {"correlation": 9, "Seq": "x"}},
          {"ph": "X", "name": "c", "ts": 2 ** 70, "dur": 1.5, "pid": 1, "tid": 1, "args": [1]}]
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev, "traceName": "x"}))
    want = _whole(p)
    for block in (3, 7, 64):
        with open(p, "rb") as fh:
            got = stream_table(fh, block=block)
        assert got[0] == want[0] and got[2:] == want[2:] == (3, 2)
        pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)


def test_stream_errors_name_the_file(tmp_path):
    p = tmp_path / "cut.json"
    p.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}, {"ph": "X"')
    with pytest.raises(TraceError, match=r"^cut\.json: .*truncated"):
        read_event_table(p, min_bytes=0)
    q = tmp_path / "none.json"
    q.write_text('{"events": []}')
    with pytest.raises(TraceError, match=r"^none\.json: not a Kineto/Chrome trace"):
        read_event_table(q, min_bytes=0)


@pytest.mark.parametrize("min_bytes", [None, 0], ids=["read-whole", "streamed"])
def test_bad_utf8_is_one_line_naming_the_file(tmp_path, min_bytes):
    """A byte that is not UTF-8 inside a name: the same one-line TraceError, whether the trace is
    read whole or decoded as a stream (a file too large to hold)."""
    events = ",".join(json.dumps({"ph": "X", "name": f"\u00e9{i}", "ts": i, "dur": 1}, ensure_ascii=False) for i in range(50))
    p = tmp_path / "bad.json"
    p.write_bytes(b'{"traceEvents": [' + events.encode().replace("\u00e9".encode(), b"\xc3\x28", 1) + b"]}")
    with pytest.raises(TraceError, match=r"^bad\.json: not valid UTF-8 text \(invalid continuation byte, byte b'\\xc3'\); corrupt trace$"):
        read_event_table(p, min_bytes=min_bytes)


@pytest.mark.parametrize("min_bytes", [None, 0], ids=["read-whole", "streamed"])
@pytest.mark.parametrize("where", ["after-a-refused-element", "in-the-metadata"])
def test_bad_utf8_elsewhere_is_the_same_line(tmp_path, min_bytes, where):
    """The bad byte after an element the typed decoder refuses (a number as "ph"), or in a top-level
    key after traceEvents: still the one line naming the byte, whichever decoder meets it first."""
    events = ",".join(json.dumps({"ph": "X", "name": f"k{i}", "ts": i, "dur": 1}) for i in range(50)).encode()
    if where == "after-a-refused-element":
        events = b'{"ph": 7, "name": "x", "ts": 0, "dur": 1},' + events.replace(b"k7", b"\xc3\x28", 1)
        tail = b"}"
    else:
        tail = b', "deviceProperties": "\xc3\x28"}'
    p = tmp_path / "bad.json"
    p.write_bytes(b'{"traceEvents": [' + events + b"]" + tail)
    with pytest.raises(TraceError, match=r"^bad\.json: not valid UTF-8 text \(invalid continuation byte, byte b'\\xc3'\); corrupt trace$"):
        read_event_table(p, min_bytes=min_bytes)


def test_analysis_through_the_stream_equals_the_reference(monkeypatch, tmp_path):
    """Every trace of the DLRM set decoded as a stream (in 64 kB blocks): the analysis' summary and
    timeline are those stored by the code before the streaming decode existed."""
    from hpcprof.analysis.decode import stream

    from .reference_outputs import STORE, run_case

    require(TRACES / "param_dlrm_8x_v100")
    monkeypatch.setattr(stream, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK", 1 << 16)
    from .test_reference_outputs import _diff

    now = json.loads(json.dumps(run_case("dlrm", TRACES, tmp_path, cache_dir=tmp_path / "cache")))
    assert not _diff(json.loads(STORE.read_text())["dlrm"], now)


@pytest.mark.parametrize("isal", ["1", "0"])
def test_gzip_traces_read_alike_with_isal_and_zlib(tmp_path, monkeypatch, isal):
    """A .json.gz trace gives the same event table whether ISA-L's inflate (where installed) or
    Python's gzip reads it, read whole or as a stream; and truncated or corrupt gzip data is the
    same one-line TraceError either way (ISA-L raises its own error class, not zlib.error)."""
    import importlib.util

    from hpcprof.analysis import isal_lib

    monkeypatch.setenv("HPCPROF_ISAL", isal)
    assert (isal_lib.isal() is not None) == (isal == "1" and importlib.util.find_spec("isal") is not None)
    src = require(TRACES / "param_dlrm_8x_v100")
    path = sorted(src.glob("*.json.gz"))[0]
    raw = gzip.decompress(path.read_bytes())
    monkeypatch.delenv("HPCPROF_ISAL")
    want = read_event_table(path)  # the default reader, ISA-L where installed
    monkeypatch.setenv("HPCPROF_ISAL", isal)
    plain = tmp_path / "plain.json"
    plain.write_bytes(raw)
    for p, min_bytes in ((path, None), (path, 0), (plain, None)):
        got = read_event_table(p, min_bytes=min_bytes)
        assert got[0] == want[0] and got[2:] == want[2:]
        pd.testing.assert_frame_equal(got[1], want[1], check_exact=True)
    good = gzip.compress(raw, 6)
    bad = {
        "cut.json.gz": good[: len(good) // 2],
        "crc.json.gz": good[:-8] + bytes([good[-8] ^ 0xFF]) + good[-7:],
        "flip.json.gz": good[:200] + bytes(b ^ 0x5A for b in good[200:400]) + good[400:],
        "header.json.gz": b"\x1f\x8b\x09" + good[3:],
    }
    for name, data in bad.items():
        f = tmp_path / name
        f.write_bytes(data)
        for min_bytes in (None, 0):
            with pytest.raises(TraceError, match=rf"^{name.replace('.', '[.]')}: truncated or corrupt gzip data"):
                read_event_table(f, min_bytes=min_bytes)
