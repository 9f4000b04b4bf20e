"""The bytes one trace's stream decode reads, counted: hashed as they are read (the parse cache keys
an entry by the hash of exactly the bytes decoded, not of the file as it was some time before:
issue 37, item 10), and limited (a .gz whose text inflates past the limit stops there: item 12)."""

from __future__ import annotations

import io


class Tee(io.RawIOBase):
    """A binary file whose bytes, as they are read, also go to `hasher` (when not None)."""

    def __init__(self, fh, hasher=None):
        self.fh, self.hasher = fh, hasher

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.fh.readinto(b)
        if n and self.hasher is not None:
            self.hasher.update(memoryview(b)[:n])
        return n


class Limited:
    """`fh.read`, counting: TextLimit once more than `limit` bytes of text were read."""

    def __init__(self, fh, limit: int | None):
        self.fh, self.limit, self.n = fh, limit, 0

    def read(self, size: int = -1) -> bytes:
        b = self.fh.read(size)
        self.n += len(b)
        if self.limit is not None and self.n > self.limit:
            raise TextLimit(self.limit)
        return b


class TextLimit(ValueError):
    """The stream's text passed the limit it was given (decode.load.max_trace_bytes)."""
