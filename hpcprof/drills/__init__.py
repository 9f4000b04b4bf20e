"""Trace-level drills: known delays injected into real multi-rank Kineto traces, so that a verdict
(which rank, what it costs) can be checked against an answer known by construction.

`trace_drill.inject` writes the drilled trace set and returns the truth (the job-time increase
measured on the written traces); `python -m hpcprof.drills.trace_drill --help` is its CLI.
`slow_gpu.slow_gpu` (`python -m hpcprof.drills.slow_gpu`) makes one rank's GPU F times slower: every
compute kernel of the rank takes F times as long; traces.py reads a set and measures the job time.
The names below are re-exported lazily, so that running the CLI module does not import it twice.
"""

__all__ = ["DrillError", "inject", "job_times"]


def __getattr__(name: str):
    if name in __all__:
        from . import trace_drill

        return getattr(trace_drill, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
