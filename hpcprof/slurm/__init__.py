"""SLURM: the rendering of sbatch scripts from templates (:mod:`.sbatch`, its ``#SBATCH`` lines in
:mod:`.sbatch_lines`, its files in :mod:`.script_io`), the ranks' pre-``srun`` check
(:mod:`.preflight`), and the resolution of a job's ranks and GPUs that ``python -m hpcprof.submit``
shares (:mod:`.geometry`). The resources a job asks SLURM for are one type in
:mod:`hpcprof.spec.resources`: the job spec's ``[resources]`` and the analysis array both use it,
so it lives with the spec, which imports nothing else of hpcprof.

Nothing is imported here eagerly: each module is loaded by the command that needs it."""
