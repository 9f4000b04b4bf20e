"""Which HTA release is installed: the distribution that provides the `hta` module Python imports.

HTA (Holistic Trace Analysis) is published as `HolisticTraceAnalysis` up to 0.5.0 and as
`traceinsight` from 0.6 on; both install the same `hta` module. Both may have metadata on one
path (an environment upgraded with `pip install --target`, or a second site-packages first on
PYTHONPATH), so the release is the one whose recorded files hold the `hta/__init__.py` that an
import of `hta` finds, not whichever name answers first. A module of its own, importing nothing
of hpcprof, so that the training rank (which records its environment in the manifest) and the
analysis (which runs HTA) read the release the same way.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import NamedTuple

DISTRIBUTIONS = ("traceinsight", "HolisticTraceAnalysis")
"""HTA's distribution names: the current one (0.6 on) first, then the one it had up to 0.5."""

NOT_INSTALLED = ("HTA is not installed: neither traceinsight nor HolisticTraceAnalysis provides the `hta` module "
                 "(pip install HolisticTraceAnalysis, or traceinsight for HTA 0.6 and later)")


class HtaRelease(NamedTuple):
    name: str  # the distribution: "traceinsight" or "HolisticTraceAnalysis"
    version: str

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@functools.cache
def installed_hta() -> HtaRelease | None:
    """The distribution (and its version) whose files provide the `hta` module that `import hta`
    loads in this process; None where no `hta` module or neither distribution is installed.

    A distribution is recognised by its name (as pip normalises it) and its record of
    `hta/__init__.py` at the place the import finds it. An install that records no such file (an
    editable install) is taken when it is the only HTA distribution on the path."""
    spec = importlib.util.find_spec("hta")
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    found: list[HtaRelease] = []
    for name in DISTRIBUTIONS:
        for dist in importlib.metadata.distributions(name=name):  # every install of that name, in sys.path order
            rel = HtaRelease(name, dist.version)
            if any(f.as_posix() == "hta/__init__.py" and Path(dist.locate_file(f)).resolve() == origin
                   for f in dist.files or ()):
                return rel
            found.append(rel)
    return found[0] if len({r.name for r in found}) == 1 else None


def require_hta() -> HtaRelease:
    """installed_hta(), or RuntimeError with one line naming both distributions when it is None."""
    rel = installed_hta()
    if rel is None:
        raise RuntimeError(NOT_INSTALLED)
    return rel


__all__ = ["DISTRIBUTIONS", "NOT_INSTALLED", "HtaRelease", "installed_hta", "require_hta"]
