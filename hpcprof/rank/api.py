"""The entry points of the step-loop API: :func:`run` (a session for a ``with`` block) and
:func:`start` (the same session, started at once and closed at exit: for module-level training
loops that would otherwise need re-indenting). Both return a :class:`hpcprof.rank.session.Run`."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Any

from ..spec import JobSpec, SpecError, apply_values, validate_run_name
from . import auto, session
from .session import Run
from .startup import running_script
from .steploop import HpcprofUsageError


def run(batch_size: int | None = None, *, spec: JobSpec | str | Path | None = None, steps: int | None = None,
        name: str | None = None, runs_dir: str | None = None, **sections: dict) -> Run:
    """This rank's profiling session; use it as a context manager: ``with hpcprof.run(...) as run:``.

    batch_size: samples per rank per step (recorded with every step: the analysis' samples/s; None:
        unknown, and no samples/s is reported).
    steps: the number of steps of ``run.steps(loader)`` (new passes over the loader are started up
        to it); without it, ``run.steps(loader)`` is one pass, as a plain ``for`` loop is. The loop's
        length is always the script's: hpcprof never cuts it and never waits for more.
    Under an hpcprof launcher the job spec comes from the launch (its flags: profiler, drills, run
    directory; `spec`, `name`, `runs_dir` and the sections given here are then ignored, with one
    line saying so). Otherwise: spec: a JobSpec or a job file (TOML, as in jobs/); name / runs_dir:
    where the run directory goes (an existing run of another job is never reused); and sections as
    dicts, e.g. ``profiler={"wait": 5, "active": 3}``, ``drills={"straggler": "1:60:2"}``,
    ``train={"pg_timeout_s": 120}``."""
    auto.yield_to_api()
    if session.LAUNCH is not None:
        given = [k for k, v in (("spec", spec), ("name", name), ("runs_dir", runs_dir)) if v is not None]
        given += list(sections)
        if given:
            print(f"hpcprof: launched by hpcprof, so the launch's job spec applies; ignored hpcprof.run() argument(s) "
                  f"{', '.join(given)} (set them as flags of the launch instead)", file=sys.stderr)
        launch = session.LAUNCH
        return Run(launch.spec, launch.run_root, launch.log, launched=True, batch_size=batch_size,
                   steps=_steps(steps))
    if isinstance(spec, JobSpec):
        job = spec
    else:
        from ..spec import load_spec

        job = load_spec(spec) if spec is not None else JobSpec()
    values: dict[str, Any] = {k: v for k, v in sections.items()}
    try:
        apply_values(job, values, where="hpcprof.run(): ")
        if name is not None:
            job.name = validate_run_name(name, "hpcprof.run(name=...)")
        if runs_dir is not None:
            job.runs_dir = str(runs_dir)
        if job.workload.builtin:  # this is the user's own code (the built-in trainer runs under LAUNCH)
            job.workload.script, job.workload.args = running_script()
        job.validate()
    except SpecError as exc:
        raise HpcprofUsageError(str(exc)) from None
    return Run(job, None, os.environ.get("HPCPROF_LOG_HINT"), launched=False, batch_size=batch_size,
               steps=_steps(steps))


def _steps(steps) -> int | None:
    if steps is None:
        return None
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise HpcprofUsageError(f"hpcprof.run(steps={steps!r}): a whole number of steps >= 1")
    return steps


def start(batch_size: int | None = None, **kwargs: Any) -> Run:
    """``run = hpcprof.start(batch_size=32)``: the session of :func:`run`, started now, for training
    code at module level (no ``with`` block to indent). It is closed when the script ends: cleanly
    at a normal exit, through the failure path when an exception ends the script (its failure note
    is written before Python prints the traceback); or earlier by ``run.close()``."""
    r = run(batch_size, **kwargs)
    r.__enter__()
    _close_at_exit(r)
    return r


def _close_at_exit(r: Run) -> None:
    previous = sys.excepthook

    def on_uncaught(exc_type, exc, tb):
        try:
            r.close(exc)
        finally:
            previous(exc_type, exc, tb)

    sys.excepthook = on_uncaught
    atexit.register(r.close)
