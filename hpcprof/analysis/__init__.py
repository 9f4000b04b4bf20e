"""Cross-rank analysis of a run directory or any folder of Kineto traces.

The folders follow the data flow:

  decode/     find, read and validate traces; decode each one once into an event table
  ranks/      the per-rank map: ``analyze_rank`` on ONE trace (HTA analyses + host/GPU timeline),
              returning a typed RankResult whose small tables sit in the parse cache
  executors/  where the map runs: a local process pool or a SLURM job array
  reduce/     cross-rank numbers from those tables: step times, stragglers, kernels, recommendations
  outputs/    the output folder: tables/, plots/, summary.json, report.html, the console lines
  cache.py    the parse cache (per rank, by content hash) and the whole-analysis memo
  pipeline.py ``analyze()``: one call per step above
"""

from .cache import ANALYSIS_VERSION
from .errors import AnalysisError
from .outputs.console import console_summary
from .pipeline import analyze
from .ranks.mapper import analyze_rank
from .ranks.result import RankResult

__all__ = ["ANALYSIS_VERSION", "AnalysisError", "RankResult", "analyze", "analyze_rank", "console_summary"]
