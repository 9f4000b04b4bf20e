"""The merged timeline: every rank's trace on one clock, in one Chrome trace (Perfetto, chrome://tracing).

Why: a finding such as "rank 6 costs 160 ms per step" is only believed once it is seen. Per-rank
traces open one at a time and each host has its own clock; this writes ONE file,
`analysis/timeline.pt.trace.json.gz`, where every rank is a process named "rank r · node · device",
its CPU threads and GPU streams are its threads, and all times are on the job's clock
(hpcprof.analysis.reduce.clocks: per-host offsets with their uncertainty, recorded in the file).
Time 0 is the start of the first chosen step (the earliest rank); the file's metadata gives, per
step, where it starts on the timeline, so a finding can say "at 143-193 ms from the start of step 12".

What goes in: the chosen profiled steps (`--timeline-steps`, default all profiled steps). Host
events overlapping those steps' window on the rank; GPU events launched in it (their CUDA runtime
call, matched by correlation id, lies in the window) or, without a launch record, starting in it
(render.window_rows; the rows a rank's first pass selects are kept for its second).
Launch flows (runtime call -> kernel) are rebuilt from correlation ids. Lanes computed by the
parent from the reduce's results: "hpcprof: waits" per rank, where each collective whose last rank
arrived more than ANNOTATE_MS after the first gets a slice on the late rank ("late arrival") and
one on every rank that waited for it, with a flow arrow from each wait to the late arrival.

One decode per rank, one rank at a time: each rank's events come from its piece, built by its map
task from the trace it decoded anyway (ranks/timeline_piece.py) and cached with the rest of its
result. The parent reads the pieces twice, one rank at a time: once to count what the chosen steps
select (per kind, and the distinct durations of the kinds the budget may cut), once to write; the
file is a gzip stream (gzip_out.py: one member, deflated on threads by python-isal where installed).
Memory: one rank's piece, never all ranks' events. What a rank freed goes back to the system after it
(render_rank): kept instead, it saved page faults but the parent's peak grew (fragmentation).

Size budget (budget.py): at most `max_events` events. Above it, whole kinds of low value are dropped first
(DROP_ORDER: flows, Python functions, short CPU ops, runtime calls, instant events, long CPU ops),
the shortest events first within the last kind touched (ties: lower rank, then trace order); GPU
activity, step markers, lanes and collectives are never dropped. Launch flows go all or nothing.
Where those alone exceed the budget (256 ranks of 22 steps: 2.1 million), the last chosen steps
are left out, whole, until they fit (`steps_left_out`, and a warning). What was dropped is counted
in the file's metadata and in the returned dict.

Adding a lane (e.g. the critical path): write a function `(ctx: TimelineContext) -> Lane` that puts
its events on the timeline's clock (`ctx.to_timeline(rank, t_us)` for a time of the rank's own clock,
or `ctx.origin_us` for the job's), pass it in `lanes` to write_timeline (merged_timeline forwards its
`lanes`), and the budget, the per-rank thread names and the file take it as they take the waits.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Sequence

import msgspec
import numpy as np
import pandas as pd

from ...progress import rank_bar
from ...reduce.clocks import ClockAlignment
from ...layout import TIMELINE_FILE
from ..rounding import round_summary
from .budget import DROP_ORDER, Counts
from .gzip_out import gzip_out
from .render import ANNOT_TID, SELECT_COLUMNS, RankLabel, keep_rows, read_piece, render_rank, window_rows

FILE_NAME = TIMELINE_FILE
DEFAULT_MAX_EVENTS = 1_000_000
ANNOTATE_MS = 1.0  # the straggler analysis' noise floor: later arrivals than this are annotated
MAX_ANNOTATED = 500  # collectives annotated at most (the latest arrivals first)


class TimelineError(Exception):
    """The timeline cannot be written (no chosen step on any rank); the message says what to pass."""


@dataclass(frozen=True)
class RankSource:
    """One rank's input to the timeline: what its map task left (meta.json `timeline`, the piece)."""

    rank: int
    piece: str | None
    """The rank's timeline.parquet (ranks/timeline_piece.py), None without profiler steps."""
    main_tid: str | None
    steps: dict[int, tuple[float, float]]
    """Profiled step -> (start, end) on the main thread, in the rank's own clock (us)."""
    node: str | None
    device: str | None  # "cpu", "cuda", or a device name


