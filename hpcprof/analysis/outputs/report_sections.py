"""Report sections on communication and on the cross-rank critical path (report.py lays them out).

Communication: HTA's share and ours side by side, labelled, with the reason for every kernel
family counted as communication that HTA's name rule misses, and the split of the time in
collectives into waiting for the last arrival and transfer. Critical path: per profiled step, the
chain of (rank, segment or collective) that sets the step's end, its time by rank and category.
"""

from __future__ import annotations

import pandas as pd

from .htmlparts import esc, num, table

PER_RANK_COMM = ["rank", "node", "comm_kernel_pct_hta", "comm_kernel_pct", "compute_pct", "compute_pct_hpcprof",
                 "comm_comp_overlap_pct", "comm_comp_overlap_pct_hpcprof", "comm_wait_ms_per_step", "comm_transfer_ms_per_step"]


def _pct(v) -> str:
    return "-" if v is None else f"{num(v, 'x_pct')}%"


def communication_section(s: dict, tables: dict) -> str:
    c = s.get("communication") or {}
    if s.get("device") in (None, "cpu"):
        body = "<p>CPU ranks: the collectives are the gloo worker thread's <code>gloo:&lt;op&gt;</code> events.</p>"
    else:
        body = (f"<p>Communication takes <b>{_pct(c.get('share_pct'))}</b> of the GPU kernel time (all ranks, hpcprof), "
                f"{_pct(c.get('overlapped_pct'))} of it overlapped with computation; "
                f"HTA's kernel-name rule (<code>nccl*Kernel</code>) finds {_pct(c.get('hta_share_pct'))}.")
        if c.get("differs"):
            body += (" They differ: HTA's numbers (per-rank compute and overlap, the kernel breakdown) are kept as HTA's, "
                     "ours are beside them (columns marked hpcprof).</p><ul>"
                     + "".join(f"<li>{esc(x['note'])}</li>" for x in c.get("reclassified") or []) + "</ul>")
        else:
            body += " They agree: every communication kernel is NCCL-named.</p>"
        body += f"<p class='sub'>Rule: {esc(c.get('rule'))}.</p>"
    if c.get("wait_share") is not None:
        body += (f"<p>Of the ranks' time inside the matched collectives ({num(c.get('in_collectives_ms_per_step'))} ms per step "
                 f"over all ranks), <b>{100 * c['wait_share']:.0f}% is waiting</b> for the last rank to arrive and "
                 f"{100 * (c.get('transfer_share') or 0):.0f}% is transfer (what-if replay). Only the transfer is what a faster "
                 "interconnect, larger buckets or fewer collectives shorten; the waiting is the late ranks'.</p>")
        who = c.get("waited_for") or []
        if who:
            body += "<p>Waited for:</p>" + table(pd.DataFrame(who))
    pr = tables.get("per_rank")
    if pr is not None and not pr.empty and s.get("device") not in (None, "cpu"):
        body += "<h3>Per rank: HTA's numbers and ours</h3>" + table(pr, columns=PER_RANK_COMM, max_rows=64)
    if c.get("differs") and c.get("kernel_breakdown"):
        body += "<h3>Kernel breakdown with our communication kernels (HTA's is in GPU time and kernels)</h3>"
        body += table(pd.DataFrame(c["kernel_breakdown"]))
    return body


def critical_path_section(s: dict, tables: dict, chart: str) -> str:
    cp = s.get("critical_path")
    if not cp:
        return chart + "<p class='none'>(no profiled step could be replayed across ranks)</p>"
    body = ("<p>Per profiled step, the chain of (rank, segment or collective) that sets the step's end: the rank that ends "
            "last, its tail, the collective it waited for, the rank that arrived last there and its segment before it, and "
            "so on back to the step's start (<i>start skew</i>: a rank entering the step after the first one). Its total "
            "equals the replayed step time; time by rank and category says whose work, doing what, the job waits on. "
            "Also on the merged timeline, lane &ldquo;hpcprof: critical path&rdquo;.</p>")
    body += chart
    rows = []
    for st in cp.get("steps", []):
        ranks = ", ".join(f"rank {r} {num(v)} ms" for r, v in list(st["by_rank_ms"].items())[:4])
        cats = ", ".join(f"{k.replace('_', ' ')} {num(v)} ms" for k, v in list(st["by_category_ms"].items())[:4])
        rows.append({"step": st["step"], "total_ms": st["total_ms"], "replayed_ms": st["replayed_ms"], "measured_ms": st["measured_ms"],
                     "links": st["links"], "by_rank": ranks, "by_category": cats})
    body += table(pd.DataFrame(rows))
    links = tables.get("critical_path")
    if links is not None and not links.empty:
        first = links[links["step"] == links["step"].min()]
        cols = ["step", "order", "rank", "kind", "collective_kind", "start_ms", "dur_ms"] + \
            [c for c in first.columns if c.endswith("_ms") and c not in ("start_ms", "dur_ms") and first[c].abs().sum() > 0]
        body += f"<h3>The chain of step {esc(int(first['step'].iloc[0]))}</h3>" + table(first, columns=cols, max_rows=60, note="tables/critical_path.csv")
    return body


def critical_path_verdict(s: dict) -> str:
    """One verdict line: whose work the critical path runs through, per step on average."""
    cp = s.get("critical_path")
    if not cp or not cp.get("by_rank_ms_per_step"):
        return ""
    tot = cp.get("total_ms_per_step") or 0.0
    ranks = list(cp["by_rank_ms_per_step"].items())[:3]
    cats = list(cp.get("by_category_ms_per_step", {}).items())[:3]
    share = (lambda v: f" ({100 * v / tot:.0f}%)") if tot else (lambda v: "")
    return ("<li><b>Critical path</b> across ranks (" + num(tot) + " ms per step): "
            + ", ".join(f"rank {esc(r)} {num(v)} ms{share(v)}" for r, v in ranks) + "; by category "
            + ", ".join(f"{esc(k.replace('_', ' '))} {num(v)} ms" for k, v in cats) + " (section Critical path).</li>")
