"""``python -m hpcprof.train [spec flags]``: the rank entry point for sbatch scripts and torchrun
(kept under this name so that users' scripts do not change); see hpcprof.rank.entry."""

import sys

from hpcprof.rank.entry import main

if __name__ == "__main__":
    sys.exit(main())
