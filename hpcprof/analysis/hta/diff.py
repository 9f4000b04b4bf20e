"""Operator and kernel deltas between two runs' traces, computed by HTA's own `TraceDiff`.

Why HTA's: users check our numbers against HTA, so the per-name counts and durations are
`TraceDiff.compare_traces` itself. What we change is only how the traces reach it:
- HTA's `LabeledTrace(trace_dir=...)` parses every file of the folder again and rejects traces
  without `distributedInfo.rank` (the kineto ResNet-50 pair). We hand it a `Trace` whose frame our
  one decode built (`frame.hta_frame`, equal to HTA's `parse_trace_file` output column by column), so
  both pairs work and nothing is parsed twice.
- `TraceDiff` looks at one iteration by default; two runs need not profile the same step numbers
  or as many steps, so we pass every `ProfilerStep` of each trace and divide counts and durations
  by the number of steps: the deltas are per step.
- One rank per run (the lowest, HTA's default): operators and kernels are the same code on every
  rank of a DDP job.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
from pathlib import Path

import pandas as pd


def _labeled_trace(trace_file: Path, label: str):
    """An HTA `LabeledTrace` over one trace file, through its public constructor
    (``LabeledTrace(label, t=trace)``), without HTA parsing the file again: the `Trace` handed to it
    holds the frame our decode built, and its `parse_traces` (which the constructor calls, and which
    would parse the file with HTA's parser, more than the rest of the comparison costs) keeps it."""
    from hta.trace_diff import LabeledTrace

    from ..decode.load import trace_meta
    from ..decode.stream import read_event_table
    from .frame import hta_frame

    logging.getLogger("hta").setLevel(logging.ERROR)
    meta, table, _, _ = read_event_table(trace_file)
    rank = trace_meta(trace_file, meta).rank
    box = [table]  # consumed by the frame: no copy of the table beside it
    del table
    df, symbols = hta_frame(box)
    with contextlib.redirect_stdout(io.StringIO()):
        t = _parsed_trace_type()(trace_files={rank: str(trace_file)}, trace_dir=str(trace_file.parent))
    t.traces, t.symbol_table, t.meta_data, t.is_parsed = {rank: df}, symbols, {rank: dict(meta)}, True
    return LabeledTrace(label, t=t)


@functools.cache
def _parsed_trace_type():
    """HTA's `Trace` for a frame that is already built (made on first use: HTA is imported only by
    the commands that compare operators)."""
    from hta.common.trace import Trace

    class ParsedTrace(Trace):
        """A `Trace` whose `traces`, `symbol_table` and `meta_data` were set from hpcprof's decode
        (equal to HTA's parser's, tests/analysis/test_fast_loader.py): parsing again keeps them."""

        def parse_traces(self, *args, **kwargs) -> None:
            if not self.is_parsed:
                super().parse_traces(*args, **kwargs)

    return ParsedTrace


def trace_diff(base_file: Path, test_file: Path) -> pd.DataFrame:
    """Per operator (CPU) and kernel (GPU) name: counts and total time per profiled step in each run
    and the change, from HTA's `TraceDiff.compare_traces` over all profiled steps of both.

    Columns: kind ("operator" | "kernel"), name, base_count, test_count, base_us, test_us,
    diff_count, diff_us (all per step), change ("added" | "removed" | "increased" | "decreased" |
    "unchanged", by time; added/removed by presence), base_steps, test_steps."""
    from hta.trace_diff import DeviceType, TraceDiff

    base, test = _labeled_trace(base_file, "base"), _labeled_trace(test_file, "test")
    nb, nt = base.iterations(), test.iterations()
    if not nb or not nt:
        missing = base_file if not nb else test_file
        raise ValueError(f"{missing}: no ProfilerStep#N in the trace, so operators cannot be compared per step")
    frames = []
    for kind, dev in (("operator", DeviceType.CPU), ("kernel", DeviceType.GPU)):
        d = TraceDiff.compare_traces(base, test, control_iteration=nb, test_iteration=nt, device_type=dev)
        if d.empty:
            continue
        d = d.reset_index().rename(columns={"index": "name"})
        out = pd.DataFrame(
            {
                "kind": kind,
                "name": d[d.columns[0]].astype(str),
                "base_count": d["base_counts"] / len(nb),
                "test_count": d["test_counts"] / len(nt),
                "base_us": d["base_total_duration"] / len(nb),
                "test_us": d["test_total_duration"] / len(nt),
            }
        )
        frames.append(out)
    if not frames:
        return pd.DataFrame(columns=["kind", "name", "base_count", "test_count", "base_us", "test_us", "diff_count", "diff_us", "change"])
    out = pd.concat(frames, ignore_index=True)
    # ProfilerStep#N names differ between runs by construction: not an operator change
    out = out[~out["name"].str.startswith("ProfilerStep#")].reset_index(drop=True)
    out["diff_count"] = out["test_count"] - out["base_count"]
    out["diff_us"] = out["test_us"] - out["base_us"]
    change = pd.Series("unchanged", index=out.index)
    change[out["diff_us"] > 0] = "increased"
    change[out["diff_us"] < 0] = "decreased"
    change[(out["base_count"] == 0) & (out["test_count"] > 0)] = "added"
    change[(out["base_count"] > 0) & (out["test_count"] == 0)] = "removed"
    out["change"] = change
    out["base_steps"], out["test_steps"] = len(nb), len(nt)
    return out.sort_values("diff_us", key=abs, ascending=False, ignore_index=True)
