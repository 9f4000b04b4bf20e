"""Rank entry point for plain launchers: ``srun python -m hpcprof.train [spec flags]`` in an sbatch
script, or ``torchrun ... -m hpcprof.train``. Every rank gets the same flags; rank, world size and
rendezvous come from the SLURM (or torchrun) variables. The run directory is
``<runs_dir>/<name>``; without --name it is ``<arch>-job<SLURM_JOB_ID>`` so that all ranks, and a
requeued job, agree on it."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..run import RunDir, RunDirError
from ..spec import SpecError, add_spec_arguments, spec_from_args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hpcprof.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = spec_from_args(args)
        from .distributed import detect_rank_env

        renv = detect_rank_env()
        spec.validate(world_size=renv.world_size)
        name = spec.name or f"{spec.model.arch}-job{renv.job_id or os.getpid()}"
        run = RunDir.for_spec(spec, name)
    except (SpecError, RunDirError) as exc:
        print(f"hpcprof.train: error: {exc}", file=sys.stderr)
        return 2
    run.ensure_layout()
    if renv.rank == 0 and not run.manifest_path.exists():
        if not run.spec_path.exists():
            run.spec_path.write_text(spec.to_toml())
        run.update_manifest(
            name=run.name,
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            executor="sbatch" if renv.launcher == "srun" else renv.launcher,
            job_id=renv.job_id,
            command_line=sys.argv,
            spec=spec.to_dict(),
        )
    from .loop import run_rank

    run_rank(spec, str(run.root))
    if renv.rank == 0:
        print(f"hpcprof: run directory {run.root}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
