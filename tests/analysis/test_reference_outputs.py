"""The summaries and the merged timelines of the shared trace sets are what the code before issue 21
produced, apart from paths and the cache block (reference_outputs.py says what is left out and how
to regenerate the stored file when a change is MEANT to change the outputs).

The stored outputs (tests/data/reference_outputs.json) were written by main's code before issue 21
(first at c191f21; again at 8cdfa09, whose only difference is the new `captures` field; again for
issue 22, whose differences are new fields, the communication advice and the critical-path lane, as
its commit lists them), when the
timeline still decoded every trace a second time in the parent; since then each rank's timeline
piece is built in its map task and the parent streams the pieces. Cases: DLRM (8 ranks) with the
default budget and two budgets that drop whole kinds and part of one (the shortest CPU ops across
ranks), the sampled 2-of-128 set whole, one of its two steps, and under a budget, the two
single-rank kineto traces, and three of HTA's test folders (CPU-only, AMD, MTIA).
"""

from __future__ import annotations

import json

import pytest

from .conftest import TRACES, require
from .reference_outputs import CASES, STORE, run_case


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(STORE.read_text())


# fields added since the reference was stored, with the value that means "as before", or a check of a
# new fact against the rest of the same object
ADDED_SINCE = {
    "steps_left_out": [],
    # issue 36: a folder of traces has no hangs/, so no hang verdict
    "hang": None,
    # issue 33: these trace folders hold no manifest and none of hpcprof's control rounds
    "control_collectives": 0, "trained_alone": None, "process_group": None,
    "workload": {"kind": "unknown", "name": None, "args": [], "batch_per_rank": None},
    # every collective in them is the job's: at least one per matched instance
    "job_collectives": lambda v, now: isinstance(v, int) and v >= now["collectives_matched"],
}


def _as_before(k, now: dict) -> bool:
    want = ADDED_SINCE[k]
    return want(now[k], now) if callable(want) else now[k] == want


def _diff(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a and k in ADDED_SINCE and _as_before(k, b):
                continue
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing now' if k not in b else 'new'}")
            else:
                out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: was {json.dumps(a)[:200]}, now {json.dumps(b)[:200]}"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_equal_the_stored_reference(name, stored, tmp_path, parse_cache):
    require(TRACES / CASES[name][0])
    now = json.loads(json.dumps(run_case(name, TRACES, tmp_path, cache_dir=parse_cache)))
    diffs = _diff(stored[name], now)
    assert not diffs, f"{name}: {len(diffs)} differences, first ones:\n  " + "\n  ".join(diffs[:20])
