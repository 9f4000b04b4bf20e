"""When the runs of a comparison ran: whether two arms shared their time, and the drift of the
machine between blocks of runs launched apart (issue 37 item 20).

Why: a run's level moves with the machine's state (thermal state, a neighbour's job, the file
system), and it moves over minutes to hours. The run-to-run SD of an arm measures how runs of one
set differ; it does not hold how two sets launched at different times differ. `submit --repeat 3`
of one spec, then again under another name, gave "faster +10.3% [+4.0, +17.0]": the interval held
each arm's spread, not the drift between the two times. pyperf's answer is the same as the
ladder's: run the variants interleaved, so that the drift falls on both alike.

The rule (docs/compare.md, "Arms run apart in time"):
- A run starts at its first attempt's start (manifest `attempts[0].started`; else `created`) and
  ends at the launcher's `outcome.time` (unknown while running or for a job nobody waited for).
- Two arms are **interleaved** when neither arm's runs all started before the other arm's first run
  (the ladder's A B A B, or one arm launched while the other ran); else they ran **apart**. Runs
  without a manifest (folders of traces) have no time: the relation is **unknown**.
- Arms run apart get no faster/slower verdict ("not comparable in time: B ran after A") unless a
  drift is known: then the interval of the change holds it, SE^2 = SD^2 (1/n_base + 1/n_arm) +
  2 drift^2, on Welch-Satterthwaite degrees of freedom, and the verdict line says the arms ran apart.
- The drift is measured on an arm the user says is one configuration (`--group-by spec`,
  `--group`) whose runs form two or more blocks run at different times: replicate sets launched
  apart (blocks: the sets), or sets run interleaved (blocks: their rounds, replicate 1 of every set,
  then replicate 2, ...). It is the SD of a block's level (the mean of its runs' logs) between the
  blocks, on blocks - 1 degrees of freedom. It holds each block's own run-to-run spread (SD^2 / n)
  too, so an interval that adds it to the arms' SD is on the wide side, never the narrow one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from .noise import Noise, transform

TIME_FORMATS = ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z")


def parse_time(text) -> datetime | None:
    """A manifest time (ISO 8601 with its UTC offset, hpcprof.rundir.manifest.now_iso); None for
    anything else (an older manifest without offset is not comparable with one that has it)."""
    if not isinstance(text, str):
        return None
    for fmt in TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


@dataclass
class RunTime:
    start: datetime | None
    end: datetime | None


def run_time(manifest: dict) -> RunTime:
    """When a run ran, from its manifest ({} for a folder of traces: unknown)."""
    attempts = [a for a in manifest.get("attempts") or [] if isinstance(a, dict)]
    start = parse_time(attempts[0].get("started")) if attempts else None
    start = start or parse_time(manifest.get("created"))
    outcome = manifest.get("outcome") if isinstance(manifest.get("outcome"), dict) else {}
    end = parse_time(outcome.get("time"))
    return RunTime(start, end if end is not None and start is not None and end >= start else None)


def span_words(times: list[RunTime]) -> str:
    """When a group of runs ran: first start to last end (or last start), e.g. 2026-03-02 10:00-10:14."""
    starts = [t.start for t in times if t.start is not None]
    if not starts:
        return "time unknown"
    last = max([t.end or t.start for t in times if t.start is not None])
    first = min(starts)
    try:
        last = last.astimezone(first.tzinfo)
    except (ValueError, OverflowError):
        pass
    tail = f"{last:%H:%M}" if last.date() == first.date() else f"{last:%Y-%m-%d %H:%M}"
    return f"{first:%Y-%m-%d %H:%M}-{tail}"


def _apart(a: list[datetime], b: list[datetime]) -> bool:
    """Every start of one group is before every start of the other (equal starts: not apart)."""
    return max(a) < min(b) or max(b) < min(a)


@dataclass
class TimeRelation:
    """How two arms' runs lie in time: interleaved, apart or unknown, and the words for it."""

    kind: str
    words: str = ""
    """apart: "B ran after A" (the verdict's words)."""
    note: str = ""
    """apart: when each ran, why there is no verdict without a drift, what to do; unknown: why."""


