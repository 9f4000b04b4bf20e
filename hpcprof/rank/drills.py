"""Rank-side drills: known faults injected on purpose so that the analysis can be checked against an
answer known in advance. The spec's [drills] section says which rank does what; the manifest records
the same drills for the analysis (hpcprof.rundir.manifest.Drills)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..spec import Drills


class DrillCrash(RuntimeError):
    """Raised on purpose by the --inject-crash drill (its failure note is never a peer failure)."""


@dataclass(frozen=True)
class RankDrills:
    """What this rank injects: a host-side sleep before each forward pass, a crash at one step, a
    shift of its trace timestamps (clock skew of its node: hpcprof.rank.clock_skew)."""

    rank: int
    sleep_s: float = 0.0
    sleep_every: int = 1
    crash_step: int | None = None
    clock_skew_ms: float = 0.0

    @classmethod
    def for_rank(cls, drills: Drills, rank: int, node: str | None = None) -> "RankDrills":
        s, c, k = drills.straggler_drill, drills.crash_rank_step, drills.clock_skew_node_ms
        mine = bool(s and s[0] == rank)
        return cls(rank, s[1] / 1000.0 if mine else 0.0, s[2] if mine else 1, c[1] if c and c[0] == rank else None,
                   k[1] if k and node is not None and k[0] == node else 0.0)

    def before_step(self, step: int) -> None:
        if self.crash_step is not None and step == self.crash_step:
            raise DrillCrash(f"hpcprof crash drill: rank {self.rank} raised at step {step} (--inject-crash)")

    def sleeps_at(self, step: int) -> bool:
        """Whether the straggler drill sleeps in global step `step` (every sleep_every-th step)."""
        return self.sleep_s > 0 and step % self.sleep_every == 0

    def straggle(self, step: int) -> None:
        """The straggler drill: an unexplained host-side delay (not inside any region), as a slow
        input pipeline on one node would cause."""
        if self.sleeps_at(step):
            time.sleep(self.sleep_s)
