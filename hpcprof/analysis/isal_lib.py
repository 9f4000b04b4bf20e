"""ISA-L (the `isal` package), the analysis' optional gzip accelerator.

`isal` is a dependency where it has wheels (pyproject.toml). Its threaded gzip writer writes the
merged timeline (outputs/timeline/gzip_out.py) and its inflate reads .json.gz traces (decode/load.py,
decode/stream.py); where it is missing, or switched off with HPCPROF_ISAL=0, zlib and Python's gzip
module do the same work: the same JSON text either way (tests/analysis/test_stream_decode.py reads
traces both ways, tests/analysis/test_timeline.py writes the timeline both ways).
"""

from __future__ import annotations

import os

ISAL_ENV = "HPCPROF_ISAL"


def isal():
    """The `isal` package (its `isal_zlib`, `igzip` and `igzip_threaded` modules), or None: not
    installed, or switched off with HPCPROF_ISAL=0."""
    if os.environ.get(ISAL_ENV, "1") == "0":
        return None
    try:
        import isal
        import isal.igzip
        import isal.igzip_threaded
        import isal.isal_zlib
    except ImportError:
        return None
    return isal
