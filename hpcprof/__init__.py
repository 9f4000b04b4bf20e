"""hpcprof: launch, profile every rank, analyse across ranks, report.

Entry points (thin CLIs over the library functions below):
  python -m hpcprof.submit   launch training (the built-in ResNet, or --entry/--script: your own code,
                             unchanged) with a profiler trace and a step record per rank
  python -m hpcprof.wrap     the same for your own launcher: torchrun ... -m hpcprof.wrap train.py ARGS
  python -m hpcprof.sbatch   render an sbatch template from the same job spec
  python -m hpcprof.analyze  analyse a run directory (or any folder of Kineto traces)

A script needs no change (zero-change mode: one step per optimizer step). For more (regions, the
batch size, requeue with your state), in your training code (needs torch only):

    import hpcprof

    with hpcprof.run(batch_size=32) as run:
        for batch in run.steps(loader):
            with run.region("forward"):
                ...

or ``run = hpcprof.start(batch_size=32)`` at module level. See hpcprof.rank.api and
hpcprof.rank.session for the whole API.
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time the names below load on first use
    from .rank.api import run, start


def __getattr__(name):
    # hpcprof.run / hpcprof.start import torch: only when used, so that `import hpcprof` stays light
    if name in ("run", "start"):
        from .rank import api

        return getattr(api, name)
    raise AttributeError(f"module 'hpcprof' has no attribute {name!r}")


__all__ = ["__version__", "run", "start"]
