"""report.html: one self-contained page that leads with the answer.

Why this layout: a reader wants, in this order, the verdict (is the job slowed by a straggler, by
how much, which rank and why, how fast it runs, what to change first), the configuration it was
measured on, and then the evidence, section by section, each finding saying where to look on the
merged timeline (rank, step, time range in ms from the start of that step). Images are embedded,
nothing is fetched from the network, every value from a trace, a manifest or a user is escaped
(htmlparts.esc), the raw summary.json is collapsed at the end. Charts with nothing to show are left out
with one line saying why (`omitted`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd

from ..reduce.whatif import NO_STRAGGLER_TEXT
from .htmlparts import esc, group_warnings, json_text, num, table
from ..layout import REPORT_FILE
from .efficiency_section import efficiency_section
from .gpu_section import gpu_summary_section
from .slow_gpu_section import slow_gpu_section
from .memory_section import memory_section
from .report_sections import communication_section, critical_path_section, critical_path_verdict
from .run_config import run_config

CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.sub{color:#666;margin-top:0}.verdict{background:#f4f8fb;border:1px solid #cfe0ee;border-radius:6px;padding:.6em 1.2em}
.verdict li{margin:.35em 0}.bad{color:#b00020;font-weight:600}.good{color:#1b7a1b;font-weight:600}
dl.cfg{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em}dl.cfg dt{color:#555}dl.cfg dd{margin:0}
.scroll{overflow-x:auto;max-width:100%;border:1px solid #eee;margin:.5em 0}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f3f3f3;position:sticky;top:0}td.l,th.l{text-align:left}.warn{color:#8a4b00}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}code{background:#f3f3f3;padding:0 .2em}
.omitted,.none,.more{color:#666;font-style:italic}.where{color:#333;font-size:.95em}
nav.toc ol{columns:2;margin:.3em 0}details pre{max-height:40em;overflow:auto;background:#f8f8f8;padding:.6em;font-size:12px}"""

SECTIONS = (
    ("captures", "The whole run and its captures"),
    ("stragglers", "Stragglers"),
    ("throughput", "Throughput and step time"),
    ("recommendations", "Recommendations"),
    ("critical-path", "Critical path across ranks"),
    ("communication", "Communication: transfer and waiting"),
    ("gpu-summary", "GPU summary (the profiler plugin's figures)"),
    ("efficiency", "Operator efficiency (FLOPs, share of peak, MFU)"),
    ("slow-gpu", "Slow GPU: the same kernels across ranks"),
    ("memory", "Memory view per rank"),
    ("timeline", "Merged timeline and clock alignment"),
    ("per-rank", "Per rank"),
    ("gpu", "GPU time and kernels"),
    ("operators", "Operators"),
    ("launches", "Kernel launches"),
    ("collectives", "Collectives"),
    ("warnings", "Warnings"),
    ("raw", "Raw summary.json"),
)


def _regions_table(stats: pd.DataFrame | None) -> str:
    """Host time per region of the step (the known ones, then the training code's own, by the names it
    gave them), median ms per step, one column per rank."""
    if stats is None or stats.empty or "rank" not in stats:
        return ""
    rows = []
    known = [("data", "data_wait"), ("copy", "copy"), ("forward", "forward"), ("backward", "backward"), ("optimizer", "optimizer")]
    user = [(c[len("region_"):-len("_median_ms")], c[:-len("_median_ms")]) for c in stats.columns
            if c.startswith("region_") and c.endswith("_median_ms")]
    for name, base in known + user:
        col = f"{base}_median_ms"
        if col in stats and stats[col].notna().any():
            rows.append({"region": name + ("" if (name, base) in known else " (yours)"),
                         **{f"rank {int(r)}": v for r, v in zip(stats["rank"], stats[col])}})
    if not rows:
        return ""
    return ("<p>Host time per region of the step, median ms per step (<code>run.region(name)</code>; "
            "regions marked <i>yours</i> are the training code's own):</p>" + table(pd.DataFrame(rows)))


