"""hpcprof: launch, profile every rank, analyse across ranks, report.

Entry points (thin CLIs over the library functions below):
  python -m hpcprof.submit   launch DDP ResNet training with a profiler trace per rank
  python -m hpcprof.sbatch   render an sbatch template from the same job spec
  python -m hpcprof.analyze  analyse a run directory (or any folder of Kineto traces)
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
