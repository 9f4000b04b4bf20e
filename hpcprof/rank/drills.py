"""Rank-side drills: known faults injected on purpose so that the analysis can be checked against an
answer known in advance. The spec's [drills] section says which rank does what; the manifest records
the same drills for the analysis (hpcprof.rundir.manifest.Drills). They act inside the step loop
(hpcprof.rank.session), so they work alike for the built-in trainer and for users' training code."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..spec import Drills


class DrillCrash(RuntimeError):
    """Raised on purpose by the --inject-crash drill (its failure note is never a peer failure)."""


@dataclass(frozen=True)
class RankDrills:
    """What this rank injects: a host-side sleep before its step's work (between getting the batch
    and handing it to the training code), a crash at one step, a shift of its trace timestamps
    (clock skew of its node: hpcprof.rank.clock_skew)."""

    rank: int
    sleep_s: float = 0.0
    sleep_every: int = 1
    sleep_from: int = 0
    """First step the straggler drill may act in."""
    sleep_to: int | None = None
    """Last step it may act in (None: to the end)."""
    crash_step: int | None = None
    clock_skew_ms: float = 0.0
    hang_step: int | None = None
    """The step in which this rank sleeps forever (the hang drill), or None."""
    mismatch_step: int | None = None
    """The step in which this rank calls a collective the others do not (the mismatch drill), or None."""

    @classmethod
    def for_rank(cls, drills: Drills, rank: int, node: str | None = None) -> "RankDrills":
        s, c, k, h = drills.straggler_plan, drills.crash_rank_step, drills.clock_skew_node_ms, drills.hang_rank_step
        m = drills.mismatch_rank_step
        mine = bool(s and s.rank == rank)
        return cls(rank, s.ms / 1000.0 if mine else 0.0, s.every if mine else 1, s.first if mine else 0,
                   s.last if mine else None, c[1] if c and c[0] == rank else None,
                   k[1] if k and node is not None and k[0] == node else 0.0, h[1] if h and h[0] == rank else None,
                   m[1] if m and m[0] == rank else None)

    def before_step(self, step: int) -> None:
        if self.crash_step is not None and step == self.crash_step:
            raise DrillCrash(f"hpcprof crash drill: rank {self.rank} raised at step {step} (--inject-crash)")

    def hang(self, step: int) -> None:
        """The hang drill: in its step this rank never returns (it sleeps forever, before the step's
        work and collectives), so its peers wait for it in their next collective. Only the hang
        watchdog (hpcprof.rank.hang), a signal or the job's end stops it. The mismatch drill acts
        at the same point: the rank calls a collective its peers do not (:func:`stray_collective`)."""
        if self.hang_step is not None and step == self.hang_step:
            hang_forever()
        if self.mismatch_step is not None and step == self.mismatch_step:
            stray_collective()

    def sleeps_at(self, step: int) -> bool:
        """Whether the straggler drill acts in global step `step` (a multiple of sleep_every inside
        [sleep_from, sleep_to])."""
        return (self.sleep_s > 0 and step % self.sleep_every == 0 and step >= self.sleep_from
                and (self.sleep_to is None or step <= self.sleep_to))

    def straggle(self, step: int, use_cuda: bool) -> float:
        """The straggler drill: an unexplained host-side delay (not inside any region), as a slow
        input pipeline on one node would cause. Returns the host seconds it took (0 when idle).

        On a GPU a bare host sleep would be absorbed by the host's lead over the device (up to about
        one ResNet-50 step of queued kernels): the GPU would never see it. So the rank first waits
        for its GPU queue to drain, then sleeps: the GPU idles for the sleep, as it does behind a
        host that cannot feed it, and the drill's truth is on the GPU's clock (step records' gpu_ms)."""
        if not self.sleeps_at(step):
            return 0.0
        t = time.perf_counter()
        if use_cuda:
            import torch

            torch.cuda.current_stream().synchronize()
        time.sleep(self.sleep_s)
        return time.perf_counter() - t


def stray_collective() -> None:
    """The mismatch drill's collective: an all_gather of one number on the default process group,
    which the other ranks never call at this point; they wait in their own next collective (DDP's
    gradient all-reduce) and this rank in this one, so the job hangs. Without a process group (a
    single process) there is nothing to mismatch."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    one = torch.zeros(1)
    if dist.get_backend() == "nccl":
        one = one.cuda()
    dist.all_gather([torch.zeros_like(one) for _ in range(dist.get_world_size())], one)


def hang_forever() -> None:
    """Sleep until the process ends (the hang drill's stack shows this function)."""
    while True:
        time.sleep(3600)
