"""The rank side: what every rank of the training job runs.

env.py (who am I, process group, device), trainer.py (setup/step/state_dict, the step loop),
data.py, model.py, profiling.py (torch.profiler, one trace per rank), preemption.py (agree, checkpoint,
requeue), drills.py (known faults on purpose), failures.py (the failure note), task.py (the submitit
task), entry.py (``run_rank`` and ``python -m hpcprof.train``).

Nothing here is imported by the analysis side, and nothing here imports it.
"""

from .entry import main, run_rank

__all__ = ["main", "run_rank"]
