"""The merged timeline's .json.gz: one gzip member, written as a stream by a maintained library.

python-isal's threaded writer (`isal.igzip_threaded`) where isal_lib.isal() gives ISA-L, else Python's
`gzip`. Both write ONE gzip member, which Perfetto needs (google/perfetto#872);
tests/analysis/test_timeline.py checks that of each, against the library itself.
"""

from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path
from typing import IO, Iterator

from ... import isal_lib

GZIP_LEVEL = 3
"""zlib's level where ISA-L is not used (HPCPROF_ISAL=0, or no `isal`): level 6's better ratio is not
worth its time on a file this size."""
ISAL_LEVEL = 1
"""ISA-L's level (0-3): compresses these texts about as well as zlib's level 3, much faster."""


@contextlib.contextmanager
def gzip_out(path: Path) -> Iterator[IO[bytes]]:
    """A binary file that writes `path` as ONE gzip member, its header without a time or a file
    name. With ISA-L: python-isal's threaded writer (pigz's scheme: blocks deflated on threads that
    release the GIL, bounded queues, the CRC combined), so deflating overlaps the writing of the
    text; else Python's gzip module on this thread. The file appears whole (written under a
    temporary name, renamed once closed) or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    isal = isal_lib.isal()
    try:
        with open(tmp, "wb") as fh:
            if isal is not None:
                gz = isal.igzip_threaded.open(fh, "wb", compresslevel=ISAL_LEVEL,
                                              threads=max(1, min(4, os.cpu_count() or 1)))
            else:
                gz = gzip.GzipFile(filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=fh, mtime=0)
            with gz:
                yield gz
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
