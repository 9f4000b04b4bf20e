"""A gzip file written as a stream, its blocks compressed on threads (the scheme of pigz).

Why: the merged timeline is up to about 130 MB of JSON (1,000,000 events); gzip at level 6 on one
core took about 1.5 s of it, and the file used to be built whole in memory first. Here the JSON is
written rank by rank; every BLOCK bytes are deflated by a thread pool (zlib and ISA-L release the GIL), each
block ending with a sync flush so that the raw deflate streams concatenate into one, and the file
is ONE gzip member: Perfetto reads no multi-member gzip (google/perfetto#872). The CRC-32 of the
whole text is kept as it is written. Memory: at most 2 x threads blocks in flight.

What is written is copied at once into a block buffer of BLOCK bytes, and the buffers are used again
once their block is deflated (2 x threads + 1 of them): a fresh buffer for every block (the join of
the pieces written) would cost a page fault per 4 kB page of every block, and the caller may reuse what it wrote as soon as write returns.

The blocks are deflated by ISA-L (the `isal` package, a dependency on x86-64 and ARM64) where it
can be imported, else by zlib. Both write standard raw deflate: any gzip reader gets the same text.
Measured on the 138 MB merged timeline of 16 ranks (one core, 4 MB blocks): zlib level 3 0.32 s,
ratio 11.9; ISA-L level 1 0.065 s, ratio 11.7. `HPCPROF_ISAL=0` in the environment uses zlib.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ... import isal_lib

LEVEL = 3
"""zlib level, where ISA-L is not used: measured on the DLRM timeline, level 3 deflates 200 MB/s at a
ratio of 11.5, level 6 92 MB/s at 14.1 (one core)."""
ISAL_LEVEL = 1
"""ISA-L level (0-3), where it is used: level 1 compresses about as well as zlib's level 3 at about
5 times its speed; level 3 is 4 times slower for no gain on these texts (module docstring)."""
BLOCK = 4 << 20


def _deflate(data: bytes, level: int, lib=zlib) -> bytes:
    """`data` as raw deflate blocks ending with a sync flush (byte-aligned, no final block), so that
    such pieces concatenate into one stream; `lib`: zlib or isal.isal_zlib (same interface)."""
    c = lib.compressobj(level, lib.DEFLATED, -15)
    return c.compress(data) + c.flush(lib.Z_SYNC_FLUSH)


class GzipStream:
    """Write text to `path` as one gzip member; `close()` finishes the file, which appears
    atomically (written under a temporary name and renamed); `abort()` removes the partial one."""

    def __init__(self, path: str | os.PathLike, level: int | None = None, threads: int | None = None,
                 block: int | None = None):
        """`level`: the deflate level of the library used (ISA-L 0-3, zlib 0-9); default ISAL_LEVEL
        or LEVEL."""
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        isal = isal_lib.isal()
        self.lib = isal.isal_zlib if isal is not None else zlib
        self.level = level if level is not None else (ISAL_LEVEL if self.lib is not zlib else LEVEL)
        self.block = block or BLOCK
        self.threads = threads or max(1, min(4, os.cpu_count() or 1))
        self._fh = open(self.tmp, "wb")
        self._fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # gzip header: deflate, no name, mtime 0
        self._pool = ThreadPoolExecutor(max_workers=self.threads)
        self._pending: deque = deque()  # (deflate future, its block buffer), in the file's order
        self._free: list[bytearray] = []  # block buffers whose block is written
        self._cur = memoryview(bytearray(self.block))
        self._used = 0  # bytes of the current block filled
        self._crc = 0
        self._size = 0

    def write(self, data: bytes | str | memoryview) -> None:
        """Append `data` to the text (copied: the caller may reuse its buffer once this returns)."""
        if isinstance(data, str):
            data = data.encode()
        view = memoryview(data).cast("B")
        while len(view):
            n = min(len(view), self.block - self._used)
            self._cur[self._used: self._used + n] = view[:n]
            self._used += n
            view = view[n:]
            if self._used == self.block:
                self._submit()

    def _submit(self) -> None:
        data = self._cur[: self._used]
        self._crc = self.lib.crc32(data, self._crc)
        self._size += self._used
        self._pending.append((self._pool.submit(_deflate, data, self.level, self.lib), self._cur))
        while len(self._pending) > 2 * self.threads:
            self._write_oldest()
        self._cur = self._free.pop() if self._free else memoryview(bytearray(self.block))
        self._used = 0

    def _write_oldest(self) -> None:
        done, buf = self._pending.popleft()
        self._fh.write(done.result())
        self._free.append(buf)

    def close(self) -> None:
        if self._used:
            self._submit()
        while self._pending:
            self._write_oldest()
        self._pool.shutdown()
        self._fh.write(zlib.compressobj(LEVEL, zlib.DEFLATED, -15).flush(zlib.Z_FINISH))  # the final (empty) block
        self._fh.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))
        self._fh.close()
        self.tmp.replace(self.path)

    def abort(self) -> None:
        self._pool.shutdown(cancel_futures=True)
        self._fh.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> "GzipStream":
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False
