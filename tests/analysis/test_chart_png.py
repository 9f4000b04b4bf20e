"""outputs/png.py saves the pixels that savefig(bbox_inches="tight") saves (it skips the tight save's
layout pass, reuses text layouts within a figure and writes RGB).

Known answer: matplotlib's own tight save of the same figure, pixel for pixel, for every chart of a
real analysis (8 DLRM ranks), the CPU-only branch of the idle chart, and the run-timeline chart.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from hpcprof.analysis.outputs import plots, png  # noqa: E402
from hpcprof.analysis.outputs.charts import Charts  # noqa: E402
from hpcprof.analysis.outputs.run_timeline import run_timeline_chart  # noqa: E402


def _tight(fig, path):
    fig.savefig(path, dpi=plots.DPI, bbox_inches="tight")
    plt.close(fig)


def pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def assert_same_as_tight(monkeypatch, tmp_path, draw, name: str) -> None:
    """draw(path) saves through plots._save: once as it is, once with matplotlib's tight save."""
    draw(tmp_path / f"{name}.png")
    with monkeypatch.context() as m:
        m.setattr(plots, "_save", _tight)
        draw(tmp_path / f"{name}-tight.png")
    new, ref = pixels(tmp_path / f"{name}.png"), pixels(tmp_path / f"{name}-tight.png")
    assert new.shape == ref.shape and np.array_equal(new, ref), name
    assert Image.open(tmp_path / f"{name}.png").mode == "RGB"


@pytest.fixture(scope="module")
def chart_calls(tmp_path_factory, parse_cache, traces):
    """The chart calls of an analysis of the 8 DLRM ranks (drawn here, not in the chart process)."""
    from hpcprof.analysis import analyze

    calls = []
    mp = pytest.MonkeyPatch()
    mp.setattr(Charts, "draw", lambda self, chart, *args: calls.append((chart, args)))
    try:
        analyze(traces["dlrm"], out=tmp_path_factory.mktemp("png") / "an", workers=2, progress=False, cache_dir=parse_cache)
    finally:
        mp.undo()
    return calls


def test_every_chart_of_an_analysis_as_the_tight_save(monkeypatch, tmp_path, chart_calls):
    assert len(chart_calls) >= 6
    for chart, args in chart_calls:
        assert_same_as_tight(monkeypatch, tmp_path, lambda p: getattr(plots, chart)(*args[:-1], p), chart)


def test_cpu_only_idle_chart_and_run_timeline_as_the_tight_save(monkeypatch, tmp_path):
    steps = pd.DataFrame({"rank": [0, 0, 1, 1], "step": [1, 2, 1, 2], "data_loading_ms": [1.0, 2.0, 1.5, 0.5],
                          "cpu_work_ms": [5.0, 6.0, 5.5, 7.0], "host_gap_ms": [0.5, 0.2, 0.1, 0.3], "dur_ms": [8.0, 9.0, 8.0, 9.0]})
    per_rank = pd.DataFrame({"rank": [0, 1]})
    assert_same_as_tight(monkeypatch, tmp_path, lambda p: plots.idle_chart(per_rank, pd.DataFrame(), steps, {0: "node-a", 1: "node-b"}, p), "idle")
    series = pd.DataFrame({"step": np.arange(40), "job_ms": 100 + np.arange(40) % 7, "late_ms_r0": np.arange(40) % 3,
                           "late_ms_r1": -(np.arange(40) % 3)})
    captures = [{"index": 0, "kind": "baseline", "steps": [3, 5]}, {"index": 1, "kind": "rank", "rank": 1, "score_ms": 12.5,
                                                                    "steps": [20, 24], "window": [14, 19]}]
    assert_same_as_tight(monkeypatch, tmp_path, lambda p: run_timeline_chart(series, captures, p), "run_timeline")


def test_a_text_changed_after_its_layout_is_laid_out_anew():
    """The layout reused is that of the same properties: a label made bold, rotated or renamed
    between two layouts measures as matplotlib measures it."""
    fig, ax = plt.subplots()
    fig.set_dpi(plots.DPI)
    t = ax.set_title("a title")
    r = fig.canvas.get_renderer()
    with png.layouts_cached():
        before = t.get_window_extent(r)
        changed = []
        for change in (lambda: t.set_fontweight("bold"), lambda: t.set_rotation(30), lambda: t.set_text("another title"),
                       lambda: t.set_fontsize(14), lambda: t.set_linespacing(2.0), lambda: t.set_text("two\nlines")):
            change()
            changed.append(t.get_window_extent(r))
    uncached = t.get_window_extent(r)
    assert changed[-1].bounds == uncached.bounds
    assert len({before.bounds, *(b.bounds for b in changed)}) == 7  # each change changed the extent
    plt.close(fig)


