"""The reduce reads each per-rank table of every rank into one frame (ranks.result.read_rank_tables).

Known answer: what pandas gives by concatenating the ranks' frames one by one (the way the reduce
read them before), on the real per-rank tables of the DLRM set and on tables built to differ
between ranks: a column empty on one rank, ints on one rank and floats on another, a table that
has a rank column of its own, an empty table, a rank without the table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.ranks.result import read_rank_tables, read_table


def one_by_one(parts) -> pd.DataFrame:
    frames = [read_table(p).assign(rank=r) for r, p in parts if p]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write(tmp_path, name: str, df: pd.DataFrame) -> str:
    p = tmp_path / f"{name}.parquet"
    df.to_parquet(p, index=False)
    return str(p)


@pytest.mark.parametrize("case", ["same", "empty_column", "int_and_float", "own_rank_column", "empty_table", "none"])
def test_rank_tables_are_the_frames_concatenated(tmp_path, case):
    rng = np.random.default_rng(1)
    base = pd.DataFrame({"name": ["a", "b", "c"], "dur": rng.random(3), "n": [1, 2, 3]})
    other = pd.DataFrame({"name": ["d", None], "dur": rng.random(2), "n": [4, 5]})
    if case == "empty_column":
        other["name"] = None
    elif case == "int_and_float":
        other["n"] = [4.5, np.nan]
    elif case == "own_rank_column":
        base["rank"], other["rank"] = 99, 98
    elif case == "empty_table":
        other = other.iloc[:0]
    parts = [(3, write(tmp_path, "r3", base)), (1, None), (0, write(tmp_path, "r0", other))]
    if case == "none":
        parts = [(1, None)]
    got, want = read_rank_tables(parts), one_by_one(parts)
    pd.testing.assert_frame_equal(got, want)
    if case != "none":
        assert list(got["rank"].unique()) == ([3] if case == "empty_table" else [3, 0])


def test_rank_tables_of_a_real_set(tmp_path, parse_cache):
    """Every per-rank table of the 8 DLRM ranks, read both ways (the merged timeline's piece apart:
    the reduce does not read it, outputs/timeline/render.py does, one rank at a time)."""
    from hpcprof.analysis.decode.load import discover_traces
    from hpcprof.analysis.executors import run_map

    from .conftest import DLRM, require

    results = run_map("local", discover_traces(require(DLRM)), parse_cache, True, workers=2, progress=False)
    from hpcprof.analysis.ranks.mapper import PIECE

    names = sorted({n for r in results for n in r.tables} - {PIECE})
    assert {"collectives", "steps", "kernels_all", "idle"} <= set(names)
    for name in names:
        parts = [(r.meta["rank"], r.tables.get(name)) for r in results]
        pd.testing.assert_frame_equal(read_rank_tables(parts), one_by_one(parts), obj=name)


@pytest.mark.parametrize("batch_rows", [1, 5000, 10**9])
def test_rank_parts_in_batches(tmp_path, parse_cache, monkeypatch, batch_rows):
    """The per-launch table is handed to the writer a few ranks at a time (reduce.views.RankParts):
    its frames, joined, are the ranks' frames concatenated; split by rank, each rank's own frame;
    a rank whose column types differ starts a new frame."""
    from hpcprof.analysis.decode.load import discover_traces
    from hpcprof.analysis.executors import run_map
    from hpcprof.analysis.reduce.views import RankParts

    from .conftest import DLRM, require

    monkeypatch.setattr(RankParts, "BATCH_ROWS", batch_rows)
    results = run_map("local", discover_traces(require(DLRM)), parse_cache, True, workers=2, progress=False)
    parts = {r.meta["rank"]: r.tables.get("launch_stats") for r in results}
    odd = pd.DataFrame({"x": [1.5]})  # a rank with other columns, between the real ones
    parts[max(parts) + 1] = write(tmp_path, "odd", odd)
    parts[max(parts) + 1] = parts[0]
    rp = RankParts(parts)
    frames = list(rp.frames())
    assert len(frames) >= 3  # the odd rank has a frame of its own
    pd.testing.assert_frame_equal(pd.concat(frames, ignore_index=True), one_by_one(sorted(parts.items())))
    for got, (r, p) in zip(rp.rank_frames(), sorted(parts.items())):
        pd.testing.assert_frame_equal(got, read_table(p).assign(rank=r))
    if batch_rows == 10**9:
        assert len(frames) == 3
