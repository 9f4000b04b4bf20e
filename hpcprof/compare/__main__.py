"""`python -m hpcprof.compare`: see hpcprof/compare/cli.py."""

import sys

from .cli import main

sys.exit(main())
