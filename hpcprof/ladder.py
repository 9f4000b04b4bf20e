"""``python -m hpcprof.ladder JOBS_DIR [--through NN] [submit options]``: run an optimisation ladder
and compare its rungs. The runner is :mod:`hpcprof.launch.ladder`; this shim is the user's command."""

from __future__ import annotations

import sys

if __name__ == "__main__":  # while the launcher's modules load, Ctrl-C is one line
    from .cliparser import quiet_until_main

    quiet_until_main("hpcprof.ladder")

from .launch.ladder import find_rungs, main, run_ladder  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
