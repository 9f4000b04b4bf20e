"""Turn the command's arguments (run directories, analysis folders, trace folders) into analysis
folders, analysing what is not analysed yet.

Why through `hpcprof.analysis.analyze`: it is the one place that turns traces into numbers, it
returns at once when its outputs are current (its inputs key), and it refuses to write into a
read-only trace folder. A comparison therefore never re-implements an analysis and never shows a
number that the run's own report does not show.

Where an analysis goes: a run directory's into its own `analysis/` (where `analyze` puts it, so
that the comparison reuses it and the run's report shows the same numbers), unless the run
directory is read-only; any other folder (a folder of traces, a run's `traces/`) is the user's
input and gets nothing written into it: its analysis goes under the comparison's output folder,
`<out>/analyses/<label>/`.

One run is one run: the same folder given twice (through a symlink, `./`, a trailing slash, or as
a run directory and its analysis folder) counts once (`distinct`); two copies of a run made by a
comparison of one run with itself were a "two-run arm" with a spread of 0.0%.
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


def _is_analysis(p: Path) -> bool:
    return (p / "summary.json").is_file() and not (p / "traces").is_dir()


def _is_run(p: Path) -> bool:
    """A run directory (the analysis' own test: a manifest or a traces/ folder)."""
    from ..rundir import RunDir

    run = RunDir(p)
    return run.manifest_path.is_file() or run.traces_dir.is_dir()


def check_dirs(args: list[str]) -> None:
    for a in args:  # every path checked before anything is analysed
        if not Path(a).is_dir():
            raise CompareError(f"{a}: not a directory; pass run directories (runs/<name>), analysis folders or trace folders")


def run_key(a: str) -> Path:
    """The run a path names, to spot one run given twice: the folder with symlinks, `.` and `..`
    resolved; an analysis folder counts as the folder it analysed (its summary's `source`)."""
    p = Path(a).resolve()
    if _is_analysis(p):
        src = _source_of(p)
        if src is not None:
            return src.resolve()
    return p


def distinct(groups: list[tuple[str | None, list[str]]]) -> tuple[list[tuple[str | None, list[str]]], list[str]]:
    """The arguments with each run once, and a warning per run given twice; `groups`: the explicit
    arms [(label, paths)], or [(None, the positional paths)]. One run in two explicit arms is an
    error (which arm is it?); fewer than two runs left is "nothing to compare"."""
    seen: dict[Path, tuple[str | None, str]] = {}
    kept, warnings = [], []
    for label, paths in groups:
        mine = []
        for a in paths:
            key = run_key(a)
            if key in seen:
                other_label, other = seen[key]
                if other_label != label:
                    raise CompareError(f"{a} is in --group {other_label} (as {other}) and in --group {label}: a run belongs to one arm")
                warnings.append(f"{a}: given twice (also as {other}, both {key}): counted once")
                continue
            seen[key] = (label, a)
            mine.append(a)
        kept.append((label, mine))
    if len(seen) < 2:
        named = " and ".join(dict.fromkeys(a for _, ps in groups for a in ps))
        raise CompareError(f"nothing to compare: {named} are one run ({next(iter(seen))}); give a baseline and another run, "
                           "or two or more replicates of one arm")
    return kept, warnings


def resolve(args: list[str], out_dir: Path, workers: int | None = None, use_cache: bool = True, progress: bool = True) -> list[Resolved]:
    """One Resolved per argument, in order (the first is the baseline)."""
    from ..analysis import AnalysisError, analyze

    if len(args) < 2:
        raise CompareError("compare needs at least two runs: a baseline, then one or more runs to compare with it")
    taken: set[str] = set()
    out: list[Resolved] = []
    check_dirs(args)
    for a in args:
        p = Path(a)
        label = _label(p, taken)
        if _is_analysis(p):
            analysis_dir = p  # an analysis folder: its summary names the source
            src = _source_of(p)
        else:
            src = p
            analysis_dir = p / "analysis" if _is_run(p) and _writable(p) else out_dir / "analyses" / label
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
