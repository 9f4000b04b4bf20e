"""The vectorised steps of analysis/hta/frame.py equal the HTA / pandas calls they replace, on
generated edge cases (test_fast_loader.py compares whole frames on the real traces):
`_correlation_to_index` against HTA's transform_correlation_to_index (correlations shared by several
CPU events and kernels, sync events, -1 and 0, labels that are not positions), `_downcast` against
pd.to_numeric(downcast="integer"), and the symbols of `_coded_symbols` against HTA's
pd.unique(cat, name) encoding.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.hta import frame as hta_frame


def _frame(rng: np.random.Generator, n: int, labels_are_index: bool = True) -> tuple[pd.DataFrame, object]:
    from hta.common.trace_symbol_table import TraceSymbolTable

    table = TraceSymbolTable()
    table.add_symbols(["cpu_op", "kernel", "Event Sync", "Context Sync", "aten::mm", "gemm"])
    index = np.sort(rng.choice(4 * n, size=n, replace=False))
    df = pd.DataFrame({
        "index": index,
        "name": rng.integers(0, 6, n),
        "stream": rng.choice([-1, -1, 0, 7, 20], n),
        "correlation": rng.choice([-1, 0, 1, 2, 3, 5, 8, 300, 70000], n),
    }, index=index if labels_are_index else np.arange(n))
    return df, table


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("n", [0, 1, 7, 60, 500])
def test_correlation_to_index_equals_hta(seed: int, n: int):
    from hta.common.trace import transform_correlation_to_index

    rng = np.random.default_rng(seed)
    df, table = _frame(rng, n, labels_are_index=seed % 4 != 3)
    if seed % 3 == 1:
        df["correlation"] = df["correlation"].astype(np.int32)
    if seed % 3 == 2:  # as in hta_frame: index and correlation downcast
        df["index"] = hta_frame._downcast(df["index"])
        df["correlation"] = hta_frame._downcast(df["correlation"])
    try:
        want = transform_correlation_to_index(df.copy(), table)
    except (TypeError, KeyError) as exc:  # labels not the index column, index wider than correlation
        with pytest.raises(type(exc)):
            hta_frame._correlation_to_index(df.copy(), table)
        return
    pd.testing.assert_frame_equal(hta_frame._correlation_to_index(df.copy(), table), want)


DOWNCAST_VALUES = [[], [0], [-128, 127], [-129], [128], [-32768, 32767], [32768], [-2**31, 2**31 - 1], [2**31], [-2**63, 2**63 - 1]]


@pytest.mark.parametrize("dtype, values", [
    (dtype, values) for dtype in (np.int64, np.int32, np.int16) for values in DOWNCAST_VALUES
    if all(np.iinfo(dtype).min <= v <= np.iinfo(dtype).max for v in values)  # only what a column of dtype can hold
])
def test_downcast_equals_to_numeric(values: list, dtype):
    col = pd.Series(np.array(values, dtype=dtype), index=np.arange(len(values)) * 3, name="c")
    pd.testing.assert_series_equal(hta_frame._downcast(col), pd.to_numeric(col, downcast="integer"))


@pytest.mark.parametrize("seed", range(8))
def test_coded_symbols_equal_hta_encoding(seed: int):
    from hta.common.trace_symbol_table import TraceSymbolTable

    rng = np.random.default_rng(seed)
    n = 300
    words = np.array(["cpu_op", "kernel", "Trace", "ac2g", "gemm", "aten::mm", "kernel ", "cpu_op"], dtype=object)
    df = pd.DataFrame({"cat": pd.Series(words[rng.integers(0, 6, n)], dtype="str"),
                       "name": pd.Series(words[rng.integers(0, 8, n)], dtype="str")})
    df.loc[rng.integers(0, n, 20), "cat"] = np.nan
    keep = (df["cat"].notna() & df["cat"].ne("Trace").fillna(True)).to_numpy() & (rng.random(n) < 0.7)
    want = TraceSymbolTable()
    kept = df.loc[keep]
    want.add_symbols(pd.unique(pd.concat([kept["cat"], kept["name"]], ignore_index=True)))
    got = TraceSymbolTable()
    coded = df.copy()
    assert hta_frame._coded_symbols(coded, keep, got)
    assert got.get_sym_table() == want.get_sym_table()
    ids = want.get_sym_id_map()
    for col in ("cat", "name"):
        assert coded.loc[keep, col].tolist() == [ids[v] for v in kept[col]]


@pytest.mark.parametrize("seed", range(16))
def test_traced_events_equal_hta_filter(seed: int):
    """hta_trace's filter (`_traced_events`) against Trace.align_and_filter_trace, after the same
    set_index: ProfilerSteps, kernels whose CPU event starts after the last step, correlations
    shared by several CPU events (the merge repeats the kernel), sync events."""
    from hta.common.trace import Trace
    from hta.common.trace_symbol_table import TraceSymbolTable

    rng = np.random.default_rng(seed)
    n = 400
    table = TraceSymbolTable()
    table.add_symbols(["cpu_op", "kernel", "Event Sync", "Context Sync", "aten::mm", "gemm",
                       *(["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"][: seed % 4])])
    df = pd.DataFrame({
        "index": np.arange(n, dtype=np.int16),
        "ts": np.sort(rng.integers(10, 10_000, n)),
        "dur": rng.integers(0, 50, n),
        "name": rng.integers(0, len(table.get_sym_table()), n),
        "stream": rng.choice([-1, -1, 0, 7], n),
        "correlation": rng.choice([-1, 0, 3, 5, 8, 9, 11, 300], n).astype(np.int32),
    })
    df["end"] = df["ts"] + df["dur"]
    want = df.copy()
    want["ts"] -= want["ts"].min()
    got = hta_frame._traced_events(want.copy(), table)

    class _T:  # the two Trace methods align_and_filter_trace calls, on this one frame
        traces = {0: want.copy()}
        symbol_table = table
        _align_all_ranks = Trace._align_all_ranks
        _filter_irrelevant_gpu_kernels = Trace._filter_irrelevant_gpu_kernels

    t = _T()
    t._filter_irrelevant_gpu_kernels(include_last_profiler_step=False)
    ref = t.traces[0].set_index("index", drop=False)
    if got is None:  # HTA's own method runs in hta_trace (fewer than two ProfilerSteps here)
        assert seed % 4 < 2
        return
    got = got.set_index("index", drop=False)
    ref.index.names = got.index.names = [None]
    pd.testing.assert_frame_equal(got, ref)
