"""analysis/hta/breakdown.py gives HTA's own results, frame for frame (values and dtypes).

The oracle is HTA's code itself, called on the same input: BreakdownAnalysis's kernel-type time,
idle-time breakdown and top-kernel aggregation, CudaKernelAnalysis's launch statistics, and
merge_kernel_intervals / _get_idle_time_for_kernels for the temporal breakdown. Inputs: HTA's frame
of every GPU trace of tests/data, and generated frames built to be hard: many equal start times
(the order of ties decides which zero-length overlap states HTA reports, and the gaps of the idle
breakdown), zero durations, a kernel type missing, fractional durations (HTA's compensated sums),
epoch-sized timestamps, runtime events missing, an index in no particular order.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.decode.columns import event_table
from hpcprof.analysis.decode.load import TraceError, read_trace
from hpcprof.analysis.hta import analyzers
from hpcprof.analysis.hta import breakdown as gb
from hpcprof.analysis.hta import frame as hta_frame

from .conftest import TRACES

KINDS = ["COMPUTATION", "COMMUNICATION", "MEMORY"]


def _gpu_traces():
    files = sorted(p for p in TRACES.glob("*/*") if p.name.endswith((".json", ".json.gz"))
                   and any(k in p.parent.name for k in ("kineto", "dlrm", "sampled")))
    files += sorted(p for p in TRACES.glob("hta_tests/*/*") if p.name.endswith((".json", ".json.gz")))
    return files


class _Symbols:
    def __init__(self, names: list[str]):
        self.names = names

    def get_sym_id_map(self) -> dict:
        return {n: i for i, n in enumerate(self.names)}

    def get_sym_table(self) -> list[str]:
        return self.names


class _Trace:
    """What HTA's analyzers read of a Trace: get_trace(rank) and the symbol table."""

    def __init__(self, df: pd.DataFrame, names: list[str]):
        self.df, self.symbol_table = df, _Symbols(names)

    def get_trace(self, rank: int) -> pd.DataFrame:
        return self.df


def _hta_frame(path):
    logging.getLogger("hta").setLevel(logging.ERROR)
    try:
        decoded = read_trace(path)
    except TraceError as exc:  # HTA's folders hold other files too (an execution trace)
        pytest.skip(f"not a Kineto trace: {exc}")
    table = event_table(decoded)
    if hta_frame.fast_path_problem(table) is not None:
        pytest.skip(f"{path.name}: {hta_frame.fast_path_problem(table)}")
    return hta_frame.hta_trace(str(path), 0, table, decoded.meta, hta_frame.ANALYSIS_COLUMNS)  # as the map builds it


def _assert_all_equal(t, gpu: pd.DataFrame) -> None:
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis as B
    from hta.analyzers.cuda_kernel_analysis import CudaKernelAnalysis
    from hta.utils.utils import merge_kernel_intervals

    ts, dur, types = gpu["ts"].to_numpy(), gpu["dur"].to_numpy(), gpu["kernel_type"].to_numpy()
    named = gpu.assign(name=gpu["kernel_name"])
    ours = gb.kernel_type_time(ts, dur, types, KINDS)
    if ours is not None:
        pd.testing.assert_frame_equal(ours, B._get_gpu_kernel_type_time(named, KINDS))

    idle_us, kernel_us = B._get_idle_time_for_kernels(gpu[["ts", "dur"]].copy())
    comp = merge_kernel_intervals(gpu[gpu["kernel_type"].eq("COMPUTATION")].copy())
    compute_us = comp["end"].sum() - comp["ts"].sum()
    on = types == "COMPUTATION"
    row = gb.temporal(ts, dur, gb.merge_intervals(ts[on], dur[on]), 0).iloc[0]
    assert (row["idle_time(us)"], row["kernel_time(us)"], row["compute_time(us)"]) == (idle_us, kernel_us, compute_us)
    assert row["non_compute_time(us)"] == kernel_us - compute_us - idle_us

    stats = gb.kernel_stats(gpu["kernel_name"], gpu["dur"])
    typed = analyzers._typed_stats(gpu)  # grouped on the symbol ids, on numpy where the durations are whole
    pd.testing.assert_frame_equal(typed.drop(columns="kernel_type"), stats)
    of_name = dict(zip(gpu["kernel_name"], gpu["kernel_type"]))
    pd.testing.assert_series_equal(typed["kernel_type"], stats["name"].map(of_name), check_names=False)
    for k in KINDS:
        mine = gb.top_kernels(stats[stats["name"].map(of_name) == k], 10, 0.8)
        theirs = B._aggr_gpu_kernel_time(named[named["kernel_type"] == k], num_kernels=10, duration_ratio=0.8)
        pd.testing.assert_frame_equal(mine, theirs)
    tops = [B._aggr_gpu_kernel_time(named[named["kernel_type"] == k], num_kernels=10, duration_ratio=0.8).assign(kernel_type=k, rank=0)
            for k in KINDS]
    theirs = pd.concat(tops, ignore_index=True).sort_values(["kernel_type", "name", "rank"], ignore_index=True)
    pd.testing.assert_frame_equal(gb.kernels_top(typed, KINDS, 10, 0.8, 0), theirs)

    df, ids = t.get_trace(0), t.symbol_table.get_sym_id_map()
    idle = gb.idle_breakdown(df, ids, 30, 0)
    if idle is not None:
        ref, _ = B.get_idle_time_breakdown(t, 30, 0, None, visualize=False, visualize_pctg=False, show_idle_interval_stats=False)
        pd.testing.assert_frame_equal(idle, ref.reset_index(drop=True))
    launches = gb.launch_stats(df, ids)
    if launches is not None:
        ref = CudaKernelAnalysis.cuda_kernel_launch_stats(t, [0], 50, 100, include_memory_events=True, visualize=False)[0]
        pd.testing.assert_frame_equal(launches, ref.reset_index(drop=True))


