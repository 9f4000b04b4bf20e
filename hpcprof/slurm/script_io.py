"""The files of ``python -m hpcprof.sbatch``: reading a template, writing the rendered script.

Why apart from the rendering: both are about what is on disk, not about the script's content, and
each has its own way to go wrong that must end in one line: a template in another encoding than
UTF-8, and an ``-o`` path that is a device, a FIFO, a folder or a symlink (issue 23, items 4 and
14). ``-o -`` (standard output) is handled by the CLI, which never calls :func:`write_script` for it.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from ..rundir.layout import new_file_mode


class RenderError(ValueError):
    """A value or template that cannot be rendered; the message names the field."""


def read_template(path: Path) -> str:
    """The template's text; one line naming the file, the line and the byte when it is not UTF-8
    (a template saved in Latin-1 used to end in a UnicodeDecodeError traceback). Why refuse rather
    than guess the encoding: the script is written in UTF-8, so a guess would change the bytes of
    the user's own lines."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RenderError(f"--template {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise RenderError(f"--template {path}: not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
                          f"save it as UTF-8 (e.g. iconv -f latin1 -t utf-8); nothing was written") from None


_KINDS = ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISSOCK, "socket"))


def write_script(out: Path, text: str) -> Path:
    """Write the script through a temporary file beside it (renamed into place: an existing script
    is replaced whole or not at all); the temporary file never stays behind. Returns the file
    written.

    Only a regular file is ever replaced: a device (``-o /dev/full``, once replaced by a regular
    file when run as root), a FIFO, a socket or a folder is refused, with the shell redirection
    that writes into it. A symlink is followed: its target gets the script and the link stays
    (a rename over the link used to replace the link itself)."""
    target = Path(os.path.realpath(out)) if out.is_symlink() else out
    shown = f"-o {out}" + (f" (a symlink to {target})" if target != out else "")
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise RenderError(f"{shown} is a folder; give the script's file name, e.g. -o {out / 'job.sbatch'}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "special file")
        raise RenderError(f"{shown} is a {kind}, not a regular file: it is left as it is; to write the script "
                          f"into it, use standard output: python -m hpcprof.sbatch ... > {shlex.quote(str(out))}")
    if not target.parent.is_dir():
        raise RenderError(f"{shown}: folder {target.parent} does not exist; create it first "
                          f"(mkdir -p {shlex.quote(str(target.parent))})")
    mode = new_file_mode(target, executable=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