def test_the_chart_process_import_draws_the_same_pixels(tmp_path, chart_calls):
    """The chart process imports matplotlib without the set() signatures and docstrings of its
    artists nor the property tables in docstrings (charts._without_set_docs). Known answer: the same charts drawn here, where matplotlib
    was imported as usual; a fresh interpreter (matplotlib not yet imported) draws them the chart
    process' way, and says that the skip took effect."""
    import pickle
    import subprocess
    import sys

    (tmp_path / "calls.pkl").write_bytes(pickle.dumps([(c, args[:-1]) for c, args in chart_calls]))
    script = (
        "import pickle, sys\n"
        "from hpcprof.analysis.outputs import charts\n"
        "charts._import_plots()\n"
        "from hpcprof.analysis.outputs import plots\n"
        "from matplotlib.lines import Line2D\n"
        "from matplotlib.axes import Axes\n"
        "print('docs' if Line2D.set.__doc__ or 'Properties:' in Axes.plot.__doc__ else 'no docs')\n"
        "for chart, args in pickle.load(open(sys.argv[1], 'rb')):\n"
        "    getattr(plots, chart)(*args, sys.argv[2] + '/' + chart + '-proc.png')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "calls.pkl"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no docs"  # the import this test is about took place
    for chart, args in chart_calls:
        getattr(plots, chart)(*args[:-1], tmp_path / f"{chart}-here.png")
        proc, here = pixels(tmp_path / f"{chart}-proc.png"), pixels(tmp_path / f"{chart}-here.png")
        assert proc.shape == here.shape and np.array_equal(proc, here), chart


def test_ticks_placed_once_within_the_block_only():
    """Within ticks_cached an axis' ticks are placed once; after it, matplotlib places them anew
    (the limits changed here show it)."""
    from matplotlib.axis import Axis

    update = Axis._update_ticks
    fig, ax = plt.subplots()
    ax.set_xlim(0, 10)
    with png.ticks_cached():
        first = ax.xaxis._update_ticks()
        locs = [t.get_loc() for t in first]
        ax.set_xlim(0, 1000)  # never happens within a save: shows that the answer is reused
        again = ax.xaxis._update_ticks()
        assert again is first and [t.get_loc() for t in again] == locs and max(locs) == 10
    assert Axis._update_ticks is update
    assert max(t.get_loc() for t in ax.xaxis._update_ticks()) == 1000
    plt.close(fig)


def test_heatmap_strip_as_one_rectangle_patch_a_column(tmp_path):
    """plots._strip draws the pixels of the Rectangle patches it replaced (one a marked column), at
    a few column counts (wide and narrow columns)."""
    from matplotlib.transforms import blended_transform_factory

    for n in (3, 25, 140):
        marked = [(i, "black" if i % 3 else "#999999") for i in range(n) if i % 4]
        for how in ("collection", "patches"):
            fig, ax = plt.subplots(figsize=(11, 4))
            ax.imshow(np.arange(2 * n, dtype=float).reshape(2, n), aspect="auto")
            ax.set_title("title", pad=16)
            if how == "collection":
                plots._strip(ax, marked)
            else:
                strip = blended_transform_factory(ax.transData, ax.transAxes)
                for i, color in marked:
                    ax.add_patch(plt.Rectangle((i - 0.5, 1.01), 1, 0.035, color=color, transform=strip, clip_on=False))
            plots._save(fig, tmp_path / f"{how}.png")
        new, ref = pixels(tmp_path / "collection.png"), pixels(tmp_path / "patches.png")
        assert new.shape == ref.shape and np.array_equal(new, ref), n


def test_rgb_png_reads_back_as_pil_writes_it(tmp_path):
    """png.rgb_png (unfiltered rows, zlib): read back by PIL, the pixels and dpi of PIL's own RGB
    PNG of the same RGBA pixels, at edge sizes (one pixel, odd widths) and random pixels."""
    rng = np.random.default_rng(0)
    for h, w in ((1, 1), (3, 7), (40, 1), (257, 333)):
        rgba = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
        (tmp_path / "ours.png").write_bytes(png.rgb_png(rgba, plots.DPI))
        Image.fromarray(rgba, "RGBA").convert("RGB").save(tmp_path / "pil.png", format="png", dpi=(plots.DPI, plots.DPI))
        ours, pil = Image.open(tmp_path / "ours.png"), Image.open(tmp_path / "pil.png")
        assert ours.mode == "RGB" and ours.info["dpi"] == pil.info["dpi"]
        assert np.array_equal(np.asarray(ours), np.asarray(pil)) and np.array_equal(np.asarray(ours), rgba[..., :3])


def test_the_chart_import_leaves_the_collector_as_it_found_it():
    """charts._import_plots switches the garbage collector off for the import only."""
    import gc

    from hpcprof.analysis.outputs import charts

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            charts._import_plots()
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
        gc.unfreeze()
