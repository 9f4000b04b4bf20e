"""Per-rank charts at 1,024 ranks (outputs/rank_axis.py): a bounded size, a readable rank axis, and the
flagged straggler still visible.

Known answers: the PNG's pixel size (before, the idle chart of 1,024 ranks was 65,400 pixels wide),
the tick labels matplotlib draws, and the red pixels of the flagged rank's bar and name.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from hpcprof.analysis.outputs import plots  # noqa: E402
from hpcprof.analysis.outputs.rank_axis import MAX_AXIS_IN, labels, nice_step, rank_ticks  # noqa: E402

N = 1024
FLAGGED = 700
LIMIT_PX = (MAX_AXIS_IN + 3) * plots.DPI  # the axis at its longest, and the legend beside it


def red_pixels(path, box=None) -> int:
    im = np.asarray(Image.open(path).convert("RGB")).astype(int)
    if box is not None:
        im = im[box[1]:box[3], box[0]:box[2]]
    flag = np.array([0xd6, 0x27, 0x28])
    return int((np.abs(im - flag).sum(axis=2) < 60).sum())


def test_small_jobs_name_every_rank():
    fig, ax = plt.subplots(figsize=(9, 4))
    named = rank_ticks(ax, "x", range(8), labels(range(8), {}), 6.0, 8)
    assert named == list(range(8)) and [t.get_text() for t in ax.get_xticklabels()] == [f"r{r}" for r in range(8)]
    plt.close(fig)


@pytest.mark.parametrize("need, step", [(0.5, 1), (1, 1), (1.01, 2), (2.5, 5), (7, 10), (11, 20), (49, 50), (51, 100)])
def test_nice_steps(need, step):
    assert nice_step(need) == step


def test_many_ranks_named_every_kth_and_the_flagged_one():
    fig, ax = plt.subplots(figsize=(14, 5))
    named = rank_ticks(ax, "x", range(N), labels(range(N), {}), 12.0, 8, always={FLAGGED})
    texts = [t.get_text() for t in ax.get_xticklabels()]
    k = named[1] - named[0]
    assert 10 <= len(named) <= 60 and k in (10, 20, 50, 100) and f"r{FLAGGED}" in texts
    regular = [i for i in named if i != FLAGGED]
    assert all(i % k == 0 for i in regular) and all(abs(i - FLAGGED) >= k for i in regular)  # none runs into it
    plt.close(fig)


def test_straggler_chart_of_1024_ranks(tmp_path):
    rng = np.random.default_rng(0)
    steps = np.arange(10, 20)
    per_step = pd.DataFrame({"rank": np.repeat(np.arange(N), steps.size), "step": np.tile(steps, N),
                             "whatif_cost_ms": rng.random(N * steps.size) * 0.3, "wait_ms": rng.random(N * steps.size) * 5})
    per_step.loc[per_step["rank"] == FLAGGED, "whatif_cost_ms"] += 25.0
    path = tmp_path / "stragglers.png"
    plots.straggler_chart(per_step, [{"rank": FLAGGED}], 1.0, {}, path)
    w, h = Image.open(path).size
    assert w <= LIMIT_PX and h <= 9 * plots.DPI + 50
    # the flagged rank's bar (a third of a pixel wide at its slot) is drawn wide enough to see, left half
    assert red_pixels(path, (0, 0, w // 2, h)) > 200


def test_idle_and_heatmap_of_1024_ranks(tmp_path):
    rng = np.random.default_rng(1)
    idle_pct = rng.random(N) * 60
    per_rank = pd.DataFrame({"rank": np.arange(N), "idle_pct": idle_pct, "compute_pct": (100 - idle_pct) / 2,
                             "non_compute_pct": (100 - idle_pct) / 2})
    idle = pd.DataFrame({"rank": np.repeat(np.arange(N), 3), "idle_category": ["host_wait", "kernel_wait", "other"] * N,
                         "idle_time": rng.random(3 * N)})
    plots.idle_chart(per_rank, idle, pd.DataFrame(), {}, tmp_path / "idle.png")
    assert Image.open(tmp_path / "idle.png").size[0] <= LIMIT_PX
    records = pd.DataFrame({"rank": np.repeat(np.arange(N), 30), "step": np.tile(np.arange(30), N),
                            "step_ms": 100 + rng.random(30 * N)})
    plots.step_heatmap(records, "step_ms", "steps", {}, tmp_path / "heat.png")
    assert Image.open(tmp_path / "heat.png").size[1] <= (MAX_AXIS_IN + 1) * plots.DPI
