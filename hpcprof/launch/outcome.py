"""How a launch ends, in words a user can act on: a refused submission in one line with what to do,
SIGINT/SIGTERM turned into stopping every process `submit` started, and the first failure named
even when the failing rank could not say so itself (killed by a signal).

Why a module of its own: submit.py launches and waits; everything here is about the ways that goes
wrong, and each piece is small but easy to get wrong (submitit prints sbatch's stderr itself,
its debug executor opens pdb on any exception, its local controller forwards only SIGINT/SIGTERM
to the ranks, a rank killed by SIGKILL leaves no failure note while its peers blame each other).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import sys
import time
from typing import Any, Iterator

from ..lifetime import end_orphaned_group
from ..rundir import RunDir, RunDirError
from ..rundir.records import unanswered
from ..rundir import manifest as run_manifest
from ..rundir.hangs import HANGS_DIR, run_verdict
from ..rundir.state import pid_alive, rank_entries_here
from ..slurm.geometry import LaunchError

# sbatch / submitit messages -> what to do. Matched case-insensitively, first match wins.
_SUBMIT_HINTS = (
    ("unable to contact slurm controller", "is slurmctld running and reachable? `sinfo` must answer; or run here with --cluster local"),
    ("could not detect \"srun\"", "no SLURM client on this machine (srun not on PATH): run on a login node, or use --cluster local"),
    ("invalid partition", "check --partition: `sinfo -s` lists the partitions"),
    ("invalid account", "check --account (and --partition): `sacctmgr show assoc user=$USER format=account,partition` lists yours"),
    ("invalid qos", "check --qos: `sacctmgr show qos format=name` lists them"),
    ("requested node configuration is not available", "ask for fewer GPUs/CPUs/memory per node, or another --partition / --constraint"),
    ("time limit", "lower --time-min to what the partition allows (`sinfo -o '%P %l'`)"),
    ("gres", "check --gpus-per-node against the partition's GPUs (`sinfo -o '%P %G'`)"),
)


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached `submit` (a BaseException, like KeyboardInterrupt: nothing should
    swallow it on the way up)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.name = signal.Signals(signum).name


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What stops a launcher cleanly: Ctrl-C, kill, and the terminal closing (SIGHUP used to kill
`submit` on the spot and leave its job running)."""


@contextlib.contextmanager
def _signals_set_to(handler) -> Iterator[None]:
    """STOP_SIGNALS go to `handler` inside the block (left alone outside the main thread)."""
    try:
        old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def signals_raise():
    """Inside the block, SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (SIGTERM and SIGHUP
    would otherwise kill this process at once, before it could stop the job's processes)."""
    def handler(signum, frame):
        raise Interrupted(signum)

    return _signals_set_to(handler)


def signals_ignored():
    """While stopping the job: a second Ctrl-C must not leave it half stopped."""
    return _signals_set_to(signal.SIG_IGN)


def submission_error(exc: BaseException) -> str:
    """One line for a refused submission: the scheduler's own last words, then what to do."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else type(exc).__name__)
    low = text.lower()
    hint = next((h for key, h in _SUBMIT_HINTS if key in low), "fix what sbatch names, or try --cluster local")
    return f"the job was not submitted: {said[:300]}; {hint}"


@contextlib.contextmanager
def quiet_pdb() -> Iterator[None]:
    """submitit's debug executor calls pdb.post_mortem() (or ipdb's, by PYTHONBREAKPOINT) on any
    exception of the job, which waits on stdin forever (issue 13: `--cluster debug --inject-crash
    0:2` hung at a (Pdb) prompt). Inside this block the debugger reads an empty standard input: it
    reads the end of the file at once and returns, and the failure is reported like any other (the
    rank's failure note and this command's exit code). Nothing of pdb or submitit is replaced."""
    saved = sys.stdin
    sys.stdin = io.StringIO()
    try:
        yield
    finally:
        sys.stdin = saved


def _alive(pid: Any) -> bool:
    """Alive and ours to stop (a process of another user is not)."""
    return pid_alive(pid, foreign=False)


def rank_pids_here(manifest: dict) -> list[int]:
    """Pids of the job's ranks on this host (from the manifest rank 0 wrote)."""
    return [e["pid"] for e in rank_entries_here(manifest)]


