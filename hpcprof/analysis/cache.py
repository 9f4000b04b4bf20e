"""The two caches of the analysis: the per-rank parse cache and the whole-analysis memo.

Parse cache: per-rank tables keyed by the trace's content hash and ANALYSIS_VERSION; an entry made
with another HTA release than the installed one (meta.json `hta`) is parsed again and replaced.

Layout: <cache_dir>/<digest>-v<ANALYSIS_VERSION>/{meta.json, *.parquet}. An entry is written to a
temporary directory and renamed into place, so a crashed worker never leaves a half entry that
looks complete. Because the key is the hash of the file's bytes, a changed or replaced trace gets a
new key and is never served stale; bump ANALYSIS_VERSION whenever per-rank tables change meaning.

Whole-analysis memo: when the trace bytes, the steps files, memory snapshots and manifest (size, mtime), the options
(ranks), the HTA release, ANALYSIS_VERSION and REDUCE_VERSION all match the `inputs_key` of the
summary.json already in the output folder, the outputs there are current and are returned as they are, without mapping,
reducing or drawing again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Iterator

from ..hta_release import installed_hta
from ..rundir import RunDir
from ..rundir.memory_snapshots import MEMORY_DIR
from ..rundir.layout import current_umask
from .decode.load import file_digest
from .outputs.layout import AnalysisDir
from .outputs.summary import read_summary
from .progress import bytes_bar

ANALYSIS_VERSION = 21
"""Part of every parse-cache key: an entry made under another version is never read. Bump it in the
change that makes a rank's analysis write different meta.json or per-rank tables for the same trace
(a column added, renamed or computed by another rule); what changed is in git log."""
REDUCE_VERSION = 21
"""Part of the whole-analysis memo's key: outputs made under another version are made again. Bump it
in the change that makes the reduce or the outputs differ for the same per-rank tables (those are
covered by ANALYSIS_VERSION)."""
META = "meta.json"


def entry_dir(cache_dir: str | os.PathLike, digest: str) -> Path:
    return Path(cache_dir) / f"{digest}-v{ANALYSIS_VERSION}"


def lookup(cache_dir: str | os.PathLike, digest: str) -> Path | None:
    d = entry_dir(cache_dir, digest)
    if (d / META).is_file():
        try:
            meta = json.loads((d / META).read_text())
        except (OSError, ValueError):
            return None
        found = (meta.get("analysis_version"), meta.get("digest"), meta.get("hta"))
        same = found == (ANALYSIS_VERSION, digest, hta_key())
        if same and _tables_intact(d):
            return d
    return None


def hta_key() -> str:
    """The installed HTA release as an entry records it: an entry made with another release is a
    miss, parsed again (HTA's numbers and tables may differ between releases)."""
    return str(installed_hta())


def _tables_intact(d: Path) -> bool:
    """Every Parquet table of an entry has its footer (a truncated or damaged file is a miss, parsed
    again, instead of failing every later run until --no-cache)."""
    import pyarrow.parquet as pq

    for p in d.glob("*.parquet"):
        try:
            pq.read_metadata(p)
        except Exception:
            return False
    return True


TMP_PREFIX = ".tmp-"
STALE_TMP_S = 24 * 3600.0
"""A temporary entry whose writer cannot be checked (another host, an older hpcprof's name) is
removed once it is this old."""


def _tmp_prefix() -> str:
    """Temporary entries are named after their writer (host and pid), so that a later analysis can
    tell the leftovers of a killed one from the work of one still running."""
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())
    return f"{TMP_PREFIX}{host}-{os.getpid()}-"


def sweep_stale(cache_dir: str | os.PathLike) -> list[Path]:
    """Remove the temporary entries of writers that are gone (an `analyze` killed by SIGKILL
    leaves its worker's half-written entry: nothing runs in a killed process to remove it; issue 23
    item 3): on this host when their pid no longer runs, elsewhere after STALE_TMP_S. Returns what
    was removed."""
    from ..rundir.state import pid_alive

    root = Path(cache_dir)
    host = _tmp_prefix()[len(TMP_PREFIX):].rsplit("-", 2)[0]
    removed = []
    try:
        leftovers = [p for p in root.iterdir() if p.name.startswith(TMP_PREFIX) and p.is_dir()]
    except OSError:
        return removed
    for p in leftovers:
        parts = p.name[len(TMP_PREFIX):].rsplit("-", 2)
        mine = len(parts) == 3 and parts[0] == host and parts[1].isdigit()
        try:
            if mine:
                stale = not pid_alive(int(parts[1]))
            else:
                stale = time.time() - p.stat().st_mtime > STALE_TMP_S
        except OSError:
            continue
        if stale:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def unwritable(cache_dir: str | os.PathLike) -> str | None:
    """Why no entry can be written into `cache_dir` (created where missing), or None when one can:
    a folder made there and removed (permission bits do not stop root; a path under a file or a
    file in its place stops everyone)."""
    try:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=_tmp_prefix(), dir=cache_dir))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


@contextlib.contextmanager
def scratch(root: Path) -> Iterator[Path]:
    """A folder under `root` (the output folder, which the SLURM array's tasks see too) for the
    per-rank tables of an analysis that writes nothing into the parse cache (--no-cache, or a cache
    folder that cannot be written: issue 37, item 18), removed when the analysis ends."""
    d = Path(tempfile.mkdtemp(prefix=".parse-", dir=root))
    os.chmod(d, 0o777 & ~current_umask())
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


class EntryWriter:
    """Context manager: write tables into a temp dir, atomically publish on success."""

    def __init__(self, cache_dir: str | os.PathLike, digest: str):
        self.final = entry_dir(cache_dir, digest)
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(), dir=cache_dir))
        os.chmod(self.tmp, 0o777 & ~current_umask())  # mkdtemp makes it 0700: follow the umask

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        if self.final.exists():
            shutil.rmtree(self.final, ignore_errors=True)
        try:
            os.replace(self.tmp, self.final)
        except OSError:  # a concurrent writer won; its entry is equivalent
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


# ------------------------------------------------------------------------- whole-analysis memo
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
