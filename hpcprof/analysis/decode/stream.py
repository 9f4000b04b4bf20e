"""Streaming decode of large traces: the event table without the whole file or its records in memory.

Why: `read_trace` holds the file's bytes and one record per event, so a 1 GB rank decoded whole
peaked at several times its size (benchmarks/README.md). Here the file is read in blocks; a
vectorised scan of each block (numpy: quotes, escapes, brackets, commas outside strings) finds where
the elements of `traceEvents` end; each run of complete elements is decoded by the same typed
msgspec decoder as `decode()` and turned at once into compact columns (decode/columns.py), and its
records are freed, so the table is the same as `event_table(read_trace())`, the whole decode's
(tests/analysis/test_stream_decode.py checks it, column by column, on every shared trace).

Used by `read_event_table` for files larger than STREAM_MIN_BYTES (uncompressed, estimated). Smaller
ones are read whole and decoded in blocks by `split_table` (no byte-by-byte scan: a guessed block end
that the decoder confirms), with the same columns, so the records of one block at a time are alive,
not those of the whole file (a lower decode peak at less CPU than one decode of the whole text).
Bad input raises the same TraceError messages (such text, and any block
whose end cannot be confirmed, is decoded whole by decode.events.decode).
"""

from __future__ import annotations

import contextlib
import gzip
import re
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from .columns import _Columns, event_table
from .counted import Limited, Tee, TextLimit
from .events import META_KEYS, DecodedTrace, _BlockEvent, _Doc, loose_events, raise_if_not_utf8

STREAM_MIN_BYTES = 256 << 20
"""Files whose JSON is larger than this (a .gz counted at 8x its size, or found larger once
inflated) are decoded as a stream."""
BLOCK = 16 << 20
MAX_HELD = 64 << 20
"""The most text the stream holds beyond its block without an element of traceEvents ending (and
before the array, and after it): a profiler's events are far smaller; a file of spaces or of one
endless string is refused here, not held whole (issue 37, item 12)."""
GZ_RATIO = 8
_EVENTS = msgspec.json.Decoder(list[_BlockEvent])
_META = msgspec.json.Decoder(_Doc)
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_LUT = np.zeros(256, dtype=np.int8)
_LUT[ord("[")] = _LUT[ord("{")] = 1
_LUT[ord("]")] = _LUT[ord("}")] = -1
_LUT[ord(",")] = 2


class StreamError(ValueError):
    """The stream is not a trace we can split (no top-level traceEvents array, cut off)."""


class HeldTooMuch(StreamError):
    """MAX_HELD bytes of text without what a trace has there (an element's end, the array)."""


class _Scanner:
    """Where the elements of the traceEvents array end, block by block (state carried across)."""

    def __init__(self, depth: int):
        self.in_str = False
        self.depth = depth

    def scan(self, buf: bytes, start: int, level: int) -> tuple[list[int], int | None]:
        """Scan buf[start:]: positions of commas at `level` (between elements) and of the ']' closing
        the array (None if not in it)."""
        b = np.frombuffer(buf, dtype=np.uint8, offset=start)
        q = np.flatnonzero(b == 34)  # '"'
        if q.size:
            prev = b[np.maximum(q - 1, 0)].copy()
            if q[0] == 0:
                prev[0] = buf[start - 1] if start > 0 else 0
            esc = q[prev == 92]
            if esc.size:  # a quote after backslashes is escaped when their number is odd
                bad = []
                for p in esc.tolist():
                    n, i = 0, start + p - 1
                    while i >= 0 and buf[i] == 92:
                        n, i = n + 1, i - 1
                    if n % 2:
                        bad.append(p)
                if bad:
                    q = np.setdiff1d(q, np.array(bad))
        s = np.flatnonzero(_LUT[b])
        outside = ((np.searchsorted(q, s) + int(self.in_str)) % 2) == 0
        s = s[outside]
        code = _LUT[b[s]].astype(np.int64)
        delta = np.where(code == 2, 0, code)
        before = self.depth + np.cumsum(delta) - delta
        commas = s[(code == 2) & (before == level)]
        close = s[(code == -1) & (before == level)]
        self.in_str = bool((q.size + int(self.in_str)) % 2)
        end = None
        if close.size:
            end = int(close[0]) + start
            commas = commas[commas < close[0]]
        else:
            self.depth = int(before[-1] + delta[-1]) if s.size else self.depth
        return [int(c) + start for c in commas], end


