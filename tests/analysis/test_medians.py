"""reduce.medians.nanmedian0 gives np.nanmedian(a, axis=0)'s numbers bit for bit (the sign of a zero
included): the straggler cause, the step graphs and the clock check call it in place of numpy's."""

import warnings

import numpy as np

from hpcprof.analysis.reduce.medians import nanmedian0


def _same(x, y) -> bool:
    return np.array_equal(x, y, equal_nan=True) and np.array_equal(np.signbit(x), np.signbit(y))


def test_same_values_as_numpy_nanmedian():
    rng = np.random.default_rng(7)
    for t in range(3000):
        rows, cols = int(rng.integers(1, 40)), int(rng.integers(1, 8))
        a = rng.normal(size=(rows, cols)) * 10.0 ** int(rng.integers(-3, 6))
        if t % 3 == 1:
            a = np.round(a)  # ties
        if t % 3 == 2:
            a = rng.integers(-2, 3, size=(rows, cols)) * 0.0 * rng.choice([1.0, -1.0], size=(rows, cols))  # +0 and -0
        a[rng.random((rows, cols)) < 0.3] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = np.nanmedian(a, axis=0)
            got = nanmedian0(a)
        assert _same(want, got), (a, want, got)


def test_list_of_rows_and_the_cases_left_to_numpy():
    rows = [np.array([1.0, np.nan, 3.0]), np.array([2.0, np.nan, 5.0]), np.array([4.0, np.nan, np.inf])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = nanmedian0(rows)  # an all-NaN column (warns, as numpy does) and an infinite value
    assert _same(got, np.array([2.0, np.nan, 5.0]))
    assert any("All-NaN" in str(w.message) for w in caught)
    big = np.arange(1300.0).reshape(650, 2)
    assert _same(nanmedian0(big), np.nanmedian(big, axis=0))
