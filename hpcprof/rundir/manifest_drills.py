"""The manifest's ``drills`` record: the known faults the spec injected (hpcprof.spec.Drills),
as the analysis reads them back to check its answers against (null when off). Part of
manifest.json (:mod:`.manifest`); kept apart because the drills grow with the tool and the rest of
the manifest does not."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StragglerDrill:
    rank: int
    ms: float
    """Host-side sleep before the forward pass of that rank."""
    every: int = 1
    """The sleep happens on the steps whose number is a multiple of this (1: every step)."""
    first_step: int = 0
    """First step the drill acts in (@FROM)."""
    last_step: int | None = None
    """Last step it acts in (@FROM-TO); None: to the end."""


@dataclass
class CrashDrill:
    rank: int
    step: int
    """That rank raises at this step."""


@dataclass
class HangDrill:
    rank: int
    step: int
    """That rank sleeps forever inside this step, before its collectives."""


@dataclass
class MismatchDrill:
    rank: int
    step: int
    """In this step that rank calls a collective (all_gather) that the others do not."""


@dataclass
class ClockSkewDrill:
    node: str
    ms: float
    """The ranks on this node wrote their trace timestamps shifted by ms (their clock ahead)."""


@dataclass
class Drills:
    """The drills of the spec, as the analysis reads them (null when off)."""

    straggler: StragglerDrill | None = None
    crash: CrashDrill | None = None
    clock_skew: ClockSkewDrill | None = None
    hang: HangDrill | None = None
    mismatch: MismatchDrill | None = None

    @classmethod
    def from_spec(cls, drills) -> "Drills":
        """From the spec's [drills] section (hpcprof.spec.Drills)."""
        s, c = drills.straggler_plan, drills.crash_rank_step
        k, h, m = drills.clock_skew_node_ms, drills.hang_rank_step, drills.mismatch_rank_step
        return cls(StragglerDrill(s.rank, s.ms, s.every, s.first, s.last) if s else None,
                   CrashDrill(c[0], c[1]) if c else None,
                   ClockSkewDrill(k[0], k[1]) if k else None, HangDrill(h[0], h[1]) if h else None,
                   MismatchDrill(m[0], m[1]) if m else None)
