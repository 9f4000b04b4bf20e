"""SLURM: the resources a job asks for (:mod:`.resources`, one type used by the training job and the
analysis array) and the rendering of sbatch scripts from templates (:mod:`.sbatch`).

Nothing is imported here eagerly: :mod:`hpcprof.spec` builds on :mod:`.resources`, while
:mod:`.sbatch` builds on :mod:`hpcprof.spec`."""