@dataclass
class TimelineContext:
    """What a lane needs to place its events: time 0 and the ranks' clock offsets."""

    origin_us: float
    """Time 0 of the timeline on the job's clock (the start of the first chosen step)."""
    offsets_us: dict[int, float]
    """Rank -> its clock's offset (subtract from a time of the rank's own clock to get the job's)."""
    steps: list[int]
    ranks: list[int]
    """The ranks on the timeline (those with a chosen step)."""

    def to_timeline(self, rank: int, t_us):
        """A time of `rank`'s own clock as a time on the timeline (us from time 0)."""
        return t_us - self.offsets_us.get(rank, 0.0) - self.origin_us


@dataclass
class Lane:
    """A thread of events the parent computes (not from one rank's trace), on every rank's process."""

    name: str
    tid: int
    sort_index: int
    events: list[dict] = field(default_factory=list)
    """Chrome trace events with pid = rank, tid = `tid`, ts (and dur) in us on the timeline's clock."""
    info: dict = field(default_factory=dict)
    """What summary.json `timeline` records about the lane (merged into it)."""


def late_arrivals(colls: pd.DataFrame, clocks: ClockAlignment, min_ms: float = ANNOTATE_MS) -> pd.DataFrame:
    """Per matched collective whose last rank arrived more than `min_ms` after the first: one row per
    rank with its aligned arrival (us), the late rank, its aligned arrival and the wait (ms).
    `colls`: rank, key, step, kind, arrival_us (the rank's own clock)."""
    if colls is None or colls.empty:
        return pd.DataFrame()
    d = colls[["rank", "key", "step", "kind", "arrival_us"]].copy()
    d["arrival"] = d["arrival_us"] - d["rank"].map(clocks.rank_offsets()).fillna(0.0)
    d = d[d.groupby("key")["rank"].transform("nunique") >= 2]
    if d.empty:
        return pd.DataFrame()
    g = d.groupby("key")["arrival"]
    d["first"] = g.transform("min")
    d["last"] = g.transform("max")
    last_rank = d.loc[g.idxmax(), ["key", "rank"]].set_index("key")["rank"]
    d["late_rank"] = d["key"].map(last_rank)
    d["lateness_ms"] = (d["last"] - d["first"]) / 1e3
    d["wait_ms"] = (d["last"] - d["arrival"]) / 1e3
    return d[d["lateness_ms"] > min_ms].reset_index(drop=True)


def waits_lane(colls: pd.DataFrame | None, clocks: ClockAlignment) -> Callable[[TimelineContext], Lane]:
    """The lane "hpcprof: waits": the MAX_ANNOTATED latest arrivals of the chosen steps, a slice on
    the late rank, one on every rank that waited for it, and a flow from each wait to the arrival."""

    def build(ctx: TimelineContext) -> Lane:
        lane = Lane("hpcprof: waits", ANNOT_TID, -1)
        late = late_arrivals(colls, clocks) if colls is not None else pd.DataFrame()
        if not late.empty:
            late = late[late["step"].isin(ctx.steps)]
            top = late.drop_duplicates("key").nlargest(MAX_ANNOTATED, "lateness_ms")["key"]
            late = late[late["key"].isin(set(top))]
        lane.info["annotated_collectives"] = int(late["key"].nunique()) if not late.empty else 0
        have, origin, out = set(ctx.ranks), ctx.origin_us, lane.events
        flow_id = 1
        for key, grp in _groups(late):
            lr = int(grp["late_rank"][0])
            first, last = float(grp["first"][0]) - origin, float(grp["last"][0]) - origin
            kind, step, lateness = grp["kind"][0], int(grp["step"][0]), float(grp["lateness_ms"][0])
            if lr in have:
                out.append({"ph": "X", "cat": "hpcprof", "name": f"late arrival: rank {lr} at {kind}, {lateness:.2f} ms after the first rank",
                            "pid": lr, "tid": ANNOT_TID, "ts": round(first, 3), "dur": round(last - first, 3),
                            "args": {"step": step, "collective": str(key), "late_ms": round(lateness, 3)}})
            for r, arr, w in zip(grp["rank"], grp["arrival"], grp["wait_ms"]):
                r = int(r)
                if r == lr or w <= 0 or r not in have:
                    continue
                a = float(arr) - origin
                out.append({"ph": "X", "cat": "hpcprof", "name": f"waiting for rank {lr} ({kind}, {w:.2f} ms)", "pid": r, "tid": ANNOT_TID,
                            "ts": round(a, 3), "dur": round(w * 1e3, 3), "args": {"step": step, "collective": str(key), "late_rank": lr}})
                if lr in have:
                    out.append({"ph": "s", "cat": "hpcprof", "name": "waits for", "id": 10**15 + flow_id, "pid": r, "tid": ANNOT_TID, "ts": round(a, 3)})
                    out.append({"ph": "f", "bp": "e", "cat": "hpcprof", "name": "waits for", "id": 10**15 + flow_id, "pid": lr, "tid": ANNOT_TID,
                                "ts": round(last - 0.001, 3)})
                    flow_id += 1
        return lane

    return build


