"""The fast loader (one msgspec decode, HTA's frame built vectorised) gives HTA's own frame.

HTA's `Trace.load_traces` on one file is the reference: same rows, index, columns, dtypes and
values, with symbol ids decoded to names (HTA numbers symbols in hash order, which changes from one
process to the next). The per-rank analyses' numbers are checked against `TraceAnalysis` in
test_hta_equality.py; this test pins the frame they run on, for every real trace set of tests/data and for a
CPU trace of this machine's own runs (float timestamps: HTA's nanosecond rounding path).
"""

from __future__ import annotations

import logging
import os

import pandas as pd
import pytest

from hpcprof.analysis.decode.columns import event_table
from hpcprof.analysis.hta import frame as hta_frame
from hpcprof.analysis.decode.load import read_trace
from hpcprof.analysis.decode.stream import read_event_table

from .conftest import TRACES


def _shared_trace_files():
    """Every trace of the top-level trace sets of tests/data (HTA's own test traces have their own test)."""
    return sorted(p for p in TRACES.glob("*/*") if p.name.endswith((".json", ".json.gz")))


def _decoded_frame(t) -> pd.DataFrame:
    df = t.get_trace(next(iter(t.traces))).copy()
    sym = t.symbol_table.get_sym_table()
    for col in ("cat", "name"):
        df[col] = df[col].map(lambda i: sym[i])
    return df.sort_index()


def _hta_reference(path: str):
    from hta.common.trace import Trace

    logging.getLogger("hta").setLevel(logging.ERROR)
    path = os.path.abspath(path)
    t = Trace(trace_files={0: path}, trace_dir=os.path.dirname(path))
    t.load_traces(include_last_profiler_step=False, use_multiprocessing=False)
    return t


def assert_same_frame(path) -> None:
    decoded = read_trace(path)
    table = event_table(decoded)
    assert hta_frame.fast_path_problem(table) is None
    ours = _decoded_frame(hta_frame.hta_trace(str(path), 0, table, decoded.meta))
    ref = _decoded_frame(_hta_reference(str(path)))
    assert sorted(ours.columns) == sorted(ref.columns)
    assert ours.index.equals(ref.index), "different rows"
    for col in ref.columns:
        assert ours[col].dtype == ref[col].dtype, f"{col}: {ours[col].dtype} != HTA's {ref[col].dtype}"
        pd.testing.assert_series_equal(ours[col], ref[col], check_names=False, obj=f"column {col}")
    # the frame the map builds: only the columns the analyses read, the same rows and values
    part_trace = hta_frame.hta_trace(str(path), 0, table, decoded.meta, hta_frame.ANALYSIS_COLUMNS)
    part = _decoded_frame(part_trace)
    # as the map calls it: the block decode's table, consumed
    meta, block_table, _, _ = read_event_table(path)
    mapped = hta_frame.hta_trace(str(path), 0, [block_table], meta, hta_frame.ANALYSIS_COLUMNS)
    assert mapped.symbol_table.get_sym_table() == part_trace.symbol_table.get_sym_table()
    pd.testing.assert_frame_equal(mapped.get_trace(0), part_trace.get_trace(0), check_exact=True)
    assert sorted(part.columns) == sorted(hta_frame.ANALYSIS_COLUMNS)
    assert part.index.equals(ref.index), "different rows (analysis columns only)"
    for col in part.columns:
        assert part[col].dtype == ref[col].dtype, f"{col}: {part[col].dtype} != HTA's {ref[col].dtype}"
        pd.testing.assert_series_equal(part[col], ref[col], check_names=False, obj=f"column {col} (analysis columns only)")


