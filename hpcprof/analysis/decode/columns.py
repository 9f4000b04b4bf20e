"""The event table: compact columns of decoded events, block by block, and their join.

The one definition of the table every analysis reads. Both block decodes (decode/stream.py:
`stream_table` for files too large to hold, `split_table` for the others) turn each block's records
into compact columns at once and free the records: numbers as int64/float64 arrays, other values
with one Python object per distinct value (texts, ints, HTA's `Input Dims` lists); a text they
cannot split is decoded whole and its records made into the table in one block (`event_table`).
`_Columns.table()` joins the blocks so that each column has the dtype and values pandas infers from
all of them, as in `pandas.DataFrame(traceEvents)` (HTA's frame), whatever the blocks
(tests/analysis/test_event_columns.py checks it against pandas, test_stream_decode.py and
test_stream_decode_blocks.py across block sizes).
"""

from __future__ import annotations

import operator
from itertools import repeat
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .events import (
    _ARGS_FIELDS, _EVENT_FIELDS, _NO_ARGS, _NO_BLOCK_ARGS, DROPPED_KEYS, HTA_ARGS, NAN, OBJECT_KEYS, OWN_ARGS, TEXT_ARGS,
    TOP_LEVEL, DecodedTrace, _BlockEvent, categories, number_kind,
)

_ENC = msgspec.json.Encoder()


def _intern(seen: dict, v):
    """One object per distinct value of a column: texts, ints and lists (HTA's `Input Dims` and
    `Input type` are lists of lists, a few hundred bytes of objects per event, repeated through the
    trace). Equal values share one object; nothing mutates them."""
    t = type(v)
    if t is str or t is int:
        return seen.setdefault((t, v), v)
    if t is list:
        return seen.setdefault((t, _ENC.encode(v)), v)
    return v


class _Decoded(dict):
    """JSON text -> its value, decoded on first use: one decode and one object per distinct text."""

    def __missing__(self, text: bytes):
        value = self[text] = msgspec.json.decode(text)
        return value


_BY_VALUE = frozenset((str, int, type(None)))
_BY_VALUE_OR_FLOAT = frozenset((str, type(None), float))