def _groups(late: pd.DataFrame):
    """(key, {column: its values as a list}) per collective of `late`, in the order of the keys'
    first rows, each group's rows in their order (lists, not a pandas groupby yielding a frame per
    collective read with iloc: the timeline walks hundreds of collectives)."""
    if late.empty:
        return
    codes, keys = pd.factorize(late["key"])  # a missing key: -1, left out (as groupby does)
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    cols = {c: late[c].to_numpy()[order].tolist() for c in ("late_rank", "first", "last", "kind", "step", "lateness_ms", "rank",
                                                              "arrival", "wait_ms")}
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    for lo, hi, key in zip([0, *bounds.tolist()], [*bounds.tolist(), len(order)], keys):
        yield key, {c: v[lo:hi] for c, v in cols.items()}


# ---------------------------------------------------------------------------------- the file


class _Elements:
    """The traceEvents array as a stream: chunks of JSON objects each followed by a comma."""

    def __init__(self, out: IO[bytes]):
        self.out, self.first = out, True

    def add(self, chunk: bytes | memoryview) -> None:
        n = len(chunk)
        while n and chunk[n - 1] == 0x2C:  # the trailing comma(s), cut without copying the chunk
            n -= 1
        if n:
            if not self.first:
                self.out.write(b",")
            self.out.write(chunk if n == len(chunk) else memoryview(chunk)[:n])
            self.first = False


def _plain(o):
    """numpy scalars (from pandas columns) as plain numbers for the JSON encoder."""
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"cannot encode {type(o).__name__} in the timeline")


def _encode(events: list[dict]) -> bytes:
    return b"".join(msgspec.json.encode(e, enc_hook=_plain) + b"," for e in events)


