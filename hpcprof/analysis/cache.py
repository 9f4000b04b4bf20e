"""The per-rank parse cache of the analysis (the whole-analysis memo is memo.py).

Parse cache: per-rank tables keyed by the trace's content hash and ANALYSIS_VERSION; an entry made
with another HTA release than the installed one (meta.json `hta`) is parsed again and replaced.

Layout: <cache_dir>/<digest>-v<ANALYSIS_VERSION>/{meta.json, *.parquet}. An entry is written to a
temporary directory and renamed into place, so a crashed worker never leaves a half entry that
looks complete. Because the key is the hash of the file's bytes, a changed or replaced trace gets a
new key and is never served stale; bump ANALYSIS_VERSION whenever per-rank tables change meaning.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator

from ..hta_release import installed_hta
from ..rundir.layout import current_umask

ANALYSIS_VERSION = 21
"""Part of every parse-cache key: an entry made under another version is never read. Bump it in the
change that makes a rank's analysis write different meta.json or per-rank tables for the same trace
(a column added, renamed or computed by another rule); what changed is in git log."""
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