def _gpu_events_by_map(t) -> pd.DataFrame:
    """analyzers.gpu_events as first written: the rows selected and copied, the columns by Series.map."""
    from hta.utils.utils import get_kernel_type

    sym, df = t.symbol_table.get_sym_table(), t.get_trace(0)
    gpu = df[df["stream"].ne(-1)].copy()
    ids = gpu["name"].unique()
    gpu["kernel_name"] = gpu["name"].map({i: sym[i] for i in ids})
    gpu["kernel_type"] = gpu["name"].map({i: get_kernel_type(sym[i]) for i in ids})
    return gpu


@pytest.mark.parametrize("path", _gpu_traces(), ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_equal_to_hta_on_real_traces(path):
    t = _hta_frame(path)
    gpu = analyzers.gpu_events(t, 0)
    pd.testing.assert_frame_equal(gpu, _gpu_events_by_map(t), check_exact=True)
    if not len(gpu):
        pytest.skip(f"{path.name}: no GPU events")
    df, ids = t.get_trace(0), t.symbol_table.get_sym_id_map()
    # on real traces the numpy path must not decline (else the speed-up is gone, silently)
    assert gb.kernel_type_time(gpu["ts"].to_numpy(), gpu["dur"].to_numpy(), gpu["kernel_type"].to_numpy(), KINDS) is not None
    assert gb.idle_breakdown(df, ids, 30, 0) is not None
    assert gb.launch_stats(df, ids) is not None
    assert gb._tops(analyzers._typed_stats(gpu), KINDS, 10, 0.8, 0) is not None
    _assert_all_equal(t, gpu)


def _generated(seed: int):
    """A frame of HTA's shape: runtime calls on the CPU (stream -1) and their kernels on 1-3 streams."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    base = int(rng.choice([0, 1_700_000_000_000_000]))
    step = int(rng.choice([1, 3, 50]))  # small steps: many equal starts
    if seed % 4 == 1:  # sparse kernels on a grid: one type's kernel ends where another's starts
        k_ts = base + 10 * rng.integers(0, 3 * n, n)
        k_dur = 10 * rng.integers(0, 3, n)
    else:
        k_ts = base + rng.integers(0, n * step, n)
        k_dur = rng.integers(0, 40, n)
    frac = seed % 3 == 0
    k_dur = k_dur.astype(np.float64 if frac or seed % 2 else np.int64)
    if frac:
        k_dur = k_dur + rng.choice([0.0, 0.5, 0.25, 0.1], n)
    names = [f"kern_{i}" for i in range(int(rng.integers(1, 30)))]
    kinds = list(rng.choice(KINDS + ["OTHER"], size=int(rng.integers(1, 5)), replace=False))
    name_of = rng.integers(0, len(names), n)
    type_of_name = {i: kinds[int(rng.integers(0, len(kinds)))] for i in range(len(names))}
    corr = rng.permutation(n) + 1000
    r_ts = k_ts - rng.integers(0, 3 * step + 1, n) - 5
    r_dur = rng.integers(1, 10, n).astype(k_dur.dtype)
    has_rt = rng.random(n) > 0.1
    symbols = ["cuda_runtime", "kernel", "gpu_memcpy", "cudaLaunchKernel", "cudaMemcpyAsync", *names]
    sid = {s: i for i, s in enumerate(symbols)}
    m = int(has_rt.sum())
    df = pd.DataFrame({
        "ts": np.concatenate([k_ts, r_ts[has_rt]]),
        "dur": np.concatenate([k_dur, r_dur[has_rt]]),
        "stream": np.concatenate([rng.choice([7, 13, 22][: int(rng.integers(1, 4))], n), np.full(m, -1)]).astype(np.int64),
        "cat": np.concatenate([np.where(rng.random(n) < 0.9, sid["kernel"], sid["gpu_memcpy"]), np.full(m, sid["cuda_runtime"])]),
        "name": np.concatenate([name_of + 5, np.where(rng.random(m) < 0.8, sid["cudaLaunchKernel"], sid["cudaMemcpyAsync"])]),
        "correlation": np.concatenate([corr, corr[has_rt]]),
    })
    labels = rng.permutation(len(df)) * 2 + 3  # unique, in no order
    df.index = labels
    df["index"] = labels
    rt_label = dict(zip(df["correlation"].to_numpy()[n:], labels[n:]))
    df["index_correlation"] = [rt_label.get(c, -1) if i < n else 0 for i, c in enumerate(df["correlation"].to_numpy())]
    gpu = df.iloc[:n].copy()
    gpu["kernel_name"] = [names[i] for i in name_of]
    gpu["kernel_type"] = [type_of_name[i] for i in name_of]
    return _Trace(df, symbols), gpu


@pytest.mark.parametrize("seed", range(60))
def test_equal_to_hta_on_generated_frames(seed):
    t, gpu = _generated(seed)
    _assert_all_equal(t, gpu)


def test_generated_frames_take_the_numpy_path():
    """The generated frames exercise the numpy code, not only its fall-backs to HTA."""
    took = 0
    for seed in range(60):
        t, gpu = _generated(seed)
        took += gb.kernel_type_time(gpu["ts"].to_numpy(), gpu["dur"].to_numpy(), gpu["kernel_type"].to_numpy(), KINDS) is not None
        took += gb.idle_breakdown(t.df, t.symbol_table.get_sym_id_map(), 30, 0) is not None
        took += gb.launch_stats(t.df, t.symbol_table.get_sym_id_map()) is not None
        tops = gb._tops(analyzers._typed_stats(gpu), KINDS, 10, 0.8, 0)
        took += tops is not None or seed % 3 == 0  # fractional durations: pandas' compensated sums, left to top_kernels
    assert took == 240


def test_merged_intervals_join_touching_ones_and_keep_gaps():
    # [0,5] and [5,5] touch: one; [10,15] after a gap; [20,30] and [30,31] touch: one
    s, e = gb.merge_intervals(np.array([10, 0, 5, 30, 20]), np.array([5, 5, 0, 1, 10]))
    assert s.tolist() == [0, 10, 20] and e.tolist() == [5, 15, 31]
    s, e = gb.merge_intervals(np.array([0, 6]), np.array([5, 1]))
    assert s.tolist() == [0, 6] and e.tolist() == [5, 7]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.float64])
def test_marks_are_isin_and_unique(dtype):
    """launch_stats' membership and distinct counts (a marked table over the ids' range) equal
    np.isin and np.unique, at the ends of narrow int dtypes, over a range too wide to mark, and on floats."""
    rng = np.random.default_rng(int(np.dtype(dtype).itemsize))
    info = np.iinfo(dtype) if np.dtype(dtype).kind == "i" else None
    cases = [rng.integers(-5, 50, 300), np.array([-1, 0, 3, 3, 7])]
    if info is not None:
        cases.append(np.array([info.min, info.min + 1, info.max, info.max, -1, 0]))
    if np.dtype(dtype).itemsize == 8:
        cases.append(np.array([0, 1 << 40, 5, 5]))  # too wide a range: np.isin
    for universe in cases:
        universe = universe.astype(dtype)
        marks = gb._Marks(universe)
        for keys in (universe[::3], universe[:0], universe):
            assert (marks.isin(universe, keys) == np.isin(universe, keys)).all()
            assert marks.distinct(keys) == len(np.unique(keys))
