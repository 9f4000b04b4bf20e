"""The analysis' one user-facing error.

Its own module (not pipeline.py) because the executors raise it too, and the SLURM array executor
must not import the orchestrator that imports it.
"""

from __future__ import annotations


class AnalysisError(Exception):
    """Nothing could be analysed (bad path, no readable trace, no usable executor); the message says what to do."""
