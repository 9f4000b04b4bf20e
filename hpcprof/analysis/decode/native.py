"""The native decode of a run of trace events into the compact columns of `columns._Columns`.

Why: the typed msgspec decode (events.py) makes one Python object per event and per value, and
turning them into columns costs about 25 ns a value and column: 0.15 of the 0.37 CPU-s of a 20 MB
rank's analysis. `hpcprof/analysis/_native.c` (a small C extension, built by setup.py where a C
compiler is found) parses the JSON text of a run of events straight into one type code and one 8-byte value per event
and field, and makes one Python object per distinct text or other non-number value, not per event.
`pieces` turns those into exactly the pieces `_Columns._compact` builds from the records (int64
arrays, ("num", ...) tuples, object arrays), so the event table is the same, value for value and
dtype for dtype (tests/analysis/test_native_decode.py compares both paths on every trace of
tests/data and on odd inputs).

The native parser takes only what it handles exactly as msgspec does; on anything else (an element
that is not an object, "args" that is not an object, a key given twice or with escapes, an integer
beyond int64, a number out of a double's range, bad UTF-8, invalid JSON) it returns None and the
caller decodes that run with msgspec, as without the extension. No extension (no compiler at
install time), or HPCPROF_NATIVE=0 in the environment (analysis/cext.py): every run goes through msgspec.
"""

from __future__ import annotations

import msgspec
import numpy as np

from .. import cext
from .columns import TextCodes
from .events import DROPPED_KEYS, HTA_ARGS, NAN, OWN_ARGS, TOP_LEVEL

# type codes of _native.c
C_INT, C_FLOAT, C_OBJ, C_NULL, C_TRUE, C_FALSE = range(6)

# (column name in _Columns, key in the trace, is an args key, value of an event without it): the
# same fields and defaults as the msgspec records of events.py (missing top-level key: NaN; missing
# args key: HTA's default, or None for our own)
_FIELDS = (
    [(k, k, False, NAN) for k in TOP_LEVEL if k not in DROPPED_KEYS]
    + [(name, raw, True, default) for name, raw, default in HTA_ARGS]
    + [(name, raw, True, None) for name, raw in OWN_ARGS]
)
_SPEC = [(raw.encode(), is_arg, default) for _name, raw, is_arg, default in _FIELDS]
_NAMES = [name for name, _raw, _is_arg, _default in _FIELDS]


def available() -> bool:
    """Whether runs of events are decoded natively (extension built, not switched off)."""
    return cext.get() is not None


def columns_of(buf: bytes, start: int, end: int):
    """(events, {column: piece}, has_args) of the events in buf[start:end] (elements of traceEvents
    separated by commas), with the pieces `_Columns._compact` would build; None when the native
    parser leaves this run to msgspec (module docstring) or is not available."""
    ext = cext.get()
    if ext is None:
        return None
    got = ext.columns(buf, start, end, _SPEC, msgspec.json.decode)
    if got is None:
        return None
    n, cols, has, uniq = got
    objs = np.fromiter(uniq, dtype=object, count=len(uniq))
    out = {}
    for name, (codes, vals, count) in zip(_NAMES, cols):
        out[name] = pieces(np.frombuffer(codes, dtype=np.uint8), np.frombuffer(vals, dtype=np.uint64), objs, count)
    return n, out, np.frombuffer(has, dtype=np.uint8).astype(bool)


def pieces(codes: np.ndarray, vals: np.ndarray, objs: np.ndarray, count: tuple):
    """One field's compact piece from its codes, values and the number of each code (counted by the
    parser) (see `_Columns._compact`): an int64 array when every value is an int; ("num", float64
    values, which were ints, exact values or None) when every value is a number; all None: an
    object array of None; texts (and NaN, a missing top-level key): columns.TextCodes; else an
    object array of the values."""
    n = codes.size
    iv, fv = vals.view(np.int64), vals.view(np.float64)
    if count[C_NULL] == n:
        return _nones(n)
    if count[C_INT] == n:
        return iv.copy()
    if count[C_INT] + count[C_FLOAT] == n:
        isint = codes == C_INT
        f = fv.copy()
        f[isint] = iv[isint]
        exact = None
        if count[C_INT] and np.abs(f[isint]).max() > 2 ** 53:  # ints beyond a double's precision: kept exact
            exact = f.astype(object)
            exact[isint] = iv[isint].astype(object)
        return ("num", f, isint, exact)
    if count[C_OBJ] + count[C_FLOAT] == n and count[C_OBJ]:
        # texts, and NaN (a missing top-level key) at most: as codes, if every value is a text
        m = codes == C_OBJ
        used, local = unique_inverse(iv[m], objs.size)
        texts = objs[used]
        if all(type(t) is str for t in texts.tolist()) and np.isnan(fv[~m]).all():
            c = np.full(n, -1, dtype=np.int64)
            c[m] = local
            return TextCodes(c, texts)
    out = np.empty(n, dtype=object)
    if count[C_OBJ]:
        m = codes == C_OBJ
        out[m] = objs[iv[m]]
    if count[C_INT]:  # one Python int per distinct value
        m = codes == C_INT
        u, inv = np.unique(iv[m], return_inverse=True)
        out[m] = np.fromiter(u.tolist(), dtype=object, count=u.size)[inv]
    if count[C_FLOAT]:
        m = codes == C_FLOAT
        out[m] = fv[m].astype(object)
    if count[C_TRUE]:
        out[codes == C_TRUE] = True
    if count[C_FALSE]:
        out[codes == C_FALSE] = False
    # C_NULL: np.empty(dtype=object) is None already
    return out


_NONES = np.empty(0, dtype=object)


def _nones(n: int) -> np.ndarray:
    """n Nones (an arg that no event of the block has: most of our own): a read-only view of one
    array kept for all blocks, which the join copies (np.full of each block's Nones: 3 ms of a
    20 MB rank)."""
    global _NONES
    if _NONES.size < n:
        _NONES = np.full(max(n, 2 * _NONES.size), None, dtype=object)
        _NONES.flags.writeable = False
    return _NONES[:n]


def unique_inverse(key: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(key, return_inverse=True) of integers in [0, space): by marking the values present
    rather than sorting every key, where the space is small against the keys (a block's ids into its
    distinct objects: about 6 ms of a 20 MB rank's decode; a rank's threads on the merged timeline,
    a few dozen values for 60,000 events: 2 ms a rank); np.unique itself otherwise."""
    if space > 4 * key.size + 1024:
        return np.unique(key, return_inverse=True)
    present = np.zeros(space, dtype=bool)
    present[key] = True
    uniq = np.flatnonzero(present)
    lookup = np.empty(space, dtype=np.int64)
    lookup[uniq] = np.arange(uniq.size)
    return uniq, lookup[key]
