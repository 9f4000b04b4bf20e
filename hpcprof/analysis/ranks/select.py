"""Which per-rank results enter the reduce.

A folder of traces is often messier than one job's clean set: unreadable files, two traces of the
same rank, a trace left over from another job. Each of these becomes a warning that names the file
and what to do; the remaining ranks are analysed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from statistics import median
from typing import Iterable

from ...rundir import TRACE_TEMPLATE
from .result import RankResult, read_table


def select_ranks(results: list[RankResult], manifest: dict, ranks: Iterable[int] | None,
                 warnings: list[str]) -> tuple[dict[int, RankResult], int | None]:
    """(rank -> result of the ranks to reduce, sorted; the job's world size or None).

    Bad files, duplicate ranks and traces from another job become warnings (appended to `warnings`),
    as do the warnings each rank's analysis left; `ranks` keeps only those ranks."""
    good = []
    for r in results:
        if r.ok:
            good.append(r)
        else:
            warnings.append(f"skipped {r.error}")
    for r in good:
        warnings.extend(r.meta.get("warnings", []))
    # world size: the manifest's, else the most common among traces
    ws_counts = Counter(r.meta["world_size"] for r in good if r.meta["world_size"] is not None)
    world_size = manifest.get("world_size") or (ws_counts.most_common(1)[0][0] if ws_counts else None)
    candidates: dict[int, list[RankResult]] = {}
    for r in good:
        m = r.meta
        name = Path(r.path).name
        if world_size is not None and m["world_size"] is not None and m["world_size"] != world_size:
            warnings.append(
                f"skipped {name} (rank {m['rank']}): world size {m['world_size']} differs from the job's {world_size}; "
                "trace from a different job? (remove it from the folder)"
            )
            continue
        if m["rank"] < 0 or (world_size is not None and m["rank"] >= world_size):
            warnings.append(
                f"skipped {name}: rank {m['rank']} is outside [0, {world_size if world_size is not None else '...'}) "
                "of this job; trace from a different job or a corrupt distributedInfo? (remove it from the folder)"
            )
            continue
        candidates.setdefault(m["rank"], []).append(r)
    keep = _one_per_rank(candidates, warnings)
    if ranks is not None:
        wanted = set(int(x) for x in ranks)
        missing = wanted - set(keep)
        if missing:
            warnings.append(f"requested ranks not found: {sorted(missing)}")
        keep = {k: v for k, v in keep.items() if k in wanted}
    if world_size and keep and len(keep) < world_size and ranks is None:
        warnings.append(f"{len(keep)} of {world_size} ranks analysed; cross-rank results cover only these ranks")
    return dict(sorted(keep.items())), world_size


def _start_us(r: RankResult) -> float | None:
    """When the trace's first profiled step (else its first busy interval) starts, on its clock."""
    for table, col in (("steps", "ts_us"), ("busy", "start_us")):
        p = r.tables.get(table)
        if p:
            try:
                v = read_table(p, columns=[col])[col]
            except Exception:
                continue
            if len(v):
                return float(v.min())
    return None


def _one_per_rank(candidates: dict[int, list[RankResult]], warnings: list[str]) -> dict[int, RankResult]:
    """One trace per rank. Two traces of one rank: the run directory's own name (rank-<r>.pt.trace...)
    wins; otherwise the trace closest in time to the other ranks' (a stale trace of an earlier run
    left in the folder is hours or days away; keeping it made "costs 291287.9 ms/step")."""
    keep = {rank: rs[0] for rank, rs in candidates.items() if len(rs) == 1}
    if all(len(rs) == 1 for rs in candidates.values()):
        return keep  # no duplicate: nothing to choose (and no table to read)
    ref = [s for s in (_start_us(r) for r in keep.values()) if s is not None]
    ref_us = median(ref) if ref else None
    for rank, rs in candidates.items():
        if len(rs) == 1:
            continue
        own = [r for r in rs if Path(r.path).name == TRACE_TEMPLATE.format(rank=rank)]
        if len(own) == 1:
            chosen, why = own[0], "the run's own trace is " + Path(own[0].path).name
        elif ref_us is not None:
            starts = {id(r): _start_us(r) for r in rs}
            chosen = min(rs, key=lambda r: abs(starts[id(r)] - ref_us) if starts[id(r)] is not None else float("inf"))
            why = f"{Path(chosen.path).name} is the one recorded with the other ranks"
        else:
            chosen, why = rs[0], f"analysed {Path(rs[0].path).name}, the first by name"
        keep[rank] = chosen
        for r in rs:
            if r is not chosen:
                warnings.append(f"skipped {Path(r.path).name}: duplicate rank {rank} ({why}); "
                                "keep one trace per rank in the folder")
    return keep
