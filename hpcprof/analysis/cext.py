"""The analysis' optional C extension, `hpcprof.analysis._native` (sources: `_native.c`, `_native_walk.c`,
`_native_text.c` beside this).

setup.py builds it where a C compiler is found (as an optional extension: without one the install
goes on). Its users fall back to their Python code when `get()` returns None, with the same results:
decode/native.py (the event table's columns), ranks/operators.py (the operator walk),
outputs/timeline_render.py (the merged timeline's event and launch-flow text). Set
HPCPROF_NATIVE=0 in the environment to use the Python code only (tests compare both).

ISA-L (the `isal` package, a dependency where it has wheels) is the other optional accelerator:
its deflate writes the merged timeline (outputs/gzip_stream.py) and its inflate reads .json.gz
traces (decode/load.py, decode/stream.py), with zlib's and Python's gzip module as the fallback and
the same bytes of JSON either way. HPCPROF_ISAL=0 switches it off.
"""

from __future__ import annotations

import os

try:
    from . import _native
except ImportError:  # built without a C compiler
    _native = None

ENV = "HPCPROF_NATIVE"


def get():
    """The extension module, or None (not built, or switched off with HPCPROF_NATIVE=0)."""
    if _native is None or os.environ.get(ENV, "1") == "0":
        return None
    return _native


ISAL_ENV = "HPCPROF_ISAL"


def isal():
    """The `isal` package (its `isal_zlib` and `igzip` modules), or None: not installed, or switched
    off with HPCPROF_ISAL=0."""
    if os.environ.get(ISAL_ENV, "1") == "0":
        return None
    try:
        import isal
        import isal.igzip
        import isal.isal_zlib
    except ImportError:
        return None
    return isal
