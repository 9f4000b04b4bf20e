"""Which per-rank results enter the reduce.

A folder of traces is often messier than one job's clean set: unreadable files, two traces of the
same rank, a trace left over from another job. Each of these becomes a warning that names the file
and what to do; the remaining ranks are analysed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from .result import RankResult


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
    keep: dict[int, RankResult] = {}
    for r in good:
        m = r.meta
        name = Path(r.path).name
        if world_size is not None and m["world_size"] is not None and m["world_size"] != world_size:
            warnings.append(
                f"skipped {name} (rank {m['rank']}): world size {m['world_size']} differs from the job's {world_size}; "
                "trace from a different job? (remove it from the folder)"
            )
            continue
        if m["rank"] in keep:
            warnings.append(
                f"skipped {name}: duplicate rank {m['rank']} (already analysed from {Path(keep[m['rank']].path).name}); "
                "keep one trace per rank in the folder"
            )
            continue
        keep[m["rank"]] = r
    if ranks is not None:
        wanted = set(int(x) for x in ranks)
        missing = wanted - set(keep)
        if missing:
            warnings.append(f"requested ranks not found: {sorted(missing)}")
        keep = {k: v for k, v in keep.items() if k in wanted}
    if world_size and keep and len(keep) < world_size and ranks is None:
        warnings.append(f"{len(keep)} of {world_size} ranks analysed; cross-rank results cover only these ranks")
    return dict(sorted(keep.items())), world_size
