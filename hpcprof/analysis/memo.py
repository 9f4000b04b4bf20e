"""The whole-analysis memo: when the trace bytes, the steps files, memory snapshots and manifest
(size, mtime), the options (ranks), the HTA release, ANALYSIS_VERSION and REDUCE_VERSION all match
the `inputs_key` of the summary.json already in the output folder, the outputs there are current
and are returned as they are, without mapping, reducing or drawing again.

The traces are hashed before the map only where the memo could serve outputs (`could_hit`): a first
analysis, or one with --no-cache, reads each trace once, in the map, and its key is made of the
hashes of the bytes the map decoded (so the key always names what the outputs were made of).
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from ..rundir import RunDir
from ..rundir.memory_snapshots import MEMORY_DIR
from .cache import ANALYSIS_VERSION
from .decode.load import file_digest
from .layout import AnalysisDir
from .outputs.summary import read_summary
from .progress import bytes_bar
from .ranks.result import RankResult

REDUCE_VERSION = 21
"""Part of the whole-analysis memo's key: outputs made under another version are made again. Bump it
in the change that makes the reduce or the outputs differ for the same per-rank tables (those are
covered by ANALYSIS_VERSION)."""


def could_hit(out: AnalysisDir) -> bool:
    """Whether `out` holds outputs the memo might serve (a summary and a report): the one case worth
    hashing every trace before the map for."""
    return out.summary.is_file() and out.report.is_file()


def trace_digests(files: list[Path], progress: bool = False) -> dict[Path, str]:
    """The content hash of each readable trace (unreadable ones left out), on all cores. `progress`:
    a bar of the bytes hashed, once hashing takes more than a second (256 ranks: 5 GB)."""
    import threading

    lock = threading.Lock()
    total = 0
    for f in files:
        try:
            total += f.stat().st_size
        except OSError:
            pass
    with bytes_bar(total, "hpcprof: hashing traces", progress) as bar:
        def advance(n: int) -> None:  # from the hashing threads
            with lock:
                bar.update(n)

        def digest(f: Path) -> str | None:
            try:
                return file_digest(f, on_block=advance if progress else None)
            except OSError:
                return None

        # xxhash releases the GIL on large blocks: hash the files on all cores
        with ThreadPoolExecutor(max_workers=max(1, min(len(files), os.cpu_count() or 1))) as pool:
            digests = dict(zip(files, pool.map(digest, files)))
    return {f: d for f, d in digests.items() if d is not None}


def read_digests(results: list[RankResult], before: dict[Path, str] | None) -> dict[Path, str]:
    """The content hash of each trace as the map decoded it (the key's, after the map); for a trace
    that could not be analysed, its hash from before the map, or taken now (none: unreadable)."""
    read = {Path(r.path): r.meta["digest"] for r in results if r.ok and r.meta.get("digest")}
    for r in results:
        f = Path(r.path)
        if f not in read:
            try:
                read[f] = (before or {}).get(f) or file_digest(f)
            except OSError:
                pass
    return read


def inputs_key(src: Path, files: list[Path], digests: dict[Path, str], ranks: Iterable[int] | None,
               options: str = "") -> str:
    """The memo key of the whole analysis of `files` whose content hashes are `digests` (a file
    without one is unreadable); `options`: the other analysis options that change the outputs (the
    merged timeline's steps and budget, the HTA release)."""
    parts = [f"v{ANALYSIS_VERSION}", f"r{REDUCE_VERSION}",
             f"ranks={sorted(ranks) if ranks is not None else None}", options]
    parts += [f"{f.name}:{digests.get(f, 'unreadable')}" for f in files]
    run = RunDir(src)
    extra = [run.steps_path(r) for r in run.step_ranks()]
    extra += sorted((run.root / MEMORY_DIR).glob("rank-*.pickle"))  # memory snapshots: summary memory_view.snapshots
    for p in extra + [run.manifest_path]:
        if p.is_file():
            st = p.stat()
            parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=20).hexdigest()


def memo_hit(out: AnalysisDir, key: str) -> dict | None:
    """The summary of the outputs in `out` when they were made from the same inputs, marked as
    reused (every rank cached, nothing parsed); else None."""
    try:
        s = read_summary(out.summary)
    except ValueError:  # unreadable, or not ours ([] or 42): analyse again
        return None
    if s.get("inputs_key") != key or not out.report.is_file():
        return None
    # the outputs must all still be there: a deleted table or chart is made again, not reported as present
    outputs = s.get("outputs") or {}
    files = [out.root / f for f in outputs.get("files") or []]
    files += [Path(p) for p in (outputs.get("plots") or {}).values()]
    if not files or not all(f.is_file() for f in files):
        return None
    c = s.setdefault("cache", {})
    c["cached_ranks"] = sorted(set(c.get("cached_ranks", [])) | set(c.get("parsed_ranks", [])))
    c["parsed_ranks"] = []
    c["outputs_reused"] = True
    return s
