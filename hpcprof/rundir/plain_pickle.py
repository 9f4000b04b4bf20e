"""Pickles a job wrote into its run directory, read without running anything of them.

A run directory may come from anywhere (a colleague's job, a shared folder): its pickles (CUDA
memory snapshots, flight-recorder dumps) are read with an unpickler that builds plain containers
and values only (dicts, lists, tuples, strings, numbers, booleans, None) and refuses any class or
function, so no code in a run directory ever runs (issue 37).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any


class PlainPickleError(ValueError):
    """A file that cannot be read as a plain-value pickle (the message names the file and why)."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain values; any global (class, function) is refused."""

    what = "this file"

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: {self.what} holds plain values only")


def load_plain(path: str | Path, max_bytes: int, what: str) -> Any:
    """The plain values pickled in `path`, or PlainPickleError naming the file: larger than
    `max_bytes`, unreadable, or not a plain-value pickle (`what` names what it should be: "a
    memory snapshot")."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise PlainPickleError(f"{path}: {size} bytes, larger than {what} ({max_bytes} bytes at most)")
        unpickler = _PlainUnpickler(io.BytesIO(path.read_bytes()))
        unpickler.what = what
        return unpickler.load()
    except PlainPickleError:
        raise
    except OSError as exc:
        raise PlainPickleError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # any malformed or hostile pickle
        raise PlainPickleError(f"{path}: not {what} ({type(exc).__name__}: {exc})") from None
