"""The analysis' optional C extension, `hpcprof.analysis._native` (sources: `_native.c`, `_native_walk.c`,
`_native_text.c` beside this).

setup.py builds it where a C compiler is found (as an optional extension: without one the install
goes on). Its users fall back to their Python code when `get()` returns None, with the same results:
decode/native.py (the event table's columns), ranks/operators.py (the operator walk),
outputs/timeline_render.py (the merged timeline's event and launch-flow text). Set
HPCPROF_NATIVE=0 in the environment to use the Python code only (tests compare both).
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
