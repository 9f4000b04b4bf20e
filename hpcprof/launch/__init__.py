"""Launching a profiling job: the executor choice and the submitit executor (:mod:`.executors`,
shared with the analysis array), then submitting and waiting (:mod:`.submit`, behind ``python -m
hpcprof.submit``). The resolution of ranks and GPUs is :mod:`hpcprof.slurm.geometry`, shared with
sbatch rendering."""

from ..slurm.geometry import LaunchError, resolve_resources
from .executors import choose_executor, make_executor, slurm_reachable

__all__ = ["LaunchError", "choose_executor", "make_executor", "resolve_resources", "slurm_reachable"]
