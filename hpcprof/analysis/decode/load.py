"""Trace discovery, reading and validation (no analysis here).

Everything that touches a raw trace file lives in this module, so the analyzers never deal with
gzip, JSON errors or missing metadata. `read_trace` decodes each file once (hpcprof.analysis.decode.events);
every per-rank analysis, HTA's included, is built from that one decode.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from ...rundir import RunDir
from .. import isal_lib
from ..layout import TIMELINE_FILE
from .events import DecodedTrace, DecodeError, ShapeError, decode

TRACE_SUFFIXES = (".json.gz", ".json")
MAX_TRACE_ENV = "HPCPROF_MAX_TRACE_MB"
"""The largest JSON text one trace may have, in MB (a .gz counted inflated); default: a quarter of
this machine's memory (`max_trace_bytes`)."""


class TraceError(Exception):
    """A trace file that cannot be analysed; the message names the file and says why."""


class InflateLimit(ValueError):
    """A gzip stream inflates past the limit it was given (`gunzip`)."""


def max_trace_bytes() -> int:
    """The largest JSON text (a .gz inflated) a trace may have: HPCPROF_MAX_TRACE_MB where set,
    else a quarter of the machine's physical memory. Why: the decode of one rank holds its event
    table and the frames built from it, a few times the size of its text; a 14 MB .json.gz holding a
    trace header and 3 GB of spaces drove `analyze` past 10 GB (issue 37, item 12). A trace past it
    fails with one line (`too_large`); the other ranks are analysed."""
    value = os.environ.get(MAX_TRACE_ENV, "").strip()
    if value:
        try:
            mb = float(value)
        except ValueError:
            mb = math.nan
        if not (math.isfinite(mb) and mb > 0):
            raise TraceError(f"{MAX_TRACE_ENV}={value!r}: expected a number of MB > 0")
        return int(mb * (1 << 20))
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):  # not known here: no limit
        return 1 << 62


def too_large(name: str, limit: int) -> TraceError:
    """The one line of a trace whose JSON text is larger than `limit` bytes."""
    return TraceError(f"{name}: more than {limit / (1 << 20):,.0f} MB of JSON text{' once inflated' if name.endswith('.gz') else ''}, "
                      f"the limit ({MAX_TRACE_ENV}; default a quarter of this machine's memory); not analysed")


@dataclass
class TraceMeta:
    """What we learn from a trace's top-level metadata (cheap to keep, picklable)."""

    path: str
    rank: int
    rank_from_trace: bool
    world_size: int | None
    backend: str | None
    host: str | None
    device_properties: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)



def discover_traces(path: Path) -> list[Path]:
    """Trace files for a run directory (`traces/` inside it) or a plain folder of traces.

    Only the top level of the trace folder is used (as HTA does); `traces/.tmp/` partial files and
    the extra profiler cycles in `traces/cycle-<k>/` are never mixed in, nor our own merged timeline
    (analysis/layout.TIMELINE_FILE: an analysis written into the trace folder by an older version).
    """
    path = Path(path)
    traces = RunDir(path).traces_dir
    folder = traces if traces.is_dir() else path
    files = [
        p
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and not p.name.startswith(".") and p.name != TIMELINE_FILE
    ]
    return files


def content_hasher():
    """A new hasher of a trace file's bytes (`update(bytes)`, `hexdigest()`): `file_digest`'s, which
    the decode also feeds with the bytes it reads (the parse cache keys an entry by exactly what
    was parsed)."""
    return xxhash.xxh3_128()


def file_digest(path: str | os.PathLike, chunk: int = 1 << 20, on_block=None) -> str:
    """Content hash of a trace file (XXH3-128 of its bytes, streamed; the parse cache's key, not a
    security check, and many times faster than a cryptographic hash); `on_block(n)` is called with
    the size of each block hashed (a progress bar)."""
    h = content_hasher()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            h.update(block)
            if on_block is not None:
                on_block(len(block))
    return h.hexdigest()


def read_trace(path: str | os.PathLike) -> DecodedTrace:
    """Read and decode one Kineto trace (`.json` or `.json.gz`); raise TraceError on bad input."""
    path = Path(path)
    return decode_trace(path.name, read_bytes(path))