def _loose(chunk: bytes) -> tuple[list, int]:
    """A run of elements the typed decoder refused: keep the objects (as decode() does)."""
    return loose_events(msgspec.json.decode(chunk))


def _events_key(buf: bytes, give_up_after: int | None = None):
    """The match of the `"traceEvents": [` key at depth 1 (a key of the document, outside any
    string) in `buf`, or None; with `give_up_after`, None once the candidates pass that offset."""
    for m in _KEY.finditer(buf):
        sc = _Scanner(0)
        sc.scan(buf[: m.start()], 0, -99)
        if not sc.in_str and sc.depth == 1:
            return m
        if give_up_after is not None and m.start() > give_up_after:
            return None
    return None


def stream_table(fh, block: int = BLOCK, limit: int | None = None) -> tuple[dict, pd.DataFrame, int, int]:
    """(metadata, event table, events, skipped entries) of the trace read from binary file `fh`.
    Raises msgspec.DecodeError for text that is not JSON, StreamError where no top-level
    traceEvents array can be found or the file ends inside it, HeldTooMuch where MAX_HELD bytes
    pass without an element ending, TextLimit past `limit` bytes of text."""
    fh = Limited(fh, limit)
    buf = b""
    head = None
    while head is None:  # find the array: the key at depth 1, outside any string
        more = fh.read(block)
        buf += more
        head = _events_key(buf)
        if head is None and not more:
            raise StreamError("no 'traceEvents' list")
        if head is None and len(buf) > MAX_HELD:
            raise HeldTooMuch(f"no 'traceEvents' list in its first {MAX_HELD >> 20} MB")
    prefix = buf[: head.end() - 1]
    pos = head.end()  # first byte inside the array
    sc = _Scanner(2)
    cols = _Columns()
    skipped = 0
    scanned = pos
    end = None
    while True:
        commas, end = sc.scan(buf, scanned, 2)
        scanned = len(buf)
        cut = end if end is not None else (commas[-1] if commas else None)
        if cut is not None:
            if cut > pos:
                chunk = b"[" + buf[pos:cut] + b"]"
                try:
                    try:
                        cols.add(_EVENTS.decode(chunk))
                    except msgspec.ValidationError:
                        ev, sk = _loose(chunk)
                        cols.add(ev)
                        skipped += sk
                except msgspec.DecodeError as exc:
                    raise_if_not_utf8(chunk, exc)
                    raise
                del chunk
            buf, scanned, pos = buf[cut + 1:], scanned - (cut + 1), 0  # drop what is decoded (the comma or ']' too)
        if end is not None:
            break
        if len(buf) - pos > MAX_HELD:
            raise HeldTooMuch(f"more than {MAX_HELD >> 20} MB of traceEvents without an element ending")
        more = fh.read(block)
        if not more:
            raise StreamError("the file ends inside traceEvents (truncated)")
        buf += more
    suffix = buf + fh.read(MAX_HELD + 1)
    if len(suffix) > MAX_HELD:
        raise HeldTooMuch(f"more than {MAX_HELD >> 20} MB of text after traceEvents")
    doc = prefix + b"[]" + suffix
    try:
        try:
            d = _META.decode(doc)
            meta = {k: getattr(d, k) for k in META_KEYS if getattr(d, k) is not None}
        except msgspec.ValidationError:
            raw = msgspec.json.decode(doc)
            meta = {k: raw[k] for k in META_KEYS if raw.get(k) is not None}
    except msgspec.DecodeError as exc:
        raise_if_not_utf8(doc, exc)
        raise
    return meta, cols.table(), cols.n, skipped


SPLIT_BLOCK = 1 << 20
"""Bytes of JSON decoded at a time by `split_table` with msgspec: the records of one block stay small
against the table, and larger blocks decode no faster."""
_CUT = b"},"


