"""One clock for the whole job: per-host clock offsets from collective end times, with an uncertainty.

Why: every rank stamps its trace with its own host's clock. Ranks on one host share that clock;
hosts may disagree by milliseconds (no or poor NTP/PTP), which would make a rank look late (or
early) by exactly that much. A collective ends on all its ranks at nearly the same instant: nobody
leaves before the last one arrived and the data moved. So for each host, the difference between
its ranks' end times and the reference host's, taken over many collectives, estimates the offset.
This module is the ONE clock estimator: the straggler analysis aligns arrivals with it and the
merged timeline places every event with it.

Definitions (also in docs/analysis.md, "Numbers and definitions"):
- reference host: the host of the lowest analysed rank; its offset is 0 by definition.
- end of host h at collective c: the median end time over h's ranks at c.
- offset of host h: median over the collectives seen on both h and the reference host of
  (end of h - end of the reference host). Aligned time = trace time - offset of the rank's host.
- residual: per collective, that difference minus the offset (what the offset does not explain).
- causal bounds: at an all-to-all kind of collective no rank ends before every rank arrived, so
  the offset lies in [max(arrival_h - end_ref), min(end_h - arrival_ref)] over those collectives.
  When that interval is narrower than the median's uncertainty (below), its midpoint is the offset
  and its half-width the uncertainty (a hard bound, not a statistical one): on shared CPU cores the
  end times of gloo collectives spread by milliseconds, while the bounds still close in.
- uncertainty of the median estimate (about a 95% bound): 2 x the standard error of that median (1.2533 x robust sigma of
  the residuals / sqrt(n)), plus the systematic part: the largest median end-time difference
  between two ranks that share a clock (their true offset is 0, so whatever they show is how far
  "ends at the same instant" is off on this job), with a floor of 1 us (Kineto's resolution).
  Where no two analysed ranks share a clock (one rank per host), that difference cannot be
  measured; it is bounded instead by how fast the job's quickest collectives complete: the
  SYSTEMATIC_QUANTILE (10th percentile) over the collectives of the shortest time any rank spent
  in one (end minus arrival on its own clock: the last rank to arrive only waits for the data to
  move), since ranks that end one collective cannot be further apart than the time the data
  takes to move. With one physical clock behind two nodes, the median of end differences is off by
  about one message time (the second rank of a gloo all-reduce ends one message later), and the
  bound holds that offset.
- a host is suspect (warning) when its uncertainty exceeds BOUND_US, or when more than
  MAX_OUTLIER_SHARE of its residuals exceed BOUND_US (a drifting or jumping clock) and the causal
  bounds do not pin the offset, or when fewer than MIN_COLLECTIVES collectives could be matched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# half of the straggler analysis' 1 ms noise floor: a clock error below this cannot create or hide
# a straggler
BOUND_US = 500.0
MAX_OUTLIER_SHARE = 0.1
MIN_COLLECTIVES = 3
RESOLUTION_US = 1.0
_MAD_TO_SIGMA = 1.4826
_MEDIAN_SE = 1.2533  # standard error of a median = 1.2533 sigma / sqrt(n) for normal noise
SYSTEMATIC_QUANTILE = 0.1


@dataclass(frozen=True)
class HostClock:
    """The clock of one host relative to the reference host."""

    host: str | None
    ranks: tuple[int, ...]
    offset_us: float
    uncertainty_us: float
    n_collectives: int
    residual_sigma_us: float  # robust (MAD) sigma of the residuals
    residual_max_us: float  # largest |residual|
    outlier_share: float  # share of residuals above BOUND_US
    suspect: bool = False


@dataclass
class ClockAlignment:
    """Per-host offsets (trace time - reference time) and how well they are known."""

    reference_host: str | None
    hosts: dict = field(default_factory=dict)  # host -> HostClock
    rank_host: dict = field(default_factory=dict)  # rank -> host
    systematic_us: float = 0.0  # the same-clock term of every uncertainty (see module docstring)
    bound_us: float = BOUND_US
    method: str = ""

    def offset_us(self, rank: int) -> float:
        h = self.hosts.get(self.rank_host.get(rank))
        return h.offset_us if h is not None else 0.0

    def uncertainty_us(self, rank: int) -> float:
        h = self.hosts.get(self.rank_host.get(rank))
        return h.uncertainty_us if h is not None else 0.0

    def rank_offsets(self) -> dict[int, float]:
        """rank -> offset (us): subtract from a rank's trace time to get the job's clock."""
        return {int(r): self.offset_us(r) for r in sorted(self.rank_host)}

    def warnings(self) -> list[str]:
        out = []
        for h in self.hosts.values():
            if not h.suspect:
                continue
            ranks = ", ".join(map(str, h.ranks))
            if h.n_collectives < MIN_COLLECTIVES:
                why = f"only {h.n_collectives} collective(s) matched with the reference host"
            else:
                why = (f"uncertainty {h.uncertainty_us / 1e3:.3f} ms, {100 * h.outlier_share:.0f}% of the "
                       f"{h.n_collectives} collectives off by more than {self.bound_us / 1e3:.3f} ms "
                       f"(largest {h.residual_max_us / 1e3:.3f} ms)")
            out.append(
                f"clock of host {h.host} (ranks {ranks}) is poorly aligned: {why}; arrival times of its ranks, "
                "and the straggler and wait numbers that involve them, may be off by that much"
            )
        return out

    def unknown_host_ranks(self) -> list[int]:
        """Ranks whose host is not known (no manifest and no host name in the trace)."""
        return sorted(int(r) for r, h in self.rank_host.items() if h is None)

    def note(self) -> str:
        """What unknown hosts mean for the alignment, in words ("" when every host is known)."""
        unknown = self.unknown_host_ranks()
        if not unknown:
            return ""
        ranks = _ranks_text(unknown)
        if len(unknown) < len(self.rank_host):
            return (f"host unknown for {ranks} (not in the manifest, and their traces record no host name): they are "
                    "taken to share one clock, aligned as one more host")
        if len(unknown) == 1:
            return "host unknown (no manifest, and the trace records no host name): one rank, one clock"
        spread = self.systematic_us / 1e3
        fits = ("consistent with one clock" if self.systematic_us <= self.bound_us else
                f"more than the {self.bound_us / 1e3:.3f} ms bound: the ranks may run on machines whose clocks differ, and "
                "arrival times, waits and straggler costs may be off by that much")
        return (f"hosts unknown for {ranks} (a folder of traces without a manifest, and the traces record no host name): every "
                f"rank is taken to share one clock and no offset is corrected; the matched collectives end within {spread:.3f} ms "
                f"of each other on all ranks ({fits}); analyse the run directory written by hpcprof.submit (its manifest "
                "names each rank's node) to align the clocks per host")

    def to_dict(self) -> dict:
        """For summary.json (`clock_alignment`) and the timeline's metadata; times in ms."""
        return {
            "method": self.method,
            "reference_host": self.reference_host,
            "unknown_host_ranks": self.unknown_host_ranks(),
            "note": self.note(),
            "bound_ms": self.bound_us / 1e3,
            "systematic_ms": round(self.systematic_us / 1e3, 6),
            "hosts": [
                {
                    "host": h.host,
                    "ranks": list(h.ranks),
                    "offset_ms": round(h.offset_us / 1e3, 6),
                    "uncertainty_ms": round(h.uncertainty_us / 1e3, 6),
                    "collectives": h.n_collectives,
                    "residual_sigma_ms": round(h.residual_sigma_us / 1e3, 6),
                    "residual_max_ms": round(h.residual_max_us / 1e3, 6),
                    "suspect": h.suspect,
                }
                for h in self.hosts.values()
            ],
        }