def children_of(pid: int) -> list[int]:
    """The child processes of `pid` (Linux /proc; elsewhere none)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def is_witness(pid: int) -> bool:
    """Whether `pid` is a witness (hpcprof.witness) rather than a rank, from its command line."""
    from ..witness import MODULE

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
    except OSError:
        return False
    return MODULE.encode() in args


def rank_processes(controller: int | None) -> list[int]:
    """The ranks the local controller runs: its children, or, where a child is a witness
    (hpcprof.witness), the witness' child. Why not the witnesses: a witness forwards every signal
    to its rank, so a rank signalled both directly and through its witness would get it twice (a
    second SIGINT interrupts its clean-up)."""
    out: list[int] = []
    for pid in children_of(controller) if controller is not None else []:
        out += children_of(pid) if is_witness(pid) else [pid]
    return out


def end_leftovers(manifest: dict) -> list[int]:
    """After a local job: SIGKILL to what is left in the process groups of its ranks (each rank
    leads its own: hpcprof.rank.task), e.g. a child of a rank that ended by os._exit or SIGKILL and
    so could not end it itself. Returns the pids signalled."""
    left: list[int] = []
    for pid in rank_pids_here(manifest):
        left += end_orphaned_group(pid)
    return left


def stop_local_job(job: Any, manifest: dict, grace_s: float = 15.0) -> list[int]:
    """Stop a local submitit job and every process it runs: SIGINT to the ranks (the controller's
    children and the manifest's rank pids: each stops where it is, its peers see the closed
    connection; the controller then sees every rank gone and exits quietly), or, when there are no
    ranks yet, SIGKILL to the controller (it ignores SIGINT: executors.local_controller_apart; the
    witnesses die with it, and a rank just starting with its witness); after `grace_s`, SIGKILL to
    whatever of it is still alive, and to what the ranks left in their process groups
    (:func:`end_leftovers`). Returns the pids that had to be killed."""
    # the controller: submitit's local job id is its pid (the process submit started)
    controller = int(job.job_id) if str(getattr(job, "job_id", "")).isdigit() else None

    def controller_done() -> bool:
        with contextlib.suppress(Exception):
            return bool(job.done(force_check=True))
        return controller is None or not _alive(controller)

    # the ranks: the controller's (started before rank 0 could list them) and the manifest's
    pids = sorted(set(rank_pids_here(manifest)) | set(rank_processes(controller)))
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)
    if not pids and controller is not None and _alive(controller):
        with contextlib.suppress(OSError):
            os.kill(controller, signal.SIGKILL)
    deadline = time.time() + grace_s
    while time.time() < deadline:
        if controller_done() and not any(_alive(p) for p in pids):
            return end_leftovers(manifest)
        time.sleep(0.1)
    killed = []
    witnesses = [w for w in (children_of(controller) if controller is not None else []) if is_witness(w)]
    for pid in pids + witnesses + ([controller] if controller is not None and not controller_done() else []):
        if _alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    end = time.time() + 10
    while time.time() < end and not controller_done():  # reaped by submitit's job when done() polls it
        time.sleep(0.1)
    return killed + end_leftovers(manifest)


# faulthandler's first line -> how a rank died of a fatal signal, in words a user can act on
_FATAL_SIGNALS = (
    ("Aborted", "aborted (SIGABRT) in native code: the NCCL watchdog after a collective timed out or NCCL failed "
                "(its log says which), or a C++ abort"),
    ("Segmentation fault", "crashed with a segmentation fault (SIGSEGV) in native code"),
    ("Bus error", "crashed with a bus error (SIGBUS): often /dev/shm full (DataLoader workers) or a bad memory map"),
    ("Floating-point exception", "crashed with a floating-point exception (SIGFPE) in native code"),
    ("Illegal instruction", "crashed with an illegal instruction (SIGILL): a build for another CPU"),
)


def fatal_cause(text: str | None) -> str | None:
    """How a rank died, from what faulthandler wrote (failures/rank-<r>.fatal.txt), or None."""
    if not text:
        return None
    head = next((ln for ln in text.splitlines() if ln.startswith("Fatal Python error")), "")
    for needle, words in _FATAL_SIGNALS:
        if needle in head:
            return words
    return f"died of a fatal signal: {head[:200] or text.strip().splitlines()[0][:200]}"


def exit_cause(entry: dict | None) -> str | None:
    """How a rank ended, in words, from its exit record (failures/rank-<r>.exit.json, written by
    hpcprof.witness for local ranks), or None."""
    if not entry:
        return None
    if "exit_code" in entry:
        code = entry["exit_code"]
        return (f"exited with code {code} without a failure note: os._exit({code}) or an exit from native code "
                "(no Python exception was raised)")
    name = entry.get("signal_name") or f"signal {entry.get('signal')}"
    if name == "SIGKILL":
        return "killed by SIGKILL, which no handler sees: the OOM killer (see dmesg) or kill -9"
    return f"killed by {name} without a failure note"


def first_failure(failures: list[dict], failed_ranks: list[int], last_steps: dict[int, int],
                  fatal: dict[int, str] | None = None, exits: dict[int, dict] | None = None) -> dict | None:
    """The rank to blame: the earliest failure note that is not a peer failure; else a failed rank
    that left no note at all (it could not write one: a fatal signal in native code, which
    faulthandler records in `fatal` (rank -> its text), or SIGKILL, as the OOM killer or `kill -9`
    do, or its node was lost), since every Python error writes one and its peers only report the
    closed connection; else, when a rank timed out waiting in a collective, the rank that did not
    answer (:func:`hpcprof.rundir.records.unanswered`: never a rank that timed out waiting; rank
    None when it is not known); else the earliest note. `last_steps`: rank -> last recorded step.
    `exits`: rank -> its exit record (RunDir.read_exit: local ranks), which says how a silent rank
    ended and, by its time, which ended first (the controller stops the others after it).
    Returns {"rank", "step", "error", "node", "log", "silent"} or None."""
    root = next((f for f in failures if not f.get("peer_failure")), None)
    if root is not None:
        return dict(root, silent=False)
    noted = {f.get("rank") for f in failures}
    fatal, exits = fatal or {}, exits or {}
    silent = [r for r in set(failed_ranks) | set(fatal) | set(exits) if r not in noted]
    waited = unanswered(failures)
    if silent:
        # a rank with a fatal signal on record first, then the one that ended first, then the one
        # that stopped stepping first
        r = min(silent, key=lambda x: (x not in fatal, float(exits.get(x, {}).get("time", float("inf"))),
                                       last_steps.get(x, -1), x))
        step = last_steps.get(r, -1) + 1
        cause = fatal_cause(fatal.get(r)) or exit_cause(exits.get(r))
        if cause is None and waited is not None:
            who = ", ".join(map(str, waited["waiting"]))
            cause = (f"did not answer: rank(s) {who} timed out waiting in a collective; it left no failure note "
                     "(it hung and was killed, or died of SIGKILL, or its node was lost)")
        return {
            "rank": r, "step": step, "silent": True, "node": None, "log": None,
            "error": cause or ("ended without a failure note: killed by a signal it cannot catch (SIGKILL: the OOM "
                               "killer or kill -9), os._exit() or an exit from native code (its exit code is not "
                               "known here), or its node was lost"),
        }
    if waited is not None:
        return dict(waited, silent=False)
    if failures:
        return dict(failures[0], silent=False)
    return None


def refuse_existing(run: RunDir) -> None:
    """Never write into a directory that holds anything: it is not this job's run (a run of this job
    is only ever created here, by this call), and writing into it would mix or replace its files."""
    root = run.root
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        what = "already holds a run" if run.manifest_path.exists() else (
            "already exists and is not a folder" if not root.is_dir() else "already exists and is not empty")
        raise LaunchError(f"{root} {what}; choose another --name (or --runs-dir); nothing was changed")


def remove_never_started(run: RunDir, error: str | None = None) -> None:
    """Remove the run directory of a job that never started (only files this launch wrote are in
    it: the refusal above guarantees it was empty). If it cannot be removed, mark it."""
    try:
        shutil.rmtree(run.root)
    except FileNotFoundError:
        pass
    except OSError:
        with contextlib.suppress(OSError, RunDirError):
            run_manifest.record_outcome(run, run_manifest.Outcome(
                state="never_started", time=run_manifest.now_iso(), error=error))


# SLURM job states in which the scheduler, not the ranks, ended the job (sacct's words)
_SCHEDULER_ENDS = ("CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "DEADLINE", "BOOT_FAIL")


def ended_by_scheduler(executor: str, job: Any) -> str | None:
    """The SLURM state when the scheduler ended the job (scancel, time limit, memory, node), else
    None: then the ranks' own outcomes tell what happened (a scancel used to read as two rank failures)."""
    if executor != "slurm":
        return None
    try:
        state = str(job.state)
    except Exception:
        return None
    return state if state.upper().startswith(_SCHEDULER_ENDS) else None


