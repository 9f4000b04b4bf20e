"""Issue 19: the shipped GPT example (examples/gpt.py: a small GPT-style language model, token data
generated in code) is a second, different workload on the same step-loop API as the built-in
ResNet. With 2 CPU ranks it trains with DDP and with FSDP2 (``fully_shard``: supported on gloo by
the torch of this project), its runs go through the whole analysis, and a straggler drill on it is
checked like the ResNet drills: rank 1 named first, cause host_gap, its drill-added cost within 15%
(plus two standard errors) of the truth measured inside the run (tests/helpers.drill_truth).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_straggler_drill_verdict, drill_truth, require_resolved_truth

from hpcprof.analysis import analyze

from .conftest import REPO

pytestmark = pytest.mark.alone  # the drill's cost is checked against a truth timed in the run (tests/conftest.py)

GPT = REPO / "examples" / "gpt.py"
# 30 steps; the profiler window holds steps 4-13, 5 drilled and 5 not (as the ResNet drill)
COMMON = ["--cluster", "local", "--tasks-per-node", "2", "--script", str(GPT), "--train-steps", "30",
          "--profiler-wait", "3", "--profiler-warmup", "1", "--profiler-active", "10"]


def _submit(runs: Path, name: str, *extra: str, script_args: tuple[str, ...] = ()) -> tuple[Path, str]:
    proc = subprocess.run([sys.executable, "-m", "hpcprof.submit", *COMMON, "--runs-dir", str(runs), "--name", name,
                           *extra, "--", *script_args], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return runs / name, proc.stdout


@pytest.fixture(scope="module")
def gpt_runs(tmp_path_factory) -> dict[str, Path]:
    runs = tmp_path_factory.mktemp("gpt")
    drill = _submit(runs, "drill", "--inject-straggler", "1:60:2", script_args=("--parallel", "ddp"))[0]
    return {
        "ddp": drill,  # the DDP run of the whole-analysis test is the drill run: one run less in the suite
        "fsdp": _submit(runs, "fsdp", "--train-steps", "16", "--profiler-wait", "2", "--profiler-active", "4",
                        script_args=("--parallel", "fsdp"))[0],
        "drill": drill,
    }


def _final_loss(run: Path) -> tuple[float, float]:
    log = next((run / "logs").glob("*_0_log.out")).read_text()
    m = re.search(r"loss ([0-9.]+) -> ([0-9.]+) \(uniform: ([0-9.]+)\)", log)
    assert m, log[-2000:]
    return float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_the_gpt_example_trains_and_goes_through_the_whole_analysis(gpt_runs, kind, tmp_path):
    run = gpt_runs[kind]
    first, last = _final_loss(run)
    assert last < first  # it learns the bigram language
    s = analyze(run, out=tmp_path / "a", progress=False)
    assert s["ranks_analyzed"] == [0, 1] and s["run_state"]["state"] == "completed"
    assert s["throughput"]["job"]["median_samples_per_s"] > 0 and s["throughput"]["job"]["batch"] == 16
    assert s["collectives_matched"] > 0  # DDP's all-reduce, or FSDP's all-gather and reduce-scatter
    stats = (tmp_path / "a" / "tables" / "steps_stats.csv").read_text()
    assert "region_grad_clip_median_ms" in stats  # the example's own region, by its name
    if kind == "fsdp":
        names = {e.get("name") for e in _events(run / "traces" / "rank-0.pt.trace.json.gz")}
        assert any("all_gather" in str(n) for n in names) and any("reduce_scatter" in str(n) for n in names), \
            sorted(n for n in names if n and "c10d" in n)


def _events(path: Path) -> list[dict]:
    import gzip
    import json

    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def test_a_straggler_drill_on_the_gpt_example_names_rank1_with_host_gap_and_its_in_run_cost(gpt_runs, tmp_path):
    run = gpt_runs["drill"]
    truth = drill_truth(run / "steps", profiled_only=True)
    require_resolved_truth(truth, drill_ms=60.0)
    assert truth.drilled_profiled * 2 == truth.profiled, truth
    summary = analyze(run, out=tmp_path / "a", workers=2, progress=False)
    figure = assert_straggler_drill_verdict(summary, truth, rank=1, run=run)
    print(f"GPT drill: {figure}")