def write_timeline(
    out_dir: Path,
    sources: list[RankSource],
    clocks: ClockAlignment,
    steps: list[int] | None = None,
    colls: pd.DataFrame | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
    progress: bool = False,
    lanes: Sequence[Callable[[TimelineContext], Lane]] = (),
) -> dict:
    """Write `out_dir/timeline.pt.trace.json.gz`; return what summary.json records about it.
    `colls`: the matched collectives (for the waits lane); `lanes`: more lanes (module docstring)."""
    from tqdm import tqdm

    wanted = set(int(s) for s in steps) if steps else None
    chosen = {s.rank: {k: v for k, v in s.steps.items() if wanted is None or k in wanted} for s in sources if s.piece}
    have = sorted(r for r, c in chosen.items() if c)
    if not have:
        avail = sorted({k for s in sources for k in s.steps})
        raise TimelineError(
            f"none of the steps {sorted(wanted) if wanted else '(all)'} is a profiled step of any rank; "
            f"profiled steps: {avail or 'none (no ProfilerStep#N in the traces)'}; pass --timeline-steps with some of these"
        )
    offs = clocks.rank_offsets()
    by_rank = {s.rank: s for s in sources}
    all_steps = sorted({s for r in have for s in chosen[r]})
    n_steps, left_out = len(all_steps), []
    # the events of every rank counted before any is written (again with fewer steps when over the
    # budget): seconds at 256 ranks, so a bar of its own, left on screen only while it runs
    sizing = rank_bar("hpcprof: merged timeline, sizing", progress, leave=False)
    while True:
        chosen_steps = all_steps[:n_steps]
        keep_steps = set(chosen_steps)
        sub = {r: {k: v for k, v in chosen[r].items() if k in keep_steps} for r in have}
        ranks = [r for r in have if sub[r]]
        step_start = {s: min(sub[r][s][0] - offs.get(r, 0.0) for r in ranks if s in sub[r]) for s in chosen_steps}
        origin = min(step_start.values())
        ctx = TimelineContext(origin_us=origin, offsets_us=offs, steps=chosen_steps, ranks=ranks)
        built = [b(ctx) for b in [waits_lane(colls, clocks), *lanes]]
        window = {r: (min(v[0] for v in sub[r].values()), max(v[1] for v in sub[r].values())) for r in ranks}
        counts = Counts()
        sizing.total = (sizing.total or 0) + len(ranks)
        rows = {}  # rank -> its selected rows (np.packbits), None: all; kept for pass 2, not selected again
        for r in ranks:  # pass 1: counts only
            piece = read_piece(by_rank[r].piece, SELECT_COLUMNS)
            # a piece holds what its rank's window of all its steps selects (ranks/timeline_piece.py), and
            # selecting in that window again keeps every row: not computed then
            mask = None if len(sub[r]) == len(by_rank[r].steps) else window_rows(piece, *window[r])
            rows[r] = None if mask is None or mask.all() else np.packbits(mask)
            counts.add(piece if mask is None else keep_rows(piece, mask))
            sizing.update()
        n_fixed = sum(len(x.events) for x in built)
        budget = counts.budget(max_events, n_fixed)
        # what is never dropped (GPU activity, steps, collectives, lanes) may alone pass the budget
        # (256 ranks x 22 steps: 2.1 million events): then the last steps are left out, whole
        undroppable = sum(n for k, n in counts.kinds.items() if k not in DROP_ORDER) + n_fixed
        if undroppable <= max_events or n_steps == 1:
            break
        n_steps = max(1, min(n_steps - 1, int(n_steps * max_events / undroppable)))
        left_out = all_steps[n_steps:]
    sizing.close()
    have = ranks

    path = Path(out_dir) / FILE_NAME
    kept = 0
    with gzip_out(path) as gz:
        gz.write(b'{"traceEvents":[')
        arr = _Elements(gz)
        for r in tqdm(have, desc="hpcprof: merged timeline", unit="rank", disable=not progress, file=sys.stderr):
            src = by_rank[r]
            f = read_piece(src.piece)
            if rows[r] is not None:
                f = keep_rows(f, np.unpackbits(rows[r], count=f.num_rows).astype(bool))
            f = keep_rows(f, budget.mask(f))
            kept += render_rank(f, RankLabel(r, src.node, src.device), src.main_tid, offs.get(r, 0.0) + origin, budget.keep_flows, arr.add)
            del f
            arr.add(_encode([m for x in built for m in (
                {"ph": "M", "name": "thread_name", "pid": r, "tid": x.tid, "args": {"name": x.name}},
                {"ph": "M", "name": "thread_sort_index", "pid": r, "tid": x.tid, "args": {"sort_index": x.sort_index}})]))
        for x in built:
            arr.add(_encode(x.events))
            kept += len(x.events)
        info = {
            "path": str(path),
            "steps": chosen_steps,
            "origin_us": origin,
            "step_start_ms": {str(s): round((v - origin) / 1e3, 3) for s, v in step_start.items()},
            "events": kept,
            "max_events": max_events,
            "dropped": {k: int(v) for k, v in budget.dropped.items() if v},
            "steps_left_out": left_out,
            **{k: v for x in built for k, v in x.info.items()},
            "ranks": have,
            "ranks_without_steps": sorted({s.rank for s in sources} - set(have)),
            "open": "open https://ui.perfetto.dev and drag the file in (or chrome://tracing -> Load)",
        }
        rest = {
            "displayTimeUnit": "ms",
            "otherData": {
                "hpcprof": "merged timeline: all ranks on one clock; time 0 = start of the first chosen step",
                "steps": ", ".join(map(str, chosen_steps)),
                "dropped": ", ".join(f"{k}: {v}" for k, v in info["dropped"].items()) or "nothing",
                "clock_offsets_ms": "; ".join(f"{h['host']}: {h['offset_ms']:+.3f} ± {h['uncertainty_ms']:.3f}" for h in clocks.to_dict()["hosts"]),
            },
            # rounded as in summary.json, so the two files state the same offsets
            "hpcprof": {"clock_alignment": round_summary(clocks.to_dict(), "clock_alignment"), **{k: v for k, v in info.items() if k != "path"}},
        }
        gz.write(b"]," + msgspec.json.encode(rest, enc_hook=_plain)[1:])
    return info


