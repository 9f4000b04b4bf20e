"""``python -m hpcprof.sbatch``: render an sbatch script from a job spec. The renderer is
:mod:`hpcprof.slurm.sbatch`; this shim keeps the user's command unchanged."""

from __future__ import annotations

import sys

from .slurm.sbatch import (  # noqa: F401  (re-exported for callers of the old module)
    RenderError,
    RenderOptions,
    available_templates,
    build_parser,
    main,
    render,
    sbatch_options,
    template_path,
    templates_dir,
)

if __name__ == "__main__":
    sys.exit(main())
