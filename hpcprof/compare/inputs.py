"""Turn the command's arguments (run directories, analysis folders, trace folders) into analysis
folders, analysing what is not analysed yet.

Why through `hpcprof.analysis.analyze`: it is the one place that turns traces into numbers, it
returns at once when its outputs are current (its inputs key), and it refuses to write into a
read-only trace folder. A comparison therefore never re-implements an analysis and never shows a
number that the run's own report does not show.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


class CompareError(Exception):
    """An argument that cannot be compared; the message names it and says what to pass."""


@dataclass
class Resolved:
    label: str
    given: Path
    analysis_dir: Path
    trace_file: Path | None  # the lowest rank's trace (operator/kernel deltas), None without traces


def _label(p: Path, taken: set[str]) -> str:
    """The run's name as shown and as used in file names (tables/steps_<label>.csv): letters and
    digits of any script are kept (runs named 実験 and 試験 were `_` and `_-2`), anything else
    becomes `_`, and no label is hidden or a path (leading dots go: `..` is "run")."""
    base = p.name if p.name not in ("analysis", "traces", "") else p.resolve().parent.name
    base = re.sub(r"[^\w.-]+", "_", base).lstrip(".") or "run"
    label, k = base, 2
    while label in taken:
        label, k = f"{base}-{k}", k + 1
    taken.add(label)
    return label


def _writable(p: Path) -> bool:
    """Whether an analysis may go inside `p`: never into a read-only folder (shared trace sets), even
    as root, for whom os.access says yes to everything (the same rule as analyze)."""
    return bool(p.stat().st_mode & 0o222) and os.access(p, os.W_OK)


def resolve(args: list[str], out_dir: Path, workers: int | None = None, use_cache: bool = True, progress: bool = True) -> list[Resolved]:
    """One Resolved per argument, in order (the first is the baseline)."""
    from ..analysis import AnalysisError, analyze

    if len(args) < 2:
        raise CompareError("compare needs at least two runs: a baseline, then one or more runs to compare with it")
    taken: set[str] = set()
    out: list[Resolved] = []
    for a in args:  # every path checked before anything is analysed
        if not Path(a).is_dir():
            raise CompareError(f"{a}: not a directory; pass run directories (runs/<name>), analysis folders or trace folders")
    for a in args:
        p = Path(a)
        label = _label(p, taken)
        if (p / "summary.json").is_file() and not (p / "traces").is_dir():
            analysis_dir = p  # an analysis folder: its summary names the source
            src = _source_of(p)
        else:
            src = p
            analysis_dir = p / "analysis" if _writable(p) else out_dir / "analyses" / label
            try:
                analyze(src, out=analysis_dir, workers=workers, use_cache=use_cache, progress=progress)
            except AnalysisError as exc:
                raise CompareError(f"{a}: cannot be analysed: {exc}") from None
        out.append(Resolved(label, p, analysis_dir, lowest_rank_trace(src) if src is not None else None))
    return out


def _source_of(analysis_dir: Path) -> Path | None:
    from ..analysis.outputs.summary import read_summary

    try:
        s = read_summary(analysis_dir / "summary.json")
    except ValueError as exc:
        raise CompareError(f"{exc}; run python -m hpcprof.analyze on its run or traces again") from None
    src = Path(s.get("source", ""))
    return src if src.is_dir() else None


def lowest_rank_trace(src: Path) -> Path | None:
    """The trace of the lowest rank in a run directory or trace folder (HTA's TraceDiff default)."""
    from ..analysis.decode.load import discover_traces

    files = discover_traces(src)
    if not files:
        return None
    from ..rundir.layout import rank_from_name

    named = [(rank_from_name(f.name), f) for f in files]
    if all(r is not None for r, _ in named):
        return min(named)[1]
    return files[0]