def _captures_section(caps: list[dict], plots: dict) -> str:
    """A triggered run: the whole run's step time with the captures marked, then per capture why it
    was taken, what its analysis found and how its step time compares with the baseline's."""
    body = ("<p>This run profiled itself when a rank (or the whole job) turned slow (profiler mode "
            "<code>triggered</code>). The sections below this one are the baseline window's; each capture has "
            "its own report.</p>")
    if plots.get("run_timeline"):
        body += _img(Path(plots["run_timeline"]), "step time of the whole run with the captures")
    rows = []
    for c in caps:
        top = (c.get("stragglers") or [None])[0]
        found = (f"rank {top['rank']} ({top.get('node') or 'unknown node'}): {num(top.get('cost_ms_per_step'))} ms/step, "
                 f"cause {top.get('cause')}") if top else ("no straggler" if c.get("report") else c.get("error") or "")
        why = {"baseline": "baseline, early in the run",
               "rank": f"rank {c.get('rank')} late by {num(c.get('score_ms'))} ms (threshold {num(c.get('threshold_ms'))} ms) "
                       f"in steps {c['window'][0]}-{c['window'][1]}" if c.get("window") else "a rank turned slow",
               "job": f"the job's step time rose by {num(c.get('score_ms'))} ms"}.get(c.get("kind"), str(c.get("kind")))
        vs = c.get("vs_baseline") or {}
        change = (f"{vs['change_pct']:+.1f}% [{vs['ci_pct'][0]:+.1f}, {vs['ci_pct'][1]:+.1f}] ({vs['verdict']})"
                  if vs.get("change_pct") is not None and vs.get("ci_pct") else "")
        link = f"<a href='{esc(c['report'])}'>report</a>" if c.get("report") else ""
        rows.append(f"<tr><td>{esc(c['index'])}</td><td class='l'>{esc(why)}</td><td>{esc(c['steps'][0])}-{esc(c['steps'][1])}</td>"
                    f"<td class='l'>{esc(found)}</td><td>{num(c.get('job_step_ms'))}</td><td class='l'>{esc(change)}</td>"
                    f"<td class='l'>{link}</td></tr>")
    body += ("<div class='scroll'><table><thead><tr><th>capture</th><th class='l'>why</th><th>steps</th>"
             "<th class='l'>finding</th><th>step ms</th><th class='l'>step time vs baseline [95% interval]</th>"
             "<th class='l'></th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")
    return body


STEP_TIME_SOURCES = {
    "gpu_clock": "step time on the GPU's clock (CUDA events between step boundaries: the host's own times are launch times)",
    "host_clock": "step time on the host's clock",
}
"""How the report names summary.json's throughput.step_time_source."""


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def _chart(key: str, title: str, plots: dict, omitted: dict) -> str:
    p = plots.get(key)
    if p is not None and Path(p).is_file():
        return _img(p, title)
    if key in omitted:
        return f"<p class='omitted'>Chart “{esc(title)}” left out: {esc(omitted[key])}.</p>"
    return ""


UNKNOWN_NODE = "unknown (not recorded)"


