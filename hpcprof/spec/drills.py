"""The ``[drills]`` section of the job spec: known faults injected on purpose (a straggler, a crash,
a hang, a skewed clock), with the parsing of their ``RANK:MS...`` forms; refusals are :class:`SpecError`
naming the field."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import SpecError


@dataclass
class Drills:
    """Known faults injected on purpose, to check that the analysis finds them."""

    straggler: str = ""
    """"RANK:MS[:EVERY][@FROM[-TO]]": that rank sleeps MS milliseconds on the host before the
    work of every step (between getting its batch and handing it to the training code: a slow input
    pipeline on one node), or only of the steps whose number is a multiple of EVERY, and only from
    step FROM (to step TO, inclusive) when given: a healthy job that turns slow mid-run. With
    EVERY = 2 the truth is measured inside one run: each drilled step's time minus that of its
    undrilled neighbours, so drift between runs cancels. On a GPU the rank first waits for its
    queue to drain, so the GPU sees the delay. Empty: off."""
    crash: str = ""
    """"RANK:STEP": that rank raises at that step. Empty: off."""
    hang: str = ""
    """"RANK:STEP": that rank sleeps forever inside that step, before its work and collectives (where
    the straggler drill sleeps): the others wait for it in their next collective, as behind a rank
    stuck in its data loader. The hang watchdog (train.hang_timeout_s) must end the job and name it.
    Empty: off."""
    mismatch: str = ""
    """"RANK:STEP": in that step, before its work, that rank calls a collective the others do not
    (an all_gather, as a branch only one rank took would): every rank then waits in a different
    collective, and the job hangs. The hang watchdog (train.hang_timeout_s) must end the job and
    name the rank and both collectives. Empty: off."""
    clock_skew: str = ""
    """"NODE:MS": the ranks on node NODE (its host name) write every trace timestamp shifted by MS
    milliseconds (negative: behind), as a host with an unsynchronised clock would. The analysis
    must recover the offset (summary.json clock_alignment) and report the same straggler and wait
    numbers as without it. The step records are not shifted. Empty: off."""

    @property
    def straggler_rank_ms(self) -> tuple[int, float] | None:
        """The straggler drill as (rank, milliseconds), or None when off."""
        d = self.straggler_plan
        return (d.rank, d.ms) if d else None

    @property
    def straggler_plan(self) -> "StragglerPlan | None":
        """The straggler drill, parsed, or None when off."""
        if not self.straggler:
            return None
        m = re.fullmatch(r"\s*(\d+)\s*:\s*([0-9]+(?:\.[0-9]*)?)\s*(?::\s*(\d+)\s*)?(?:@\s*(\d+)\s*(?:-\s*(\d+)\s*)?)?",
                         str(self.straggler))
        if not m:
            raise SpecError(f"drills.straggler must look like RANK:MS[:EVERY][@FROM[-TO]] (e.g. 2:50, 1:60:2 or "
                            f"1:60@120-160), got {self.straggler!r}")
        rank, ms, every = int(m.group(1)), float(m.group(2)), int(m.group(3) or 1)
        first, last = int(m.group(4) or 0), (int(m.group(5)) if m.group(5) else None)
        if every < 1:
            raise SpecError(f"drills.straggler: EVERY must be >= 1 (1: every step), got {every}")
        if not 0 < ms <= 600_000:
            raise SpecError(f"drills.straggler: MS must be > 0 and at most 600000 (10 minutes), got {m.group(2)}")
        if last is not None and last < first:
            raise SpecError(f"drills.straggler: the step range @{first}-{last} is empty (TO < FROM)")
        return StragglerPlan(rank, ms, every, first, last)

    @property
    def clock_skew_node_ms(self) -> tuple[str, float] | None:
        """The clock-skew drill as (node, milliseconds), or None when off."""
        if not self.clock_skew:
            return None
        m = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\s*:\s*(-?[0-9]+(?:\.[0-9]*)?)\s*", str(self.clock_skew))
        if not m:
            raise SpecError(f"drills.clock_skew must look like NODE:MS (e.g. n2:5 or n2:-0.5), got {self.clock_skew!r}")
        return m.group(1), float(m.group(2))

    @property
    def crash_rank_step(self) -> tuple[int, int] | None:
        """The crash drill as (rank, step), or None when off."""
        return _parse_pair(self.crash, "drills.crash", "RANK:STEP", int) if self.crash else None

    @property
    def hang_rank_step(self) -> tuple[int, int] | None:
        """The hang drill as (rank, step), or None when off."""
        return _parse_pair(self.hang, "drills.hang", "RANK:STEP", int) if self.hang else None

    @property
    def mismatch_rank_step(self) -> tuple[int, int] | None:
        """The collective-mismatch drill as (rank, step), or None when off."""
        return _parse_pair(self.mismatch, "drills.mismatch", "RANK:STEP", int) if self.mismatch else None


@dataclass(frozen=True)
class StragglerPlan:
    """The straggler drill, parsed (hpcprof.spec.Drills.straggler)."""

    rank: int
    ms: float
    every: int = 1
    first: int = 0
    """First step it acts in."""
    last: int | None = None
    """Last step it acts in (None: to the end of the run)."""


_EXAMPLES = {"RANK:MS": "2:50", "RANK:STEP": "3:4"}


def _parse_pair(text: str, key: str, form: str, conv) -> tuple[int, Any]:
    m = re.fullmatch(r"\s*(\d+)\s*:\s*([0-9.]+)\s*", str(text))
    if not m:
        raise SpecError(f"{key} must look like {form} (e.g. {_EXAMPLES[form]}), got {text!r}")
    try:
        return int(m.group(1)), conv(m.group(2))
    except ValueError:
        raise SpecError(f"{key} must look like {form} (e.g. {_EXAMPLES[form]}), got {text!r}") from None
