"""The local map's processes (executors/local.py): `--workers N` is the analyze process itself and
N - 1 forked workers, all taking ranks; a worker that dies costs only the rank it was analysing."""

from __future__ import annotations

import os
from pathlib import Path

import hpcprof.analysis.executors.local as local
from hpcprof.analysis.decode.load import file_digest
from hpcprof.analysis.ranks.mapper import analyze_rank


def _traces(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith((".json", ".json.gz")))


# what the stand-ins below see (module level: the pool pickles the function it runs by name)
SEEN: dict[str, Path] = {}
DYING: dict[str, object] = {}


def recording(path, *a, **k):
    (SEEN["dir"] / Path(path).name).write_text(str(os.getpid()))
    return analyze_rank(path, *a, **k)


def dying(path, *a, **k):
    if os.getpid() != DYING["parent"] and Path(path) == DYING["victim"]:
        os._exit(3)  # as a segfault or the OOM killer would end it: no exception, no result
    return analyze_rank(path, *a, **k)


def test_the_parent_and_workers_minus_one_forked_workers_map_the_ranks(dlrm_copy, tmp_path, monkeypatch):
    seen = tmp_path / "pids"
    seen.mkdir()
    monkeypatch.setitem(SEEN, "dir", seen)
    monkeypatch.setattr(local, "analyze_rank", recording)
    files = _traces(dlrm_copy)
    results = local.map_local(files, tmp_path / "cache", False, workers=2, progress=False)
    assert [r.path for r in results] == [str(f) for f in files] and all(r.ok for r in results)
    pids = {p.name: int(p.read_text()) for p in seen.iterdir()}
    assert sorted(pids) == sorted(f.name for f in files)  # each rank analysed once
    assert os.getpid() in pids.values(), "the parent analysed no rank"
    assert len(set(pids.values())) == 2, pids  # the parent and one worker


def test_a_worker_that_dies_costs_only_its_rank(dlrm_copy, tmp_path, monkeypatch):
    files = _traces(dlrm_copy)
    victim = files[0]  # the first rank handed out goes to the worker (the parent takes from the end)
    monkeypatch.setitem(DYING, "parent", os.getpid())
    monkeypatch.setitem(DYING, "victim", victim)
    monkeypatch.setattr(local, "analyze_rank", dying)
    results = local.map_local(files, tmp_path / "cache", False, workers=2, progress=False)
    by = {Path(r.path): r for r in results}
    assert sorted(by) == files
    assert not by[victim].ok and victim.name in by[victim].error, by[victim].error
    assert all(by[f].ok for f in files[1:]), [by[f].error for f in files[1:] if not by[f].ok]


def test_the_parent_preloads_before_forking_only_when_a_rank_will_be_parsed(dlrm_copy, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(local, "preload", lambda: calls.append(1))
    files = _traces(dlrm_copy)[:2]
    digests = {f: file_digest(f) for f in files}
    cache_dir = tmp_path / "cache"
    assert local.map_local(files, cache_dir, True, workers=2, progress=False, digests=digests)[0].ok
    assert calls == [1]  # nothing cached yet
    assert all(r.cached for r in local.map_local(files, cache_dir, True, workers=2, progress=False, digests=digests))
    assert calls == [1]  # every rank in the cache: no preload
    local.map_local(files, cache_dir, False, workers=2, progress=False, digests=digests)
    assert calls == [1, 1]  # --no-cache parses them all
