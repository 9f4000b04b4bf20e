"""``python -m hpcprof.wrap [spec flags] SCRIPT [ARGS...]``: profile a training script on every rank
under the user's own launcher, with no change to the script or to the launch.

    torchrun --nproc-per-node 4 -m hpcprof.wrap train.py --lr 0.1
    srun python -m hpcprof.wrap --profiler-active 5 train.py --lr 0.1

Each rank runs SCRIPT as ``python SCRIPT ARGS`` would (as ``__main__``, ``sys.argv = [SCRIPT, *ARGS]``)
with the environment torchrun gives (under ``srun`` hpcprof adds it from SLURM's variables), in
zero-change mode (hpcprof.rank.auto: one step per optimizer step). hpcprof's own flags (the spec's:
``--profiler-*``, ``--inject-*``, ``--name``, ``--runs-dir``, ...) go before SCRIPT; everything after
it is the script's. Rank 0 chooses the run directory when the job has joined
(hpcprof.rank.startup.choose_run_dir: ``runs/<script>-job<SLURM_JOB_ID>`` or
``runs/<script>-<date>-<time>``) and prints it at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..cliparser import ArgumentParser
from ..rundir import RunDirError
from ..spec import SpecError, add_spec_arguments, spec_from_args

LOG_HINT_VAR = "HPCPROF_LOG_HINT"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m hpcprof.wrap", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_arguments(parser, rank_only=True)
    parser.add_argument("target", metavar="SCRIPT", help="your training script (a .py file)")
    parser.add_argument("script_args", metavar="ARGS", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from .env import detect_rank_env, export_launch_env
    from .workload import check_workload, run_workload

    try:
        if getattr(args, "spec__workload__script", None) or getattr(args, "spec__workload__entry", None):
            raise SpecError("python -m hpcprof.wrap takes the script as its first argument, not --script/--entry")
        args.spec__workload__script = args.target
        spec = spec_from_args(args, list(args.script_args))
        check_workload(spec, Path.cwd())
        renv = detect_rank_env()
        spec.validate(world_size=renv.world_size)
    except (SpecError, RunDirError) as exc:
        print(f"hpcprof.wrap: error: {exc}", file=sys.stderr)
        return 2
    export_launch_env(renv)
    from .auto import install
    from .failures import FailureContext

    watcher = install(spec, None, FailureContext.log_for_rank(os.environ.get(LOG_HINT_VAR), renv.rank), launched=False)
    try:
        run_workload(spec)
    except BaseException as exc:
        watcher.close(exc)
        run = watcher.run
        if run._state == "closed" and getattr(run, "failure", None) is not None and \
                not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            run.failure.record(exc)  # the job was joined: the note goes into its run directory
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            return _done(watcher, renv.rank)
        raise
    return _done(watcher, renv.rank)


def _done(watcher, rank: int) -> int:
    watcher.close(None)
    run = watcher.run
    if rank == 0 and getattr(run, "run", None) is not None:
        print(f"hpcprof: run directory {run.run.root}", flush=True)
    elif rank == 0 and not watcher.retired:
        print("hpcprof: no optimizer step was made: nothing was recorded", file=sys.stderr, flush=True)
    return 0
