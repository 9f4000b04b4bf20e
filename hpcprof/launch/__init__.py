"""Launching a profiling job: the executor choice and the submitit executor (:mod:`.executors`,
shared with the analysis array), then submitting and waiting (:mod:`.submit`, behind ``python -m
hpcprof.submit``) and the report of each rank (:mod:`.rank_report`); the ladder of runs
(:mod:`.ladder`); the analysis' per-rank map as a SLURM job array (:mod:`.analysis_array`, which
``python -m hpcprof.analyze`` hands to the analysis). The resolution of ranks and GPUs is :mod:`hpcprof.slurm.geometry`, shared with
sbatch rendering."""

from ..slurm.geometry import LaunchError, resolve_resources
from .executors import choose_executor, make_executor, slurm_reachable

__all__ = ["LaunchError", "choose_executor", "make_executor", "resolve_resources", "slurm_reachable"]
