"""The rank side: what every rank of the training job runs.

api.py (``hpcprof.run()``, ``hpcprof.start()``), session.py and steploop.py (the step-loop session,
used by the built-in trainer and by users' training code alike), auto.py (zero-change mode: steps from
the optimizer's hook, for scripts that never import hpcprof), wrap.py (``python -m hpcprof.wrap``
under the user's own launcher), startup.py (a rank's start-up in two phases), checkpoint.py,
timing.py (host and GPU-clock step timing), control.py (non-blocking control rounds: preemption
agreement), env.py (who am I, process group), device.py (device, mixed precision
and NCCL settings, as pure decisions), resnet.py, data.py, model.py (the built-in ResNet workload),
workload.py (which workload runs: built-in, a user's function or script), profiling.py
(torch.profiler, one trace per rank), preemption.py (requeue), drills.py (known faults on purpose),
failures.py (the failure note, the peer watch), task.py (the submitit task), entry.py (``run_rank``
and ``python -m hpcprof.train``).

Nothing here is imported by the analysis side, and nothing here imports it.
"""

from .entry import main, run_rank

__all__ = ["main", "run_rank"]
