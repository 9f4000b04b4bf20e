"""The analysis output folder: every path and file name under ``<run>/analysis`` (or ``--out``).

One place for the names, so the orchestrator, the memo (memo.py), the report and the notebook
(``analysis/post_job.ipynb`` reads the same names) agree. docs/analysis.md "Outputs" lists what each holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import AnalysisError

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
TABLES_DIR = "tables"
PLOTS_DIR = "plots"
CACHE_DIR = ".cache"
SLURM_LOGS_DIR = "slurm-logs"
TIMELINE_FILE = "timeline.pt.trace.json.gz"
"""The merged timeline (outputs/timeline/trace.py); never read back as a rank's trace (decode/load.py)."""
PLOT_FILES = {
    "stragglers": "stragglers.png",
    "idle": "idle_time.png",
    "step_heatmap": "step_time_heatmap.png",
    "overlap": "overlap.png",
    "kernel_types": "kernel_types.png",
    "operators": "operators.png",
    "launches": "launches.png",
    "critical_path": "critical_path.png",
    "efficiency": "op_efficiency.png",
    "memory": "memory.png",
    "memory_ranks": "memory_ranks.png",
}
"""Chart key (summary.json outputs.plots) -> file name under plots/."""


@dataclass(frozen=True)
class AnalysisDir:
    """Paths of one analysis output folder."""

    root: Path

    @property
    def tables(self) -> Path:
        return self.root / TABLES_DIR

    @property
    def plots(self) -> Path:
        return self.root / PLOTS_DIR

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY_FILE

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    @property
    def default_cache(self) -> Path:
        """The parse cache when no --cache-dir is given."""
        return self.root / CACHE_DIR

    @property
    def slurm_logs(self) -> Path:
        return self.root / SLURM_LOGS_DIR

    def plot(self, key: str) -> Path:
        return self.plots / PLOT_FILES[key]

    def create(self) -> "AnalysisDir":
        """Make the folder and its tables/ and plots/; an AnalysisError says when that is impossible."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.tables.mkdir(exist_ok=True)
            self.plots.mkdir(exist_ok=True)
        except OSError as exc:
            raise AnalysisError(f"cannot write the analysis to {self.root} ({exc.strerror}); pass --out DIR") from None
        return self
