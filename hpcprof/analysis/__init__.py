"""Cross-rank analysis of a run directory or any folder of Kineto traces.

The folders follow the data flow:

  decode/     find, read and validate traces; decode each one once into an event table
  hta/        everything HTA: its frame from that table, its per-rank analyzers, TraceDiff
  ranks/      the per-rank map: ``analyze_rank`` on ONE trace (HTA analyses + host/GPU timeline),
              returning a typed RankResult whose small tables sit in the parse cache
  executors/  where the map runs: a local process pool, or a SLURM job array the caller gives
              (hpcprof.launch.analysis_array: the analysis imports nothing of the launcher)
  reduce/     cross-rank numbers from those tables: step times, stragglers, kernels, recommendations
  outputs/    the output folder: tables/, plots/, summary.json, report.html, the console lines
  cache.py    the parse cache (per rank, by content hash); memo.py: the whole-analysis memo
  layout.py   the output folder's names; intervals.py: interval algebra; pool.py: worker processes
  pipeline.py ``analyze()``: one call per step above

No two of these import each other in a circle: decode/ and hta/ come first, then ranks/,
executors/ and reduce/, then outputs/, memo.py and pipeline.py.
"""

import os as _os

# Arrow allocates with the C library's allocator: its own (mimalloc) keeps what it freed, and pandas'
# string columns and the Parquet writes and reads allocate through Arrow: the map workers' and the
# parent's peaks are lower at the same CPU time (benchmarks/README.md, runs 5-7). Read once, when
# pyarrow is first imported (a process that imported it already keeps its pool); a pool the user
# chose is kept. Set in the environment, so the SLURM array's tasks get it too.
_os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from .cache import ANALYSIS_VERSION  # noqa: E402
from .errors import AnalysisError  # noqa: E402
from .outputs.console import console_summary  # noqa: E402
from .pipeline import analyze  # noqa: E402
from .ranks.mapper import analyze_rank  # noqa: E402
from .ranks.result import RankResult  # noqa: E402

__all__ = ["ANALYSIS_VERSION", "AnalysisError", "RankResult", "analyze", "analyze_rank", "console_summary"]
