"""The few lines ``python -m hpcprof.analyze`` prints at the end: ranks, top straggler, top
recommendation, warnings, and where the report is."""

from __future__ import annotations

from ...rundir.state import describe
from .run_config import batch_text, workload_text


def console_summary(summary: dict) -> str:
    lines = []
    state = summary.get("run_state") or {}
    if state.get("state") not in (None, "unknown"):
        lines.append(describe(state))  # first: a running, crashed or stopped job is not read as a finished one
    lines.append(f"hpcprof analysis of {summary['source']}: {len(summary['ranks_analyzed'])}/{summary['world_size']} ranks, device {summary['device']}{' (' + summary['device_name'] + ')' if summary.get('device_name') else ''}")
    user = workload_text(summary.get("workload"))
    if user:  # a user's own job, named by what it is; its batch as its step records say
        lines.append(f"workload: {user}; batch {batch_text(summary.get('workload'))}")
    comm = summary.get("communication") or {}
    ours = bool(comm.get("differs"))  # HTA's compute and overlap, and ours beside them where they differ
    hdr = f"{'rank':>4}  {'node':<14} {'step ms':>9} {'idle %':>7} {'comp %':>7} {'overlap %':>9}"
    lines.append(hdr + (f" {'comp % ours':>11} {'overlap % ours':>14}   (comp/overlap: HTA's)" if ours else ""))

    def f(v, w, d=1):
        return f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>{w}}"

    for r in summary["per_rank"]:
        line = f"{r['rank']:>4}  {str(r['node'] or 'unknown')[:14]:<14} {f(r['step_time_ms'], 9)} {f(r['idle_pct'], 7)} {f(r['compute_pct'], 7)} {f(r['comm_comp_overlap_pct'], 9)}"
        if ours:
            line += f" {f(r.get('compute_pct_hpcprof'), 11)} {f(r.get('comm_comp_overlap_pct_hpcprof'), 14)}"
        lines.append(line)
    ca = summary.get("clock_alignment") or {}
    if ca.get("note"):
        lines.append(f"clocks: {ca['note']}")
    lines += communication_lines(comm, summary["device"])
    cp = summary.get("critical_path")
    if cp and cp.get("by_rank_ms_per_step"):
        ranks = ", ".join(f"rank {r} {v:.2f} ms" for r, v in list(cp["by_rank_ms_per_step"].items())[:3])
        cats = ", ".join(f"{k.replace('_', ' ')} {v:.2f} ms" for k, v in list(cp.get("by_category_ms_per_step", {}).items())[:3])
        lines.append(f"critical path across ranks: {cp['total_ms_per_step']:.2f} ms per step: {ranks}; {cats}")
    line = throughput_line(summary.get("throughput"))
    idle = [r["idle_pct"] for r in summary["per_rank"] if isinstance(r.get("idle_pct"), (int, float))]
    if idle and summary["device"] != "cpu":  # as the tutorials show it: utilisation next to throughput
        line += f"; GPU busy {100 - sum(idle) / len(idle):.1f}% of the profiled steps (HTA, mean over ranks)"
    lines.append(line)
    if summary["stragglers"]:
        s = summary["stragglers"][0]
        lines.append(f"top straggler: rank {s['rank']} (node {s.get('node') or 'unknown'}): costs {s['cost_ms_per_step']:.1f} ms/step "
                     f"(what-if replay; above {s['threshold_ms']:.1f} ms in {s['steps_flagged']} of {s['steps']} profiled steps); "
                     f"cause {s['cause']}; job straggler slowdown x{summary.get('straggler_slowdown') or 1:.3f}")
        if s.get("gpu_compute_evidence"):
            lines.append(f"  {s['gpu_compute_evidence']}")
    elif summary.get("trained_alone"):
        lines.append(f"stragglers: not analysed: {summary['trained_alone']}")
    else:
        lines.append("stragglers: none")
    for x in (summary.get("slow_gpu") or {}).get("per_rank") or []:  # reduce/slow_gpu.py
        if x.get("slow"):
            lines.append(f"slow GPU: {x['text']}")
    for v in (summary.get("memory_view") or {}).get("snapshots") or []:  # rundir/memory_snapshots.py
        for o in v.get("oom") or []:
            big = (v.get("largest_blocks") or [None])[0]
            lines.append(f"out of memory on rank {v['rank']} (device {v['device']}): {o['requested_bytes'] / 2**20:,.1f} MiB "
                         f"requested with {o['in_use_bytes'] / 2**20:,.1f} MiB in use"
                         + (f"; largest block live at the peak {big['bytes'] / 2**20:,.1f} MiB, allocated at {big['where'] or 'an unknown line'}" if big else "")
                         + f" ({v['file']})")
    if summary["recommendations"]:
        r = summary["recommendations"][0]
        lines.append(f"top recommendation: {r['title']}\n  evidence: {r['evidence']}")
    if summary["warnings"]:
        lines.append(f"{len(summary['warnings'])} warning(s); first: {summary['warnings'][0]}")
    for c in summary.get("captures") or []:
        if c.get("kind") == "baseline":
            continue
        top = (c.get("stragglers") or [None])[0]
        found = f"rank {top['rank']} costs {top.get('cost_ms_per_step')} ms/step, cause {top.get('cause')}" if top else "no straggler"
        vs = c.get("vs_baseline") or {}
        change = f"; step time {vs['change_pct']:+.1f}% vs the baseline ({vs['verdict']})" if vs.get("change_pct") is not None else ""
        why = f"rank {c.get('rank')} turned slow" if c.get("kind") == "rank" else "the job turned slow"
        lines.append(f"capture {c['index']} (steps {c['steps'][0]}-{c['steps'][1]}, {why}): {found}{change}; "
                     f"report {c.get('report')}")
    lines.append(f"report: {summary['outputs']['report']}")
    return "\n".join(lines)


