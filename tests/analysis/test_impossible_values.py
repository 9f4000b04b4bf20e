"""Issue 37 item 5: times that cannot be true give no number.

A complete event whose ts or dur cannot be true (1e300, negative, null, missing) is left out of the
analysis with one warning per rank naming the file, the rank and the count
(hpcprof/analysis/decode/plausible.py). The answer known independently: the analysis of the same
trace with those events deleted from the file. Before, a dur of 1e300 printed a critical path of 300
digits and a straggler slowdown of 5.5e295, and 365 null durations moved the numbers without a word.

On copies of the real 8-rank DLRM trace set (8 x V100); rank 7 (the rank the others wait for) is
the one spoiled."""

from __future__ import annotations

import random
import re

from hpcprof.analysis import analyze, console_summary

from .conftest import DLRM, load_trace, require, write_trace


def _complete(events: list, cat: str | None = None) -> list[int]:
    return [i for i, e in enumerate(events) if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)]


def _dur_1e300(events):
    return {_complete(events, "kernel")[5]: {"dur": 1e300}}


def _ts_1e300(events):
    return {_complete(events, "cpu_op")[5]: {"ts": 1e300}}


def _negative_dur(events):
    i = next(i for i in _complete(events) if str(events[i].get("name", "")).startswith("ProfilerStep"))
    return {i: {"dur": -events[i]["dur"]}}


def _null_dur(events):
    return {i: {"dur": None} for i in random.Random(37).sample(_complete(events), 365)}


def _no_dur(events):
    return {i: {"dur": DELETE} for i in random.Random(7).sample(_complete(events, "kernel"), 40)}


DELETE = object()
SPOILS = {7: _negative_dur, 4: _null_dur, 0: _dur_1e300, 1: _ts_1e300, 5: _no_dur}
"""rank -> how its trace is spoiled (rank 7 is the one the others wait for: its steps set the job's)."""
COMPARED = ("per_rank", "stragglers", "straggler_slowdown", "replay_error_pct", "critical_path", "communication",
            "collective_matching", "step_time", "kernel_breakdown")


def _sets(tmp_path) -> tuple:
    """(spoiled copy, copy with the spoiled events deleted, {rank: events spoiled})."""
    spoiled, deleted = tmp_path / "spoiled", tmp_path / "deleted"
    spoiled.mkdir()
    deleted.mkdir()
    count = {}
    for p in sorted(require(DLRM).glob("*.json.gz")):
        doc = load_trace(p)
        rank = doc["distributedInfo"]["rank"]
        if rank in SPOILS:
            events = doc["traceEvents"]
            changes = SPOILS[rank](events)
            count[rank] = len(changes)
            for i, change in changes.items():
                for k, v in change.items():
                    if v is DELETE:
                        del events[i][k]
                    else:
                        events[i][k] = v
            write_trace(spoiled / p.name, doc)
            doc["traceEvents"] = [e for i, e in enumerate(events) if i not in changes]
            write_trace(deleted / p.name, doc)
        else:
            write_trace(spoiled / p.name, doc)
            write_trace(deleted / p.name, doc)
    return spoiled, deleted, count


def test_events_whose_times_cannot_be_true_are_left_out_with_one_warning_per_rank(tmp_path, parse_cache):
    spoiled, deleted, count = _sets(tmp_path)
    got = analyze(spoiled, out=tmp_path / "an-spoiled", workers=2, progress=False, cache_dir=parse_cache)
    want = analyze(deleted, out=tmp_path / "an-deleted", workers=2, progress=False, cache_dir=parse_cache)
    named = [w for w in got["warnings"] if "cannot be true" in w]
    assert len(named) == len(SPOILS), got["warnings"]
    for rank, n in count.items():
        line = next(w for w in named if f"(rank {rank})" in w)
        assert line.startswith(f"worker{rank}_") and f": {n} complete event" in line, line
    assert [w for w in got["warnings"] if w not in named] == want["warnings"]
    for key in COMPARED:
        assert got[key] == want[key], key
    # no absurd time reaches the console (a million seconds is 9 digits of ms)
    assert not re.search(r"\d{9,}(\.\d+)? ms", console_summary(got)), console_summary(got)
