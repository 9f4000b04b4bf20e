"""``python -m hpcprof.wrap [spec flags] SCRIPT [ARGS...]``: your training script, unchanged, profiled on
every rank under your own launcher (``torchrun ... -m hpcprof.wrap train.py ARGS``, ``srun python -m
hpcprof.wrap train.py ARGS``); see hpcprof.rank.wrap."""

import sys

from hpcprof.rank.wrap import main

if __name__ == "__main__":
    sys.exit(main())
