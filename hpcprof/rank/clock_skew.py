"""The clock-skew drill, rank side: the ranks of one node write their trace timestamps shifted by a
known amount, as an unsynchronised host would.

Why: hosts of a real cluster disagree by up to milliseconds, and a clock offset looks exactly like
a late (or early) rank. The analysis estimates each host's offset from collective end times
(hpcprof.analysis.reduce.clocks); this drill gives it an offset whose answer is known in advance:
every event timestamp (`ts`) of the trace moves by `ms`, nothing else changes (Kineto's
`baseTimeNanoseconds` is added to `ts` by readers that want wall time, so it stays as it is),
so the recovered offset must equal `ms` and the straggler and wait numbers must not move.
The step records (steps/*.jsonl) are left alone: the drill skews the trace's clock, not the job.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def skew_trace_file(path: str | Path, ms: float) -> int:
    """Shift every numeric `ts` of the trace at `path` (.json or .json.gz, rewritten in place) by
    `ms` milliseconds. Returns the number of events shifted."""
    path = Path(path)
    gz = path.name.endswith(".gz")
    raw = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    doc = json.loads(raw)
    us = float(ms) * 1e3
    n = 0
    for e in doc.get("traceEvents", []):
        ts = e.get("ts") if isinstance(e, dict) else None
        if isinstance(ts, (int, float)) and not isinstance(ts, bool):
            # keep Kineto's integer/float form: integers stay integers when the shift is whole
            e["ts"] = ts + (int(us) if isinstance(ts, int) and float(us).is_integer() else us)
            n += 1
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return n
