"""The run's configuration as the report and the console say it: what ran (the built-in trainer's
model and data, or the user's script or function with its arguments), the batch size, the ranks,
the launch, the profiler, the drills and the versions.

Why a user's job is described from summary.json `workload`, not from the spec's built-in sections:
a script has its own model and data, so "resnet50, batch 32 per rank" (the built-in trainer's
defaults) would describe a job that never ran. Its batch size is what its step records hold, or
"unknown", and then no samples/s is given anywhere (reduce.throughput: none without a batch size).
"""

from __future__ import annotations

import shlex


def workload_text(w: dict | None) -> str | None:
    """"script /path/train.py --lr 0.05", "entry pkg.mod:train --x 1" or None (built-in, unknown)."""
    if not w or w.get("kind") not in ("script", "entry") or not w.get("name"):
        return None
    return " ".join([w["kind"], shlex.quote(str(w["name"])), *(shlex.quote(str(a)) for a in w.get("args") or [])])


def batch_text(w: dict | None) -> str:
    """The batch size per rank as the step records hold it, or "unknown" (then no samples/s)."""
    per = (w or {}).get("batch_per_rank") or {}
    if not per:
        return "unknown (the step records hold no batch size: no samples/s)"
    sizes = sorted(set(per.values()))
    if len(sizes) == 1:
        return f"{sizes[0]:g} per rank (as the step records say)"
    return "per rank, as the step records say: " + ", ".join(f"rank {r}: {b:g}" for r, b in sorted(per.items(), key=lambda x: int(x[0])))


def run_config(manifest: dict | None, s: dict) -> list[tuple[str, str]]:
    """(label, value) pairs of the run's configuration from the manifest and the summary (the ranks
    and devices only, for trace folders)."""
    m = manifest or {}
    spec = m.get("spec") or {}
    model, data, res, prof = (spec.get(k) or {} for k in ("model", "data", "resources", "profiler"))
    w = s.get("workload") or {}
    v = m.get("versions") or {}
    rows = []
    user = workload_text(w)
    if user:
        rows.append(("Workload", user))
        rows.append(("Batch", batch_text(w)))
    else:
        if model:
            extra = [x for x, on in (("channels_last", model.get("channels_last")), ("torch.compile", model.get("compile"))) if on]
            rows.append(("Model", f"{model.get('arch')} ({model.get('image_size')} px images{', ' + ', '.join(extra) if extra else ''})"))
            rows.append(("AMP", str(model.get("amp", "off"))))
        if data:
            rows.append(("Batch", f"{data.get('batch_size')} per rank"))
            rows.append(("Data", f"{data.get('source')}, {data.get('num_workers', 0)} DataLoader workers, pin_memory {data.get('pin_memory')}"))
    ranks = m.get("world_size") or s.get("world_size")
    nodes = m.get("nodes") or []
    if not nodes:
        nodes = sorted({str(r.get("node")) for r in s.get("per_rank", []) if r.get("node")})
    rows.append(("Ranks", f"{ranks} on {len(nodes) or 'unknown'} node(s){' ' + ', '.join(map(str, nodes)) if nodes else ''}; device {s.get('device')}"
                 + (f"; backend {m['backend']}" if m.get("backend") else "")))
    if not m:
        rows.append(("Source", "a folder of traces without a manifest: model, batch and versions are not recorded"))
    if m.get("executor"):
        rows.append(("Launch", f"{m.get('executor')} ({m.get('launcher', '')}), job {m.get('job_id', '?')}"))
    if prof:
        rows.append(("Profiler", f"wait {prof.get('wait')}, warmup {prof.get('warmup')}, active {prof.get('active')}, repeat {prof.get('repeat')}"))
    drills = {k: x for k, x in (m.get("drills") or {}).items() if x}
    if drills:
        rows.append(("Drills", ", ".join(f"{k} {x}" for k, x in drills.items())))
    if v:
        rows.append(("Versions", ", ".join(f"{k} {x}" for k, x in v.items() if x)))
    return rows
