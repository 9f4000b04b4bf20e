"""Trace sets for the analysis benchmarks: N ranks of about M MB of JSON each, built by tiling the
real DLRM traces the repository carries (tests/data/param_dlrm_8x_v100, 8 ranks of one V100 job) in
time, every id and step number kept unique, so that a set is a real job's traces made longer (its
kernels, collectives and launch pattern) rather than synthetic events. Rank r of a set is source
rank r mod 8 with its distributedInfo rewritten (rank r of N). A set is written once under a root
folder and reused by later runs with the same parameters (its `.built` stamp).
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the DLRM traces the repository carries (tests/data/README.md); a collection beside the checkout as a fallback
SOURCE = next((p for p in (REPO / "tests" / "data" / "param_dlrm_8x_v100", (REPO / ".." / "shared" / "traces" / "param_dlrm_8x_v100").resolve())
               if p.is_dir()), REPO / "tests" / "data" / "param_dlrm_8x_v100")
SOURCE_RANKS = 8
GAP_US = 1000
ID_KEYS = ("External id", "correlation", "Ev Idx", "Sequence number")


def load_sources() -> dict[int, dict]:
    """The source traces by rank (SOURCE: the 8 DLRM ranks); exits naming the folder if a rank is missing."""
    docs = {}
    for f in sorted(SOURCE.glob("*.json*")):
        raw = f.read_bytes()
        doc = json.loads(gzip.decompress(raw) if f.name.endswith(".gz") else raw)
        docs[int(doc["distributedInfo"]["rank"])] = doc
    if sorted(docs) != list(range(SOURCE_RANKS)):
        raise SystemExit(f"{SOURCE}: expected ranks 0..{SOURCE_RANKS - 1}, found {sorted(docs)}")
    return docs


def _tile(doc: dict, copies: int) -> list:
    """The doc's events repeated `copies` times in time, ids and step numbers kept unique."""
    ev = doc["traceEvents"]
    timed = [e for e in ev if isinstance(e.get("ts"), (int, float)) and e.get("ph") not in ("M", "i") and e.get("cat") != "Trace"]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    shift = int(t1 - t0) + GAP_US
    id_span = 1 + max(
        [int(e["args"][k]) for e in ev for k in ID_KEYS if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)]
        + [int(e["id"]) for e in ev if isinstance(e.get("id"), int)]
        + [0]
    )
    tids = {id(e) for e in timed}
    once = [e for e in ev if id(e) not in tids]  # metadata, trace span, instants: kept once
    out = []
    for e in once:
        e = copy.deepcopy(e)
        if e.get("cat") == "Trace" and "dur" in e:
            e["dur"] = int(e["dur"] + shift * (copies - 1))
        elif e.get("ph") == "i" and e.get("name") == "Record Window End":
            e["ts"] = e["ts"] + shift * (copies - 1)
        out.append(e)
    for k in range(copies):
        for e in timed:
            e = dict(e)
            e["ts"] = e["ts"] + k * shift
            if isinstance(e.get("id"), int):
                e["id"] = e["id"] + k * id_span
            name = e.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k}"
            a = e.get("args")
            if isinstance(a, dict):
                a = dict(a)
                for key in ID_KEYS:
                    if isinstance(a.get(key), int) and a[key] >= 0:
                        a[key] = a[key] + k * id_span
                e["args"] = a
            out.append(e)
    return out


def build_set(root: Path, n: int, mb_per_rank: float, sources: dict[int, dict]) -> tuple[Path, float]:
    """Write an n-rank trace folder under root (reused when already built with the same parameters)."""
    d = root / f"ranks{n}-mb{mb_per_rank:g}"
    stamp = d / ".built"
    if stamp.is_file():
        return d, json.loads(stamp.read_text())["mb_per_rank"]
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    one = len(json.dumps(sources[0]).encode())
    copies = max(1, round(mb_per_rank * 1e6 / one))
    tiled = {s: _tile(sources[s], copies) for s in sorted({r % SOURCE_RANKS for r in range(n)})}
    sizes = []
    for r in range(n):
        src = sources[r % SOURCE_RANKS]
        doc = {k: v for k, v in src.items() if k != "traceEvents"}
        doc["distributedInfo"] = dict(src["distributedInfo"], rank=r, world_size=n)
        doc["traceEvents"] = tiled[r % SOURCE_RANKS]
        p = d / f"rank{r:03d}.pt.trace.json"
        tmp = p.with_name("." + p.name)
        tmp.write_text(json.dumps(doc))  # one dumps is much faster than json.dump's chunked writes
        tmp.replace(p)
        sizes.append(p.stat().st_size)
    mb = statistics.mean(sizes) / 1e6
    stamp.write_text(json.dumps({"ranks": n, "copies": copies, "mb_per_rank": mb}))
    return d, mb
