"""hpcprof: launch, profile every rank, analyse across ranks, report.

Entry points (thin CLIs over the library functions below):
  python -m hpcprof.submit   launch training (the built-in ResNet, or --entry/--script: your own code)
                             with a profiler trace and a step record per rank
  python -m hpcprof.sbatch   render an sbatch template from the same job spec
  python -m hpcprof.analyze  analyse a run directory (or any folder of Kineto traces)

In your own training code (needs torch only):

    import hpcprof

    with hpcprof.run(batch_size=32) as run:
        for batch in run.steps(loader):
            with run.region("forward"):
                ...

See hpcprof.rank.session for the whole API.
"""

__version__ = "0.1.0"


def run(batch_size=None, **kwargs):
    """This rank's profiling session for a training loop: ``with hpcprof.run(batch_size=B) as run:``.
    See :func:`hpcprof.rank.session.run` (arguments) and :class:`hpcprof.rank.session.Run` (the
    step loop: ``run.steps(loader)``, ``run.step()``, ``run.region(name)``, ``run.checkpoint(...)``)."""
    from .rank.session import run as _run

    return _run(batch_size, **kwargs)


__all__ = ["__version__", "run"]