def merged_timeline(out_dir: Path, keep: dict, nodes: dict, matching, warnings: list[str],
                    steps: list[int] | None = None, max_events: int | None = None, progress: bool = False,
                    lanes: Sequence[Callable[[TimelineContext], Lane]] = ()) -> tuple[ClockAlignment, dict]:
    """The merged timeline, on the clock the straggler analysis used. `keep`: rank -> RankResult
    (its `timeline` table and meta.json `timeline`: ranks/timeline_piece.py); `matching`: the
    what-if replay's matched collectives (reduce/whatif.Matching: `df` with rank, key, step, kind,
    arrival_us, and `clocks` from reduce/clocks.py), or None (one rank, no collectives: one host's
    clock, offset 0). A timeline that cannot be written is a warning (and `error` in the returned
    dict), never a failed analysis. The clock's warnings are appended to `warnings`."""
    from ...reduce.clocks import estimate_clocks

    hosts = {r: nodes.get(r) for r in keep}
    if matching is not None and getattr(matching, "clocks", None) is not None:
        clocks, matched = matching.clocks, matching.df
    else:
        clocks, matched = estimate_clocks(pd.DataFrame(columns=["rank", "key", "end_us"]), hosts), pd.DataFrame()
    warnings.extend(clocks.warnings())
    sources = []
    for r, v in sorted(keep.items()):
        m = v.meta
        tl = m.get("timeline") or {}
        sources.append(RankSource(
            r, v.tables.get("timeline"), tl.get("main_tid"), {int(s): (float(a), float(b)) for s, a, b in tl.get("steps") or []},
            nodes.get(r), (m.get("device_name") or m.get("device")) if m.get("device") in ("cuda", "accelerator") else "cpu"))
    try:
        info = write_timeline(out_dir, sources, clocks, steps, matched if len(matched) else None,
                              max_events=DEFAULT_MAX_EVENTS if max_events is None else max_events, progress=progress,
                              lanes=lanes)
        if info.get("steps_left_out"):
            warnings.append(f"merged timeline: steps {info['steps_left_out']} left out: the GPU activity, steps and collectives of "
                            f"all chosen steps alone exceed --timeline-max-events ({info['max_events']:,}); pass "
                            "--timeline-steps to choose the steps, or a larger --timeline-max-events")
        if info["events"] > info["max_events"]:  # one step alone is more than the budget (0 once meant 1,000,000)
            warnings.append(f"the merged timeline holds {info['events']:,} events, above --timeline-max-events "
                            f"{info['max_events']:,}: GPU activity, step markers, collectives and annotations are never "
                            f"dropped (everything else was), and one step is never cut")
    except TimelineError as exc:
        warnings.append(f"no merged timeline: {exc}")
        info = {"error": str(exc)}
    except Exception as exc:  # a damaged cache entry, a full disk: the rest still stands
        warnings.append(f"no merged timeline: {type(exc).__name__}: {exc}")
        info = {"error": f"{type(exc).__name__}: {exc}"}
    return clocks, info
