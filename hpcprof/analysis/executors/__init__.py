"""Executors of the per-rank map: where ``analyze_rank`` runs for every trace.

- local.py: a process pool on this machine (``--executor local``, the default);
- slurm_array.py: a submitit job array on SLURM (``--executor slurm``).

Both return the same sorted list of :class:`~hpcprof.analysis.ranks.result.RankResult`, so the
reduce does not know which one ran.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AnalysisError
from ..ranks.result import RankResult

EXECUTORS = ("local", "slurm")


def run_map(executor: str, files: list[Path], cache_dir: Path, use_cache: bool, *, workers: int, progress: bool,
            digests: dict | None = None, slurm=None, log_dir: Path | None = None) -> list[RankResult]:
    """Run the per-rank map with the chosen executor. `workers`, `digests`: local only;
    `slurm` (SlurmOptions) and `log_dir`: slurm only."""
    if executor == "slurm":
        from .slurm_array import map_on_slurm  # submitit is imported only when asked for

        return map_on_slurm(files, cache_dir, use_cache, slurm, log_dir=log_dir, progress=progress)
    if executor == "local":
        from .local import map_local

        return map_local(files, cache_dir, use_cache, workers, progress, digests)
    raise AnalysisError(f"executor {executor!r}: expected 'local' (worker processes here) or 'slurm' (a job array)")
