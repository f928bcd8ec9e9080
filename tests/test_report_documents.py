"""What the coverage report's documents say, from a handful of made-up rows: the plot's
colours, legends and margins (read off the matplotlib objects, not compared as images),
INCONCLUSIVE counted apart and explained, the slow tail counted and listed beside the
medians, and coverage.json strict and complete."""

from __future__ import annotations

import json

import pytest

from tegrad.check import FAIL, INCONCLUSIVE, PASS
from tegrad.coverage import plot
from tegrad.coverage.agreement import Agreement
from tegrad.coverage.cases import Case, normal
from tegrad.coverage.record import json_document
from tegrad.coverage.render import (
    INCONCLUSIVE_NOTE,
    SUMMARY_HEADERS,
    context,
    html_document,
    markdown,
    readme_block,
    slowest,
    summary_rows,
)
from tegrad.coverage.run import Row
from tegrad.coverage.timing import Timing

LONG = "stride (3, 2) > kernel 2, pad (1, 0), dilation (2, 1), groups 2, no bias, odd sizes"


def _row(op: str, label: str, category: str, ratio: float | None, *, verdict: str = PASS,
         failed: bool = False) -> Row:
    row = Row(Case(op, label, category, normal((2,))), gradcheck=verdict)
    if ratio is not None:  # tegrad / torch, forward+backward
        row.timing = Timing(ratio, 1.0, ratio * 1e-3, 1e-3, 0.5, 2)
    if failed:
        row.agreement = Agreement([float("inf")], {}, 1e-12, 0.0, None)
    return row


@pytest.fixture
def rows() -> list[Row]:
    return [
        _row("conv2d", LONG, "convolution", 3.0),  # slow, passing
        _row("conv2d", "", "convolution", 1.2),
        _row("relu", "", "activation", 0.4),
        _row("softmax", "broken", "softmax", 2.5, failed=True),  # slow and failing
        _row("softmax", "fast but broken", "softmax", 0.5, verdict=FAIL),
        _row("batch_norm", "training", "normalization", 0.9, verdict=INCONCLUSIVE),
        _row("rms_norm", "no weight", "normalization", None, verdict=INCONCLUSIVE),
    ]


@pytest.fixture
def drawn(rows):
    pytest.importorskip("matplotlib")
    from matplotlib import pyplot as plt

    fig = plot.figure(rows)
    fig.canvas.draw()
    speed, coverage = fig.axes
    yield fig, speed, coverage
    plt.close(fig)


def _bar_colors(ax) -> dict[str, str]:
    from matplotlib.colors import to_hex

    names = [t.get_text() for t in ax.get_yticklabels()]
    return dict(zip(names, (to_hex(p.get_facecolor()) for p in ax.patches), strict=True))


def test_slow_bars_are_not_in_the_failure_colour(drawn):
    _, speed, _ = drawn
    colors = _bar_colors(speed)
    assert colors[f"conv2d[{LONG}]"] == plot.SLOW_COLOR  # slow but passing: amber
    assert colors["softmax[broken]"] == colors["softmax[fast but broken]"] == plot.FAILED
    assert colors["conv2d"] == colors["relu"] == plot.FAST_ENOUGH  # 1.2x is not slow
    assert plot.SLOW_COLOR != plot.FAILED
    failed = {"softmax[broken]", "softmax[fast but broken]"}
    assert {name for name, c in colors.items() if c == plot.FAILED} == failed


def test_the_coverage_panel_shows_inconclusive_and_failed_apart(drawn):
    from matplotlib.colors import to_hex

    _, _, coverage = drawn
    widths: dict[str, float] = {}
    for patch in coverage.patches:
        color = to_hex(patch.get_facecolor())
        widths[color] = widths.get(color, 0) + patch.get_width()
    assert widths == {plot.PASSED: 3, plot.PASSED_INCONCLUSIVE: 2, plot.FAILED: 2}


