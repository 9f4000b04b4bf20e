"""The event table's column dtypes (decode/columns.py, whole and in blocks) are those pandas infers
from the same values, as in `pandas.DataFrame(traceEvents)` (HTA's frame): checked on hostile
mixtures a trace may hold (bools among ints, ints beyond int64, missing values, texts among numbers,
NaN), against pandas itself."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.decode.columns import event_table
from hpcprof.analysis.decode.events import DecodedTrace, _Event, number_kind

MIXTURES = {
    "empty": (),
    "ints": (1, 2, 3),
    "negative and zero": (-5, 0, 7),
    "bool alone": (True, False),
    "bool among ints": (1, True, 3),
    "False among ints": (0, False),
    "ints and floats": (1, 2.5, 3),
    "floats": (1.5, 2.0),
    "float ints": (1.0, 2.0),
    "int and NaN": (1, math.nan, 3),
    "only NaN": (math.nan, math.nan),
    "int and None": (1, None, 3),
    "float and None": (1.5, None),
    "only None": (None, None),
    "int64 max": (2 ** 63 - 1, 1),
    "int64 min": (-(2 ** 63), 1),
    "beyond int64": (2 ** 63, 1),
    "beyond uint64": (2 ** 70, 1),
    "huge negative": (-(2 ** 64), 1),
    "int beyond float precision and float": (2 ** 53 + 1, 0.5),
    "text and int": ("5", 5),
    "texts": ("a", "b"),
    "text and NaN": ("a", math.nan),
    "text and None": ("a", None),
    "bool and float": (True, 1.5),
    "list and int": ([1], 2),
    "dict": ({"a": 1}, None),
    "inf": (math.inf, 1),
}


class IntSub(int):
    pass


def _tid_column(values) -> pd.Series | None:
    """The event table's `tid` column of a trace whose events' tid are `values`, the records made as
    the decoder makes them (NaN: the event lacks the key); None where the table has no such column."""
    events = [_Event(ph="X", name="op", ts=i, dur=1, pid=1, tid=v) for i, v in enumerate(values)]
    table = event_table(DecodedTrace(meta={}, events=events))
    return table["tid"] if "tid" in table else None


@pytest.mark.parametrize("values", [v for v in MIXTURES.values() if v], ids=[k for k, v in MIXTURES.items() if v])
def test_column_dtype_and_values_are_pandas_inference(values):
    got = _tid_column(values)
    want = pd.Series(list(values), name="tid")
    if all(isinstance(v, float) and math.isnan(v) for v in values):
        assert got is None  # no event has the key: pandas.DataFrame(traceEvents) has no such column
        return
    assert got.dtype == want.dtype, f"{got.dtype} != pandas' {want.dtype}"
    pd.testing.assert_series_equal(got, want, check_exact=True)


def test_huge_int_among_floats_is_a_float_column():
    """The one departure from pandas, kept from the first fast decode (the parse cache's tables
    depend on it): ints and floats make a float64 column even where an int is beyond uint64 (pandas
    would keep Python objects); the value is the nearest float."""
    got = _tid_column((2 ** 70, 1.5))
    assert got.dtype == np.float64 and got.tolist() == [float(2 ** 70), 1.5]


def test_number_kind_uses_exact_types():
    assert number_kind(()) == "int" and number_kind((1, 2)) == "int"
    assert number_kind((1, 2.0)) == "num" and number_kind((2.0,)) == "num"
    for odd in ((1, True), (IntSub(3), 1), (1, None), (1, "1"), (1.0, np.float64(2.0)), ([1],)):
        assert number_kind(odd) is None, odd


def _pandas_but_huge_ints(values: list) -> pd.Series:
    """pandas' column of `values`, with the departure above: ints and floats only (exact types, as
    pandas tells them apart: no bools), at least one float, a float64 column."""
    types = {type(v) for v in values}
    if float in types and types <= {int, float}:
        return pd.Series(values, dtype=np.float64)
    return pd.Series(values)


JSON_MIXTURES = {k: v for k, v in MIXTURES.items() if k not in ("empty", "inf", "only NaN", "int and NaN", "text and NaN")}
JSON_MIXTURES["beyond uint64 and float"] = (2 ** 70, 1.5)  # the float column of the departure above


@pytest.mark.parametrize("values", list(JSON_MIXTURES.values()), ids=list(JSON_MIXTURES))
def test_block_columns_equal_the_whole_decode(tmp_path, values):
    """The same mixtures as values of a top-level key (tid), of one of HTA's args (correlation) and
    of one of ours (Seq), and of the args whose JSON text the block decode keeps (events.TEXT_ARGS:
    Input Dims, grid), decoded one event per block and in one block: the table is the whole-file
    decode's, column by column (values and dtypes), and its columns are those pandas builds from the
    trace's values (a missing top-level key NaN, a missing arg HTA's default or None for ours)."""
    import json

    from hpcprof.analysis.decode.load import read_bytes, read_trace
    from hpcprof.analysis.decode.stream import split_table

    events = [{"ph": "X", "name": "op", "ts": i, "dur": 1, "pid": 1, "tid": v, "args": {"correlation": v, "Seq": v, "Input Dims": v, "grid": v}}
              for i, v in enumerate(values)]
    events.append({"ph": "X", "name": "op", "ts": 99, "dur": 1, "pid": 1})  # keys missing: NaN / defaults
    p = tmp_path / "mix.json"
    p.write_text(json.dumps({"traceEvents": events}))
    want = event_table(read_trace(p))
    by_pandas = {
        "tid": _pandas_but_huge_ints([e.get("tid", math.nan) for e in events]),
        "correlation": _pandas_but_huge_ints([e.get("args", {}).get("correlation", -1) for e in events]),
        "input_dims": _pandas_but_huge_ints([e.get("args", {}).get("Input Dims", "-1") for e in events]),
        "seq_upper": pd.Series([e.get("args", {}).get("Seq") for e in events], dtype=object),
        "grid": pd.Series([e.get("args", {}).get("grid") for e in events], dtype=object),
    }
    for column, col in by_pandas.items():
        pd.testing.assert_series_equal(want[column], col, check_exact=True, check_names=False)
    for block in (1, 1 << 20):
        got = split_table(read_bytes(p), block)
        assert got is not None
        pd.testing.assert_frame_equal(got[1], want, check_exact=True)


def test_texts_of_any_two_mixtures_is_pandas_inference():
    """columns._texts (the join of the block decode's object columns) gives the column
    pd.Series(values.tolist()) gives, for every mixture and every two mixtures joined (its mixed
    values are kept as an object array, not inferred again)."""
    from hpcprof.analysis.decode.columns import _texts

    for a, b in itertools.product(MIXTURES.values(), repeat=2):
        values = np.empty(len(a) + len(b), dtype=object)
        for i, v in enumerate((*a, *b)):
            values[i] = v
        got, want = _texts(values), pd.Series(values.tolist())
        assert got.dtype == want.dtype, (a, b)
        pd.testing.assert_series_equal(got, want, check_exact=True)
        assert all(x is y for x, y in zip(got.tolist(), want.tolist()) if got.dtype == object), (a, b)
