"""Run comparison (issue 11): did a change help?

`compare(["runs/a", "runs/b", ...], out)`: the first run is the baseline; each argument is a run
directory, an analysis folder or a folder of traces, analysed first when needed. Modules, in data
order: inputs (arguments -> analysis folders), series (analysis folder -> per-step series and
per-run figures), stats (bootstrap change and verdict), deltas (operators and kernels, HTA's
TraceDiff), core (the comparison), outputs (json, csv, png, html, console), cli.
"""

from .core import compare
from .inputs import CompareError
from .outputs import console_table

__all__ = ["CompareError", "compare", "console_table"]
