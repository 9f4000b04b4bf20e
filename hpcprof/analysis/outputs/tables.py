"""tables/: every table of the reduce as CSV (for people and spreadsheets) and Parquet (for pandas,
the notebook and ``hpcprof.compare``), one pair per name. docs/analysis.md "Outputs" lists the names."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..reduce.crossrank import Reduced
from ..reduce.gpu_summary import gpu_summary_table
from ..reduce.slow_gpu import slow_gpu_table
from ..reduce.memory_view import memory_table, operators_table
from .rounding import csv_frame


def output_tables(red: Reduced) -> dict[str, pd.DataFrame]:
    """Table name -> frame, in the order they are written and shown."""
    tables = {
        "per_rank": red.per_rank,
        "steps_trace": red.steps_trace,
        "steps_stats": red.steps.stats,
        "kernel_breakdown": red.kernel_breakdown,
        "kernels_top": red.kernels_top,
        "kernels_all": red.kernels_all,
        "kernels_across_ranks": red.kernels_across_ranks,
        "idle_breakdown": red.idle,
        "collectives": red.collectives,
        "waits_per_step": red.waits_per_step,
        "whatif_steps": red.whatif.steps if red.whatif is not None else pd.DataFrame(),
        "critical_path": red.critical_path.links if red.critical_path is not None else pd.DataFrame(),
        "gpu_summary": gpu_summary_table(red.gpu_summary) if red.gpu_summary is not None else pd.DataFrame(),
        "op_efficiency": red.op_efficiency_table if red.op_efficiency_table is not None else pd.DataFrame(),
        "slow_gpu": slow_gpu_table(red.slow_gpu),
        "memory_view": memory_table(red.memory_view) if red.memory_view is not None else pd.DataFrame(),
        "memory_operators": operators_table(red.memory_view) if red.memory_view is not None else pd.DataFrame(),
    }
    if not red.steps.records.empty:
        tables["steps_all"] = red.steps.records
    if red.throughput_steps is not None and not red.throughput_steps.empty:
        tables["throughput_steps"] = red.throughput_steps[[c for c in ("rank", "step", "epoch", "phase", "batch_size", "step_s", "samples_per_s")
                                                           if c in red.throughput_steps]]
    return tables


def _parquet_ready(df: pd.DataFrame) -> pd.DataFrame:
    d = df.copy()
    for c in d.columns:
        if d[c].dtype == object:
            d[c] = d[c].astype(str)
    return d


def write_table(df, tables: Path, name: str) -> None:
    """<name>.csv and <name>.parquet (object columns as strings: Parquet needs one type per column).
    `df` may be a reduce.views.RankParts: written a few ranks at a time (the same two files)."""
    from ..reduce.views import RankParts

    if isinstance(df, RankParts):
        return _write_parts(df, tables, name)
    csv_frame(name, df).to_csv(tables / f"{name}.csv", index=False)  # for people: units in names, rounded
    _parquet_ready(df).to_parquet(tables / f"{name}.parquet", index=False)


def _write_parts(parts, tables: Path, name: str) -> None:
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    writer = schema = None
    first = True
    with open(tables / f"{name}.csv", "wb") as fh:
        for df in parts.frames():
            # Arrow's CSV writer: the rank-split tables of large jobs hold millions of rows, where
            # pandas' to_csv takes seconds (benchmarks/README.md)
            c = pa.Table.from_pandas(csv_frame(name, df), preserve_index=False)
            if first:  # the header as pandas writes it (Arrow quotes every name)
                fh.write((",".join(c.column_names) + "\n").encode())
            pa_csv.write_csv(c, fh, pa_csv.WriteOptions(include_header=False, quoting_style="needed"))
            t = pa.Table.from_pandas(_parquet_ready(df), preserve_index=False)
            if writer is None:
                schema = t.schema
                writer = pq.ParquetWriter(tables / f"{name}.parquet", schema)
            writer.write_table(t.select(schema.names).cast(schema))
            first = False
        if first:  # no rank has rows: the empty table, as write_table writes it
            fh.write(b"\n")
    if writer is None:
        pd.DataFrame().to_parquet(tables / f"{name}.parquet", index=False)
    else:
        writer.close()


def write_tables(tables: dict[str, pd.DataFrame], folder: Path) -> None:
    for name, df in tables.items():
        write_table(df if df is not None else pd.DataFrame(), folder, name)
