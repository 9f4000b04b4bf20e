"""The report's slow-GPU section: identical compute kernels compared across ranks (summary.json
`slow_gpu`, reduce/slow_gpu.py): the ranks named a slow GPU, the rule, and each rank's ratio to the
median rank with its work. Everything from the trace is escaped (htmlparts.esc and table)."""

from __future__ import annotations

import pandas as pd

from .htmlparts import esc, num, table


def slow_gpu_section(s: dict) -> str:
    g = s.get("slow_gpu") or {}
    if g.get("reason"):
        return f"<p class='none'>(not compared: {esc(g['reason'])})</p>"
    if not g.get("per_rank"):
        return "<p class='none'>(not compared: no rank was analysed)</p>"
    body = (f"<p>The same GPU work on every rank: kernels grouped by {esc(g.get('key'))}, {num(g.get('groups_compared'))} groups "
            "ran on every rank. Per rank, its time per call over the other ranks' median, weighted by the groups' time "
            f"(a weighted median: a few outlier kernels do not move it); {esc(g.get('rule'))}.</p>")
    named = [x for x in g["per_rank"] if x.get("slow")]
    body += ("<ul>" + "".join(f"<li class='warn'>{esc(x['text'])}</li>" for x in named) + "</ul>") if named else \
        "<p>No slow GPU: every rank runs the same kernels within the others' spread.</p>"
    df = pd.DataFrame(g["per_rank"])
    return body + table(df, max_rows=64, note="tables/slow_gpu.csv")
