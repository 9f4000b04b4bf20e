"""The code checks CI runs on every change, with the ruff that the [test] extra installs and the
[tool.ruff] settings of pyproject.toml: no unused or undefined names (pyflakes, ruff's F rules) in
the package or the tests, and lines of at most 120 characters in the modules already wrapped to it
(the rest of the package is wrapped as it is edited; the list grows with it)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

WRAPPED_TO_120 = [
    "hpcprof/analysis/cache.py",
    "hpcprof/analysis/intervals.py",
    "hpcprof/analysis/ranks/timeline.py",
    "hpcprof/analysis/ranks/waits.py",
    "hpcprof/rundir/__init__.py",
    "hpcprof/rundir/manifest.py",
    "hpcprof/rundir/manifest_codec.py",
    "hpcprof/spec/__init__.py",
    "hpcprof/spec/checks.py",
    "hpcprof/spec/schema.py",
    "tests/analysis/test_whatif.py",
    "tests/test_code_checks.py",
]


def _ruff() -> list[str]:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    exe = shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (it is in the [test] extra: pip install -e '.[test]')")
    return [exe]


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_package_and_tests_have_no_unused_or_undefined_names():
    done = _check("hpcprof", "tests")
    assert done.returncode == 0, done.stdout + done.stderr


def test_wrapped_modules_keep_their_lines_within_120_characters():
    missing = [f for f in WRAPPED_TO_120 if not (ROOT / f).is_file()]
    assert not missing, f"listed but not found (renamed? update WRAPPED_TO_120): {missing}"
    done = _check("--select", "E501", *WRAPPED_TO_120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_module_of_the_package_is_over_400_lines():
    """A module past ~400 lines holds two ideas: split it by idea (docs/architecture.md)."""
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "hpcprof").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, f"modules over 400 lines: {long}"
