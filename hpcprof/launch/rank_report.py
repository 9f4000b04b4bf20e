"""What ``python -m hpcprof.submit`` prints when a job has ended, and what it records: the table of
ranks (node, status, steps, median step time, trace), then one verdict line (succeeded; ended
without a step; the first failure and who stopped after it; a hang), with the manifest's
``outcome``. Apart from :mod:`.submit` because it reads only what the ranks wrote into the run
directory and the per-rank outcomes the waiting gathered, not the job or its executor.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from ..rundir import RunDir
from ..rundir import manifest as run_manifest
from ..rundir.state import ALONE_TEXT, NO_STEP_TEXT, trained_alone
from .outcome import end_leftovers, first_failure, record_outcome, report_hang

EXIT_OK, EXIT_FAILED = 0, 1


def last_step(run: RunDir, rank: int) -> int:
    """The last step `rank` recorded in its step file (-1: none)."""
    return max((s["step"] for s in run.read_steps(rank) if isinstance(s, dict) and isinstance(s.get("step"), int)), default=-1)


def oom_pointer(run: RunDir, note: dict) -> str:
    """After an out-of-memory failure: where the memory snapshot written at it lies, and what reads
    it; or how to get one next time."""
    if note.get("memory_snapshot"):
        return (f"hpcprof: the CUDA memory snapshot at the failure is {run.root / note['memory_snapshot']}: "
                f"python -m hpcprof.analyze {run.root} lists the blocks that held the memory and the lines that "
                "allocated them (https://pytorch.org/memory_viz draws its whole history)")
    return ("hpcprof: to see which lines held the memory, run again with --profiler-memory-snapshot (GPU runs): the "
            "ranks then record the allocator's history and write a snapshot at an out-of-memory failure")


def report_ranks(run: RunDir, executor: str, job_id: Any, world_size: int, outcomes: list[dict[str, Any]],
                 log=print) -> int:
    """Report each rank of an ended job (``outcomes``: per rank, ``rank``, ``status`` "ok" or
    "failed", ``log`` and ``error``) and how the job ended; records the manifest's ``outcome`` and
    returns the exit code. A local job's leftover processes are ended first."""
    manifest = run.read_manifest()
    if executor == "local":
        left = end_leftovers(manifest)
        if left:
            print(f"hpcprof: ended {len(left)} process(es) the ranks left running (pids "
                  f"{', '.join(map(str, left))}): no process of a job outlives it", file=sys.stderr)
    nodes = {e["rank"]: e.get("node") for e in manifest.get("ranks", [])}
    failures = run.read_failures()
    log("")
    log(f"{'rank':>4}  {'node':<14} {'status':<8} {'steps':>5} {'median step ms':>14}  trace")
    recorded = 0
    for o in outcomes:
        rank = o["rank"]
        steps = [s for s in run.read_steps(rank) if isinstance(s, dict) and isinstance(s.get("step_s"), (int, float))]
        recorded += len(steps)
        median = statistics.median(s["step_s"] for s in steps) * 1000 if steps else float("nan")
        trace = run.trace_path(rank)
        log(
            f"{rank:>4}  {str(nodes.get(rank, '?')):<14} {o['status']:<8} {len(steps):>5} {median:>14.1f}  "
            f"{trace.name if trace.exists() else '-'}"
        )
    failed = [o for o in outcomes if o["status"] != "ok"]
    if report_hang(run, world_size, job_id, log):
        return EXIT_FAILED
    if not failed and not failures:
        record_outcome(run, "completed")
        alone = trained_alone(manifest)
        if not recorded:  # the ranks ended cleanly having measured nothing: not a success
            log(f"hpcprof: job {job_id} ended on {world_size} rank(s) without a step: {NO_STEP_TEXT}"
                f"{'; ' + ALONE_TEXT if alone else ''}; run directory {run.root}")
            return EXIT_FAILED
        if alone:
            log(f"hpcprof: job {job_id} ran on {world_size} rank(s), but {ALONE_TEXT}; "
                f"run directory {run.root}")
            return EXIT_OK
        log(f"hpcprof: job {job_id} succeeded on {world_size} rank(s); run directory {run.root}")
        return EXIT_OK
    log("")
    fatal = {o["rank"]: t for o in outcomes if (t := run.read_fatal(o["rank"]))}
    exits = {o["rank"]: e for o in outcomes if (e := run.read_exit(o["rank"]))}
    root = first_failure(failures, [o["rank"] for o in failed],
                         {o["rank"]: last_step(run, o["rank"]) for o in outcomes}, fatal, exits)
    if root is not None and root["rank"] is None:  # timed out waiting for a rank not known
        record_outcome(run, "failed", first=run_manifest.FirstFailure(rank=None, step=root.get("step"), error=str(root["error"])[:300]))
        log(f"hpcprof: {root['error']} (step {root.get('step')})")
    elif root is not None:
        rank = root["rank"]
        log_path = root.get("log") or next((o["log"] for o in outcomes if o["rank"] == rank), None)
        node = root.get("node") or nodes.get(rank)
        record_outcome(run, "failed", first=run_manifest.FirstFailure(rank=rank, step=root.get("step"), error=str(root.get("error"))[:300]))
        log(
            f"hpcprof: rank {rank} on node {node} failed at step {root.get('step')}: {root.get('error')}\n"
            f"hpcprof: {'its last words, if any, are' if root.get('silent') else 'traceback'} in {log_path}"
        )
        if root.get("kind") == "oom":
            log(oom_pointer(run, root))
        own = sorted({f["rank"] for f in failures if f["rank"] != rank and not f.get("peer_failure")})
        others = sorted(({f["rank"] for f in failures if f["rank"] != rank} | {o["rank"] for o in failed if o["rank"] != rank})
                        - set(own))
        if own:  # ranks that hit an error of their own (often the same one), not a peer's failure
            same = all(str(f.get("error")) == str(root.get("error")) for f in failures if f["rank"] in own)
            log(f"hpcprof: rank(s) {', '.join(map(str, own))} failed too, "
                + ("with the same error" if same else "each with an error of its own (see failures/)"))
        if others:
            log(f"hpcprof: rank(s) {', '.join(map(str, others))} stopped after it (peer failure)")
    else:
        record_outcome(run, "failed")
        for o in failed:
            log(f"hpcprof: rank {o['rank']} on node {nodes.get(o['rank'])} failed: {o['error']} (log: {o['log']})")
    log(f"hpcprof: what the ranks wrote before the failure stays in {run.root}")
    return EXIT_FAILED