def test_each_legend_belongs_to_its_panel_and_names_its_colours(drawn):
    from matplotlib.colors import to_hex

    fig, speed, coverage = drawn
    assert not fig.legends  # no figure-level legend to misread
    for ax, expected in ((speed, {plot.FAST_ENOUGH, plot.SLOW_COLOR, plot.FAILED}),
                         (coverage, {plot.PASSED, plot.PASSED_INCONCLUSIVE, plot.FAILED})):
        legend = ax.get_legend()
        assert legend is not None
        patches = [h for h in legend.legend_handles if hasattr(h, "get_width")]
        assert {to_hex(h.get_facecolor()) for h in patches} == expected
        box = legend.get_window_extent()
        axes = ax.get_window_extent()
        assert axes.x0 - 1 <= box.x0 and box.x1 <= axes.x1 + 1  # under its own panel
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    texts = [t.get_text() for t in speed.get_legend().get_texts()]
    assert any("slow" in t and f"{plot.SLOW}x" in t for t in texts)
    assert any("INCONCLUSIVE" in t.get_text() for t in coverage.get_legend().get_texts())


def test_no_tick_label_is_cut_at_the_figure_edge(drawn):
    fig, speed, coverage = drawn
    assert fig.dpi == plot.DPI  # drawn as the PNG is (the old layout, made at 100 dpi and
    # saved at 110, cut the longest label)
    renderer = fig.canvas.get_renderer()
    labels = [*speed.get_yticklabels(), *coverage.get_yticklabels()]
    assert any(LONG in t.get_text() for t in labels)
    for label in labels:
        box = label.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, label.get_text()
    assert fig.get_tightbbox(renderer).x0 >= 0


def test_the_axis_says_what_the_ratio_is(drawn):
    _, speed, _ = drawn
    label = speed.get_xlabel()
    assert "tegrad time / PyTorch eager time" in label and "forward+backward" in label


def test_a_plot_with_nothing_timed_still_renders(rows):
    pytest.importorskip("matplotlib")
    png = plot.figure_png([r for r in rows if r.timing is None])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_summary_counts_each_gradcheck_verdict_apart(rows):
    every = summary_rows(rows)[-1]
    assert every.category == "all"
    assert (every.passing, every.verdicts) == (5, {PASS: 4, INCONCLUSIVE: 2, FAIL: 1})
    cells = dict(zip(SUMMARY_HEADERS, every.cells(), strict=True))
    assert cells["passing"] == "5/7"
    assert (cells["gradcheck PASS"], cells["gradcheck INCONCLUSIVE"],
            cells["gradcheck FAIL"]) == ("4", "2", "1")


def test_the_documents_explain_inconclusive_and_count_it_in_the_context(rows):
    about = context(rows, 12.0, 5)
    assert "5 passing (2 with an INCONCLUSIVE gradient check)" in about
    md = markdown(rows, about, "coverage.png")
    page = html_document(rows, about, None)
    assert INCONCLUSIVE_NOTE in md
    assert INCONCLUSIVE_NOTE.replace("'", "&#x27;") in page
    assert '<tr class="inconclusive">' in page and '<tr class="fail">' in page
    assert "batch_norm[training], rms_norm[no weight]" in readme_block(rows, about, "x.md")


def test_the_inconclusive_note_states_the_checkers_own_threshold():
    import inspect

    from tegrad.check import verdict

    assert "exceeds 1% of the derivatives" in inspect.getsource(verdict)
    assert "1% of the typical gradient element" in INCONCLUSIVE_NOTE


def test_coverage_json_is_strict_and_has_every_row(rows):
    document = json.loads(json_document(rows, "about", 12.0, 5))  # strict: no Infinity
    assert [r["name"] for r in document["rows"]] == [r.case.name for r in rows]
    broken = document["rows"][3]
    assert broken["passed"] is False and broken["agreement"]["worst"] is None
    assert broken["timing"]["both_ratio"] == pytest.approx(2.5)
    assert document["rows"][6]["timing"] is None
    assert document["summary"][-1]["gradcheck"] == {PASS: 4, INCONCLUSIVE: 2, FAIL: 1}


