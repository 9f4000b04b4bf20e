"""The map's memory (issue 21): Arrow allocates with the C library's allocator unless the user chose
another pool (hpcprof/analysis/__init__.py: its own kept ~50 MB more per map worker). Each check
runs in a fresh interpreter: the allocator is chosen when pyarrow is first imported, and the test
process imported it long ago."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _python(code: str, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"} | env
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=full, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


POOL = "import hpcprof.analysis, pyarrow as pa; print(pa.default_memory_pool().backend_name)"


def test_arrow_allocates_with_the_c_library_allocator_once_the_analysis_is_imported():
    assert _python(POOL) == "system"


def test_an_arrow_pool_the_user_chose_is_kept():
    assert _python(POOL, ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"