def _array_end(raw: bytes, prefix: bytes, pos: int, tries: int = 1024) -> tuple[int, dict] | None:
    """(position of the ']' closing traceEvents, metadata): the last ']' of the text that follows an
    object's '}' and such that the document with an empty traceEvents in its place decodes (the
    typed decoder checks the JSON; Kineto writes its log lines, which hold ']', after the events);
    None if none of the last `tries` fits or the rest names traceEvents again."""
    e = len(raw)
    for _ in range(tries):
        e = raw.rfind(b"]", pos, e)
        if e < 0:
            return None
        j = e - 1
        while j >= pos and raw[j] in b" \t\r\n":
            j -= 1
        if raw[j] != 0x7D:  # '}': the last element is an object (else: not this ']', or an odd trace)
            continue
        suffix = raw[e + 1:]
        if b'"traceEvents"' in suffix:
            return None
        try:
            d = _META.decode(prefix + b"[]" + suffix)
        except msgspec.ValidationError:
            try:
                full = msgspec.json.decode(prefix + b"[]" + suffix)
            except (msgspec.DecodeError, UnicodeDecodeError):
                continue
            if not isinstance(full, dict):
                return None
            return e, {k: full[k] for k in META_KEYS if full.get(k) is not None}
        except (msgspec.DecodeError, UnicodeDecodeError):
            continue
        return e, {k: getattr(d, k) for k in META_KEYS if getattr(d, k) is not None}
    return None


def _next_cut(raw: bytes, at: int, end: int) -> int:
    """The first "}," at or after `at` that is followed by '{' (an element ends, the next begins),
    as the position of its comma; `end` if none."""
    while at < end:
        c = raw.find(_CUT, at, end)
        if c < 0:
            return end
        j = c + 2
        while j < end and raw[j] in b" \t\r\n":
            j += 1
        if j < end and raw[j] == 0x7B:
            return c + 1
        at = c + 2
    return end


def split_table(raw: bytes | list, block: int | None = None) -> tuple[dict, pd.DataFrame, int, int] | None:
    """(metadata, event table, events, skipped entries) of the trace whose JSON text is `raw`,
    decoded `block` bytes at a time (default SPLIT_BLOCK) by msgspec, each block's records turned
    into compact columns and freed
    (as `stream_table` does, for a text already in memory). Cheaper than `stream_table`: no scan of
    every byte; a block ends at the first "}," followed by "{" after `block` bytes, and the array at
    the last ']' whose removal leaves a valid document. A wrong guess (a "}," inside a string or an
    element) cannot pass: the block would not be valid JSON on its own, so the decoder refuses it.
    None when a guess fails or the text is not a plain trace: the caller then decodes the whole
    text (decode.events.decode), which also gives bad input its usual error. `raw` in a one-element
    list is consumed once every block is decoded (the list emptied before the table is built: the
    text and the table were alive together, 20 MB of a 20.5 MB rank's peak); on None it is left."""
    box = raw if isinstance(raw, list) else None
    raw = box[0] if box is not None else raw
    head = _events_key(raw, give_up_after=1 << 20)  # further in: an odd layout, left to the whole-text decode
    if head is None:
        return None
    pos = head.end()
    prefix = raw[: pos - 1]
    found = _array_end(raw, prefix, pos)
    if found is None:
        return None
    end, meta = found
    cols = _Columns()
    skipped = 0
    start = pos
    if block is None:
        block = SPLIT_BLOCK
    while start < end:
        at, tries = start + block, 0
        while True:
            cut = _next_cut(raw, at, end)
            chunk = b"".join((b"[", memoryview(raw)[start:cut], b"]"))  # one copy of the block, not three
            try:
                try:
                    events, sk = _EVENTS.decode(chunk), 0
                except msgspec.ValidationError:  # raised where the element is refused, the JSON unchecked yet
                    events, sk = loose_events(msgspec.json.decode(chunk))
                skipped += sk
            except (msgspec.DecodeError, UnicodeDecodeError):
                # the "}," was inside a string or an element: end the block at the next one
                tries += 1
                if cut == end or tries > 8:
                    return None
                at = cut + 1
                continue
            del chunk
            cols.add(events)
            del events
            break
        start = cut + 1
    if not cols.n:
        return None
    del raw, head, prefix  # the match holds the text too
    if box is not None:
        box.clear()
    return meta, cols.table(), cols.n, skipped


