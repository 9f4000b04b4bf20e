"""Complete events whose times cannot be true, dropped from a rank's event table before any analysis.

The policy (issue 37, item 5). A complete event (``ph`` "X") enters the analysis only when its
``ts`` and ``dur`` are what a profiler writes:

- both are JSON numbers and finite: not a text, a boolean, null, NaN or infinity, and not missing
  (a complete event without a duration has no end);
- ``dur`` >= 0: an event does not end before it starts;
- ``|ts|`` and ``|ts + dur|`` below MAX_TS_US, and ``dur`` at most MAX_DUR_US: beyond them a time
  is not a profiled step's, whatever clock the trace uses.

Any other complete event is dropped as if the trace did not hold it (the table is then the one the
trace without those events decodes to, column types included), and counted: the map adds one
warning per rank naming the count and why. Why: a ``dur`` of 1e300 printed a critical path of 300
digits and a straggler slowdown of 5.5e295; a negative ``dur`` moved the slowdown from 1.25 to 1.16
with only HTA's warning; 365 events with a null ``dur`` moved it as much without any warning.
Other events (instants, flows, metadata) are left as they are: no duration is read from them, and
each analysis that reads their ``ts`` keeps only finite ones.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .events import number_kind

MAX_TS_US = float(2**53)
"""Times (µs) at or beyond this are refused: float64 no longer holds every whole microsecond there,
and Kineto's clocks (epoch or relative, in µs) are far below it (2026 in epoch µs: 1.8e15)."""
MAX_DUR_US = 86_400e6
"""The longest duration accepted, one day: a torch.profiler trace covers a few steps, never a day
(a trace of one would hold more events than any analysis here can load)."""

REASONS = {
    "ts": "a ts that is not a finite number",
    "dur": "a dur missing or not a finite number",
    "negative": "a negative dur",
    "far": "a ts or end beyond 2^53 µs or a dur over a day",
}


def _numbers(col: pd.Series) -> np.ndarray:
    """The values as floats, NaN where a value is not a JSON number (texts, booleans, null)."""
    if col.dtype.kind in "iuf":
        return col.to_numpy(dtype=float)
    values = col.to_numpy(dtype=object)
    is_num = np.fromiter((type(v) in (int, float) for v in values), dtype=bool, count=len(values))
    out = np.full(len(values), np.nan)
    if is_num.any():
        out[is_num] = values[is_num].astype(float)
    return out


def impossible_times(table: pd.DataFrame) -> tuple[np.ndarray | None, dict[str, int]]:
    """(rows to drop, or None where none is; {reason key of REASONS: count}) of an event table
    (decode.columns.event_table)."""
    if "ph" not in table or not len(table):
        return None, {}
    x = (table["ph"] == "X").to_numpy(dtype=bool, na_value=False)
    if not x.any():
        return None, {}
    n = len(table)
    ts = _numbers(table["ts"]) if "ts" in table else np.full(n, np.nan)
    dur = _numbers(table["dur"]) if "dur" in table else np.full(n, np.nan)
    with np.errstate(invalid="ignore", over="ignore"):
        bad_ts = x & ~np.isfinite(ts)
        bad_dur = x & ~bad_ts & ~np.isfinite(dur)
        rest = x & ~bad_ts & ~bad_dur
        negative = rest & (dur < 0)
        far = rest & ~negative & ((np.abs(ts) >= MAX_TS_US) | (np.abs(ts + dur) >= MAX_TS_US) | (dur > MAX_DUR_US))
    counts = {k: int(m.sum()) for k, m in (("ts", bad_ts), ("dur", bad_dur), ("negative", negative), ("far", far))}
    drop = bad_ts | bad_dur | negative | far
    return (drop if drop.any() else None), {k: v for k, v in counts.items() if v}


def drop_impossible(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The table less the complete events whose times cannot be true (module docstring), and their
    count by reason; the table itself where there is none. The rows left are numbered from 0 again,
    and `ts` and `dur` get the type pandas infers from the values left (a null among numbers made
    them object columns), as for a trace that never held the dropped events."""
    drop, counts = impossible_times(table)
    if drop is None:
        return table, {}
    out = table.loc[~drop].reset_index(drop=True)
    for key in ("ts", "dur"):
        if key in out and out[key].dtype == object:
            values = out[key].to_numpy(dtype=object)
            kind = number_kind(values)
            try:
                if kind is not None:
                    out[key] = pd.Series(values.astype(np.int64 if kind == "int" else np.float64))
            except OverflowError:  # ints beyond int64: pandas keeps them as objects too
                pass
    return out, counts


def dropped_warning(where: str, counts: dict[str, int]) -> str:
    """The one warning of a rank's dropped events; `where`: "<file> (rank r)"."""
    total = sum(counts.values())
    parts = ", ".join(f"{v} with {REASONS[k]}" for k, v in counts.items())
    return (f"{where}: {total} complete event{'s' if total != 1 else ''} (ph X) with times that cannot be true left "
            f"out of the analysis: {parts}")
