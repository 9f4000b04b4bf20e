"""The comparison's charts: each arm's throughput (or step time) with its 95% interval and every
replicate run as a point, and the step breakdown per arm (stacked, mean over the arm's runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

VERDICT_COLOURS = {"faster": "#2a7", "slower": "#c33"}


def tick_labels(labels: list[str]) -> list[str]:
    """Arm labels as the charts can draw them: a label with a character the chart font lacks (runs
    named in CJK scripts, with matplotlib's DejaVu Sans) would be a row of boxes and a warning per
    glyph; it becomes "arm <position>" (the position in compare.html's table, which shows the name)."""
    try:
        from matplotlib.font_manager import FontProperties, findfont, get_font

        font = get_font(findfont(FontProperties()))
    except Exception:
        return labels
    return [t if all(font.get_char_index(ord(c)) for c in t) else f"arm {i + 1}" for i, t in enumerate(labels)]


def charts(out: Path, result: dict) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = result["arms"]
    runs = result["runs"]
    labels = tick_labels([a["label"] for a in arms])
    x = np.arange(len(arms))
    plots: dict[str, Path] = {}
    use_sps = all(a["samples_per_s"] is not None for a in arms)
    key, unit = ("samples_per_s", "samples/s") if use_sps else ("step_ms", "step time ms")
    vals = np.array([a[key] if a[key] is not None else np.nan for a in arms], dtype=float)
    lo = np.array([(a[f"{key}_ci95"] or [np.nan, np.nan])[0] for a in arms], dtype=float)
    hi = np.array([(a[f"{key}_ci95"] or [np.nan, np.nan])[1] for a in arms], dtype=float)
    err = np.vstack([np.nan_to_num(np.maximum(vals - lo, 0)), np.nan_to_num(np.maximum(hi - vals, 0))])
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(arms) + 2), 4))
    colours = ["#888"] + [VERDICT_COLOURS.get((a.get("vs_baseline") or {}).get("verdict"), "#48c") for a in arms[1:]]
    ax.bar(x, vals, yerr=err, capsize=5, color=colours, alpha=0.75)
    by_label = {r["label"]: r for r in runs}
    for k, a in enumerate(arms):
        pts = [(by_label[n][key], by_label[n]["used"]) for n in a["runs"] if by_label[n][key] is not None]
        if not pts:
            continue
        jitter = np.linspace(-0.18, 0.18, len(pts)) if len(pts) > 1 else np.zeros(1)
        for (v, used), j in zip(pts, jitter):
            ax.plot(k + j, v, "o" if used else "x", color="black", markerfacecolor="black" if used else "none", markersize=5)
    ax.set_xticks(x, labels, rotation=20, ha="right")
    basis = {a.get(f"{key}_ci_basis") for a in arms} - {None}
    what = "run-to-run" if basis & {"replicates", "calibration"} else "within-run"
    ax.set_ylabel(unit)
    ax.set_title(f"{'throughput' if use_sps else 'step time'} per arm: bar and 95% {what} interval, dots: runs (x: not used)\n"
                 "grey: baseline; green: faster, red: slower", fontsize=9)
    fig.tight_layout()
    plots["throughput"] = out / "plots" / "throughput.png"
    fig.savefig(plots["throughput"], dpi=100)
    plt.close(fig)

    parts = list(dict.fromkeys(p for a in arms for p in a["breakdown_ms"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(arms) + 4), 4))
    bottom = np.zeros(len(arms))
    for p in parts:
        v = np.array([a["breakdown_ms"].get(p) or 0.0 for a in arms])
        ax.bar(x, v, bottom=bottom, label=p)
        bottom += v
    ax.set_xticks(x, labels, rotation=20, ha="right")
    ax.set_ylabel("ms per step (mean per rank and run)")
    ax.set_title("step breakdown per arm")
    if parts:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    plots["step_breakdown"] = out / "plots" / "step_breakdown.png"
    fig.savefig(plots["step_breakdown"], dpi=100)
    plt.close(fig)
    return plots