def record_outcome(run: RunDir, state: str, first=None, sig: str | None = None, error: str | None = None) -> None:
    """Write how the job ended into the manifest (best effort: the run's files matter more)."""
    with contextlib.suppress(OSError, RunDirError):
        run_manifest.record_outcome(run, run_manifest.Outcome(
            state=state, time=run_manifest.now_iso(), signal=sig, error=error, first_failure=first))


def report_hang(run: RunDir, world_size: int, job_id: Any, log=print) -> bool:
    """When the ranks' hang watchdog ended the job (hangs/ holds notes): say which rank the others
    waited for, record it as the outcome (state "hung", the culprit as first_failure), and return
    True. False when no rank wrote a hang note. A hung rank's exit breaks its peers' collectives,
    and their failure notes would otherwise name a waiting rank (or the hung one as killed)."""
    hang = run_verdict(run, world_size)
    if hang is None:
        return False
    first = (run_manifest.FirstFailure(rank=hang["culprit"], step=hang["step"], error=hang["text"][:300])
             if hang["culprit"] is not None else None)
    record_outcome(run, "hung", first=first, error=hang["text"][:300])
    log("")
    log(f"hpcprof: job {job_id} hung: {hang['text']}")
    log(f"hpcprof: every rank's Python stack at that moment is in {run.root / HANGS_DIR} (rank-<r>.stack.txt, "
        "rank-<r>.json)")
    return True
