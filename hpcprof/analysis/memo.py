"""The whole-analysis memo: when the trace bytes, the steps files, memory snapshots and manifest
(size, mtime), the options (ranks), the HTA release, ANALYSIS_VERSION and REDUCE_VERSION all match
the `inputs_key` of the summary.json already in the output folder, the outputs there are current
and are returned as they are, without mapping, reducing or drawing again.
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

REDUCE_VERSION = 21
"""Part of the whole-analysis memo's key: outputs made under another version are made again. Bump it
in the change that makes the reduce or the outputs differ for the same per-rank tables (those are
covered by ANALYSIS_VERSION)."""


def inputs_key(src: Path, files: list[Path], ranks: Iterable[int] | None, options: str = "",
               progress: bool = False) -> tuple[dict[Path, str], str]:
    """(content hash per readable trace, the memo key of the whole analysis); `options`: the other
    analysis options that change the outputs (the merged timeline's steps and budget). `progress`:
    a bar of the bytes hashed, once hashing takes more than a second (256 ranks: 5 GB, seconds)."""
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

        def digest(f: Path) -> str:
            try:
                return file_digest(f, on_block=advance if progress else None)
            except OSError:
                return "unreadable"

        # hashlib releases the GIL on large blocks: hash the files on all cores
        with ThreadPoolExecutor(max_workers=max(1, min(len(files), os.cpu_count() or 1))) as pool:
            digests = dict(zip(files, pool.map(digest, files)))
    parts = [f"v{ANALYSIS_VERSION}", f"r{REDUCE_VERSION}",
             f"ranks={sorted(ranks) if ranks is not None else None}", options]
    parts += [f"{f.name}:{digests[f]}" for f in files]
    run = RunDir(src)
    extra = [run.steps_path(r) for r in run.step_ranks()]
    extra += sorted((run.root / MEMORY_DIR).glob("rank-*.pickle"))  # memory snapshots: summary memory_view.snapshots
    for p in extra + [run.manifest_path]:
        if p.is_file():
            st = p.stat()
            parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    key = hashlib.blake2b("\n".join(parts).encode(), digest_size=20).hexdigest()
    return {f: d for f, d in digests.items() if d != "unreadable"}, key


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
