"""``python -m hpcprof.submit``: launch DDP ResNet training with a profiler trace per rank. The
launcher is :mod:`hpcprof.launch`; this shim keeps the user's command unchanged."""

from __future__ import annotations

import sys

if __name__ == "__main__":  # while the launcher's modules load, Ctrl-C is one line
    from .cliparser import quiet_until_main

    quiet_until_main("hpcprof.submit")

from .launch.executors import choose_executor, make_executor, slurm_reachable  # noqa: F401
from .slurm.geometry import resolve_resources  # noqa: F401
from .launch.submit import Launch, SubmitError, build_parser, launch, main, wait  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
