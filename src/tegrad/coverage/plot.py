"""The report's figure: speed ratio per case, and coverage per category (matplotlib).

Left: tegrad's forward+backward time over PyTorch's, one bar per timed case, log scale,
sorted, with the line at 1 (below it tegrad is faster). Right: cases per category,
passing in green and failing in red. matplotlib is optional (``tegrad[report]``); without
it the report is written without the figure.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from .cases import CATEGORIES
from .run import Row


def figure_png(rows: Sequence[Row]) -> bytes | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    timed = sorted(((r.timing.both_ratio or r.timing.forward_ratio, r.case.name)
                    for r in rows if r.timing is not None), reverse=True)
    categories = [c for c in CATEGORIES if any(r.case.category == c for r in rows)]
    height = max(4.0, 0.16 * len(timed) + 1.0)
    fig, (speed, coverage) = plt.subplots(1, 2, figsize=(13, height),
                                          gridspec_kw={"width_ratios": [3, 2]})
    if timed:
        ratios, names = zip(*timed, strict=True)
        colors = ["#c0392b" if v > 1.5 else "#e67e22" if v > 1.0 else "#27ae60"
                  for v in ratios]
        speed.barh(range(len(ratios)), ratios, color=colors)
        speed.set_yticks(range(len(names)), names, fontsize=6)
        speed.set_xscale("log")
        speed.axvline(1.0, color="black", linewidth=0.8)
        speed.invert_yaxis()
    speed.set_xlabel("tegrad / PyTorch eager, forward+backward time (log; < 1 is faster)")
    speed.set_title("speed per case")

    passing = [sum(r.passed for r in rows if r.case.category == c) for c in categories]
    failing = [sum(not r.passed for r in rows if r.case.category == c) for c in categories]
    coverage.barh(categories, passing, color="#27ae60", label="passing")
    coverage.barh(categories, failing, left=passing, color="#c0392b", label="failing")
    coverage.invert_yaxis()
    coverage.set_xlabel("cases")
    coverage.set_title("coverage per category")
    coverage.legend(loc="lower right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()
