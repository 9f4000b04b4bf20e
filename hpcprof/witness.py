"""Between submitit's local controller and a local rank: a small process that runs the rank as its
child, and records how it ended when nothing else can.

Why (issue 37, item 2): a rank that ends by ``os._exit(7)``, or exits from native code, writes no
failure note (no Python runs), and only its parent learns its exit status. Under ``--cluster local``
that parent was submitit's controller, which records it nowhere, so ``submit`` could only list what
it might have been ("killed by SIGKILL, os._exit() or an exit from native code"). The witness is
the command submitit starts for each task (``LocalExecutor(python=...)``, a public parameter:
:func:`witness_python`), and the rank is its child. It guarantees:

- every signal the controller or ``submit`` sends it for the rank (SIGINT, SIGTERM, SIGUSR1,
  SIGUSR2, SIGHUP, SIGQUIT, SIGCONT) reaches the rank, once (``submit`` signals ranks, never
  witnesses: :func:`hpcprof.launch.outcome.rank_processes`);
- when the rank ends with any status but 0 (or submitit's requeue code), it writes
  ``failures/rank-<r>.exit.json`` (:meth:`hpcprof.rundir.RunDir.exit_path`) with the exit code or the
  signal, and when: ``submit`` names the rank and its code, and tells a rank killed by SIGKILL from
  one that exited;
- it ends as the rank ended (the same exit code, or the same signal), so that the controller's
  requeue and failure handling see what they saw without it;
- it dies with the controller (``PR_SET_PDEATHSIG``), and the rank with it (the rank asks the same
  of its parent: :mod:`hpcprof.rank.lifeline`);
- it leads a session of its own, so that a Ctrl-C at the terminal does not reach it (nor the rank
  through it): the controller starts it with SIGINT ignored, and `submit` alone stops the ranks.

It imports the standard library and :mod:`hpcprof.lifetime` only (hence a top-level module, beside
it): it lives as long as the rank, and must not hold memory or time a rank could use. SLURM ranks need none: ``sacct`` reports each step's
exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from .lifetime import die_with_parent, lead_own_group

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGCONT)
"""The signals a controller, ``submit`` or a user sends a local task; the rank gets each of them."""
MODULE = "hpcprof.witness"
EXIT_FILE = "failures/rank-{rank}.exit.json"
"""Where the witness records an abnormal end (the same path as RunDir.exit_path: tests check both agree)."""
REQUEUE_CODE = 144
"""submitit's LOCAL_REQUEUE_RETURN_CODE: a rank asking to be started again, not a failure (checked
against submitit's constant in tests/test_witness.py: the witness imports nothing of submitit)."""


def witness_python(run_root: str | os.PathLike, python: str | None = None) -> str:
    """The ``python`` command for submitit's LocalExecutor: submitit appends
    ``-u -m submitit.core._submit FOLDER`` and splits the whole with shlex, so every path is quoted."""
    exe = shlex.quote(python or sys.executable)
    return f"{exe} -m {MODULE} --run {shlex.quote(str(run_root))} -- {exe}"


def record_exit(run_root: Path, rank: int, status: int) -> Path | None:
    """Write failures/rank-<r>.exit.json for a rank that ended with `status` (Popen's returncode:
    the exit code, or minus the signal). Best effort: a full disk must not change how the rank ended."""
    entry: dict = {"rank": rank, "time": time.time()}
    if status < 0:
        sig = -status
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        entry.update(signal=sig, signal_name=name)
    else:
        entry["exit_code"] = status
    path = run_root / EXIT_FILE.format(rank=rank)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def run(run_root: Path, command: list[str]) -> int:
    """Run `command` (the rank), forwarding signals to it; record and return its status."""
    die_with_parent()
    # out of the terminal's process group (the controller is in it, ignoring SIGINT): a Ctrl-C
    # reaches `submit` alone, which signals the rank once (hpcprof.launch.executors.local_controller_apart)
    lead_own_group()
    child: list[subprocess.Popen] = []
    pending: list[int] = []

    def forward(signum, _frame):
        if child:
            try:
                child[0].send_signal(signum)
            except ProcessLookupError:
                pass
        else:  # before the rank exists: delivered as soon as it does
            pending.append(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    child.append(subprocess.Popen(command))
    for sig in pending:
        child[0].send_signal(sig)
    status = child[0].wait()
    rank = os.environ.get("SUBMITIT_LOCAL_GLOBALID", "")
    if status not in (0, REQUEUE_CODE) and rank.isdigit():
        record_exit(run_root, int(rank), status)
    return status


def end_as(status: int) -> None:
    """Exit the way the rank did: with its exit code, or killed by its signal."""
    if status < 0:
        sig = -status
        for s in FORWARDED:
            signal.signal(s, signal.SIG_DFL)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: no handler can be set, the default it is
            pass
        with contextlib.suppress(ValueError, OSError):  # the rank's core dump, if any, is the one to keep
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), sig)
        time.sleep(1.0)  # a signal whose default is not to end (SIGCONT...): exit as a shell would
        os._exit(128 + sig)
    sys.stdout.flush()
    os._exit(status)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 4 or argv[0] != "--run" or argv[2] != "--":
        sys.exit(f"usage: python -m {MODULE} --run RUN_DIR -- COMMAND... (started by hpcprof.submit, not by hand)")
    end_as(run(Path(argv[1]), argv[3:]))


if __name__ == "__main__":
    main()
