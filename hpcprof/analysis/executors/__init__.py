"""Executors of the per-rank map: where ``analyze_rank`` runs for every trace.

- local.py: a process pool on this machine (``--executor local``, the default);
- a SLURM job array (``--executor slurm``): given by the caller as ``slurm``, an object whose
  ``map(files, cache_dir, use_cache, *, log_dir, progress)`` runs the map there
  (:class:`hpcprof.launch.analysis_array.SlurmOptions`, which ``python -m hpcprof.analyze`` builds
  from its ``--slurm-*`` flags). Why injected: submitting to SLURM is the launcher's business
  (submitit, the job spec's resource flags); the analysis imports nothing of it.

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
    `slurm` (the array's map, see above) and `log_dir`: slurm only."""
    if executor == "slurm":
        if slurm is None:
            raise AnalysisError("executor 'slurm': no SLURM array options given; pass slurm="
                                "hpcprof.launch.analysis_array.SlurmOptions(...) (python -m hpcprof.analyze "
                                "--executor slurm builds them from its --slurm-* flags)")
        return slurm.map(files, cache_dir, use_cache, log_dir=log_dir, progress=progress)
    if executor == "local":
        from .local import map_local

        return map_local(files, cache_dir, use_cache, workers, progress, digests)
    raise AnalysisError(f"executor {executor!r}: expected 'local' (worker processes here) or 'slurm' (a job array)")
