"""Column medians ignoring NaN: `np.nanmedian(a, axis=0)`'s values, without its cost on small arrays.

Why: numpy computes a nanmedian along an axis of fewer than 600 values through masked arrays
(a fixed cost per call, large next to the work on such arrays); the cause of a straggler (cause.window_excesses) takes one per step graph
over all its collectives, the step graphs one per step. Here numpy's masked path is done on the
plain array: the same argsort of the values with NaN filled by +inf, the two middle values of each
column's non-NaN ones (the middle one twice when their number is odd), their sum (a reduction, as
numpy's) halved: the same numbers bit for bit, the sign of a zero included
(tests/analysis/test_medians.py compares them). What that path treats apart goes to np.nanmedian
itself: 600 rows or more, a column without a value (NaN, with numpy's warning), an infinite value
(ties with the fill)."""

from __future__ import annotations

import numpy as np


def nanmedian0(a) -> np.ndarray:
    """np.nanmedian(a, axis=0) of a 2-D array (or a list of equal-length 1-D arrays)."""
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or not 0 < a.shape[0] < 600 or a.shape[1] == 0:
        return np.nanmedian(a, axis=0)
    nan = np.isnan(a)
    n = a.shape[0] - nan.sum(axis=0)
    if not n.all() or np.isinf(a).any():
        return np.nanmedian(a, axis=0)
    s = np.take_along_axis(a, np.where(nan, np.inf, a).argsort(axis=0), axis=0)
    h = n // 2
    lo = np.where(n % 2 == 1, h, h - 1)
    cols = np.arange(a.shape[1])
    return np.stack([s[lo, cols], s[h, cols]]).sum(axis=0) / 2.0  # the sum as ma.sum takes it: -0 + -0 is +0 there