def read_bytes(path: str | os.PathLike, limit: int | None = None, hasher=None) -> bytes:
    """The JSON text of one trace file (`.gz` decompressed); TraceError when it cannot be read or
    holds nothing. `limit`: the most bytes of text accepted (InflateLimit past it: the caller
    decides, decode.stream.read_event_table); `hasher` (`content_hasher()`) is fed the file's bytes."""
    path = Path(path)
    name = path.name
    gz = name.endswith(".gz")
    try:
        if limit is not None and not gz and path.stat().st_size > limit:
            raise InflateLimit(limit)
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{name}: cannot read file ({exc.strerror or exc})") from None
    if not raw:
        raise TraceError(f"{name}: empty file (0 bytes); the rank probably died before writing its trace")
    if hasher is not None:
        hasher.update(raw)
    if gz:
        try:
            raw = gunzip(raw, limit)
        except gzip_errors() as exc:
            raise TraceError(
                f"{name}: truncated or corrupt gzip data ({exc}); the trace was probably cut off while being written"
            ) from None
        if not raw.strip():
            raise TraceError(f"{name}: empty trace (gzip holds no data)")
    return raw


def gzip_errors() -> tuple[type[BaseException], ...]:
    """What reading truncated or corrupt gzip data raises, with ISA-L's inflate or Python's gzip."""
    isal = isal_lib.isal()
    return (EOFError, OSError, zlib.error) + ((isal.isal_zlib.error,) if isal is not None else ())


def gunzip(data: bytes, limit: int | None = None) -> bytes:
    """gzip.decompress(data), by ISA-L's inflate where installed (isal_lib.isal: faster than
    zlib's); errors: gzip_errors(). `limit`: InflateLimit once the text passes that many
    bytes, before more is inflated (a gzip bomb never takes more memory than the limit)."""
    isal = isal_lib.isal()
    if limit is None:
        return (isal.igzip if isal is not None else gzip).decompress(data)
    z = isal.isal_zlib if isal is not None else zlib
    parts: list[bytes] = []
    n = 0
    while True:  # one gzip member at a time, as gzip.decompress reads them
        d = z.decompressobj(wbits=31)
        parts.append(d.decompress(data, limit + 1 - n))
        n += len(parts[-1])
        if n > limit:
            raise InflateLimit(limit)
        if not d.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        data = d.unused_data
        if not data.strip(b"\0"):  # the end, or gzip's zero padding after the last member
            return b"".join(parts)


def open_gzip(path: str | os.PathLike):
    """gzip.open(path, "rb"), by ISA-L's inflate where installed; errors: gzip_errors()."""
    isal = isal_lib.isal()
    return (isal.igzip if isal is not None else gzip).open(path, "rb")


def bad_utf8(name: str, exc: UnicodeDecodeError) -> TraceError:
    """The one-line error of trace file `name` whose text is not UTF-8 (whole or streamed decode)."""
    return TraceError(f"{name}: not valid UTF-8 text ({exc.reason}, byte {exc.object[exc.start:exc.end]!r}); corrupt trace")


def decode_trace(name: str, raw: bytes) -> DecodedTrace:
    """Decode the JSON text `raw` of the trace file `name`; TraceError (naming the file) when it is
    not JSON, not a trace, or holds no event."""
    try:
        decoded = decode(raw)
    except DecodeError as exc:
        raise TraceError(f"{name}: not valid JSON ({str(exc)[:120]}); truncated or corrupt trace") from None
    except UnicodeDecodeError as exc:
        raise bad_utf8(name, exc) from None
    except ShapeError:
        raise TraceError(f"{name}: not a Kineto/Chrome trace (no 'traceEvents' list)") from None
    if not decoded.events:
        raise TraceError(f"{name}: trace holds no events")
    return decoded


def trace_meta(path: str | os.PathLike, doc: dict) -> TraceMeta:
    """Rank, world size and backend of a trace (`doc`: its top-level keys); falls back to rank 0
    (with a warning) without distributedInfo."""
    name = Path(path).name
    info = doc.get("distributedInfo") or {}
    if not isinstance(info, dict):
        info = {}
    warnings: list[str] = []
    rank = info.get("rank")
    from_trace = isinstance(rank, int) and not isinstance(rank, bool)
    if not from_trace:
        rank = 0
        warnings.append(
            f"{name}: no distributedInfo.rank in the trace (not recorded by a distributed job?); "
            "analysed as rank 0"
        )
    ws = info.get("world_size")
    return TraceMeta(
        path=str(path),
        rank=int(rank),
        rank_from_trace=from_trace,
        world_size=int(ws) if isinstance(ws, int) else None,
        backend=info.get("backend"),
        host=doc.get("host_name"),
        device_properties=[d for d in doc.get("deviceProperties") or [] if isinstance(d, dict)]
        if isinstance(doc.get("deviceProperties"), list) else [],
        warnings=warnings,
    )
