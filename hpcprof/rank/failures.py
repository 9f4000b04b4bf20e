"""The failure note of a rank (failures/rank-<r>.json): which rank failed, at which step, why, and where
its log is, so that the launcher can name the first rank that failed rather than the ones that
stopped after it; and the watch that stops a rank within seconds once a peer has failed.

The context travels as one explicit object: the launcher side says where the rank's log is when it
builds it, the step loop moves ``step`` forward, and :meth:`FailureContext.record` writes the note.

Classification (:func:`classify`) is by the kind of error, not by whether its text mentions NCCL: a
rank whose own NCCL or network operation failed (``ncclSystemError``, ``ncclInternalError``, an
InfiniBand error) is a root cause, as is any error of the training code (CUDA out of memory, a bug);
a rank that only saw a peer go away (connection closed or reset, NCCL's ``ncclRemoteError``,
a collective that timed out waiting, or hpcprof's peer watch) is a peer failure. Texts match in
any case (gloo's "Timed out waiting ..."); a DataLoader's timeout and Python's own TimeoutError
are the rank's own errors, and so is a non-zero ``sys.exit()``.

A rank that dies in native code (the NCCL watchdog's ``abort()``, a segmentation fault) cannot write
a note; :func:`enable_fatal_log` makes Python's faulthandler write the signal and every thread's
stack to ``failures/rank-<r>.fatal.txt`` instead, which the launcher reads to say how it died
(hpcprof.launch.outcome.first_failure).
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Callable

from ..lifetime import end_own_group
from ..rundir import FATAL_TEMPLATE, FailureNote, RunDir, atomic_write_text, rank_from_name
from ..rundir.records import STOPPED_AFTER_TIMEOUT
from .drills import DrillCrash

# (kind, peer_failure, texts): the first entry whose text occurs in "<type>: <message>" wins, in any
# case (gloo says "Timed out waiting 20000ms for recv", NCCL's watchdog "timed out").
_KINDS: tuple[tuple[str, bool, tuple[str, ...]], ...] = (
    ("error", False, ("DataLoader timed out",)),  # the rank's own input pipeline, not a peer
    ("peer_stopped", True, ("hpcprof: stopped because rank",)),
    ("nccl_remote", True, ("ncclRemoteError", "remote process exited", "Remote process exited")),
    ("nccl", False, ("ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError", "ncclInvalidUsage",
                     "ncclInvalidArgument", "NET/IB", "NET/Socket", "unhandled system error", "unhandled cuda error")),
    ("oom", False, ("CUDA out of memory", "OutOfMemoryError")),
    ("peer_timeout", True, ("Watchdog caught collective operation timeout", "timed out", "Timeout", "DistStoreError")),
    ("peer_closed", True, ("Connection closed", "Connection reset", "Broken pipe", "Socket Timeout",
                           "connection refused", "Connection refused")),
)


def classify(exc: BaseException) -> tuple[str, bool]:
    """(kind, peer_failure) of an exception a rank raised (see the module docstring). Kinds: drill,
    peer_stopped, nccl_remote, nccl, oom, peer_timeout, peer_closed, error."""
    if isinstance(exc, DrillCrash):
        return "drill", False
    if isinstance(exc, SystemExit):  # sys.exit(code) of the training code on this rank
        return "error", False
    if type(exc) is TimeoutError:  # Python's own (a socket, a lock, the user's code): torch.distributed raises others
        return "error", False
    text = f"{type(exc).__name__}: {exc}".lower()
    for kind, peer, needles in _KINDS:
        if any(n.lower() in text for n in needles):
            return kind, peer
    return "error", False


def exit_code(exc: SystemExit) -> int:
    """The exit status a SystemExit gives the process: 0 for None, the int given, else 1 (Python
    prints a message given to sys.exit and exits with 1)."""
    code = exc.code
    if code is None:
        return 0
    return int(code) if isinstance(code, int) else 1


class PeerStopped(RuntimeError):
    """This rank stops because another rank failed first (its note names the rank and the step)."""


@dataclass
class FailureContext:
    run: RunDir
    rank: int
    node: str
    log: str | None = None
    """This rank's log file (submitit's stderr path, or the sbatch script's per-task log)."""
    step: int | None = None
    """The step being run; None before the step loop. Set by the step loop."""

    @staticmethod
    def log_for_rank(template: str | None, rank: int) -> str | None:
        """A log path with SLURM's %t (task id = rank) filled in; None when there is none."""
        return template.replace("%t", str(rank)) if template else None

    def note(self, exc: BaseException) -> FailureNote:
        kind, peer = classify(exc)
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, SystemExit):
            error = f"SystemExit: the training code exited with code {exit_code(exc)} (sys.exit({exc.code!r}))"
        snapshot = None
        if kind == "oom":
            from .profiling import write_oom_snapshot

            snapshot = write_oom_snapshot(self.run, self.rank)
        return FailureNote(
            memory_snapshot=snapshot,
            rank=self.rank,
            node=self.node,
            pid=os.getpid(),
            step=self.step,
            time=time.time(),
            error=error[:2000],
            peer_failure=peer,
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
            log=self.log,
            kind=kind,
        )

    @staticmethod
    def was_recorded(exc: BaseException) -> bool:
        """Whether this exception is settled: a note was written for it already (by the step loop's
        session), or it needs none (:meth:`settle`)."""
        return bool(getattr(exc, "__hpcprof_noted__", False))

    def record_as(self, exc: BaseException, noted: BaseException) -> None:
        """`exc` is told by the note written for `noted` (a clearer error standing in for it)."""
        if self.was_recorded(noted):
            self.settle(exc)

    @staticmethod
    def settle(exc: BaseException) -> None:
        """No note for this exception, here or further up (the SystemExit of a requeue)."""
        try:
            exc.__hpcprof_noted__ = True  # type: ignore[attr-defined]
        except AttributeError:
            pass

    def record(self, exc: BaseException) -> None:
        """Write the note (once per exception); a failure to write it never hides the original error."""
        if self.was_recorded(exc):
            return
        try:
            exc.__hpcprof_noted__ = True  # type: ignore[attr-defined]
        except AttributeError:
            pass
        try:
            atomic_write_text(self.run.failure_path(self.rank), json.dumps(self.note(exc).to_dict(), indent=2))
        except OSError:
            pass


