"""The operator table's walk (ranks/operators._walk) gives the same doubles in C
(analysis/_native.c) as in Python: on every trace of tests/data (the whole operator table, exactly)
and on generated threads of nested operators and runtime calls (equal starts and ends, zero and
NaN GPU times, several threads)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis import cext
from hpcprof.analysis.decode.stream import read_event_table
from hpcprof.analysis.ranks import operators

from .test_native_decode import _trace_files

needs_native = pytest.mark.skipif(cext._native is None, reason="the C extension hpcprof.analysis._native is not built (no C compiler at install)")


@needs_native
def test_operator_tables_of_every_shared_trace_are_the_same_in_c_and_python(monkeypatch):
    seen = 0
    for f in _trace_files():
        try:
            _, table, _, _ = read_event_table(f)
        except Exception:  # not a Kineto trace (an execution trace): nothing to walk
            continue
        monkeypatch.setenv(cext.ENV, "1")
        a = operators.operator_table(table)
        monkeypatch.setenv(cext.ENV, "0")
        b = operators.operator_table(table)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        seen += len(a) > 0
    assert seen >= 20


def _generated(rng: np.random.Generator, n_ops: int, n_rt: int):
    """A walk as operator_table builds it: per thread, operators (nested or not) and runtime calls,
    sorted by (thread, start, longest first, operators first)."""
    tid = rng.integers(0, 3, n_ops + n_rt)
    t0 = rng.integers(0, 60, n_ops + n_rt).astype(float)  # many equal starts and ends
    dur = rng.integers(0, 25, n_ops + n_rt).astype(float)
    kind = np.r_[np.zeros(n_ops, int), np.ones(n_rt, int)]
    g = np.where(kind == 1, rng.choice([0.0, 1.5, 0.1, np.nan, 7.25], n_ops + n_rt), 0.0)
    order = np.lexsort((np.arange(kind.size), kind, np.where(kind == 0, -dur, 0.0), t0, tid))
    op = np.r_[np.arange(n_ops), np.full(n_rt, -1)]
    return tid[order], t0[order], op[order], g[order], t0[:n_ops] + dur[:n_ops], dur[:n_ops]


@needs_native
@pytest.mark.parametrize("seed", range(20))
def test_generated_walks_give_the_same_doubles(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    args = _generated(rng, int(rng.integers(1, 300)), int(rng.integers(0, 300)))
    monkeypatch.setenv(cext.ENV, "1")
    a = operators._walk(*args)
    monkeypatch.setenv(cext.ENV, "0")
    b = operators._walk(*args)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)  # NaN where both are NaN, else the same double
        assert x.dtype == y.dtype == np.float64
