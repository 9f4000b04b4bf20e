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
- the pixels written as an RGB PNG: they are opaque (the figure's white background), and PIL
  filters and compresses 3 bytes a pixel instead of 4 (-0.015 s, files 10% smaller; PIL's compress
  level 3 or 1 instead of its 6 saved no more than the noise, 0.02 s, with files 10% larger).
Tried and left: drawing once on a canvas larger than the figure and cropping it to the tight box
(one layout pass less, but sub-pixel shifts changed thousands of pixels, and no faster than the
above); a layout cache shared by all the charts of the process (0.02 s more, with rcParams and the
font manager as unseen inputs).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.axis import Axis
from matplotlib.text import Text
from PIL import Image

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
    rgba = np.asarray(fig.canvas.buffer_rgba())  # the canvas just drawn: height x width x 4
    Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1).convert("RGB").save(
        path, format="png", dpi=(dpi, dpi))
