"""Where a run stands, read from what its run directory holds: running, completed, failed (which rank,
at which step), hung (the hang watchdog ended it: the rank the others waited for), preempted
(checkpoint written, waiting for the requeue), interrupted (the launcher was stopped), cancelled
(scancel), stopped (ended short without a failure note: scancel, kill -9 of the ranks, a dead
node), no_steps (the job ended and no rank recorded a single step), never started, or unknown (a
plain folder of traces). A job whose ranks trained alone (the manifest's latest attempt says no
process group of the job's) is said so, whatever its state.

Why here and not in the analysis: the launcher writes the evidence (the manifest's `outcome`), the
ranks write the rest (steps/, failures/, hangs/, checkpoint/), and both `submit` and `analyze` need one
reading of it. `analyze` prints :meth:`RunState.describe` first, stores :meth:`RunState.to_dict`
as summary.json `run_state`, and treats every state but "completed" (and "unknown") as partial.

Evidence, strongest first:
1. the manifest's `outcome` (written by `submit` when it waited: never_started, interrupted, failed
   with the first failure it saw, completed);
2. hang notes (hangs/, hpcprof.rundir.hangs): the ranks' hang watchdog fired; the verdict names the
   rank the others waited for, and outranks the failure notes that a hung rank's exit caused;
3. failure notes: the earliest one that is not a peer failure names the failing rank;
4. step files: every rank of the world reached the planned step count -> completed;
5. liveness: a rank process of this host still alive (pid in the manifest), SLURM saying the job
   is pending or running (`squeue`, when it answers), or step files written very recently;
6. a checkpoint without a live job -> preempted (checkpoints are written only on preemption).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .hangs import run_verdict
from .layout import RunDir, RunDirError
from .records import unanswered

STATES = ("running", "completed", "failed", "hung", "preempted", "interrupted", "cancelled", "stopped", "no_steps",
          "never_started", "unknown")
NO_STEP_TEXT = ("no optimizer step was recorded on any rank: the training code ended before its first step that hpcprof "
                "records (an optimizer step, or a step of run.steps()/run.step()), so there is nothing to analyse")
"""What the state "no_steps" says (the run state, submit's last line)."""
ALONE_TEXT = ("the ranks trained alone: no process group of the job's (more than one rank, and the training code never "
              "created one), so each rank trained by itself and no cross-rank analysis applies")
"""What a job whose latest attempt's process_group is "none" is said to be (the run state, submit)."""
FRESH_MIN_S = 120.0
"""Step files written less than this long ago (or 20 median steps, if longer) mean the job is stepping."""


@dataclass
class RunState:
    state: str
    """One of STATES."""
    partial: bool
    """True when the run did not (yet) produce every planned step: an analysis of it is partial."""
    steps_done: int | None = None
    """Steps every rank of the world finished (the slowest rank's count)."""
    steps_planned: int | None = None
    failed_rank: int | None = None
    failed_step: int | None = None
    error: str | None = None
    """The failing rank's error, the launcher's error (never started), or the signal that stopped it."""
    job_id: str | None = None
    evidence: str | None = None
    """What the state was read from, for the curious."""
    hang: dict | None = None
    """State "hung": the verdict (hpcprof.rundir.hangs.verdict: culprit, step, where, waiters, text)."""
    process_group: str | None = None
    """The manifest's latest attempt's process_group: "hpcprof", "script", "none" (the ranks trained
    alone) or None (unknown)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return describe(self.to_dict())


def describe(st: dict | None) -> str:
    """One line for the console and the report, from a RunState or summary.json's `run_state`."""
    if not st or st.get("state") in (None, "unknown"):
        return "run state: unknown (a folder of traces, no run directory)"
    s = st["state"]
    prog = ""
    if st.get("steps_planned"):
        prog = f" ({st.get('steps_done') or 0} of {st['steps_planned']} steps on every rank)"
    job = f"job {st['job_id']} " if st.get("job_id") else "job "
    if s == "completed":
        text = f"{job}completed{prog}"
    elif s == "running":
        text = f"{job}is still running{prog}"
    elif s == "failed" and st.get("failed_rank") is None:
        text = f"{job}failed ({st.get('error') or 'no rank left a failure note'}){prog}"
    elif s == "failed":
        at = f" at step {st['failed_step']}" if st.get("failed_step") is not None else ""
        err = f": {st['error']}" if st.get("error") else ""
        text = f"{job}failed: rank {st['failed_rank']} crashed{at}{err}{prog}"
    elif s == "hung":
        text = f"{job}hung: {st.get('error') or 'the hang watchdog fired'}{prog}"
    elif s == "preempted":
        text = f"{job}was preempted after step {(st.get('steps_done') or 0) - 1} (checkpoint written; it resumes when requeued){prog}"
    elif s == "interrupted":
        text = f"{job}was interrupted ({st.get('error') or 'the launcher was stopped'}){prog}"
    elif s == "cancelled":
        text = f"{job}was cancelled ({st.get('error') or 'scancel'}){prog}"
    elif s == "stopped":
        text = f"{job}stopped early without a failure note (cancelled, killed or a node lost?){prog}"
    elif s == "no_steps":
        text = f"{job}ended without a step: {NO_STEP_TEXT}"
    elif s == "never_started":
        text = f"{job}never started" + (f": {st['error']}" if st.get("error") else "")
    else:
        text = f"{job}{s}{prog}"
    if st.get("process_group") == "none":
        text += f"; {ALONE_TEXT}"
    if st.get("partial") and s not in ("never_started", "no_steps"):
        text += "; partial analysis"
    return f"run state: {text}"


def _steps(run: RunDir, world: int | None, planned: int | None) -> tuple[dict[int, int], float | None, float | None]:
    """Per rank, steps finished (last usable step + 1: a record of another rank or a step number out
    of range counts for nothing); the newest step-file mtime; the median step time."""
    done: dict[int, int] = {}
    newest = None
    times: list[float] = []
    for r in run.step_ranks():
        if world is not None and not 0 <= r < world:
            continue
        recs = run.usable_steps(r, planned)
        done[r] = max((x["step"] for x in recs), default=-1) + 1
        times += [float(x["step_s"]) for x in recs[-20:] if isinstance(x.get("step_s"), (int, float))]
        try:
            m = run.steps_path(r).stat().st_mtime
            newest = m if newest is None else max(newest, m)
        except OSError:
            pass
    return done, newest, (statistics.median(times) if times else None)


def pid_alive(pid: Any, foreign: bool = True) -> bool:
    """Whether process `pid` runs on this host (a zombie has ended). `foreign`: what a process of
    another user counts as (alive for the run state; not ours to stop for hpcprof.launch.outcome)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return foreign
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def started_after(pid: int, iso_time: Any, slack_s: float = 5.0) -> bool:
    """Whether process `pid` started later than `iso_time` (+ `slack_s`): then it is not the process
    the manifest recorded at that time, but a later one given the same pid. False when unknown."""
    if not isinstance(iso_time, str):
        return False
    try:
        from datetime import datetime

        when = datetime.strptime(iso_time, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        boot = next(float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime "))
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return started > when + slack_s


def rank_entries_here(manifest: dict) -> list[dict]:
    """The manifest's rank entries (rank, node, pid) of the ranks that ran on this host."""
    host = socket.gethostname()
    return [e for e in manifest.get("ranks") or []
            if isinstance(e, dict) and e.get("node") == host and isinstance(e.get("pid"), int)]


def _slurm_active(job_id: str | None) -> bool | None:
    """True/False when squeue answers about the job, None when it cannot be asked."""
    if not job_id or shutil.which("squeue") is None:
        return None
    try:
        p = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:
        return False if "Invalid job id" in p.stderr else None
    states = {s.strip() for s in p.stdout.split()}
    return bool(states & {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"})


def _live(manifest: dict, newest: float | None, step_s: float | None) -> str | None:
    """Why the job looks alive, or None."""
    host = socket.gethostname()
    out = manifest.get("outcome") if isinstance(manifest.get("outcome"), dict) else {}
    attempts = manifest.get("attempts") if isinstance(manifest.get("attempts"), list) else []
    last_start = attempts[-1].get("started") if attempts and isinstance(attempts[-1], dict) else None
    for e in rank_entries_here(manifest):
        # a pid alive but started after the attempt is another process that got the same number
        if pid_alive(e["pid"]) and not started_after(e["pid"], last_start):
            return f"rank {e.get('rank')} (pid {e.get('pid')}) is alive on this host"
    launcher = manifest.get("launcher_pid")
    if (manifest.get("launcher_host") == host and pid_alive(launcher) and not out
            and not started_after(launcher, manifest.get("created"))):
        return f"the launcher (pid {launcher}) is alive on this host"
    if manifest.get("executor") in ("slurm", "sbatch") and not out:
        active = _slurm_active(manifest.get("job_id"))
        if active is not None:
            return "squeue lists the job" if active else None
    if newest is not None:
        window = max(FRESH_MIN_S, 20 * (step_s or 0.0))
        if time.time() - newest < window:
            return f"step files written {time.time() - newest:.0f} s ago"
    return None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def latest_attempt(manifest: dict) -> dict:
    """The manifest's latest attempt (hpcprof.rundir.manifest.Attempt) as a dict; {} when there is none
    or it is malformed."""
    attempts = manifest.get("attempts") if isinstance(manifest.get("attempts"), list) else []
    return attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}


def trained_alone(manifest: dict) -> bool:
    """Whether the latest attempt says the ranks trained alone (its process_group "none")."""
    return latest_attempt(manifest).get("process_group") == "none"


def planned_steps(manifest: dict, spec: dict) -> int | None:
    """The steps the job runs: the count rank 0 recorded at a clean end of the latest attempt
    (Attempt.steps_done: the script's own loop length); else, for the built-in trainer and runs of
    older versions, train.steps; None for user code still running (its loop decides)."""
    last = latest_attempt(manifest)
    if _count(last.get("steps_done")):
        return last["steps_done"]
    if last.get("steps_source") in ("api", "optimizer"):
        return None
    train = spec.get("train") if isinstance(spec.get("train"), dict) else {}
    return _count(train.get("steps"))


def run_state(path: str | os.PathLike) -> RunState:
    """The state of the run in `path` (a run directory; anything else is "unknown")."""
    run = RunDir(path)
    try:
        manifest = run.read_manifest()
    except (RunDirError, OSError):
        manifest = {}
    if not manifest and not run.steps_dir.is_dir():
        return RunState("unknown", partial=False, evidence="no manifest.json, no steps/")
    world = manifest.get("world_size")
    world = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    planned = planned_steps(manifest, spec)
    job_id = manifest.get("job_id")
    job_id = str(job_id) if job_id is not None else None
    outcome = manifest.get("outcome") if isinstance(manifest.get("outcome"), dict) else {}
    done, newest, step_s = _steps(run, world, planned)
    ranks = range(world) if world else sorted(done)
    steps_done = min((done.get(r, 0) for r in ranks), default=0)
    last = latest_attempt(manifest)
    pg = last.get("process_group")
    base = dict(steps_done=steps_done, steps_planned=planned, job_id=job_id, process_group=pg if isinstance(pg, str) else None)

    if outcome.get("state") == "never_started":
        return RunState("never_started", partial=True, error=outcome.get("error"), evidence="manifest outcome", **base)
    if outcome.get("state") in ("interrupted", "cancelled"):
        return RunState(outcome["state"], partial=True, error=outcome.get("error") or outcome.get("signal"),
                        evidence="manifest outcome", **base)
    hang = run_verdict(run, world)
    if hang is not None:
        return RunState("hung", partial=True, failed_rank=hang["culprit"], failed_step=hang["step"], error=hang["text"],
                        evidence=("nccl-flight-recorder/ (PyTorch's flight recorder)" if hang.get("source") == "flight recorder"
                                  else "hangs/ (the ranks' hang watchdog)"), hang=hang, **base)
    notes = [f for f in run.read_failures() if isinstance(f, dict)]
    first = outcome.get("first_failure") if isinstance(outcome.get("first_failure"), dict) else None
    if first is None and notes:
        first = next((f for f in notes if not f.get("peer_failure")), None) or unanswered(notes) or notes[0]
    if first is not None or outcome.get("state") == "failed":
        first = first or {}
        step = first.get("step")
        return RunState("failed", partial=True, failed_rank=first.get("rank"), failed_step=step if isinstance(step, int) else None,
                        error=(str(first.get("error"))[:300] if first.get("error") else outcome.get("error")),
                        evidence="manifest outcome" if outcome.get("first_failure") else "failures/", **base)
    if planned is not None and done and steps_done >= planned:
        return RunState("completed", partial=False, evidence="every rank recorded every planned step", **base)
    # the launcher saw every rank end cleanly: fresh step files no longer mean a live job
    why = _live(manifest, newest, step_s) if outcome.get("state") != "completed" else None
    if why:
        return RunState("running", partial=True, evidence=why, **base)
    if run.checkpoint_path.is_file():
        return RunState("preempted", partial=True, evidence="checkpoint/latest.pt without a live job", **base)
    if not any(done.values()) and (last or outcome.get("state") == "completed"):
        # the ranks started (an attempt recorded) or ran to their end, and none recorded a step
        return RunState("no_steps", partial=True, evidence="no step recorded in steps/ by any rank; nothing alive", **base)
    if outcome.get("state") == "completed" and planned is None:
        return RunState("completed", partial=False, evidence="manifest outcome", **base)
    if not done and job_id is None:
        return RunState("never_started", partial=True, error="no job id and no step recorded", evidence="manifest", **base)
    return RunState("stopped", partial=True, evidence="steps stop short; no failure note; nothing alive", **base)
