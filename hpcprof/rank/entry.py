"""Rank entry points. :func:`run_rank` is what every rank runs, whoever started it (the submitit
task, or :func:`main` under ``srun``/``torchrun``): set up, train, and on any error leave a failure
note before re-raising.

:func:`main` is ``python -m hpcprof.train [spec flags]`` (kept as that name: sbatch scripts call it).
Every rank gets the same flags; rank, world size and rendezvous come from the SLURM (or torchrun)
variables. The run directory is ``<runs_dir>/<name>``; without --name it is
``<arch>-job<SLURM_JOB_ID>`` so that all ranks, and a requeued job, agree on it. The sbatch scripts
say where each task's log goes in ``HPCPROF_LOG_HINT`` (``%t`` = task id); it is read here, once.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..cliparser import ArgumentParser
from ..rundir import RunDir, RunDirError
from ..rundir import manifest as run_manifest
from ..spec import JobSpec, SpecError, add_spec_arguments, spec_from_args, split_passthrough

LOG_HINT_VAR = "HPCPROF_LOG_HINT"


def run_rank(spec: JobSpec, run_root: str, log: str | None = None) -> Any:
    """Run the spec's workload on this rank (the built-in trainer or the user's code, which find the
    spec and the run directory through hpcprof.rank.session.LAUNCH); returns what it returns.
    `log`: this rank's log file, named in the failure note. User code starts with the environment
    torchrun gives (hpcprof.rank.env.export_launch_env) and in zero-change mode (hpcprof.rank.auto),
    which steps back when the code opens its own session with hpcprof.run(). An error outside the
    step loop's session (user code failing before its first step, say) gets its failure note here."""
    from . import session
    from .env import detect_rank_env, export_launch_env
    from .failures import FailureContext, exit_code
    from .workload import run_workload

    run = RunDir(run_root)
    run.ensure_layout()
    session.LAUNCH = session.LaunchContext(spec, str(run.root), log)
    watcher = None
    try:
        if not spec.workload.builtin:
            import torch

            from .auto import install
            from .device import use_nccl_environment

            export_launch_env(detect_rank_env())
            if torch.cuda.is_available():  # the code's own NCCL group, too, dumps its flight recorder here
                use_nccl_environment(run.root)
            watcher = install(spec, str(run.root), log, launched=True)
        result = run_workload(spec)
    except BaseException as exc:
        if watcher is not None:
            watcher.close(exc)
        if isinstance(exc, SystemExit) and exit_code(exc) == 0 and not spec.workload.builtin:
            return None  # the script's own sys.exit(0): a clean end
        # every error gets its note; an exit too, when it says the code failed (sys.exit(3), argparse's 2)
        quiet = isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit) and exit_code(exc) == 0)
        if not quiet and not FailureContext.was_recorded(exc):
            renv = detect_rank_env()
            FailureContext(run, renv.rank, renv.node, log).record(exc)
        raise
    else:
        if watcher is not None:
            watcher.close(None)
        return result
    finally:
        session.LAUNCH = None


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m hpcprof.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="The allocation (nodes, tasks, GPUs, partition, account, QoS, time...)\n"
                                            "comes from SLURM or torchrun: submit and sbatch take those flags;\n"
                                            "a rank accepts them only to record them in spec.toml.")
    add_spec_arguments(parser, rank_only=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    own, passthrough = split_passthrough(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(own)
    try:
        spec = spec_from_args(args, passthrough)
        from .env import detect_rank_env

        renv = detect_rank_env()
        spec.validate(world_size=renv.world_size)
        label = spec.model.arch if spec.workload.builtin else spec.workload.label
        name = spec.name or f"{label}-job{renv.job_id or os.getpid()}"
        run = RunDir.for_spec(spec, name)
    except (SpecError, RunDirError) as exc:
        print(f"hpcprof.train: error: {exc}", file=sys.stderr)
        return 2
    run.ensure_layout()
    if renv.rank == 0 and not run.manifest_path.exists():
        # No launcher wrote the run directory (sbatch script, torchrun): rank 0 does, once.
        if not run.spec_path.exists():
            run.write_spec(spec)
        executor = "sbatch" if renv.launcher == "srun" else renv.launcher
        run_manifest.write(run, run_manifest.Manifest.at_launch(spec, run.name, executor, renv.world_size, sys.argv,
                                                                renv.job_id))
    from .failures import FailureContext

    run_rank(spec, str(run.root), log=FailureContext.log_for_rank(os.environ.get(LOG_HINT_VAR), renv.rank))
    if renv.rank == 0:
        print(f"hpcprof: run directory {run.root}", flush=True)
    return 0
