"""The report's memory view section: the PyTorch profiler TensorBoard plugin's memory view per rank
(allocated and reserved memory over the profiled steps, the peak with its operator and step, the
operators that allocate most) and the peaks side by side, from summary.json `memory_view`; where no
rank recorded memory, one line saying why. Everything from a trace is escaped (htmlparts)."""

from __future__ import annotations

import pandas as pd

from .htmlparts import esc, num, table


def _mib(v) -> str:
    """A size in MiB (KiB below one MiB: a CPU rank's few kilobytes are not "0.0 MiB")."""
    if v is None:
        return "–"
    return f"{v / 2**20:,.1f} MiB" if abs(v) >= 2**20 else f"{v / 2**10:,.1f} KiB"


def snapshots_part(snapshots: list[dict]) -> str:
    """What held the memory at the peak of each CUDA memory snapshot (summary.json
    memory_view.snapshots), an out-of-memory one first; "" without snapshots."""
    if not snapshots:
        return ""
    body = ("<h3>CUDA memory snapshots</h3><p>From the snapshots the ranks wrote (<code>profiler.memory_snapshot</code>; "
            "open them in <a href='https://pytorch.org/memory_viz'>pytorch.org/memory_viz</a> for the whole history): "
            "the peak of the memory in use over the recorded history and the largest blocks live at that peak, with "
            "the line that allocated each.</p>")
    for v in sorted(snapshots, key=lambda v: (v["at"] != "oom", v["rank"], v["device"])):
        head = (f"rank {esc(v['rank'])}, device {esc(v['device'])} ({esc(v['file'])}"
                f"{', written at its out-of-memory failure' if v['at'] == 'oom' else ''}): peak in use "
                f"{_mib(v['peak_bytes'])} with {num(v['live_blocks_at_peak'])} live blocks; reserved at the dump "
                f"{_mib(v['reserved_bytes_at_dump'])}")
        for o in v.get("oom") or []:
            head += (f"; <b>out of memory</b>: {_mib(o['requested_bytes'])} requested with {_mib(o['in_use_bytes'])} in use"
                     f" and {_mib(o['device_free_bytes'])} free on the device")
        rows = [{"size": _mib(b["bytes"]), "allocated at": b["where"], "frames": " <- ".join(b["frames"][:3])}
                for b in v["largest_blocks"]]
        body += f"<p>{head}.</p>" + table(pd.DataFrame(rows), max_rows=10)
    return body


def memory_section(s: dict, charts: str) -> str:
    """The section's HTML; `charts`: the two charts' HTML (report._chart: image or why left out)."""
    m = s.get("memory_view") or {}
    across, per = m.get("across_ranks") or {}, m.get("per_rank") or []
    snaps = snapshots_part(m.get("snapshots") or [])
    if not across.get("ranks"):
        return f"<p class='none'>No memory view: {esc(across.get('reason') or 'no rank was analysed')}.</p>" + snaps
    body = ("<p>The memory view of the PyTorch profiler's TensorBoard plugin (torch-tb-profiler 0.4.3), from the "
            "traces' <code>[memory]</code> events (<code>profile_memory</code>): allocated memory over time on each "
            "rank's device, the peak with the operator and profiled step where it was reached, and the operators "
            "that allocate most (self: the operator's own allocations, not its children's; docs/summary-json.md, "
            "MemoryView).</p>")
    if across.get("basis") == "bytes_since_start":
        body += ("<p class='warn'>These traces' memory events carry no <code>Total Allocated</code> (PyTorch before 1.10): "
                 "the curves are the memory allocated since the first event, not the device's total.</p>")
    body += (f"<p>Peak allocated: lowest {_mib(across['min'])} (rank {esc(across['min_rank'])}), median {_mib(across['median'])}, "
             f"highest {_mib(across['max'])} (rank {esc(across['max_rank'])}) over {num(across['ranks'])} ranks.</p>")
    differs = across.get("differs") or []
    if differs:
        body += "<p class='warn'>" + "; ".join(
            f"rank {esc(d['rank'])}: peak {_mib(d['peak_allocated_bytes'])}, {num(d['vs_median_pct'])}% from the median"
            f" (at {esc(d['peak_operator'] or 'no operator')}, step {esc(d['peak_step'])})" for d in differs) \
            + f" (more than {num(across['tolerance_pct'])}% from the median rank's peak).</p>"
    else:
        body += f"<p>No rank's peak is more than {num(across['tolerance_pct'])}% from the median.</p>"
    body += charts
    rows = [{"rank": r["rank"], "device": r["device"], "peak allocated": _mib(r["peak_allocated_bytes"]),
             "peak reserved": _mib(r["peak_reserved_bytes"]), "device memory": _mib(r["device_total_bytes"]),
             "peak at operator": r["peak_operator"], "peak in step": r["peak_step"],
             "top allocating operator": (r["top_operators"][0]["operator"] if r["top_operators"] else None),
             "note": r["reason"]} for r in per]
    body += "<h3>Per rank</h3>" + table(pd.DataFrame(rows), max_rows=64, note="tables/memory_view.csv")
    top = [{"rank": r["rank"], "operator": o["operator"], "self allocation": _mib(o["self_allocation_bytes"]),
            "self allocations": o["self_allocations"], "allocation (with children)": _mib(o["allocation_bytes"]),
            "self size increase": _mib(o["self_increase_bytes"])} for r in per[:4] for o in r["top_operators"][:5]]
    if top:
        body += ("<h3>Operators that allocate most (first ranks)</h3>"
                 + table(pd.DataFrame(top), max_rows=40, note="tables/memory_operators.csv"))
    return body + snaps