def communication_lines(comm: dict, device: str) -> list[str]:
    """Our communication share beside HTA's (with the reason where they differ) and the transfer /
    waiting split of the time in collectives (summary.json `communication`)."""
    if device == "cpu" or comm.get("share_pct") is None:
        return []
    line = f"communication: {comm['share_pct']:.1f}% of GPU kernel time"
    if comm.get("overlapped_pct") is not None:  # all of it, overlapped or not: say how much is hidden
        line += f", {comm['overlapped_pct']:.1f}% of it overlapped with computation"
    if comm.get("differs"):
        line += f" (HTA's kernel-name rule: {comm.get('hta_share_pct') or 0.0:.1f}%)"
    if comm.get("wait_share") is not None:
        line += f"; in the matched collectives {100 * comm['wait_share']:.0f}% waiting for the last arrival, {100 * (comm.get('transfer_share') or 0):.0f}% transfer"
    return [line] + [f"  {x['note']}" for x in (comm.get("reclassified") or [])[:3]] if comm.get("differs") else [line]


def throughput_line(tp: dict | None) -> str:
    """The job's samples/s with its interval and what was left out (summary.json `throughput`)."""
    if not tp or tp["job"].get("median_samples_per_s") is None:
        return "throughput: - samples/s (no step records with batch_size, or no steady-state step)"
    j = tp["job"]
    lo, hi = j["ci95_samples_per_s"]
    n = j["steps"]
    cov = "" if (j.get("ci_coverage") or 0) >= tp["level"] else f", covers {100 * j['ci_coverage']:.0f}% only"
    prof = j.get("profiled_median_samples_per_s")
    clock = " on the GPU clock" if tp.get("step_time_source") == "gpu_clock" else ""
    export = f", after a trace export {n['trace_export']}" if n.get("trace_export") else ""
    return (
        f"throughput: {j['median_samples_per_s']:.1f} samples/s{clock} (95% CI {lo:.1f}-{hi:.1f}{cov}) over {n['steady']} steady "
        f"steps of {n['total']}; left out: warm-up {n['warmup']}, epoch boundary {n['epoch_boundary']}{export}, profiler warm-up "
        f"{n['profiler_warmup']}, profiled {n['profiled']}" + (f" (those ran at {prof:.1f} samples/s)" if prof is not None else "")
    )
