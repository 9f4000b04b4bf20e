"""Issue 35, memory snapshots: what held the memory at the peak of a CUDA memory snapshot
(profiler.memory_snapshot), and an out-of-memory failure that points to the one written at it.

No GPU is at hand here, so the snapshots are written as torch.cuda.memory._snapshot documents them
(segments with their blocks, the allocator's actions per device), with a history whose answer is
known by construction: which blocks are live at the peak, how much memory that is, what the
out-of-memory entry asked for. A snapshot that is a hostile pickle is refused without running
anything (a run directory may come from anywhere)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from hpcprof.analysis import analyze
from hpcprof.analysis.outputs.console import console_summary
from hpcprof.launch.rank_report import oom_pointer
from hpcprof.rank.failures import FailureContext
from hpcprof.rundir import RunDir
from hpcprof.rundir.memory_snapshots import SnapshotError, peak_blocks, read_snapshot

from .conftest import TRACES

MiB = 2**20


def _frame(path: str, line: int, name: str) -> dict:
    return {"filename": path, "line": line, "name": name}


ALLOC = _frame("/usr/lib/python3/site-packages/torch/cuda/memory.py", 10, "malloc")


def snapshot() -> dict:
    """One device. A (4 MiB) was allocated before the history began and is active at the dump; E
    (1 MiB) too, and is freed first thing. Then B (8 MiB) and C (16 MiB, allocated at train.py:20)
    come, B goes, D (2 MiB) comes, a 64 MiB request fails, C goes. In use: 5, 4, 12, 28 (the peak:
    A, B and C live), 20, 22 MiB at the out-of-memory entry, 6 at the end."""
    def alloc(addr, size, line, name):
        return {"action": "alloc", "addr": addr, "size": size, "stream": 0,
                "frames": [ALLOC, _frame("/home/u/train.py", line, name)]}

    trace = [
        {"action": "free_completed", "addr": 500, "size": 1 * MiB, "stream": 0, "frames": []},
        alloc(200, 8 * MiB, 10, "make_b"),
        alloc(300, 16 * MiB, 20, "make_c"),
        {"action": "free_requested", "addr": 200, "size": 8 * MiB, "stream": 0, "frames": []},
        {"action": "free_completed", "addr": 200, "size": 8 * MiB, "stream": 0, "frames": []},
        alloc(400, 2 * MiB, 30, "make_d"),
        {"action": "oom", "size": 64 * MiB, "device_free": 1 * MiB, "stream": 0, "frames": [ALLOC, _frame("/home/u/train.py", 40, "big")]},
        {"action": "free_requested", "addr": 300, "size": 16 * MiB, "stream": 0, "frames": []},
        {"action": "free_completed", "addr": 300, "size": 16 * MiB, "stream": 0, "frames": []},
    ]
    segments = [{"device": 0, "address": 0, "total_size": 40 * MiB, "stream": 0, "segment_type": "large",
                 "segment_pool_id": (0, 0), "allocated_size": 6 * MiB, "active_size": 6 * MiB, "blocks": [
                     {"size": 4 * MiB, "requested_size": 4 * MiB, "address": 100, "state": "active_allocated",
                      "frames": [ALLOC, _frame("/home/u/model.py", 5, "build")]},
                     {"size": 2 * MiB, "requested_size": 2 * MiB, "address": 400, "state": "active_allocated", "frames": []},
                     {"size": 34 * MiB, "requested_size": 34 * MiB, "address": 600, "state": "inactive", "frames": []}]}]
    return {"segments": segments, "device_traces": [trace]}


def test_the_blocks_live_at_the_peak_are_named_with_the_lines_that_allocated_them(tmp_path):
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snapshot()))
    [v] = peak_blocks(read_snapshot(path))
    assert v["device"] == 0 and v["entries"] == 9
    assert v["peak_bytes"] == 28 * MiB and v["peak_entry"] == 2 and v["live_blocks_at_peak"] == 3
    assert [b["bytes"] for b in v["largest_blocks"]] == [16 * MiB, 8 * MiB, 4 * MiB]
    assert [b["where"] for b in v["largest_blocks"]] == ["/home/u/train.py:20 make_c", "/home/u/train.py:10 make_b",
                                                         "/home/u/model.py:5 build"]
    assert v["largest_blocks"][0]["frames"][0].endswith("memory.py:10 malloc")
    assert v["oom"] == [{"entry": 6, "requested_bytes": 64 * MiB, "device_free_bytes": 1 * MiB, "in_use_bytes": 22 * MiB,
                         "frames": ["/usr/lib/python3/site-packages/torch/cuda/memory.py:10 malloc", "/home/u/train.py:40 big"]}]
    assert v["reserved_bytes_at_dump"] == 40 * MiB and v["allocated_bytes_at_dump"] == 6 * MiB


class _Boom:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.target}",))


def test_a_hostile_pickle_is_refused_and_runs_nothing(tmp_path):
    bomb = _Boom()
    bomb.target = str(tmp_path / "ran")
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[bomb]]}))
    with pytest.raises(SnapshotError, match="refused to load"):
        read_snapshot(path)
    assert not (tmp_path / "ran").exists()
    path.write_bytes(b"not a pickle")
    with pytest.raises(SnapshotError, match=str(path)):
        read_snapshot(path)


def test_analyze_reports_an_out_of_memory_snapshot_in_the_summary_console_and_report(tmp_path):
    folder = tmp_path / "traces"
    shutil.copytree(TRACES / "hta_sampled_2of128", folder)
    (folder / "memory").mkdir()
    oom = snapshot()
    oom["device_traces"][0][2]["frames"][1]["name"] = "<script>make_c</script>"  # text from a run is escaped
    (folder / "memory" / "rank-1.oom.pickle").write_bytes(pickle.dumps(oom))
    bomb = _Boom()
    bomb.target = str(tmp_path / "ran")
    (folder / "memory" / "rank-0.pickle").write_bytes(pickle.dumps({"segments": [bomb], "device_traces": []}))
    s = analyze(folder, out=tmp_path / "out", progress=False)
    assert not (tmp_path / "ran").exists()
    assert any("memory snapshot of rank 0 left out" in w and "rank-0.pickle" in w for w in s["warnings"]), s["warnings"]
    [v] = s["memory_view"]["snapshots"]
    assert v["rank"] == 1 and v["at"] == "oom" and v["file"] == "memory/rank-1.oom.pickle" and v["peak_bytes"] == 28 * MiB
    text = console_summary(s)
    assert ("out of memory on rank 1 (device 0): 64.0 MiB requested with 22.0 MiB in use; largest block live at the "
            "peak 16.0 MiB, allocated at /home/u/train.py:20 <script>make_c</script> (memory/rank-1.oom.pickle)") in text
    html = Path(s["outputs"]["report"]).read_text()
    assert "CUDA memory snapshots" in html and "&lt;script&gt;make_c&lt;/script&gt;" in html and "<script>make_c" not in html
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["memory_view"]["snapshots"][0]["live_blocks_at_peak"] == 3


def test_a_snapshot_added_after_an_analysis_is_read_by_the_next_one(tmp_path):
    """The whole-analysis memo is keyed on the snapshots too: not served from before they existed."""
    folder = tmp_path / "traces"
    shutil.copytree(TRACES / "hta_sampled_2of128", folder)
    assert analyze(folder, out=tmp_path / "out", progress=False)["memory_view"]["snapshots"] == []
    (folder / "memory").mkdir()
    (folder / "memory" / "rank-0.pickle").write_bytes(pickle.dumps(snapshot()))
    s = analyze(folder, out=tmp_path / "out", progress=False)
    assert [(v["rank"], v["at"]) for v in s["memory_view"]["snapshots"]] == [(0, "first_trace")]


def test_an_out_of_memory_failure_note_points_to_the_snapshot_written_at_it(tmp_path, monkeypatch):
    """The rank side, without a GPU: the allocator's history is on (as RankProfiler turns it on with
    profiler.memory_snapshot), and torch's dump writes what it would write on a GPU."""
    import torch

    from hpcprof.rank import profiling

    run = RunDir(tmp_path / "run")
    (run.root / "failures").mkdir(parents=True)
    monkeypatch.setitem(profiling._HISTORY, "on", True)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda p: Path(p).write_bytes(pickle.dumps(snapshot())))
    FailureContext(run, 1, "n1").record(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB"))
    [note] = run.read_failures()
    assert note["kind"] == "oom" and note["memory_snapshot"] == "memory/rank-1.oom.pickle"
    assert peak_blocks(read_snapshot(run.root / note["memory_snapshot"]))[0]["oom"][0]["requested_bytes"] == 64 * MiB
    said = oom_pointer(run, note)
    assert str(run.root / "memory" / "rank-1.oom.pickle") in said and "python -m hpcprof.analyze" in said


def test_without_the_history_an_out_of_memory_note_says_how_to_get_one(tmp_path):
    import torch

    run = RunDir(tmp_path / "run")
    (run.root / "failures").mkdir(parents=True)
    FailureContext(run, 0, "n1").record(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    [note] = run.read_failures()
    assert note["kind"] == "oom" and note["memory_snapshot"] is None
    assert "--profiler-memory-snapshot" in oom_pointer(run, note)
    assert not (run.root / "memory").exists()