class _Columns:
    """Per column, the compact pieces of every decoded run of events."""

    def __init__(self):
        self.top: dict[str, list] = {k: [] for k in TOP_LEVEL if k not in DROPPED_KEYS}
        self.args: dict[str, list] = {n: [] for n in _ARGS_FIELDS}
        self.has_args: list[np.ndarray] = []
        self.interned: dict[str, dict] = {}
        self.decoded: dict[str, _Decoded] = {n: _Decoded() for n in TEXT_ARGS}
        self.n = 0

    def _compact(self, name: str, values: tuple):
        """An int64 array when every value is an int that fits; ("num", float64 values, which were
        ints, the exact values or None) when every value is a number (the exact ones kept where an
        int is beyond float precision); else an object array, one object per distinct value."""
        n = len(values)
        if n and values[0] is None and values.count(None) == n:  # an arg no event of the block has (most of ours): no type scan
            return np.full(n, None, dtype=object)
        types = set(map(type, values))
        kind = number_kind(values, types)
        if kind == "int":
            try:
                return np.array(values, dtype=np.int64)
            except OverflowError:
                return ("num", np.array(values, dtype=np.float64), np.ones(n, dtype=bool), np.fromiter(values, dtype=object, count=n))
        if kind == "num":
            isint = np.fromiter(map(type, values), dtype=object, count=n) == int
            f = np.array(values, dtype=np.float64)
            exact = np.fromiter(values, dtype=object, count=n) if isint.any() and np.abs(f[isint]).max() > 2 ** 53 else None
            return ("num", f, isint, exact)
        seen = self.interned.setdefault(name, {})
        if types <= _BY_VALUE or (types <= _BY_VALUE_OR_FLOAT and values.count(NAN) == list(map(type, values)).count(float)):
            # texts, ints and None (and NaN, the missing key's value: one object): equal values of
            # these types are the same value (no 1 == True == 1.0 mix, no -0.0 == 0.0), so the values
            # themselves are the keys (in C, no call per value)
            return np.fromiter(map(seen.setdefault, values, values), dtype=object, count=n)
        if float not in types:  # JSON values without floats: their JSON text tells them apart (true vs 1)
            return np.fromiter(map(seen.setdefault, map(_ENC.encode, values), values), dtype=object, count=n)
        return np.fromiter((_intern(seen, v) for v in values), dtype=object, count=n)

    def _from_text(self, name: str, texts: tuple) -> np.ndarray:
        """The values of a TEXT_ARGS column whose JSON texts the decoder kept, as objects (one per
        distinct text): `_join` infers the column's dtype from the values, as for any object piece."""
        return np.fromiter(map(self.decoded[name].__getitem__, map(bytes, texts)), dtype=object, count=len(texts))

    def add(self, events: list) -> None:
        """Add a block's records: _BlockEvent from the block decoders, or _Event (loose_events)."""
        if not events:
            return
        texts = type(events[0]) is _BlockEvent
        top = dict(zip(_EVENT_FIELDS, zip(*map(msgspec.structs.astuple, events))))
        del events
        for k in self.top:
            self.top[k].append(self._compact(k, top[k]))
        a = top.pop("args")
        del top
        has = np.fromiter(map(operator.is_not, a, repeat(None)), dtype=bool, count=len(a))
        self.has_args.append(has)
        if not has.all():
            a = list(a)
            for i in np.flatnonzero(~has).tolist():
                a[i] = _NO_BLOCK_ARGS if texts else _NO_ARGS
        args = dict(zip(_ARGS_FIELDS, zip(*map(msgspec.structs.astuple, a))))
        del a
        for k in self.args:
            values = args.pop(k)
            self.args[k].append(self._from_text(k, values) if texts and k in TEXT_ARGS else self._compact(k, values))
        self.n += len(has)

    @staticmethod
    def _join(pieces: list, object_dtype: bool) -> pd.Series:
        """The column pandas would infer from all values at once (or pd.Series(values, dtype=object)).
        Series of the arrays joined here are made with copy=False (pandas 3 copies an array given
        to Series otherwise)."""
        if not pieces:
            return pd.Series([], dtype=object if object_dtype else None)
        is_int = [isinstance(p, np.ndarray) and p.dtype == np.int64 for p in pieces]
        is_num = [isinstance(p, tuple) for p in pieces]
        if not object_dtype and all(is_int):
            return pd.Series(np.concatenate(pieces), copy=False)
        all_ints = all(i or (n and p[2].all()) for i, n, p in zip(is_int, is_num, pieces))
        if not object_dtype and not all_ints and all(i or n for i, n in zip(is_int, is_num)):
            return pd.Series(np.concatenate([p[1] if isinstance(p, tuple) else p.astype(np.float64) for p in pieces]), copy=False)
        objs = []
        for p in pieces:
            if isinstance(p, tuple):  # numbers back to the Python ints and floats they were
                if p[3] is not None:
                    objs.append(p[3])
                    continue
                o = p[1].astype(object)
                o[p[2]] = p[1][p[2]].astype(np.int64).astype(object)
                objs.append(o)
            elif p.dtype != object:  # ints: one Python int per distinct value, not per event
                u, inv = np.unique(p, return_inverse=True)
                objs.append(np.fromiter(u.tolist(), dtype=object, count=u.size)[inv])
            else:
                objs.append(p)
        values = np.concatenate(objs)
        if object_dtype:
            return pd.Series(values, dtype=object, copy=False)
        return _texts(values)

    def table(self) -> pd.DataFrame:
        cols: dict[str, Any] = {}
        for key, pieces in self.top.items():
            col = self._join(pieces, key in OBJECT_KEYS)
            self.top[key] = []
            if _all_missing(col) and not any(p.dtype == object and any(v is None for v in p) for p in pieces if isinstance(p, np.ndarray)):
                continue
            cols[key] = categories(col) if key in OBJECT_KEYS else col
        for name, _key, _default in HTA_ARGS:
            cols[name] = self._join(self.args.pop(name), False)
        for name, _key in OWN_ARGS:
            cols[name] = self._join(self.args.pop(name), True)
        cols["has_args"] = pd.Series(np.concatenate(self.has_args) if self.has_args else np.empty(0, dtype=bool), dtype=bool, copy=False)
        return pd.DataFrame(cols, copy=False)  # the columns as they are, not stacked into 2-D blocks


def event_table(decoded: DecodedTrace) -> pd.DataFrame:
    """The event table of a trace decoded whole (decode.events.decode): one row per event (in trace
    order, index = position), one column per top-level key that occurs in the trace (except
    DROPPED_KEYS), plus one column per kept `args` key (HTA's and ours) and `has_args`. Made from its
    records in one block, by the columns the block decodes make."""
    cols = _Columns()
    cols.add(decoded.events)
    return cols.table()


def _all_missing(col: pd.Series) -> bool:
    """col.isna().all(), decided by the first value where that one is not missing (the whole isna
    of a column of texts or objects is slow)."""
    if len(col) and pd.api.types.is_scalar(first := col.iloc[0]) and not pd.isna(first):
        return False
    return bool(col.isna().all())


def _texts(values: np.ndarray) -> pd.Series:
    """pd.Series(values.tolist()): the dtype pandas infers from the values; built from the distinct
    values where they are all texts (or missing): the text column is made from the few distinct
    texts and their codes, not from one Python string per event. Values that are not all texts
    (infer_dtype stops at the first other one) are not factorized: pid and tid, ints and texts.
    Values of mixed types ("mixed", "mixed-integer": ints and texts,
    lists) become an object column as they are: pandas infers object for every such mix of JSON
    values (tests/analysis/test_event_columns.py), without the list of every value and the
    inference over it."""
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind in ("mixed", "mixed-integer"):
        return pd.Series(values, dtype=object, copy=False)
    if kind != "string":
        return pd.Series(values.tolist())
    try:
        codes, uniq = pd.factorize(values, use_na_sentinel=True)
    except TypeError:  # unhashable values (lists)
        return pd.Series(values.tolist())
    if len(uniq) and len(uniq) < len(values):
        inferred = pd.Series(list(uniq))
        if isinstance(inferred.dtype, pd.StringDtype):  # only texts (equal texts are one value)
            return pd.Series(inferred.array.take(codes, allow_fill=True))
    return pd.Series(values.tolist())
