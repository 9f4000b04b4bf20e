"""The analysis' progress bars on stderr, for the phases that can take more than a moment at scale.

Each phase's bar appears only once the phase has run for DELAY_S (tqdm's `delay`): a 2-rank analysis
prints no bar for a phase of 10 ms, a 256-rank one shows what it is doing during the seconds of
hashing 5 GB of traces or reducing 256 ranks. The map and the merged timeline have their own bars
(executors/, outputs/timeline/trace.py)."""

from __future__ import annotations

import sys

DELAY_S = 1.0
"""Seconds a phase runs before its bar is shown."""


def rank_bar(desc: str, progress: bool, total: int = 0, leave: bool = True):
    """A bar counting ranks, shown once it has run for DELAY_S (the merged timeline's sizing pass)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="rank", delay=DELAY_S, disable=not progress, leave=leave, file=sys.stderr)


def bytes_bar(total: int, desc: str, progress: bool):
    """A bar counting bytes (hashing the traces)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, delay=DELAY_S,
                disable=not progress, file=sys.stderr)


class Stages:
    """A bar over the named stages of a phase (the reduce): `step(name)` ends the current stage and
    shows the name of the next one beside the bar."""

    def __init__(self, desc: str, names: list[str], progress: bool):
        from tqdm import tqdm

        self.names = list(names)
        self.done = 0
        self.bar = tqdm(total=len(self.names), desc=desc, unit="stage", delay=DELAY_S, disable=not progress,
                        file=sys.stderr)
        if self.names:
            self.bar.set_postfix_str(self.names[0], refresh=False)

    def step(self, name: str) -> None:
        """The stage `name` (one of `names`, in order) begins; the stages before it are done."""
        at = self.names.index(name)
        self.bar.set_postfix_str(name, refresh=False)  # shown by the update's refresh
        if at > self.done:
            self.bar.update(at - self.done)
            self.done = at

    def close(self) -> None:
        if self.done < len(self.names):
            self.bar.update(len(self.names) - self.done)
            self.done = len(self.names)
        self.bar.close()

    def __enter__(self) -> "Stages":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # interrupted or failed: leave the bar where it stopped, on a line of its own
            self.bar.close()
