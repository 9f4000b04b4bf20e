"""Unknown hosts (trace folders without a manifest whose traces record no host name) are shown as
unknown, with what that means for the clock alignment, never as an empty name: in summary.json, on
the console and in the report."""

from __future__ import annotations

import re

from hpcprof.analysis import analyze, console_summary

from .conftest import DLRM, load_trace, write_trace


def test_a_folder_of_traces_without_hosts(replayed_sets):
    _, s, _ = replayed_sets["dlrm"]
    ca = s["clock_alignment"]
    assert ca["unknown_host_ranks"] == list(range(8)) and ca["reference_host"] is None
    assert ca["method"] == "hosts unknown: one clock assumed, no correction"
    assert "hosts unknown for ranks 0-7" in ca["note"] and "taken to share one clock" in ca["note"]
    assert "consistent with one clock" in ca["note"]  # the matched collectives end within 0.002 ms on all ranks
    text = console_summary(s)
    assert f"clocks: {ca['note']}" in text
    for line in text.splitlines()[2:10]:  # the ranks table
        assert re.match(r"^\s+\d\s+unknown\s", line), line
    page = open(s["outputs"]["report"], encoding="utf-8").read()
    assert "reference host unknown." in page and "reference host ." not in page and "reference host None" not in page
    assert "unknown (not recorded)" in page and ca["note"] in page.replace("&#x27;", "'")
    # no empty node or host cell in any table (the per-rank tables name the node in their second column)
    per_rank = page[page.index("<section id='per-rank'>"):]
    assert '<td class="l"></td>' not in per_rank[:per_rank.index("</section>")]


def test_some_hosts_known(tmp_path):
    src = tmp_path / "dlrm"
    src.mkdir()
    for p in sorted(DLRM.iterdir()):
        doc = load_trace(p)
        if doc["distributedInfo"]["rank"] < 4:
            doc["host_name"] = "gpu-node-1"
        write_trace(src / p.name, doc)
    s = analyze(src, out=tmp_path / "an", workers=2, progress=False)
    ca = s["clock_alignment"]
    assert ca["unknown_host_ranks"] == [4, 5, 6, 7] and ca["reference_host"] == "gpu-node-1"
    assert ca["note"].startswith("host unknown for ranks 4-7") and "aligned as one more host" in ca["note"]
    hosts = {tuple(h["ranks"]): h["host"] for h in ca["hosts"]}
    assert hosts == {(0, 1, 2, 3): "gpu-node-1", (4, 5, 6, 7): None}
    page = open(s["outputs"]["report"], encoding="utf-8").read()
    assert "unknown (not recorded)" in page and "gpu-node-1" in page
    # every host known: nothing to say
    for p in sorted(src.iterdir()):
        doc = load_trace(p)
        doc["host_name"] = "gpu-node-1"
        write_trace(p, doc)
    s = analyze(src, out=tmp_path / "an2", workers=2, progress=False)
    assert s["clock_alignment"]["note"] == "" and s["clock_alignment"]["unknown_host_ranks"] == []
    assert "clocks:" not in console_summary(s)