def relation(base_label: str, base: list[RunTime], label: str, arm: list[RunTime]) -> TimeRelation:
    if not base or not arm or any(t.start is None for t in base + arm):
        return TimeRelation("unknown", note="the runs' start times are unknown (no manifest), so whether the arms ran "
                                            "interleaved was not checked")
    bs, s = [t.start for t in base], [t.start for t in arm]
    try:
        apart = _apart(bs, s)
    except TypeError:  # an offset-less time against one with an offset: not comparable
        return TimeRelation("unknown", note="the runs' start times cannot be compared, so whether the arms ran "
                                            "interleaved was not checked")
    if not apart:
        return TimeRelation("interleaved")
    (first, ft), (later, lt) = ((base_label, base), (label, arm)) if max(bs) < min(s) else ((label, arm), (base_label, base))
    note = (f"the runs of {later} ({span_words(lt)}) all started after those of {first} ({span_words(ft)}): the interval "
            "holds the spread within each arm, not the drift of the machine between the two times; run the arms "
            "interleaved (ladder --repeat N), or pass --noise with a noise.json that measured drift (compare --group-by "
            "spec of sets of one spec launched apart; docs/compare.md)")
    return TimeRelation("apart", f"{later} ran after {first}", note)


def blocks(runs: list[int], set_of: dict[int, str], round_of: dict[int, int | None],
           times: list[RunTime]) -> tuple[list[list[int]], str] | None:
    """The blocks of runs run together among an arm's runs `runs` (one configuration), and what they
    are in words; None when they cannot be told apart (unknown times, one set, sets partly apart).
    `set_of`: run -> its replicate set (a run launched alone is a set of its own); `round_of`: run ->
    its replicate index."""
    if any(times[i].start is None for i in runs):
        return None
    sets: dict[str, list[int]] = {}
    for i in runs:
        sets.setdefault(set_of[i], []).append(i)
    if len(sets) < 2:
        return None
    groups = list(sets.values())
    starts = [[times[i].start for i in g] for g in groups]
    try:
        pairs = [_apart(starts[x], starts[y]) for x in range(len(groups)) for y in range(x + 1, len(groups))]
    except TypeError:
        return None
    if all(pairs):
        return groups, f"{len(groups)} sets launched apart"
    if not any(pairs) and all(round_of.get(i) is not None for i in runs):
        rounds: dict[int, list[int]] = {}
        for i in runs:
            rounds.setdefault(round_of[i], []).append(i)
        if len(rounds) >= 2:
            return [rounds[k] for k in sorted(rounds)], f"{len(rounds)} rounds of {len(groups)} interleaved sets"
    return None


def drift_noise(arms: list[tuple[str, list[list[float]]]], scale: str) -> Noise | None:
    """The drift, pooled over arms: each (words, the values of its blocks' runs); the SD of a block's
    level (mean of its runs' transformed values) between the blocks of its arm, df = blocks - 1."""
    ss, df, used = 0.0, 0, []
    for words, blks in arms:
        means = [float(transform(b, scale).mean()) for b in blks if len(b)]
        if len(means) < 2:
            continue
        m = np.asarray(means)
        ss += float(((m - m.mean()) ** 2).sum())
        df += len(means) - 1
        used.append(words)
    if df == 0:
        return None
    return Noise(math.sqrt(ss / df), float(df), f"{'; '.join(used)}: SD of a block's level between blocks, df {df}", scale,
                 "replicates")


def welch_df(parts: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance estimates [(variance, its df)]."""
    num = sum(v for v, _ in parts) ** 2
    den = sum(v * v / d for v, d in parts if not math.isinf(d) and v > 0)
    return num / den if den > 0 else math.inf
