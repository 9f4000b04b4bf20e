"""Running the spec's workload on a rank: the built-in ResNet trainer, a user's function
(``workload.entry = "pkg.module:function"``) or a user's script (``workload.script = "train.py"``).

User code reaches hpcprof through the step-loop API (``hpcprof.run()``); the launcher's spec and run
directory travel to it through hpcprof.rank.session.LAUNCH, set around the call. A script runs as
``python SCRIPT ARGS`` would run it: as ``__main__``, with ``sys.argv = [SCRIPT, *args]`` and its
folder first on ``sys.path``; a function is called with no arguments, with ``sys.argv[1:] = args``.

:func:`check_workload` is the launcher-side check (before anything is submitted): the script exists,
the entry's module can be found; each refusal is one line naming the field.
"""

from __future__ import annotations

import importlib
import importlib.util
import runpy
import sys
from pathlib import Path
from typing import Any

from ..spec import JobSpec, SpecError


def check_workload(spec: JobSpec, cwd: Path | None = None) -> JobSpec:
    """Refuse a workload that cannot run, before anything is submitted; a script path becomes
    absolute (ranks may start elsewhere). Modifies and returns ``spec``."""
    w = spec.workload
    if w.script:
        path = Path(w.script).expanduser()
        if not path.is_absolute():
            path = (cwd or Path.cwd()) / path
        if not path.is_file():
            raise SpecError(f"workload.script {w.script!r}: no such file ({path})")
        w.script = str(path.resolve())
    if w.entry:
        module, _, func = w.entry.partition(":")
        missing = None
        try:
            if importlib.util.find_spec(module) is None:
                missing = module
        except ModuleNotFoundError as exc:  # a parent package is missing
            missing = exc.name or module
        except (ImportError, ValueError) as exc:
            raise SpecError(f"workload.entry {w.entry!r}: cannot import {module!r} ({exc})") from None
        if missing:
            raise SpecError(f"workload.entry {w.entry!r}: no module {missing!r} on this Python's path "
                            "(install it, or add its folder to PYTHONPATH)")
    return spec


def run_workload(spec: JobSpec) -> Any:
    """Run the workload in this process (the caller has set LAUNCH); returns what it returns."""
    w = spec.workload
    if w.builtin:
        from .resnet import train

        return train()
    saved_argv = list(sys.argv)
    try:
        if w.script:
            script = str(Path(w.script))
            sys.argv = [script, *w.args]
            folder = str(Path(script).resolve().parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            runpy.run_path(script, run_name="__main__")
            return None
        module, _, func = w.entry.partition(":")
        sys.argv = [saved_argv[0] if saved_argv else module, *w.args]
        target = getattr(importlib.import_module(module), func, None)
        if not callable(target):
            raise SpecError(f"workload.entry {w.entry!r}: {module} has no function {func!r}")
        return target()
    finally:
        sys.argv = saved_argv
