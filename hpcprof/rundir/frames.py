"""Python frames as the run directory's records name them: ``function (folder/file.py:line)``, and
the training code's own frame among torch's and hpcprof's (hang notes, flight-recorder dumps)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Frame:
    """One Python frame of a stack (innermost first in lists)."""

    file: str
    line: int
    function: str

    def short(self) -> str:
        """``function (folder/file.py:line)``: the last two parts of the path are enough to find it."""
        tail = "/".join(self.file.replace("\\", "/").split("/")[-2:])
        return f"{self.function} ({tail}:{self.line})"


def _internal(frame: Frame) -> bool:
    p = frame.file.replace("\\", "/")
    return "/torch/" in p or "/hpcprof/" in p or p.startswith("<")


def where_and_caller(frames: list[Frame]) -> tuple[str | None, str | None]:
    """(innermost frame, innermost frame of the training code: outside torch and hpcprof)."""
    where = frames[0].short() if frames else None
    caller = next((f.short() for f in frames if not _internal(f)), None)
    return where, caller