def _timed(op: str, category: str, ratio: float, *, forward_only: bool = False,
           inputs: str = "bench") -> Row:
    """A passing case timed at ``ratio`` x torch (forward+backward, or forward only)."""
    row = Row(Case(op, "", category, normal((2,))), gradcheck=PASS)
    row.timing = Timing(ratio, 1.0, ratio * 1e-3, None if forward_only else 1e-3, 0.5, 2,
                        inputs)
    return row


@pytest.fixture
def tail() -> list[Row]:
    return [_timed("conv2d", "convolution", 4.0), _timed("conv3d", "convolution", 1.6),
            _timed("conv1d", "convolution", 0.8, inputs="test x16"),
            _timed("relu", "activation", 0.5), _timed("gelu", "activation", 1.4),
            _timed("argmax", "reduction", 12.0, forward_only=True, inputs="test"),
            Row(Case("mean", "", "reduction", normal((2,))), gradcheck=PASS)]  # not timed


def test_the_summary_counts_the_slow_tail_beside_the_medians(tail):
    found = {s.category: s for s in summary_rows(tail)}
    conv, act, red, every = (found[c] for c in ("convolution", "activation", "reduction",
                                                "all"))
    assert (conv.timed, conv.slow, conv.very_slow, conv.slowest) == (3, 2, 1, ("conv2d", 4.0))
    assert (act.timed, act.slow, act.very_slow, act.slowest) == (2, 0, 0, ("gelu", 1.4))
    # a case with nothing to differentiate counts by its forward
    assert (red.timed, red.slow, red.very_slow, red.slowest) == (1, 1, 1, ("argmax", 12.0))
    assert (every.timed, every.slow, every.very_slow) == (6, 3, 2)
    cells = dict(zip(SUMMARY_HEADERS, every.cells(), strict=True))
    assert (cells["over 1.5x"], cells["over 3x"], cells["slowest"]) == ("3", "2",
                                                                        "argmax 12.00x")
    assert cells["median fwd+bwd / torch"] == "1.40x"  # the median hides the tail


def test_the_slowest_cases_are_listed_slowest_first_in_every_document(tail):
    assert [r.case.name for r in slowest(tail)] == ["argmax", "conv2d", "conv3d", "gelu",
                                                    "conv1d", "relu"]
    assert [r.case.name for r in slowest(tail, 2)] == ["argmax", "conv2d"]
    about = context(tail, 3.0, 5)
    assert "6 cases timed (4 on benchmark inputs, 1 on test inputs scaled up, 1 on test " \
           "inputs)" in about
    md = markdown(tail, about)
    table = md.split("## The 6 slowest cases", 1)[1].split("## Every case", 1)[0]
    assert table.index("| argmax | reduction | test | 12.00x | — |") < table.index(
        "| conv2d | convolution | bench | 4.00x | 4.00x |") < table.index("| relu |")
    page = html_document(tail, about, None)
    assert "<h2>The 6 slowest cases</h2>" in page
    assert page.index("<td>argmax</td>") < page.index("<td>conv2d</td>")
    document = json.loads(json_document(tail, about, 3.0, 5))
    assert document["thresholds"] == [1.5, 3.0]
    assert [(w["name"], w["ratio"], w["inputs"]) for w in document["slowest"][:2]] == [
        ("argmax", 12.0, "test"), ("conv2d", 4.0, "bench")]
    every = document["summary"][-1]
    assert (every["timed"], every["over_1.5x"], every["over_3x"]) == (6, 3, 2)
    assert every["slowest"] == {"name": "argmax", "ratio": 12.0}
    assert document["rows"][2]["timing"]["inputs"] == "test x16"


def test_the_console_prints_the_slowest_cases_before_the_summary(tail, capsys):
    from tegrad.cli.report import _print_table

    _print_table(tail, plain=True)
    out = capsys.readouterr().out
    assert out.index("every case") < out.index("the 6 slowest cases") < out.index(
        "coverage per category")
    worst = out.split("the 6 slowest cases", 1)[1].splitlines()
    assert worst[2].startswith("argmax\treduction\ttest\t12.00x")
