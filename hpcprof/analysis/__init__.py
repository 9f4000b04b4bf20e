"""Cross-rank analysis of a run directory or any folder of Kineto traces.

Flow: load (discover, read, validate) -> per-rank map (`analyze_rank`: HTA analyses + host
timeline on one rank, cached by content hash) -> reduce (stragglers, steps, breakdowns) -> outputs
(summary.json, tables/, plots/, report.html).
"""

from .cache import ANALYSIS_VERSION
from .mapper import analyze_rank
from .pipeline import AnalysisError, analyze, console_summary

__all__ = ["ANALYSIS_VERSION", "AnalysisError", "analyze", "analyze_rank", "console_summary"]
