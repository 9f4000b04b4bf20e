"""Run comparison (issues 11, 24): did a change help?

`compare(["runs/a", "runs/b", ...], out)`: the first run is the baseline; each argument is a run
directory, an analysis folder or a folder of traces, analysed first when needed. Modules, in data
order: inputs (arguments -> analysis folders), series (analysis folder -> per-step series and
per-run figures), arms (replicate runs grouped into arms; which runs an arm may use), noise
(run-to-run noise, detectable change, calibration files), student (t quantiles), stats (the change
of a metric between arms, its interval and verdict; the within-run bootstrap), deltas (operators
and kernels, HTA's TraceDiff), core (the comparison), charts, outputs (json, csv, html, console), cli.
"""

from .core import compare
from .inputs import CompareError
from .outputs import console_table

__all__ = ["CompareError", "compare", "console_table"]
