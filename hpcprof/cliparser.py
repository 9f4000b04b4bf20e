"""The argument parser of every ``python -m hpcprof.*`` command: no abbreviations, and a mistyped
flag answered in one line with the closest real one.

argparse's defaults surprise users of a tool with 80 generated flags: a prefix such as
``--train-step`` is silently taken for ``--train-steps`` (and a new flag can later make the same
prefix ambiguous), and a typo prints the whole usage (35 lines) before "unrecognized arguments".
:class:`ArgumentParser` refuses prefixes (``allow_abbrev=False``) and reports an unknown flag as::

    python -m hpcprof.submit: error: unknown flag --data-num-wokers (did you mean --data-num-workers?); --help lists every flag
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser with ``allow_abbrev=False`` and one-line errors with suggestions."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def option_strings(self) -> list[str]:
        """Every flag this parser accepts (``--x`` and ``--no-x`` of boolean flags included)."""
        return [opt for action in self._actions for opt in action.option_strings]

    def suggest(self, flag: str) -> str | None:
        """The accepted flag closest to ``flag`` (``--data-num-wokers=4`` is compared without ``=4``)."""
        name = flag.split("=", 1)[0]
        close = difflib.get_close_matches(name, self.option_strings(), n=1, cutoff=0.6)
        return close[0] if close else None

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.unknown(extras)
        return parsed

    def unknown(self, extras: list[str]) -> NoReturn:
        """Exit 2 with one line naming the first unknown flag (or stray value) and the closest flag."""
        flags = [e for e in extras if e.startswith("-")]
        if not flags:
            self.exit(2, f"{self.prog}: error: unexpected argument(s): {' '.join(extras)}; "
                         "--help lists what this command takes\n")
        first = flags[0]
        hint = self.suggest(first)
        more = f" (and {len(flags) - 1} more unknown)" if len(flags) > 1 else ""
        did_you_mean = f" (did you mean {hint}?)" if hint else ""
        self.exit(2, f"{self.prog}: error: unknown flag {first.split('=', 1)[0]}{did_you_mean}{more}; "
                     "--help lists every flag\n")

    def error(self, message: str) -> NoReturn:
        """One line: the message, and where the full usage is (instead of printing all of it)."""
        self.exit(2, f"{self.prog}: error: {message}; --help lists every flag\n")



def quiet_until_main(prog: str) -> None:
    """Called first thing by a command's ``__main__`` shim: until its main() handles Ctrl-C itself,
    Ctrl-C prints ``<prog>: interrupted`` and exits 130. Why: importing pandas, torch or
    matplotlib takes seconds, and a Ctrl-C then printed the import's KeyboardInterrupt traceback
    (issue 23, item 3). Nothing has started yet, so there is nothing to stop."""
    import signal

    def handler(signum, frame):
        sys.stderr.write(f"{prog}: interrupted\n")
        sys.stderr.flush()
        os._exit(130)

    handler.quiet_until_main = True  # type: ignore[attr-defined]
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        pass


def main_handles_interrupts() -> None:
    """After :func:`quiet_until_main`: Ctrl-C raises KeyboardInterrupt again (what
    :func:`run_guarded` turns into one line). A handler someone else set (`submit --analyze`
    runs this main inside its own) is left alone."""
    import signal

    if getattr(signal.getsignal(signal.SIGINT), "quiet_until_main", False):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run_guarded(prog: str, call, expected: tuple[type[BaseException], ...], what: str):
    """(result, None) from `call()`, or (None, exit code) after one line on stderr: 2 for an
    `expected` error (its message says what to do), 130 for Ctrl-C, 1 for anything unforeseen
    (never a traceback; HPCPROF_DEBUG=1 re-raises it)."""
    try:
        return call(), None
    except expected as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return None, 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return None, 130
    except Exception as exc:
        if os.environ.get("HPCPROF_DEBUG"):
            raise
        print(f"{prog}: error: {what} failed ({type(exc).__name__}: {exc}); rerun with HPCPROF_DEBUG=1 for details",
              file=sys.stderr)
        return None, 1
