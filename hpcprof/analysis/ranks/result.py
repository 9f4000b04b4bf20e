"""What the per-rank map hands to the reduce: one :class:`RankResult` per trace file.

A dataclass rather than a dict so the contract between ``analyze_rank``, the executors (a local
process pool, a SLURM array: the result is pickled back) and the reduce is written down once.
Only small things travel: the per-rank tables stay in the parse cache as Parquet files, and the
result carries their paths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RankResult:
    """The outcome of analysing one trace file."""

    path: str
    """The trace file as the caller named it (summary.json and warnings show it)."""
    ok: bool
    """False: the file could not be analysed; `error` says why and names the file."""
    error: str | None = None
    """Why the file was skipped (ok=False), starting with its name."""
    dir: str | None = None
    """The parse-cache entry holding this rank's tables and meta.json."""
    meta: dict[str, Any] = field(default_factory=dict)
    """meta.json of the entry: rank, world_size, host, device, HTA's temporal breakdown, warnings..."""
    tables: dict[str, str] = field(default_factory=dict)
    """Table name (mapper.TABLES) -> Parquet path, for the tables this rank has."""
    cached: bool = False
    """True: served from the parse cache, nothing parsed."""
    hashed: str | None = None
    """The file's content hash taken before it was read (by the memo, or by `analyze_rank` to look
    in the parse cache); None where none was taken. It differs from meta["digest"], the hash of the
    bytes decoded, when the file changed while the analysis read it."""

    @classmethod
    def failed(cls, path, error: str) -> "RankResult":
        return cls(path=str(path), ok=False, error=error)

    @property
    def rank(self) -> int:
        return self.meta["rank"]


PARQUET_OPTIONS = {"compression": "none", "write_statistics": False, "dictionary_pagesize_limit": 64 << 10}
"""How the map writes its tables: uncompressed, without column statistics (nothing reads them: no
filter pushdown). The content is the same either way; these local, short-lived cache files are
written and read faster uncompressed, at about twice the size on disk. A column's Parquet
dictionary encoding gives up at 64 KiB of dictionary (Parquet's default: 1 MiB), so that a column
of distinct values (a timeline piece's timestamps) is not hashed value by value for a dictionary
that only makes the file larger, while few-valued columns keep it. Arrow dictionary columns are
read back as the same dictionaries whatever their size."""


def write_table(table, path) -> None:
    """A pandas frame (without its index, as `to_parquet(index=False)` writes it: the same schema and
    pandas metadata, without pandas' file-handle layer) or an Arrow table, as a Parquet file. The
    frame is converted in this thread (`nthreads=1`: on tables this small, Arrow's thread pool costs
    more than it saves)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(table, pd.DataFrame):
        frame, table = table, pa.Table.from_pandas(table, preserve_index=False, nthreads=1)
        if frame.attrs:  # as pandas' writer keeps them
            table = table.replace_schema_metadata({**table.schema.metadata, "PANDAS_ATTRS": json.dumps(frame.attrs)})
    pq.write_table(table, str(path), **PARQUET_OPTIONS)


def read_table(path: str, columns: list[str] | None = None):
    """One of a rank's Parquet tables (`RankResult.tables`) as a pandas frame: pd.read_parquet's
    frame, read through pyarrow's ParquetFile (half the CPU of pandas' reader, which goes through
    the datasets layer: the reduce reads ~160 small tables at 16 ranks)."""
    return _read_arrow(path, columns).to_pandas(use_threads=False)


def _read_arrow(path: str, columns: list[str] | None = None):
    """A Parquet file as an Arrow table, in this thread, without pre-buffering: for these small
    files Arrow's thread pool and read coalescing cost more than they save (the table read is the
    same). Converted to pandas in this thread too (`to_pandas(use_threads=False)`, the same frame),
    for the same reason."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, pre_buffer=False).read(columns=columns, use_threads=False)


def read_rank_tables(parts) -> pd.DataFrame:
    """Many ranks' copies of one table, `parts` an iterable of (rank, Parquet path or None), as one
    frame with a `rank` column (set to the rank, where the table has one), in the order given,
    ranks with no rows left out: what concatenating their `read_table` frames gives, made by
    concatenating the Arrow tables and converting once (a conversion to pandas per file was most of
    the cost at many ranks). When the ranks' schemas differ (a column all
    empty on one rank; pandas' metadata), pandas concatenates the frames, as before: its rules
    decide the type."""
    import pandas as pd
    import pyarrow as pa

    tables = [t for t in (rank_arrow(r, p) for r, p in parts) if t is not None]
    if not tables:
        return pd.DataFrame()
    if any(not t.schema.equals(tables[0].schema, check_metadata=True) for t in tables[1:]):
        return pd.concat([t.to_pandas(use_threads=False) for t in tables], ignore_index=True)
    return pa.concat_tables(tables).to_pandas(use_threads=False).reset_index(drop=True)


def rank_arrow(rank: int, path: str | None):
    """One rank's table as an Arrow table with its `rank` column set to `rank` (appended, or in
    place where the table has one); None without a file, rows or columns."""
    import numpy as np
    import pyarrow as pa

    if not path:
        return None
    t = _read_arrow(path)
    if not (t.num_rows and t.num_columns):
        return None
    col = pa.array(np.full(t.num_rows, rank, dtype=np.int64))
    names = t.column_names
    return t.set_column(names.index("rank"), "rank", col) if "rank" in names else t.append_column("rank", col)
