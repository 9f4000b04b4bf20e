"""Timing-free canonical forms of an analysis' summary.json and merged timeline, and the cases whose
canonical outputs are stored in tests/data/reference_outputs.json (test_reference_outputs.py).

Why: the analysis' data flow may be rebuilt for speed (issue 21: the timeline's events produced in
the per-rank map, streamed by the parent), and such a rebuild must not change what a user reads.
The stored file was written by the code BEFORE that rebuild; the test analyses the same inputs with
today's code and compares. What is left out is what legitimately differs between two runs: paths of
the output and cache folders, the cache block (workers, parsed or cached ranks), the memo key
(it includes the versions), the HTA release that ran (`hta`). The timeline is compared as a
multiset of events (a viewer does not care in which order they come), with per-rank counts stored
to say where a difference lies.

A change that is meant to change the outputs (a new field, a new lane on the timeline) regenerates
the file, and its commit says why:

    .venv/bin/python -m tests.analysis.reference_outputs --write
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "tests" / "data" / "reference_outputs.json"

# name -> (trace folder under the shared traces, analyze() keyword arguments)
CASES = {
    "dlrm": ("param_dlrm_8x_v100", {}),
    "dlrm_budget_6000": ("param_dlrm_8x_v100", {"timeline_max_events": 6000}),
    "dlrm_budget_2500": ("param_dlrm_8x_v100", {"timeline_max_events": 2500}),
    "sampled": ("hta_sampled_2of128", {}),
    "sampled_one_step": ("hta_sampled_2of128", {"timeline_steps": "first"}),
    "sampled_budget_3000": ("hta_sampled_2of128", {"timeline_max_events": 3000}),
    "kineto0": ("kineto_resnet50_v100_workers0", {}),
    "kineto4": ("kineto_resnet50_v100_workers4", {}),
    # HTA's own test traces of other kinds: a CPU-only rank, an AMD (ROCm) job, an MTIA rank
    "hta_cpu_only": ("hta_tests/cpu_only", {}),
    "hta_amd": ("hta_tests/amd_trace", {}),
    "hta_mtia": ("hta_tests/mtia_trace_single_rank", {}),
}
TIMING_FREE_DROP = ("cache", "inputs_key", "hta")  # hta: the installed release, like the versions in the memo key


def _replace(o, subs: list[tuple[str, str]]):
    if isinstance(o, dict):
        return {k: _replace(v, subs) for k, v in o.items()}
    if isinstance(o, list):
        return [_replace(v, subs) for v in o]
    if isinstance(o, str):
        for a, b in subs:
            o = o.replace(a, b)
    return o


def canonical_summary(summary: dict, src: Path, out: Path) -> dict:
    """summary.json without what differs between two runs of the same inputs (paths, cache, memo key)."""
    s = {k: v for k, v in summary.items() if k not in TIMING_FREE_DROP}
    return _replace(s, [(str(out), "<out>"), (str(src), "<src>")])


def _numbers(e: dict) -> dict:
    """Times as floats: 4 and 4.0 are the same time to a viewer (and to JSON's number type)."""
    for k in ("ts", "dur"):
        if isinstance(e.get(k), int):
            e[k] = float(e[k])
    return e


def canonical_timeline(path: Path) -> dict:
    """The timeline document as {"meta": everything but the events, "events": sha256 of the sorted
    events (times as floats), "per_pid": {pid: {ph/cat: count}}}."""
    with gzip.open(path, "rb") as fh:
        doc = json.loads(fh.read())
    events = [_numbers(e) for e in doc.pop("traceEvents")]
    lines = sorted(json.dumps(e, sort_keys=True, separators=(",", ":")) for e in events)
    per_pid: dict = {}
    for e in events:
        c = per_pid.setdefault(str(e.get("pid")), Counter())
        c[f"{e.get('ph')}/{e.get('cat', '')}"] += 1
    return {
        "meta": doc,
        "n_events": len(events),
        "events_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
        "per_pid": {p: dict(sorted(c.items())) for p, c in sorted(per_pid.items())},
    }


def run_case(name: str, traces_root: Path, work: Path, cache_dir: Path | None = None) -> dict:
    """Analyse one case into `work/<name>` and return its canonical outputs."""
    from hpcprof.analysis import analyze

    folder, kwargs = CASES[name]
    src = traces_root / folder
    kwargs = dict(kwargs)
    if kwargs.get("timeline_steps") == "first":
        kwargs["timeline_steps"] = [_first_step(src)]
    out = work / name
    s = analyze(src, out=out, progress=False, cache_dir=cache_dir, **kwargs)
    return {"summary": canonical_summary(s, src, out), "timeline": canonical_timeline(out / "timeline.pt.trace.json.gz")}


def _first_step(src: Path) -> int:
    import re

    steps = set()
    for p in sorted(src.iterdir()):
        opener = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rt") as fh:
            steps |= {int(m) for m in re.findall(r'"ProfilerStep#(\d+)"', fh.read())}
    return min(steps)


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(__doc__)
        return 2
    sys.path.insert(0, str(REPO / "tests" / "analysis"))
    from conftest import TRACES  # the shared trace sets, wherever the fixtures find them

    with tempfile.TemporaryDirectory() as tmp:
        data = {name: run_case(name, TRACES, Path(tmp)) for name in CASES}
    STORE.parent.mkdir(parents=True, exist_ok=True)
    STORE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {STORE} ({STORE.stat().st_size} bytes, {len(data)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
