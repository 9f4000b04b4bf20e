"""What the per-rank map hands to the reduce: one :class:`RankResult` per trace file.

A dataclass rather than a dict so the contract between ``analyze_rank``, the executors (a local
process pool, a SLURM array: the result is pickled back) and the reduce is written down once.
Only small things travel: the per-rank tables stay in the parse cache as Parquet files, and the
result carries their paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    parse_s: float | None = None
    """Seconds spent decoding and analysing (fresh results only)."""

    @classmethod
    def failed(cls, path, error: str) -> "RankResult":
        return cls(path=str(path), ok=False, error=error)

    @property
    def rank(self) -> int:
        return self.meta["rank"]


def read_table(path: str, columns: list[str] | None = None):
    """One of a rank's Parquet tables (`RankResult.tables`) as a pandas frame: pd.read_parquet's
    frame, read through pyarrow's ParquetFile (half the CPU of pandas' reader, which goes through
    the datasets layer: the reduce reads ~160 small tables at 16 ranks)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read(columns=columns).to_pandas()
