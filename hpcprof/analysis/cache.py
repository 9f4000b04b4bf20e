"""Parse cache: per-rank tables keyed by the trace's content hash and ANALYSIS_VERSION.

Layout: <cache_dir>/<digest>-v<ANALYSIS_VERSION>/{meta.json, *.parquet}. An entry is written to a
temporary directory and renamed into place, so a crashed worker never leaves a half entry that
looks complete. Because the key is the hash of the file's bytes, a changed or replaced trace gets a
new key and is never served stale; bump ANALYSIS_VERSION whenever per-rank tables change meaning.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

ANALYSIS_VERSION = 6
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
        if meta.get("analysis_version") == ANALYSIS_VERSION and meta.get("digest") == digest:
            return d
    return None


class EntryWriter:
    """Context manager: write tables into a temp dir, atomically publish on success."""

    def __init__(self, cache_dir: str | os.PathLike, digest: str):
        self.final = entry_dir(cache_dir, digest)
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))

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
