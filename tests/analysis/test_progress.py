"""The analysis shows what it is doing during its long phases (hpcprof.analysis.progress).

At 256 ranks, hashing the traces (an analysis into a folder whose outputs the memo might serve),
the reduce and the merged timeline's sizing pass each take seconds; before these bars a user saw
nothing for 7 s at the start and 6 s after the map. The bars appear once a phase has run for
progress.DELAY_S; set to 0 here, so a 2-rank analysis shows them.
"""

from __future__ import annotations

import re

from hpcprof.analysis import analyze, progress
from hpcprof.analysis.reduce.crossrank import STAGES

from .conftest import SAMPLED, require


def test_long_phases_have_progress_bars(tmp_path, monkeypatch, capsys):
    src = require(SAMPLED)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    analyze(src, out=tmp_path / "out", cache_dir=tmp_path / "cache", progress=False)
    capsys.readouterr()
    # outputs the memo might serve: the traces are hashed first; another budget: analysed again
    analyze(src, out=tmp_path / "out", cache_dir=tmp_path / "cache", progress=True, timeline_max_events=999_999)
    err = capsys.readouterr().err
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", err) if ln.strip()]
    size = sum(p.stat().st_size for p in src.iterdir() if p.is_file() and ".json" in p.name)
    hashed = [ln for ln in lines if ln.startswith("hpcprof: hashing traces")]
    assert hashed and hashed[-1].startswith("hpcprof: hashing traces: 100%"), hashed
    # the bar counts the traces' bytes: its total is their size (tqdm writes 1.23M for 1.23 MiB)
    total = re.search(r"/([\d.]+)([kMG]?)\b", hashed[-1])
    scale = {"": 1, "k": 1 << 10, "M": 1 << 20, "G": 1 << 30}[total.group(2)]
    assert abs(float(total.group(1)) * scale - size) <= 0.01 * size + 1024, (hashed[-1], size)
    reduce_ = [ln for ln in lines if ln.startswith("hpcprof: cross-rank analysis")]
    assert reduce_ and f"{len(STAGES)}/{len(STAGES)}" in reduce_[-1] and STAGES[-1] in reduce_[-1], reduce_
    assert any(ln.startswith("hpcprof: merged timeline, sizing") for ln in lines), lines
