"""What the job ran and whether its ranks worked together: summary.json `workload`, `job_collectives`,
`control_collectives` and `trained_alone`.

Why here: the report, the console and notebooks must name a user's own job by what it is (its script
or function and their arguments, the batch size its step records hold) and never by the built-in
trainer's defaults (a script is not "resnet50, batch 32"); and a job whose ranks never communicated
has no straggler to name: its only collectives were hpcprof's own control rounds, which the map
leaves out (ranks/timeline.py), and saying "no straggler" would read as a healthy data-parallel job.
"""

from __future__ import annotations

import pandas as pd

from ...rundir.state import trained_alone as manifest_says_alone


def workload(manifest: dict, job_records: pd.DataFrame | None) -> dict:
    """summary.json `workload`: what ran (from the manifest's spec) and the batch size per rank as the
    step records say (None where they do not: then there is no samples/s either, never a guess)."""
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    w = spec.get("workload") if isinstance(spec.get("workload"), dict) else {}
    args = [str(a) for a in w.get("args") or [] if isinstance(a, (str, int, float))] if isinstance(w.get("args"), list) else []
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    if w.get("script"):
        kind, name = "script", str(w["script"])
    elif w.get("entry"):
        kind, name = "entry", str(w["entry"])
    elif spec:
        kind, name, args = "builtin", str(model.get("arch") or "resnet"), []
    else:
        kind, name = "unknown", None
    return {"kind": kind, "name": name, "args": args, "batch_per_rank": batch_per_rank(job_records)}


def batch_per_rank(records: pd.DataFrame | None) -> dict[str, float] | None:
    """Per rank, the median batch size of its step records that hold one; None when none does."""
    if records is None or records.empty or "batch_size" not in records or "rank" not in records:
        return None
    b = pd.to_numeric(records["batch_size"], errors="coerce")
    ok = records.assign(batch_size=b)[b.notna()]
    if ok.empty:
        return None
    return {str(int(r)): float(g.median()) for r, g in ok.groupby("rank")["batch_size"]}


def collective_counts(metas: dict[int, dict]) -> tuple[int | None, int]:
    """(the job's own collectives in the traces, summed over ranks, or None where a trace cannot show
    them; hpcprof's control collectives in the traces, left out of every collective analysis)."""
    job = [m.get("job_collectives") for m in metas.values()]
    known = None if not job or any(not isinstance(j, int) for j in job) else sum(job)
    return known, sum(int(m.get("control_collectives") or 0) for m in metas.values())


def trained_alone(manifest: dict, metas: dict[int, dict]) -> str | None:
    """Why the ranks trained alone (no cross-rank analysis applies), or None: they communicated, one
    rank is analysed, or it cannot be told (traces from before hpcprof marked its control rounds).

    Two pieces of evidence: the manifest (the latest attempt's process_group "none": more than one
    rank, and the training code never made a process group), or the traces (hpcprof's control rounds
    are there, the job's own collectives are not, on any rank)."""
    if len(metas) < 2:
        return None
    if manifest_says_alone(manifest):
        return ("the ranks trained alone: the training code never created a process group, so each rank "
                "trained by itself and no rank waited for another; no straggler can be named")
    job, control = collective_counts(metas)
    if job == 0 and control > 0:
        return (f"the ranks trained alone: the traces hold no collective of the job's own on any rank, only "
                f"hpcprof's {control} control collective(s) (left out of the analysis), so no rank waited for "
                "another in the profiled steps (no DDP or other collective on the job's process group); "
                "no straggler can be named")
    return None