def _ranks_text(ranks: list[int]) -> str:
    """"ranks 0-7", "ranks 0, 2, 5", "rank 3"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _robust_sigma(x: np.ndarray) -> float:
    if x.size < 2:
        return 0.0
    return float(_MAD_TO_SIGMA * np.median(np.abs(x - np.median(x))))


def _quickest_collectives_us(colls: pd.DataFrame) -> float:
    """The bound on how far the ends of one collective lie apart where no two ranks share a clock
    (see the module docstring): per collective, the shortest time a rank spent in it on its own
    clock (end - arrival), and of those the SYSTEMATIC_QUANTILE over the collectives."""
    if not {"arrival_us", "end_us", "key"} <= set(colls.columns) or colls.empty:
        return 0.0
    inside = (colls["end_us"] - colls["arrival_us"]).groupby(colls["key"]).min()
    inside = inside[inside >= 0]
    return float(inside.quantile(SYSTEMATIC_QUANTILE)) if len(inside) else 0.0


def _causal_bounds(colls: pd.DataFrame, members: list[int], ref_members: list[int]) -> tuple[float, float] | None:
    """[lo, hi] for the offset of the hosts of `members` against the reference host from causality:
    at an all-to-all kind of collective (all-reduce, all-gather, all-to-all, reduce-scatter,
    barrier) no rank ends before every rank has arrived, so in true time end_r >= arrival_r' for
    any two ranks. With offset t (host clock - reference clock): t >= arrival_h - end_ref and
    t <= end_h - arrival_ref at every such collective. None when the columns are missing, no such
    collective was seen on both hosts, or the bounds contradict each other (clocks drifting, a
    wrong match): the median estimate stands then."""
    if not {"arrival_us", "end_us", "key"} <= set(colls.columns) or colls.empty:
        return None
    d = colls
    if "kind" in d:
        kinds = d["kind"].astype(str).str.lower().str.replace("_", "")
        d = d[kinds.str.contains("all|reducescatter|barrier|sendrecv", regex=True)]
    h = d[d["rank"].isin(members)].groupby("key").agg(a=("arrival_us", "max"), e=("end_us", "min"))
    r = d[d["rank"].isin(ref_members)].groupby("key").agg(a=("arrival_us", "max"), e=("end_us", "min"))
    both = h.add_suffix("_h").join(r.add_suffix("_r"), how="inner")
    if both.empty:
        return None
    lo = float((both["a_h"] - both["e_r"]).max())
    hi = float((both["e_h"] - both["a_r"]).min())
    return (lo, hi) if lo <= hi else None


def estimate_clocks(colls: pd.DataFrame, hosts: dict, bound_us: float = BOUND_US) -> ClockAlignment:
    """Estimate per-host offsets from matched collectives.

    `colls`: one row per (rank, collective) with columns `rank`, `key` (the same for one collective
    on every rank) and `end_us` (the rank's own clock). `hosts`: rank -> host name (ranks sharing
    a name share a clock; None counts as one unknown host). Ranks missing from `colls` get the
    offset of their host, or 0 with the reference when their host has no collectives.
    """
    rank_host = {int(r): hosts.get(r) for r in hosts}
    for r in (colls["rank"].unique() if len(colls) else []):
        rank_host.setdefault(int(r), None)
    ranks = sorted(rank_host)
    if not ranks:
        return ClockAlignment(reference_host=None, method="no ranks")
    ref = rank_host[ranks[0]]
    by_host: dict = {}
    for r in ranks:
        by_host.setdefault(rank_host[r], []).append(r)
    piv = (colls.pivot_table(index="key", columns="rank", values="end_us", aggfunc="first")
           if len(colls) else pd.DataFrame())

    systematic, same_clock_pairs = 0.0, 0
    for members in by_host.values():
        cols = [r for r in members if r in piv.columns]
        A = piv[cols].to_numpy(float) if cols else np.empty((0, 0))
        for i in range(len(cols) - 1):  # every pair (a, b) of the host's ranks, a row of pairs at a time
            D = A[:, i:i + 1] - A[:, i + 1:]
            seen = (~np.isnan(D)).sum(axis=0) > 0
            if seen.any():
                med = np.nanmedian(D[:, seen], axis=0)  # every column seen: no all-NaN slice
                same_clock_pairs += int(seen.sum())
                systematic = max(systematic, float(np.max(np.abs(med))))
    if not same_clock_pairs and len(by_host) > 1:
        systematic = _quickest_collectives_us(colls)

    def host_end(members):
        cols = [r for r in members if r in piv.columns]
        return piv[cols].median(axis=1) if cols else pd.Series(dtype=float)

    ref_end = host_end(by_host[ref])
    out: dict = {}
    for h, members in by_host.items():
        if h == ref or len(by_host) == 1:
            out[h] = HostClock(h, tuple(members), 0.0, 0.0, int(ref_end.notna().sum()), 0.0, 0.0, 0.0)
            continue
        d = (host_end(members) - ref_end).dropna().to_numpy(float) if not ref_end.empty else np.empty(0)
        n = int(d.size)
        if n == 0:
            out[h] = HostClock(h, tuple(members), 0.0, float("inf"), 0, 0.0, 0.0, 0.0, suspect=True)
            continue
        off = float(np.median(d))
        res = d - off
        sigma = _robust_sigma(res)
        unc = max(RESOLUTION_US, 2 * _MEDIAN_SE * sigma / np.sqrt(n) + systematic)
        bounds = _causal_bounds(colls, members, by_host[ref])
        bounded = bounds is not None and bounds[1] - bounds[0] < 2 * unc
        if bounded:
            # causality pins the offset more tightly than the spread of end times: use it
            off, unc = (bounds[0] + bounds[1]) / 2, max(RESOLUTION_US, (bounds[1] - bounds[0]) / 2)
            res = d - off
        share = float(np.mean(np.abs(res) > bound_us))
        # scattered end times do not make a causally bounded offset uncertain
        suspect = n < MIN_COLLECTIVES or unc > bound_us or (share > MAX_OUTLIER_SHARE and not bounded)
        out[h] = HostClock(h, tuple(members), off, unc, n, sigma, float(np.max(np.abs(res))), share, suspect)
    method = ("hosts unknown: one clock assumed, no correction" if len(by_host) == 1 and ref is None else
              "one host: one clock, no correction" if len(by_host) == 1 else
              "per host: median over collectives of the difference in end times to the reference host")
    return ClockAlignment(reference_host=ref, hosts=out, rank_host=rank_host, systematic_us=systematic,
                          bound_us=bound_us, method=method)
