"""The report's figure: speed per case, and coverage per category (matplotlib).

Left, "speed per case": one bar per timed case, the time of tegrad's forward+backward
over PyTorch eager's (the forward alone, marked "(forward only)", where nothing is
differentiable), log scale, slowest on top, with lines at 1x (left of it tegrad is
faster) and at ``SLOW`` x. A bar is

    red    the case failed (any stage: the only use of red in the figure)
    amber  the case passed but is slow: more than ``SLOW`` times torch's time
    blue   the case passed, at most ``SLOW`` times torch's time

Right, "coverage per category": cases per category, passed in green, passed with an
INCONCLUSIVE gradient check in pale green, failed in red. Each panel has its own legend
(inside the speed panel's frame; right under the coverage panel's axis), and the layout
is constrained, so the longest case name is not cut.
matplotlib is optional (``tegrad[report]``); without it the report has no figure.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from ..check import INCONCLUSIVE
from .cases import CATEGORIES
from .render import SLOW
from .run import Row

DPI = 110  # the figure is laid out and saved at this resolution (text sizes depend on it)
FAILED = "#c0392b"
SLOW_COLOR = "#f39c12"
FAST_ENOUGH = "#4a7fb5"
PASSED = "#27ae60"
PASSED_INCONCLUSIVE = "#a9dfbf"
RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 1.5, 2, 5, 10, 20, 50, 100, 200, 500)


def speed_of(row: Row) -> tuple[float, str] | None:
    """``(tegrad / torch time, label)`` of a timed case: forward+backward, else forward."""
    t = row.timing
    if t is None:
        return None
    if t.both_ratio is not None:
        return t.both_ratio, row.case.name
    return t.forward_ratio, f"{row.case.name} (forward only)"


def bar_color(row: Row, ratio: float) -> str:
    if not row.passed:
        return FAILED
    return SLOW_COLOR if ratio > SLOW else FAST_ENOUGH


def figure(rows: Sequence[Row]):
    """The matplotlib Figure (Agg backend); ``figure_png`` renders it."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    timed = sorted(((*speed_of(r), r) for r in rows if speed_of(r) is not None),
                   key=lambda found: -found[0])
    categories = [c for c in CATEGORIES if any(r.case.category == c for r in rows)]
    coverage_height = 0.35 * len(categories) + 1.8
    height = max(4.0, 0.16 * len(timed) + 1.5, coverage_height + 1.0)
    fig = plt.figure(figsize=(13, height), dpi=DPI, layout="constrained")
    grid = fig.add_gridspec(2, 2, width_ratios=[3, 2],
                            height_ratios=[coverage_height, height - coverage_height])
    _speed_panel(fig.add_subplot(grid[:, 0]), timed)
    _coverage_panel(fig.add_subplot(grid[0, 1]), rows, categories)
    return fig


def _speed_panel(ax, timed) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullFormatter

    if timed:
        ratios = [t[0] for t in timed]
        ax.barh(range(len(timed)), ratios, color=[bar_color(r, v) for v, _, r in timed])
        ax.set_yticks(range(len(timed)), [t[1] for t in timed], fontsize=6)
        ax.set_ylim(len(timed) - 0.5, -0.5)  # slowest on top
        ax.set_xscale("log")
        lo, hi = min(min(ratios), 0.5) / 1.5, max(max(ratios), SLOW) * 3
        ax.set_xlim(lo, hi)
        ax.set_xticks([v for v in RATIO_TICKS if lo <= v <= hi],
                      [f"{v:g}x" for v in RATIO_TICKS if lo <= v <= hi])
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.text(0.5, 0.5, "no case was timed", ha="center", va="center",
                transform=ax.transAxes)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(SLOW, color=SLOW_COLOR, linewidth=0.8, linestyle="--")
    ax.set_xlabel("tegrad time / PyTorch eager time, forward+backward, float32\n"
                  "(log scale; below 1x tegrad is faster)")
    ax.set_title("speed per case")
    ax.legend(handles=[
        Patch(color=FAST_ENOUGH, label=f"passed, at most {SLOW}x torch's time"),
        Patch(color=SLOW_COLOR, label=f"passed, slow: over {SLOW}x torch's time"),
        Patch(color=FAILED, label="failed (see the report)"),
        Line2D([], [], color="black", linewidth=0.8, label="1x: as fast as torch"),
        Line2D([], [], color=SLOW_COLOR, linewidth=0.8, linestyle="--",
               label=f"{SLOW}x: the slow threshold")],
        loc="lower right", fontsize=8, title="each bar: one case")


def _coverage_panel(ax, rows: Sequence[Row], categories: list[str]) -> None:
    from matplotlib.transforms import offset_copy

    def count(category: str, test) -> int:
        return sum(1 for r in rows if r.case.category == category and test(r))

    sure = [count(c, lambda r: r.passed and r.gradcheck != INCONCLUSIVE) for c in categories]
    unsure = [count(c, lambda r: r.passed and r.gradcheck == INCONCLUSIVE) for c in categories]
    failed = [count(c, lambda r: not r.passed) for c in categories]
    ax.barh(categories, sure, color=PASSED, label="passed")
    ax.barh(categories, unsure, left=sure, color=PASSED_INCONCLUSIVE,
            label="passed, gradient check INCONCLUSIVE")
    ax.barh(categories, failed, left=[a + b for a, b in zip(sure, unsure, strict=True)],
            color=FAILED, label="failed")
    ax.invert_yaxis()
    ax.set_xlabel("cases")
    ax.set_title("coverage per category")
    below = offset_copy(ax.transAxes, ax.figure, y=-0.55, units="inches")  # under "cases"
    ax.legend(loc="upper left", bbox_to_anchor=(0, 0), bbox_transform=below, fontsize=8)


def figure_png(rows: Sequence[Row]) -> bytes | None:
    """The figure as PNG bytes, or None without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    from matplotlib import pyplot as plt

    fig = figure(rows)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plt.close(fig)
    return buffer.getvalue()
