"""The largest operator and kernel changes between two runs, from HTA's `TraceDiff` deltas
(hpcprof/analysis/hta/diff.py: how the traces reach `TraceDiff`, per step, one rank per run)."""

from __future__ import annotations

import pandas as pd

TOP = 15
"""Rows per direction (increase / decrease) in the console and the HTML page."""


def top_changes(diff: pd.DataFrame, n: int = TOP) -> dict[str, list[dict]]:
    """The largest increases and decreases in time per step, and what was added or removed."""
    if diff.empty:
        return {"increases": [], "decreases": [], "added": [], "removed": []}
    cols = ["kind", "name", "base_us", "test_us", "diff_us", "base_count", "test_count"]
    inc = diff[diff["diff_us"] > 0].nlargest(n, "diff_us")
    dec = diff[diff["diff_us"] < 0].nsmallest(n, "diff_us")
    return {
        "increases": inc[cols].to_dict("records"),
        "decreases": dec[cols].to_dict("records"),
        "added": diff[diff["change"] == "added"].nlargest(n, "test_us")[cols].to_dict("records"),
        "removed": diff[diff["change"] == "removed"].nlargest(n, "base_us")[cols].to_dict("records"),
    }
