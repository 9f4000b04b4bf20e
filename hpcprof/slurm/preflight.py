"""The batch script's last check before ``srun`` starts any rank: ``python -m hpcprof.slurm.preflight``.

Every template runs it after checking that ``import hpcprof`` works (that check is shell, as it
must work without hpcprof). It stops the job with one line on stderr, exit 1, when

- torch does not import (a venv without the site's PyTorch module loaded: ``module purge`` and a
  venv made with ``--system-site-packages`` on that module);
- the rank code (:mod:`hpcprof.rank`: torchvision, the trainer, the profiler) does not import;
- SLURM gave the job GPUs (``SLURM_GPUS_ON_NODE``, else ``SLURM_JOB_GPUS``, in the batch step on the
  first node) and torch cannot use them: a CPU-only build, or a CUDA build newer than the node's
  driver. The line names torch's version, its CUDA version and the request.

Otherwise the ranks would each fail on their own (N tracebacks in N logs), or, without a GPU,
run on CPU and gloo. Nothing is printed on success. The GPU test is
:func:`hpcprof.rank.device.cuda_problem`, a pure function of what torch reports, which the ranks use
too: they refuse the same case in the same words.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Mapping

VENV_HINT = ("load the site's PyTorch module before the venv is activated (the template's module line; "
             "--module NAME when rendering) or pip install torch into the venv")


def _last_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def check(env: Mapping[str, str] | None = None) -> str | None:
    """The first problem found, in one line (without the ``hpcprof: error:`` prefix), or None."""
    env = os.environ if env is None else env
    python = sys.executable or "python"
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install raising anything else
        return f"torch is not importable by {python} ({_last_line(exc)}): {VENV_HINT}"
    try:
        importlib.import_module("hpcprof.rank")
    except Exception as exc:
        return (f"the rank code (hpcprof.rank) does not import with {python} ({_last_line(exc)}): "
                f"install what it lacks into this environment (pip install hpcprof installs its dependencies)")
    from ..rank.device import cuda_problem, gpus_requested

    requested = gpus_requested(env)
    if requested:
        available = torch.cuda.is_available()
        return cuda_problem(requested, torch.__version__, torch.version.cuda, available,
                            torch.cuda.device_count() if available else 0)
    return None


def main() -> int:
    problem = check()
    if problem:
        print(f"hpcprof: error: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
