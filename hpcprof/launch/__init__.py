"""Launching a profiling job: the executor choice, resource resolution and the submitit executor
(:mod:`.executors`, shared with sbatch rendering and the analysis array), then submitting and
waiting (:mod:`.submit`, behind ``python -m hpcprof.submit``)."""

from .executors import LaunchError, choose_executor, make_executor, resolve_resources, slurm_reachable

__all__ = ["LaunchError", "choose_executor", "make_executor", "resolve_resources", "slurm_reachable"]
