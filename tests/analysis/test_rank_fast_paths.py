"""The per-rank map's shortcuts equal what they replace, on edge cases the real traces may lack:
timeline_piece._factor (pandas' no-sentinel factorization made from the sentinel one),
operators._thread_codes (thread ids turned into text per distinct value, not per row) and the
operator table's category tests (once per distinct category: comm_kernels.Names)."""

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.ranks.operators import _thread_codes
from hpcprof.analysis.ranks.timeline_piece import _factor

COLUMNS = [
    pd.Series([None, "a", np.nan, "b", "a", None], dtype=object),
    pd.Series(["x", None, 3, 3, "x"], dtype=object),
    pd.Series([1, 2, np.nan, 2], dtype=object),
    pd.Series([None] * 5),
    pd.Series(["a", None, "b"], dtype="str"),
    pd.Series([np.nan, "a", np.nan], dtype="str"),
    pd.Series([], dtype=object),
    pd.Series([5, 6, 5]),
    pd.Series([1.0, np.nan, 2.0]),
]


@pytest.mark.parametrize("values", COLUMNS)
def test_factor_equals_pandas_no_sentinel_factorization(values):
    codes, uniq = _factor(values)
    want_codes, want_uniq = pd.factorize(values, use_na_sentinel=False)
    assert codes.dtype == want_codes.dtype and np.array_equal(codes, want_codes)
    want_uniq = np.asarray(want_uniq, dtype=object)
    assert len(uniq) == len(want_uniq)
    for a, b in zip(uniq, want_uniq):
        assert type(a) is type(b) and (a == b or (a != a and b != b))


@pytest.mark.parametrize("tid", [
    pd.Series([7, 8, 7, 9]),
    pd.Series([7, "7", 8, "a"], dtype=object),
    pd.Series([1, 1.0, True, 2], dtype=object),  # one value to a factorization, texts "1", "1.0", "True"
    pd.Series([0.0, -0.0, np.nan, None, 3], dtype=object),
    pd.Series([[1], [1], 2], dtype=object),  # unhashable
    pd.Series(["a", None, "a"], dtype=object),
])
def test_thread_codes_equal_codes_of_the_texts(tid):
    assert np.array_equal(_thread_codes(tid), pd.factorize(tid.astype(str), use_na_sentinel=False)[0])


@pytest.mark.parametrize("v", [7, "7", 1, True])
def test_equals_is_pythons_equality(v):
    """The factorized path (v neither None nor a float): missing values of any kind equal nothing."""
    from hpcprof.analysis.ranks.timeline import _equals

    values = np.array([7, "7", None, np.nan, pd.NA, pd.NaT, 1, True, 1.0, "a", 7], dtype=object)
    assert _equals(values, v).tolist() == [not pd.isna(t) and bool(t == v) for t in values]


@pytest.mark.parametrize("pid, tid", [
    ([1, 1, 2, 1, 2], [10, 11, 10, 10, 10]),
    ([1, "1", 2, "2"], [5, 5, "x", "x"]),  # the same texts from an int and a text: one thread
    ([1, 1.0, True, None], [5, 5, 5, 5]),  # 1, 1.0 and True are one value to a factorization
    (["a|b", "a"], ["c", "b|c"]),  # two pairs, one text
    ([], []),
])
def test_thread_ids_equal_codes_of_the_texts(pid, tid):
    from hpcprof.analysis.ranks.comm_kernels import _thread_ids

    p, t = np.array(pid, dtype=object), np.array(tid, dtype=object)
    want = pd.factorize(pd.Series([f"{a}|{b}" for a, b in zip(p, t)], dtype=object))[0]
    assert np.array_equal(_thread_ids(p, t), want)


CATEGORIES = COLUMNS + [pd.Series(["cpu_op", "kernel", None, "Runtime", 7, "cpu_op", np.nan], dtype=object),
                        pd.Series(["cpu_op", None, "cuda_runtime", "Memset"], dtype="str")]


@pytest.mark.parametrize("cat", CATEGORIES)
def test_category_tests_per_distinct_value_equal_the_column_tests(cat):
    """What operator_table tested on the category column before (cat == "cpu_op", cat.isin(...))."""
    from hpcprof.analysis.ranks.comm_kernels import Names, one_of
    from hpcprof.analysis.ranks.operators import GPU_CATS, RUNTIME_CATS

    names = Names(cat)
    assert np.array_equal(names.where(lambda u: u == "cpu_op"), (cat == "cpu_op").fillna(False).to_numpy(dtype=bool))
    for values in (GPU_CATS, RUNTIME_CATS):
        assert np.array_equal(names.where(one_of(values)), cat.isin(values).to_numpy(dtype=bool))

