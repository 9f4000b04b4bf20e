"""What the framework adapters' tests (test_frameworks_*.py) share: launching a user's script the
way its author does (``torchrun`` with 2 CPU ranks, or plain ``python``), and reading back what the
run directory and the traces hold."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path


def launch(tmp: Path, script: str, ranks: int = 2, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `script` (written to tmp/train.py) under ``python -m torch.distributed.run
    --nproc-per-node <ranks>`` (ranks=None: ``python train.py``), with cwd tmp."""
    (tmp / "train.py").write_text(script)
    cmd = [sys.executable, "train.py"] if ranks is None else \
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "train.py"]
    return subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false"))


def the_run_dir(tmp: Path) -> Path:
    """The one run directory hpcprof made under tmp/runs (the default runs_dir)."""
    (run_dir,) = list((tmp / "runs").iterdir())
    return run_dir


def optimizer_steps(tmp: Path, rank: int) -> int:
    """The optimizer steps the framework counted on `rank` (the script writes its own count)."""
    return json.loads((tmp / f"optimizer-steps-{rank}.json").read_text())["global_step"]


def allreduces_per_profiled_step(trace: Path, profiled: list[int], region: str) -> dict[int, int]:
    """Per traced step (``ProfilerStep#<n>``), the gloo all-reduces (``c10d::allreduce_``: DDP's
    gradient all-reduce; hpcprof's own control rounds use other collectives) that ran inside
    hpcprof's region `region` of that step."""
    with gzip.open(trace, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]

    def spans(name):
        return [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == name]

    regions = spans(f"hpcprof.{region}")
    reduces = spans("c10d::allreduce_")
    out = {}
    for step in profiled:
        (s0, s1), = spans(f"ProfilerStep#{step}")
        out[step] = sum(1 for a0, a1 in reduces if s0 <= a0 and a1 <= s1
                        and any(r0 <= a0 and a1 <= r1 for r0, r1 in regions))
    return out
