"""How the charts' rank axes scale with the number of ranks: the axis' length and which ranks it names.

A per-rank chart used to grow by almost an inch per rank and name every rank: at 1,024 ranks the idle
chart was 65,400 pixels wide, took 5 s to draw, and the report shrank it to a grey band. Now a rank
axis grows up to MAX_AXIS_IN and then keeps its length (bars get thinner: an outlier still stands out
among 1,024 bars of 2 pixels), and names every k-th rank (k = 1, 2, 5, 10, 20, 50, ...) when the
names would run into each other, plus the ranks that must be named (the flagged stragglers).
Below the length limit and while names fit, a chart is as before.
"""

from __future__ import annotations

import math

MAX_AXIS_IN = 22.0
"""The longest a rank axis grows, in inches (about 2,000 pixels at the charts' 90 dpi)."""
CHAR_IN = 0.62 / 72
"""Width of a character per point of font size, in inches (DejaVu Sans, digits and lower case)."""
LINE_IN = 1.3 / 72
"""Height of a line of text per point of font size, in inches."""


def axis_inches(n: int, per_rank: float, extra: float, least: float = 6.0, most: float = MAX_AXIS_IN) -> float:
    """The figure's extent along the rank axis: `per_rank` inches a rank plus `extra`, at least
    `least`, at most `most`."""
    return min(max(least, per_rank * n + extra), most)


def labels(ranks, nodes: dict) -> list[str]:
    """Tick labels: "rank r" over its node; the node line is left out when no rank's node is known
    (a folder of traces: "unknown" under every rank says nothing), and from 6 ranks on the labels
    shorten to "r<r>" so that they do not run into each other under narrow bars."""
    ranks = list(ranks)
    known = any(nodes.get(r) for r in ranks)
    short = len(ranks) >= 6
    out = []
    for r in ranks:
        head = f"r{r}" if short else f"rank {r}"
        out.append(f"{head}\n{nodes.get(r) or 'unknown'}" if known else head)
    return out


def nice_step(need: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is >= need."""
    if need <= 1:
        return 1
    mag = 10 ** math.floor(math.log10(need))
    for m in (1, 2, 5, 10):
        if m * mag >= need:
            return int(m * mag)
    return int(10 * mag)


def rank_ticks(ax, axis: str, ranks, names: list[str], room_in: float, fontsize: float, always=()) -> list[int]:
    """Put the rank names on `axis` ("x" or "y") of ax at positions 0..n-1: every rank's when they
    fit in `room_in` inches (the axes' length), else every k-th (nice_step) and those of the ranks in
    `always`; returns the positions named."""
    ranks = list(ranks)
    n = len(ranks)
    if axis == "x":  # names side by side: their width
        label_in = max((max(len(line) for line in s.split("\n")) for s in names), default=1) * fontsize * CHAR_IN + 0.06
    else:  # names one above the other: their height
        label_in = max((s.count("\n") + 1 for s in names), default=1) * fontsize * LINE_IN
    k = 1 if n <= 1 or room_in / n >= label_in else nice_step(label_in * n / max(room_in, 1e-9))
    named = set(always)
    must = [i for i, r in enumerate(ranks) if r in named]
    # the regular names give way to a rank that must be named, where they would touch it
    pos = sorted({i for i in range(0, n, k) if all(i == j or abs(i - j) >= k for j in must)} | set(must))
    (ax.set_xticks if axis == "x" else ax.set_yticks)(pos, [names[i] for i in pos], fontsize=fontsize)
    return pos


def visible_width(n: int, room_in: float, width: float, dpi: float, pixels: float = 3.0) -> float:
    """A bar width (in rank slots) of at least `pixels` pixels: at 1,024 ranks a slot is a third of
    a pixel, and a flagged rank's bar would not be drawn at all."""
    return max(width, pixels / dpi / max(room_in / max(n, 1), 1e-9))
