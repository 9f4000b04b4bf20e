"""Saving a chart as a PNG: the pixels of `savefig(bbox_inches="tight")`, for less CPU.

Measured on the 8 charts of a 16-rank analysis (ranks16-mb20; CPU-s in one process, medians of
repeats): 1.24 s with savefig(bbox_inches="tight"), 0.94 s with the same pixels by three steps
(each measured alone against the tight save):
- the tight box measured with `Figure.get_tightbbox` and passed to savefig: "tight" first runs a
  whole draw with drawing switched off only to settle the layout that get_tightbbox settles itself
  (-0.2 s);
- each text's layout computed once per figure, not in every pass: matplotlib lays out a tick label
  again for the tight box, the axis label's position, the title's position and the draw, 3 times
  a text in all (-0.15 to -0.2 s; `layouts_cached`);
- each axis' ticks placed and labelled once per save, not about 10 times (-0.064 s; `ticks_cached`);
- the pixels written as an RGB PNG: they are opaque (the figure's white background), and 3 bytes
  a pixel are compressed instead of 4 (-0.015 s, files 10% smaller; PIL's compress level 3 or 1
  instead of its 6 saved no more than the noise, 0.02 s, with files 10% larger);
- written here, rows unfiltered, rather than by PIL, which tries 5 filters on every row (-0.035 s,
  files 2% smaller; `rgb_png`).
Tried and left: drawing once on a canvas larger than the figure and cropping it to the tight box
(one layout pass less, but sub-pixel shifts changed thousands of pixels, and no faster than the
above); a layout cache shared by all the charts of the process (0.02 s more, with rcParams and the
font manager as unseen inputs).
"""

from __future__ import annotations

import contextlib
import io
import struct
import zlib
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.axis import Axis
from matplotlib.text import Text

# what Text._get_layout reads of the text (the same in matplotlib 3.7 and 3.11); where a name is missing, texts are
# laid out as matplotlib does, uncached
_CACHEABLE = all(hasattr(Text, a) for a in ("_get_layout", "_get_multialignment", "get_parse_math", "get_wrap"))


def _layout_key(text: Text, renderer) -> tuple:
    """Everything Text._get_layout's answer depends on (it is independent of the text's position)."""
    return (text.get_text(), hash(text.get_fontproperties()), text.get_rotation(), text.get_rotation_mode(),
            text.get_horizontalalignment(), text.get_verticalalignment(), text._get_multialignment(),
            getattr(text, "_linespacing", None), text.get_usetex(), text.get_parse_math(), text.figure.dpi,
            type(renderer), getattr(renderer, "dpi", None))


@contextlib.contextmanager
def layouts_cached():
    """Within the block, a text laid out again with the same properties reuses its layout (the
    answer of Text._get_layout: a box, the lines' sizes and offsets; read, never changed, by its
    callers). Wrapped texts (their lines depend on where they sit) are laid out anew."""
    if not _CACHEABLE:
        yield
        return
    layout = Text._get_layout
    done: dict[tuple, tuple] = {}

    def cached(self, renderer):
        if self.get_wrap():
            return layout(self, renderer)
        key = _layout_key(self, renderer)
        found = done.get(key)
        if found is None:
            found = done[key] = layout(self, renderer)
        return found

    Text._get_layout = cached
    try:
        yield
    finally:
        Text._get_layout = layout


@contextlib.contextmanager
def ticks_cached():
    """Within the block, each axis places and labels its ticks once (Axis._update_ticks: the locator's
    positions, the formatter's labels, the ticks in view): matplotlib does it again for every tight
    box, label and title position and the draw, about 10 times an axis in a save. In between, the figure
    is only moved (to the tight box), never resized nor its limits changed: the same answer each
    time (the tight save's pixels: tests/analysis/test_chart_png.py). 8 charts of 16 ranks: 0.064
    CPU-s less (0.893 -> 0.829, medians of 8, interleaved)."""
    update = Axis._update_ticks
    done: dict = {}

    def cached(self):
        found = done.get(self)
        if found is None:
            found = done[self] = update(self)
        return found

    Axis._update_ticks = cached
    try:
        yield
    finally:
        Axis._update_ticks = update


def save(fig, path: Path, dpi: float) -> None:
    """Write fig to path as savefig(path, dpi=dpi, bbox_inches="tight") would draw it."""
    fig.set_dpi(dpi)  # the tight box is measured in the pixels it is drawn in
    with layouts_cached(), ticks_cached():
        box = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
        fig.savefig(io.BytesIO(), format="rgba", dpi=dpi, bbox_inches=box)
    Path(path).write_bytes(rgb_png(np.asarray(fig.canvas.buffer_rgba()), dpi))  # the canvas just drawn


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def rgb_png(rgba: np.ndarray, dpi: float) -> bytes:
    """An RGB PNG of the pixels `rgba` (height x width x 4, uint8; the alpha left out, as PIL's
    RGBA -> RGB does), `dpi` in its pHYs chunk (as PIL writes it). Its rows unfiltered: PIL tries
    the 5 PNG filters on every row (adaptive filtering), more than half of its 0.08 CPU-s for the 8
    charts of 16 ranks; unfiltered, zlib at PIL's level 6 takes 0.045 s and the files are 2% smaller
    (the charts are mostly flat colour: nothing for a filter to gain)."""
    height, width = rgba.shape[:2]
    rows = np.zeros((height, 1 + 3 * width), np.uint8)  # each row: its filter type (0, none), then R G B a pixel
    rows[:, 1:].reshape(height, width, 3)[...] = rgba[..., :3]
    per_m = int(dpi / 0.0254 + 0.5)
    return b"\x89PNG\r\n\x1a\n" + b"".join((
        _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)),  # 8 bits, RGB, no interlace
        _chunk(b"pHYs", struct.pack(">IIB", per_m, per_m, 1)),  # pixels per metre
        _chunk(b"IDAT", zlib.compress(rows, 6)),  # the array itself: no copy of it as bytes
        _chunk(b"IEND", b"")))