def read_event_table(path: str | Path, min_bytes: int | None = None, hasher=None,
                     limit: int | None = None) -> tuple[dict, pd.DataFrame, int, int]:
    """(metadata, event table, number of events, skipped entries) of one trace; large files are
    decoded as a stream (module docstring), others read whole and decoded in blocks (`split_table`).
    Raises TraceError with read_trace's messages. `hasher` (decode.load.content_hasher) is fed the
    file's bytes as they are read, so its digest is that of what was decoded. `limit`: the most
    bytes of JSON text (a .gz inflated) accepted, default decode.load.max_trace_bytes(); a .gz
    read whole is inflated up to STREAM_MIN_BYTES at most, then decoded as a stream."""
    from .load import InflateLimit, TraceError, decode_trace, max_trace_bytes, read_bytes, too_large

    path = Path(path)
    name = path.name
    gz = name.endswith(".gz")
    limit = max_trace_bytes() if limit is None else limit
    try:
        size = path.stat().st_size * (GZ_RATIO if gz else 1)
    except OSError:
        size = 0
    if size <= (STREAM_MIN_BYTES if min_bytes is None else min_bytes):
        try:
            box = [read_bytes(path, min(limit, STREAM_MIN_BYTES) if gz else limit, hasher)]
        except InflateLimit:
            if not gz or limit <= STREAM_MIN_BYTES:
                raise too_large(name, limit) from None
            box = None  # larger than its compressed size said: decoded as a stream
            if hasher is not None:
                hasher.reset()
        if box is not None:
            got = split_table(box)  # frees the text before it builds the table
            if got is not None:
                return got
            raw = box.pop()
            decoded: DecodedTrace = decode_trace(name, raw)
            del raw
            meta, n, skipped = decoded.meta, len(decoded), decoded.skipped
            return meta, event_table(decoded), n, skipped
    meta, table, n, skipped = _streamed(path, hasher, limit)
    if not n:
        raise TraceError(f"{name}: trace holds no events")
    return meta, table, n, skipped


def _streamed(path: Path, hasher, limit: int) -> tuple[dict, pd.DataFrame, int, int]:
    """read_event_table's stream decode of `path`, its errors as TraceError's one line."""
    from .load import TraceError, bad_utf8, gzip_errors, open_gzip, too_large

    name = path.name
    gz = name.endswith(".gz")
    try:
        if not gz and path.stat().st_size > limit:
            raise too_large(name, limit)
        with open(path, "rb") as raw, Tee(raw, hasher) as tee:
            with (open_gzip(tee) if gz else contextlib.nullcontext(tee)) as fh:
                got = stream_table(fh, BLOCK, limit)
            while tee.read(BLOCK):  # what the inflate left unread, for the digest
                pass
        return got
    except OSError as exc:
        if isinstance(exc, gzip.BadGzipFile) or not isinstance(exc, (FileNotFoundError, PermissionError)):
            raise TraceError(f"{name}: truncated or corrupt gzip data ({exc}); the trace was probably cut off while being written") from None
        raise TraceError(f"{name}: cannot read file ({exc.strerror or exc})") from None
    except gzip_errors() as exc:  # OSError: handled above
        raise TraceError(f"{name}: truncated or corrupt gzip data ({exc}); the trace was probably cut off while being written") from None
    except msgspec.DecodeError as exc:
        raise TraceError(f"{name}: not valid JSON ({str(exc)[:120]}); truncated or corrupt trace") from None
    except UnicodeDecodeError as exc:
        raise bad_utf8(name, exc) from None
    except TextLimit:
        raise too_large(name, limit) from None
    except HeldTooMuch as exc:
        raise TraceError(f"{name}: {exc}; not a trace a profiler writes (corrupt or hostile), not analysed") from None
    except StreamError as exc:
        if "truncated" in str(exc):
            raise TraceError(f"{name}: not valid JSON ({exc}); truncated or corrupt trace") from None
        raise TraceError(f"{name}: not a Kineto/Chrome trace (no 'traceEvents' list)") from None