def enable_fatal_log(run: RunDir, rank: int):
    """Let faulthandler write a fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) and every
    thread's Python stack to failures/rank-<r>.fatal.txt. Returns the open file (kept open for the
    life of the process; an empty file is removed at a clean end by :func:`disable_fatal_log`)."""
    path = run.fatal_path(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "w")
    faulthandler.enable(file=fh, all_threads=True)
    return fh


def disable_fatal_log(fh) -> None:
    faulthandler.disable()
    try:
        name = fh.name
        fh.close()
        if os.path.getsize(name) == 0:
            os.unlink(name)
    except OSError:
        pass


class PeerWatch:
    """A daemon thread that reads failures/ once a second; when another rank has left a note that is
    not a peer failure (the root cause), and this rank is still running `grace_s` later, it writes
    this rank's note (kind peer_stopped) and ends the process. Likewise, after `timeout_grace_s`,
    when no rank has a root cause but another timed out waiting for a peer in a collective: this
    rank had not failed, nor timed out itself, so it is likely the one that did not answer (hung,
    or stuck outside the collectives); its note says so (hpcprof.rundir.records.unanswered names it).

    Why: on NCCL a rank waiting in a collective for a dead peer notices nothing until the process
    group's timeout (minutes), and only srun --kill-on-bad-exit or torchrun's agent kill it earlier;
    under submitit's local executor, a plain srun, or a launcher of the user's, nobody does. On gloo
    the closed connection usually stops the rank first; then the watch has nothing to do."""

    def __init__(self, failure: FailureContext, on_stop: Callable[[], None] | None = None,
                 interval_s: float = 1.0, grace_s: float = 3.0, timeout_grace_s: float = 10.0):
        self.failure = failure
        self.on_stop = on_stop
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.timeout_grace_s = timeout_grace_s
        """Longer than grace_s: the other ranks waiting in the same collective time out a little
        later than the first; a rank still running after this is most likely not one of them."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hpcprof-peer-watch", daemon=True)

    def start(self) -> "PeerWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def root_failure(self) -> dict | None:
        """The earliest note of another rank that is not a peer failure, else another rank's record of
        a fatal signal (failures/rank-<r>.fatal.txt: it died in native code), or None."""
        run, me = self.failure.run, self.failure.rank
        for note in run.read_failures():
            if note.get("rank") != me and not note.get("peer_failure"):
                return note
        for path in sorted(run.fatal_path(me).parent.glob(FATAL_TEMPLATE.format(rank="*"))):
            rank = rank_from_name(path.name)
            if rank is not None and rank != me and run.read_fatal(rank):
                first = run.read_fatal(rank).strip().splitlines()[0]
                return {"rank": rank, "step": None, "error": first}
        return None

    def timed_out(self) -> dict | None:
        """The earliest note of another rank that timed out waiting for a peer (kind peer_timeout)."""
        run, me = self.failure.run, self.failure.rank
        return next((n for n in run.read_failures() if n.get("rank") != me and n.get("kind") == "peer_timeout"), None)

    def _run(self) -> None:
        seen_at = None
        while not self._stop.wait(self.interval_s):
            try:
                root = self.root_failure()
                waited = self.timed_out() if root is None else None
            except Exception:  # a half-written folder on a slow file system: look again
                continue
            if root is None and waited is None:
                continue
            seen_at = seen_at or time.time()
            if time.time() - seen_at < (self.grace_s if root is not None else self.timeout_grace_s):
                continue
            if self._stop.is_set():
                return
            if root is not None:
                at = f" at step {root['step']}" if root.get("step") is not None else ""
                exc = PeerStopped(f"hpcprof: stopped because rank {root.get('rank')} failed{at} "
                                  f"({str(root.get('error'))[:200]}); this rank was still running {self.grace_s:.0f} s later")
            else:
                at = f" at step {waited['step']}" if waited.get("step") is not None else ""
                exc = PeerStopped(f"hpcprof: stopped because rank {waited.get('rank')} {STOPPED_AFTER_TIMEOUT}{at} "
                                  f"({str(waited.get('error'))[:200]}); this rank had not failed: it was in step "
                                  f"{self.failure.step}, still running {self.timeout_grace_s:.0f} s later")
            self.failure.record(exc)
            if self.on_stop is not None:
                try:
                    self.on_stop()
                except Exception:
                    pass
            end_own_group()
            os._exit(1)