@pytest.mark.parametrize("path", _shared_trace_files(), ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_fast_frame_equals_hta_on_shared_traces(path):
    assert_same_frame(path)


def test_fast_frame_equals_hta_on_a_cpu_trace(cpu_run):
    files = sorted((cpu_run / "traces").glob("*.json*"))
    assert files
    assert_same_frame(files[0])


def test_counter_ranges_fall_back_to_hta_loader(tmp_path, helpers):
    """A trace the fast path does not mirror (hardware counter ranges) is loaded by HTA itself."""
    src = sorted((helpers.require(TRACES / "param_dlrm_8x_v100")).glob("*.json.gz"))[0]
    doc = helpers.load_trace(src)
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_profiler_range", "name": "range", "pid": 0, "tid": 0, "ts": 1, "dur": 1, "args": {"sm__cycles": 5}})
    p = helpers.write_trace(tmp_path / "rank0.json.gz", doc)
    decoded = read_trace(p)
    table = event_table(decoded)
    assert "cuda_profiler_range" in hta_frame.fast_path_problem(table)
    from hpcprof.analysis.hta.analyzers import load_hta_trace

    _, loader = load_hta_trace(str(p), 0, table, decoded.meta)
    assert loader == "hta"


def test_non_object_events_are_skipped_and_counted(tmp_path, helpers):
    src = sorted((helpers.require(TRACES / "param_dlrm_8x_v100")).glob("*.json.gz"))[0]
    doc = helpers.load_trace(src)
    n = len(doc["traceEvents"])
    doc["traceEvents"][5:5] = [7, "x", None]
    doc["traceEvents"][0]["args"] = ["not", "a", "dict"]
    decoded = read_trace(helpers.write_trace(tmp_path / "odd.json.gz", doc))
    assert decoded.skipped == 3
    assert len(decoded) == n


def _gpu_trace_files():
    return [p for p in _shared_trace_files() if "kineto" in p.parent.name or "dlrm" in p.parent.name or "sampled" in p.parent.name]


@pytest.mark.parametrize("path", _gpu_trace_files(), ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_classified_analyses_equal_hta_analyzers(path):
    """Classifying each GPU event once gives exactly HTA's own analyzer results on the same Trace."""
    from hpcprof.analysis.hta.analyzers import classified_analyses, hta_analyses

    decoded = read_trace(path)
    t = hta_frame.hta_trace(str(path), 0, event_table(decoded), decoded.meta)
    part = hta_frame.hta_trace(str(path), 0, event_table(decoded), decoded.meta, hta_frame.ANALYSIS_COLUMNS)
    ref, ours = hta_analyses(t, 0), classified_analyses(part, 0)
    pd.testing.assert_frame_equal(ours["temporal"], ref["temporal"], check_dtype=False)
    assert ours["overlap_pct"] == ref["overlap_pct"]  # None when the rank has no communication kernels
    pd.testing.assert_frame_equal(ours["kernel_type"], ref["kernel_type"], check_dtype=False)
    cols = list(ref["kernels_top"].columns)
    pd.testing.assert_frame_equal(ours["kernels_top"][cols], ref["kernels_top"], check_dtype=False)
    pd.testing.assert_frame_equal(ours["idle"], ref["idle"])


def test_a_changed_hta_default_parser_configuration_sends_the_trace_to_htas_own_loader():
    """A user who asks HTA to parse every argument (ParserConfig.set_default_cfg) gets HTA's loader,
    not a frame built for HTA's default configuration."""
    from hta.configs.parser_config import ParserConfig

    before = ParserConfig.get_default_cfg()
    changed = ParserConfig.get_default_cfg()
    changed.parse_all_args = True
    ParserConfig.set_default_cfg(changed)
    try:
        assert hta_frame.fast_path_problem() == "HTA's default parser configuration was changed"
    finally:
        ParserConfig.set_default_cfg(before)
    assert hta_frame.fast_path_problem() is None


def test_a_kernel_too_long_to_break_down_exactly_on_numpy_gets_htas_own_figures(tmp_path, helpers):
    """A kernel of 1e17 us (a hostile or corrupted trace: sums past 2**53 are not exact in float64)
    makes the numpy breakdown decline; the rank then gets HTA's own analyzers' figures."""
    from hpcprof.analysis.hta.analyzers import hta_analyses, load_hta_trace, run_hta_rank

    src = sorted(helpers.require(TRACES / "param_dlrm_8x_v100").glob("*.json.gz"))[0]
    doc = helpers.load_trace(src)
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["dur"] = 1e17
    path = helpers.write_trace(tmp_path / "long.json.gz", doc)
    decoded = read_trace(path)
    ours = run_hta_rank(str(path), 0, event_table(decoded), decoded.meta)
    ref = hta_analyses(load_hta_trace(str(path), 0)[0], 0)
    assert ours["loader"] == "fast" and ours["kernel_type"]["sum"].max() > 2**53
    pd.testing.assert_frame_equal(ours["kernel_type"], ref["kernel_type"], check_dtype=False)
    pd.testing.assert_frame_equal(ours["temporal"], ref["temporal"], check_dtype=False)
