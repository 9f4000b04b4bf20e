"""One rank's compute kernels grouped by the work they do, for the slow-GPU comparison across ranks
(reduce/slow_gpu.py).

What identifies identical work: the kernel's name (its template arguments included) and its launch
configuration, `grid` and `block` as Kineto records them on the kernel event. Two calls with the
same name, grid and block run the same code over the same number of thread blocks; on another rank
the same triple is the same work (data-parallel ranks run the same model on equal-sized batches).
The calling operator and its input shapes are not part of the key: in older Kineto traces (the
shared DLRM set) the kernel's `External id` is a copy of its correlation id, so the operator is
found only by time containment on the launching thread, and the grid already separates the sizes
that matter (a bigger tensor gets more blocks). A kernel without `grid`/`block` (older or other
profilers) is keyed by its name alone.

Communication kernels (NCCL and the others ranks/comm_kernels.py finds) are left out: their
duration includes waiting for the other ranks. Copies and memsets are not kernels and are left out
too. Every compute kernel of the trace counts, profiled step or not: a slow GPU is slow throughout.

The table (one row per group): key, name, grid, block, count, total_us.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .comm_kernels import Names, classify, one_of

KERNEL_CATS = ("kernel", "Kernel")
COLUMNS = ("key", "name", "grid", "block", "count", "total_us")


def _dims(v) -> str:
    """A launch dimension as text ("32x2x1"); "" where the trace does not record it."""
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return "x".join(str(int(x)) for x in v)
    return ""


def kernel_work_table(table: pd.DataFrame, names: Names | None = None, cats: Names | None = None,
                      comm: np.ndarray | None = None) -> pd.DataFrame:
    """The rank's compute kernels grouped by (name, grid, block): calls and total time (µs). `comm`:
    the table's communication kernels where the caller has them (RankTimeline.comm_rows), else
    they are classified here."""
    n = len(table)
    empty = pd.DataFrame({c: pd.Series(dtype="int64" if c == "count" else "float64" if c == "total_us" else "object")
                          for c in COLUMNS})
    if not n or "cat" not in table:
        return empty
    names = names if names is not None else Names.column(table, "name", n)
    cats = cats if cats is not None else Names.column(table, "cat", n)
    # complete kernel events with a start and a duration; the times read at those rows only
    cand = np.flatnonzero((table["ph"] == "X").to_numpy(dtype=bool, na_value=False) & cats.where(one_of(KERNEL_CATS))
                          & names.where(lambda v: isinstance(v, str)))
    ts, dur = (pd.to_numeric(table[c].iloc[cand], errors="coerce").to_numpy(dtype=float) for c in ("ts", "dur"))
    timed = np.isfinite(ts) & np.isfinite(dur)
    if not timed.any():
        return empty
    kernel = np.zeros(n, dtype=bool)
    kernel[cand[timed]] = True
    if comm is None or len(comm) != n:
        comm = classify(table, kernel, names=names, cats=cats).mask
    rows = np.flatnonzero(kernel & ~comm)
    if not rows.size:
        return empty
    def col(c):
        if c not in table:
            return np.full(rows.size, "", dtype=object)
        values = table[c].iloc[rows].to_numpy(dtype=object)  # the kernels' rows, not a copy of the column
        # one text per distinct list object: the decode keeps one object per distinct launch
        # dimension (decode/columns.py), and `values` keeps every object alive while its id is a key
        texts: dict[int, str] = {}
        return np.array([texts[i] if (i := id(v)) in texts else texts.setdefault(i, _dims(v)) for v in values], dtype=object)

    df = pd.DataFrame({"name": names.take(rows).values(), "grid": col("grid"), "block": col("block"),
                       "dur": dur[np.searchsorted(cand, rows)]})
    g = df.groupby(["name", "grid", "block"], sort=True)["dur"].agg(["count", "sum"]).reset_index()
    g = g.rename(columns={"sum": "total_us"})
    g["key"] = g["name"] + "|" + g["grid"] + "|" + g["block"]
    g["count"] = g["count"].astype("int64")
    return g[list(COLUMNS)]