def _named_nodes(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """A table whose `node` column says "unknown (not recorded)" where the node is not known
    (a folder of traces without a manifest), never an empty cell."""
    if not isinstance(df, pd.DataFrame) or "node" not in df:
        return df
    return df.assign(node=df["node"].map(lambda n: n if isinstance(n, str) and n else UNKNOWN_NODE))


def _pct(part, whole) -> str:
    return f" ({100 * part / whole:.0f}% of the {num(whole)} ms median step)" if part is not None and whole else ""


def _step_ms(s: dict):
    return (s.get("step_time") or {}).get("median_of_rank_medians_ms")


def where_to_look(s: dict, colls: pd.DataFrame | None, rank: int) -> str:
    """Rank, step and time range on the merged timeline of the rank's worst late arrival."""
    tl = s.get("timeline") or {}
    if colls is None or colls.empty or "last_rank" not in colls:
        return ""
    mine = colls[colls["last_rank"] == rank]
    sort_col = next((c for c in ("blocked_inflicted_ms", "inflicted_ms", "skew_ms") if c in mine), None)
    if mine.empty or sort_col is None:
        return ""
    c = mine.sort_values(sort_col, ascending=False).iloc[0]
    step = int(c["step"]) if pd.notna(c.get("step")) else None
    starts = tl.get("step_start_ms") or {}
    text = f"rank {rank}, step {step}"
    if step is not None and str(step) in starts and tl.get("origin_us") is not None and "first_arrival_us" in c:
        t0 = float(starts[str(step)])
        a = (float(c["first_arrival_us"]) - tl["origin_us"]) / 1e3 - t0
        b = (float(c["last_arrival_us"]) - tl["origin_us"]) / 1e3 - t0
        text += (f": {esc(c.get('kind', 'collective'))} at {num(a)}–{num(b)} ms from the start of step {step} "
                 f"(the others arrive first; rank {rank} arrives {num(b - a)} ms later), on the merged timeline "
                 f"<code>{esc(Path(tl.get('path', 'timeline.pt.trace.json.gz')).name)}</code>, lane “hpcprof: waits”")
    elif step is not None:
        text += f" (not on the merged timeline: rerun <code>python -m hpcprof.analyze {esc(s.get('source', 'RUN_DIR'))} --timeline-steps {step}</code>)"
    return text


def _verdict(s: dict, colls) -> str:
    step_ms = _step_ms(s)
    items = []
    strag = s.get("stragglers") or []
    slow = s.get("straggler_slowdown")
    if strag:
        total = sum(float(x.get("cost_ms_per_step") or 0.0) for x in strag)
        factor = slow.get("factor") if isinstance(slow, dict) else slow
        head = f"{num(100 * (float(factor) - 1))}% slower than with every rank at the median, " if isinstance(factor, (int, float)) and factor else ""
        items.append(f"<li><span class='bad'>Stragglers slow the job down</span>: {head}{num(total)} ms per step lost to "
                     f"{len(strag)} flagged rank{'s' if len(strag) > 1 else ''}{_pct(total, step_ms)}.</li>")
        t = strag[0]
        where = where_to_look(s, colls, int(t["rank"]))
        items.append(
            f"<li><b>Top straggler: rank {esc(t['rank'])}</b> on node {esc(t.get('node') or 'unknown')}: costs "
            f"{num(t.get('cost_ms_per_step'))} ms per step; cause: <b>{esc(t.get('cause'))}</b> ({esc(t.get('cause_detail'))})."
            + (f"<br><span class='where'>Where to look: {where}.</span>" if where else "") + "</li>")
    elif s.get("trained_alone"):  # no collective of the job's own: "no straggler" would read as a healthy job
        items.append(f"<li><span class='bad'>No cross-rank analysis</span>: {esc(s['trained_alone'])}.</li>")
    elif len(s.get("ranks_analyzed", [])) > 1:
        items.append(f"<li><span class='good'>No straggler</span>: {esc(NO_STRAGGLER_TEXT)}.</li>")
        if colls is not None and not colls.empty and "skew_ms" in colls and colls["skew_ms"].max() > 0:
            r = int(colls.loc[colls["skew_ms"].idxmax(), "last_rank"])
            where = where_to_look(s, colls.sort_values("skew_ms", ascending=False).head(1), r)
            if where:
                items.append(f"<li>Latest arrival in the profiled steps (not a straggler: it does not persist or cost enough): "
                             f"<span class='where'>Where to look: {where}.</span></li>")
    else:
        items.append("<li>One rank analysed: no cross-rank verdict (stragglers need two ranks or more).</li>")
    thr = (s.get("throughput") or {}).get("job") or {}
    clock = STEP_TIME_SOURCES.get((s.get("throughput") or {}).get("step_time_source") or "host_clock", "")
    if thr.get("median_samples_per_s"):
        ci = thr.get("ci95_samples_per_s") or [None, None]
        items.append(f"<li><b>Throughput</b>: {num(thr['median_samples_per_s'])} samples/s (job, median over steady steps, {clock}"
                     + (f", 95% interval {num(ci[0])}–{num(ci[1])}" if ci[0] is not None else "") + ")"
                     + (f"; median step {num(step_ms)} ms" if step_ms else "") + ".</li>")
    elif step_ms:
        items.append(f"<li><b>Step time</b>: {num(step_ms)} ms (median over ranks; no samples/s: no step records with a batch size).</li>")
    cp = critical_path_verdict(s)
    if cp:
        items.append(cp)
    recs = (s.get("recommendations") or [])[:3]
    if recs:
        items.append("<li><b>Most valuable changes</b>:<ol>" + "".join(f"<li>{esc(r['title'])}</li>" for r in recs) + "</ol></li>")
    tl = s.get("timeline") or {}
    if tl.get("path"):
        items.append(f"<li>Open the merged timeline (all ranks, one clock): <code>{esc(tl['path'])}</code> in "
                     "<a href='https://ui.perfetto.dev'>ui.perfetto.dev</a> (Open trace file) or chrome://tracing (Load).</li>")
    return "<section id='verdict' class='verdict'><h2>Verdict</h2><ul>" + "".join(items) + "</ul></section>"


def write_report(out: Path, summary: dict, tables: dict[str, pd.DataFrame], plots: dict[str, Path],
                 omitted: dict[str, str] | None = None, manifest: dict | None = None) -> Path:
    s, omitted = summary, omitted or {}
    tables = {k: _named_nodes(v) for k, v in tables.items()}
    colls = tables.get("collectives")
    step_ms = _step_ms(s)
    p = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hpcprof report: {esc(s.get('run_name'))}</title><style>{CSS}</style></head><body>"]
    p.append(f"<h1>hpcprof report: {esc(s.get('run_name'))}</h1>")
    p.append(f"<p class='sub'>{esc(len(s.get('ranks_analyzed', [])))} of {esc(s.get('world_size'))} ranks analysed, device {esc(s.get('device'))}; source <code>{esc(s.get('source'))}</code></p>")
    state = s.get("run_state") or {}
    if state.get("state") not in (None, "unknown"):  # a running, crashed or stopped job is not read as a finished one
        from ...rundir.state import describe

        p.append(f"<p class='{'warn' if state.get('partial') else 'sub'}' id='run-state'><b>{esc(describe(state))}</b></p>")
    p.append(_verdict(s, colls))
    cfg = run_config(manifest, s)
    p.append("<section id='config'><h2>Run configuration</h2><dl class='cfg'>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in cfg) + "</dl></section>")
    recs = s.get("recommendations") or []
    caps = s.get("captures") or []
    shown = [(k, t) for k, t in SECTIONS if (k != "recommendations" or recs) and (k != "captures" or caps)]
    p.append("<nav class='toc'><h2>Contents</h2><ol>" + "".join(f"<li><a href='#{k}'>{esc(t)}</a></li>" for k, t in shown) + "</ol></nav>")

    def section(key: str, body: str) -> None:
        title = dict(SECTIONS)[key]
        p.append(f"<section id='{key}'><h2>{esc(title)}</h2>{body}</section>")

    if caps:
        section("captures", _captures_section(caps, plots))
    # stragglers (of the baseline window, for a triggered run)
    strag = s.get("stragglers") or []
    body = ""
    if strag:
        body += "<ul>" + "".join(
            f"<li>rank {esc(x['rank'])} (node {esc(x.get('node') or 'unknown')}): costs {num(x.get('cost_ms_per_step'))} ms per step{_pct(x.get('cost_ms_per_step'), step_ms)}, "
            f"cause {esc(x.get('cause'))}." + (f" {esc(x['gpu_compute_evidence'])}." if x.get("gpu_compute_evidence") else "") + (f" Where to look: {w}." if (w := where_to_look(s, colls, int(x['rank']))) else "") + "</li>" for x in strag) + "</ul>"
        body += table(_named_nodes(pd.DataFrame(strag)), columns=["rank", "node", "cost_ms_per_step", "cost_ms_per_step_median", "others_cost_ms_per_step", "others_wait_ms_per_step", "threshold_ms", "cause", "confidence", "late_in_steps_share"])
    elif s.get("trained_alone"):
        body += f"<p>Not analysed: {esc(s['trained_alone'])}.</p>"
    else:
        body += (f"<p>No straggler: {esc(NO_STRAGGLER_TEXT)}. A bar above the dashed line alone is not a straggler when the "
                 "other ranks cost about as much: that is the ranks' jitter (docs/analysis.md, &ldquo;Straggler flag&rdquo;).</p>")
    body += _chart("stragglers", "Straggler cost and waiting per rank and step", plots, omitted)
    section("stragglers", body)
    # throughput and step time
    body = ""
    thr = s.get("throughput") or {}
    if thr.get("per_rank"):
        rows = [{"rank": r["rank"], "median_samples_per_s": r.get("median_samples_per_s"), "median_step_ms": r.get("median_step_ms"),
                 "steady_steps": (r.get("steps") or {}).get("steady"), "profiled_median_samples_per_s": r.get("profiled_median_samples_per_s")} for r in thr["per_rank"]]
        body += f"<p>Step times: {esc(STEP_TIME_SOURCES.get(thr.get('step_time_source') or 'host_clock', ''))}.</p>"
        body += table(pd.DataFrame(rows))
    body += _chart("step_heatmap", "Step time per rank and step", plots, omitted)
    stats = tables.get("steps_stats")
    if thr.get("step_time_source") == "gpu_clock":
        body += ("<p>The region columns below (data, copy, forward, backward, optimizer, and your own regions) are "
                 "<b>host launch times</b>: how long the host took to issue that work, not how long the GPU ran it "
                 "(the host runs ahead of the GPU). <code>host_step</code> is the host's time per step.</p>")
    body += _regions_table(stats)
    body += table(stats, note="tables/steps_stats.csv", empty="")
    section("throughput", body)
    if recs:
        section("recommendations", "<ol>" + "".join(f"<li><b>{esc(r['title'])}</b><br>evidence: {esc(r.get('evidence'))}</li>" for r in recs) + "</ol>")
    section("critical-path", critical_path_section(s, tables, _chart("critical_path", "Critical path across ranks", plots, omitted)))
    section("communication", communication_section(s, tables))
    section("gpu-summary", gpu_summary_section(s))
    section("efficiency", efficiency_section(s, tables, _chart("efficiency", "Operator efficiency", plots, omitted)))
    section("slow-gpu", slow_gpu_section(s))
    section("memory", memory_section(s, _chart("memory", "Memory per rank", plots, omitted)
                                     + _chart("memory_ranks", "Allocated memory of all ranks", plots, omitted)))
    # timeline and clocks
    tl, ca = s.get("timeline") or {}, s.get("clock_alignment") or {}
    body = ""
    if tl.get("path"):
        dropped = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in (tl.get("dropped") or {}).items()) or "nothing"
        body += (f"<p><code>{esc(tl['path'])}</code>: steps {esc(', '.join(map(str, tl.get('steps', []))))}, {num(tl.get('events'))} events "
                 f"(budget {num(tl.get('max_events'))}; dropped: {esc(dropped)}). {esc(tl.get('open', ''))}. Time 0 is the start of the first of these steps; "
                 "step starts on the timeline: " + esc(", ".join(f"step {k} at {num(v)} ms" for k, v in (tl.get("step_start_ms") or {}).items())) + ".</p>")
    elif tl.get("error"):
        body += f"<p class='warn'>No merged timeline: {esc(tl['error'])}</p>"
    if ca.get("hosts"):
        ref = ca.get("reference_host") or "unknown"
        body += f"<p>Clock alignment: {esc(ca.get('method'))}; reference host {esc(ref)}.</p>"
        if ca.get("note"):
            body += f"<p class='warn'>{esc(ca['note'])}.</p>"
        hosts = pd.DataFrame(ca["hosts"]).rename(columns={"offset_ms": "clock_offset_ms", "collectives": "collectives_used"})
        hosts["host"] = hosts["host"].map(lambda h: h if isinstance(h, str) and h else UNKNOWN_NODE)
        body += table(hosts)
    section("timeline", body or "<p class='none'>(no merged timeline)</p>")
    section("per-rank", table(tables.get("per_rank"), columns=[c for c in (tables.get("per_rank") if tables.get("per_rank") is not None else pd.DataFrame()).columns if not c.endswith("_us")])
            + _chart("idle", "Time breakdown per rank", plots, omitted))
    if s.get("device") not in (None, "cpu"):  # CUDA/ROCm or another accelerator (MTIA)
        body = _chart("overlap", "Communication/computation overlap", plots, omitted) + _chart("kernel_types", "Kernel types", plots, omitted)
        for key, title, rows in (("kernel_breakdown", "Kernel breakdown", 40), ("kernels_across_ranks", "Top kernels across ranks", 25), ("idle_breakdown", "Idle time per stream (HTA)", 40)):
            body += f"<h3>{esc(title)}</h3>" + table(tables.get(key), max_rows=rows, note=f"tables/{key}.csv")
    else:
        body = "<p class='omitted'>CPU-only run: no GPU kernels, so no GPU time breakdown, overlap or kernel tables.</p>"
    section("gpu", body)
    ops = tables.get("operators")
    body = _chart("operators", "Top operators", plots, omitted)
    if ops is not None and not ops.empty:
        cols = ["name", "calls", "host_total_us", "host_self_us"] + (["device_total_us", "device_self_us"] if ops["device_total_us"].sum() > 0 else [])
        agg = ops.groupby("name")[cols[1:]].sum().assign(ranks=ops.groupby("name")["rank"].nunique()).reset_index()
        key = "device_self_us" if "device_self_us" in cols else "host_self_us"
        body += f"<h3>All ranks, by {'device' if key.startswith('device') else 'host'} self time</h3>" + table(agg.sort_values(key, ascending=False), max_rows=20, note="tables/operators.csv (per rank)", columns=cols + ["ranks"])
        per = ops.sort_values(["rank", key], ascending=[True, False]).groupby("rank").head(3)
        body += "<h3>Per rank, top 3</h3>" + table(per, max_rows=3 * 64, columns=["rank"] + cols)
    elif "operators" not in omitted:
        body += "<p class='none'>(no operators)</p>"
    section("operators", body)
    ls = tables.get("launch_summary")
    body = _chart("launches", "Kernel launches", plots, omitted)
    if ls is not None and not ls.empty:
        body += ("<p>HTA's kernel-launch statistics: per launched GPU event, the launch call's CPU time, the GPU time and the "
                 "launch delay (GPU start - call end). Many kernels shorter than their launch call, or long delays, mean the GPU waits for the CPU.</p>")
        body += table(ls, columns=["rank", "launches", "short_kernel_share", "cpu_launch_median_us", "gpu_median_us", "launch_delay_median_us", "launch_delay_p95_us", "runtime_outliers", "launch_delay_outliers"])
    section("launches", body)
    c = colls
    if c is not None and not c.empty:
        c = c.copy()
        origin = tl.get("origin_us")
        if origin is None and "first_arrival_us" in c:
            origin = float(c["first_arrival_us"].min())
        for col in ("first_arrival_us", "last_arrival_us", "end_us"):
            if col in c:
                c[col.replace("_us", "_ms")] = (c[col] - origin) / 1e3
                c = c.drop(columns=col)
    section("collectives", "<p>Times in ms from the start of the merged timeline (the first chosen step), on the job's clock.</p>" + table(c, note="tables/collectives.csv"))
    warns = group_warnings(s.get("warnings") or [])
    section("warnings", "<ul>" + "".join(f"<li class='warn'>{esc(w)}</li>" for w in warns) + "</ul>" if warns else "<p class='none'>(none)</p>")
    section("raw", f"<details><summary>summary.json ({len(json.dumps(s, default=str)):,} characters)</summary><pre>{esc(json_text(s))}</pre></details>")
    p.append("</body></html>")
    path = Path(out) / REPORT_FILE
    tmp = path.with_name(f".{REPORT_FILE}.tmp")
    tmp.write_text("\n".join(p), encoding="utf-8")
    tmp.replace(path)
    return path
