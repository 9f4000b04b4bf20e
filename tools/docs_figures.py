"""Regenerate the figures the docs quote, from the code's own output:  python tools/docs_figures.py

A documented figure is never typed by hand: each generated block of a page sits between
``<!-- generated: NAME (tools/docs_figures.py) -->`` and ``<!-- end generated: NAME -->`` and holds
the output of the command in BLOCKS (the console table, without the warnings and paths). The test
that runs the same command (tests/test_compare.py for "kineto") fails when the block and the output
differ, so a change of the statistics cannot leave an old interval in the docs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "tests" / "data"  # the real traces the repository carries (tests/data/README.md)

BLOCKS = {
    "kineto": (REPO / "docs" / "compare.md",
               ["-m", "hpcprof.compare", str(TRACES / "kineto_resnet50_v100_workers0"), str(TRACES / "kineto_resnet50_v100_workers4"),
                "--quiet"]),
}


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- generated: {name} (tools/docs_figures.py) -->", f"<!-- end generated: {name} -->"


def table_part(stdout: str) -> str:
    """The console output less what depends on the machine: warnings (they name paths) and the
    line naming the output folder."""
    keep = [ln.rstrip() for ln in stdout.splitlines() if not ln.startswith(("warning:", "comparison:", "noise level written"))]
    return "\n".join(keep).strip("\n")


def documented_block(name: str) -> str:
    """The text of a generated block as the page holds it (without its code fence)."""
    doc, _ = BLOCKS[name]
    start, end = _markers(name)
    text = doc.read_text()
    m = re.search(re.escape(start) + r"\n```\n(.*?)\n```\n" + re.escape(end), text, re.S)
    if not m:
        raise ValueError(f"{doc}: no generated block {name!r} ({start} ... {end})")
    return m.group(1)


def regenerate(name: str) -> None:
    doc, args = BLOCKS[name]
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([sys.executable, *args, "--out", str(Path(tmp) / "out")], cwd=REPO, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{name}: the command failed:\n{p.stderr[-2000:]}")
    start, end = _markers(name)
    text = doc.read_text()
    block = f"{start}\n```\n{table_part(p.stdout)}\n```\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{doc}: no block {start} ... {end} to fill")
    doc.write_text(pattern.sub(lambda _m: block, text))
    print(f"{doc.relative_to(REPO)}: block {name!r} regenerated")


if __name__ == "__main__":
    for n in sys.argv[1:] or list(BLOCKS):
        regenerate(n)
