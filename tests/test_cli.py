"""``tegrad check FILE.py``: discovery, exit status, plain and rich output."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tegrad.cli
from tegrad.check import FAIL, INCONCLUSIVE, PASS, GradCheckReport, InputResult
from tegrad.check.report import Kink
from tegrad.cli import CONVENTION, EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from tegrad.cli.discover import PairFunction
from tegrad.cli.render import PlainRenderer
from tegrad.cli.runner import Outcome

needs_rich = pytest.mark.skipif(importlib.util.find_spec("rich") is None,
                                reason="rich is not installed (pip install 'tegrad[cli]')")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "gradcheck_pairs.py")
PAIRS = (
    "gradcheck_conv2d_generated",
    "gradcheck_conv2d_input_grad_dropped_edge",
    "gradcheck_numpy_linear",
)

# NumPy pairs: quick to check, no compilation.
LINEAR = """
import numpy as np

def _forward(x, w):
    return x @ w.T

def _backward(dy, x, w):
    return dy @ w, dy.T @ x

def gradcheck_linear():
    rng = np.random.default_rng(0)
    return {"forward": _forward, "backward": _backward,
            "args": (rng.standard_normal((3, 2)), rng.standard_normal((4, 2)))}
"""


@pytest.fixture(autouse=True)
def _console(monkeypatch):
    """Rich output 120 columns wide and without colour codes, whatever the terminal."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def write(tmp_path: Path, source: str, name: str = "pairs.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


# -- exit status ------------------------------------------------------------------------------


def test_example_fails_on_the_planted_bug(capsys):
    assert main(["check", EXAMPLE, "--plain"]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "=== gradcheck_conv2d_input_grad_dropped_edge: FAIL ===" in out
    assert "axis 2 = 8 (the last) or axis 3 = 8 (the last)" in out
    assert "missing contribution" in out
    assert "#########" in out  # the mask's last row
    assert "3 pairs: 2 passed, 1 failed" in out


def test_k_selects_the_passing_pairs(capsys):
    assert main(["check", EXAMPLE, "-k", "generated", "-k", "numpy", "--plain"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "gradcheck_conv2d_generated: PASS" in out
    assert "gradcheck_numpy_linear: PASS" in out
    assert "dropped_edge" not in out
    assert "2 pairs: 2 passed" in out


def test_missing_file_is_a_usage_error(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.py")]) == EXIT_USAGE
    assert "no such file" in capsys.readouterr().err


def test_file_without_pairs_is_a_usage_error(tmp_path, capsys):
    path = write(tmp_path, """
        def helper():
            return 1

        def gradcheck_needs_an_argument(x):
            return x
    """)
    assert main(["check", path]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no pairs found" in err
    assert "gradcheck_needs_an_argument take required arguments" in err


def test_k_matching_nothing_is_a_usage_error(capsys):
    assert main(["check", EXAMPLE, "-k", "nothing_like_this"]) == EXIT_USAGE
    assert "no pair name contains 'nothing_like_this'" in capsys.readouterr().err


def test_file_raising_on_import_is_a_usage_error(tmp_path, capsys):
    path = write(tmp_path, "raise RuntimeError('cannot even load')\n")
    assert main(["check", path]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "importing it raised" in err and "cannot even load" in err


def test_bad_options_are_usage_errors(capsys):
    assert main(["check", EXAMPLE, "--probes", "-1"]) == EXIT_USAGE
    assert main([]) == EXIT_USAGE
    capsys.readouterr()


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "rich"])
def test_a_raising_pair_counts_as_failed_and_the_others_run(tmp_path, capsys, plain):
    path = write(tmp_path, LINEAR + """
def gradcheck_raises():
    raise ValueError("boom in the pair")

def gradcheck_bad_dict():
    return {"forward": _forward, "args": (), "output": None}

def gradcheck_not_a_dict():
    return 42
""")
    assert main(["check", path, *(["--plain"] if plain else [])]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "gradcheck_linear" in out and "PASS" in out
    assert "ValueError: boom in the pair" in out
    assert "while calling the pair function" in out
    assert "mixes the tensor-expression keys ('output')" in out
    assert "returned int; a pair returns a dict" in out
    assert "4 pairs: 1 passed, 3 raised an exception" in out


def test_sibling_imports_and_cleanup(tmp_path, capsys):
    (tmp_path / "cli_test_helper_mod.py").write_text(LINEAR)
    path = write(tmp_path, "from cli_test_helper_mod import gradcheck_linear  # noqa\n",
                 name="uses_sibling.py")
    assert main(["check", path, "--quiet", "--seed", "3"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "gradcheck_linear" in out and "seed 3" in out
    assert str(tmp_path) not in sys.path
    assert "uses_sibling" not in sys.modules


# -- output -----------------------------------------------------------------------------------


@needs_rich
def test_rich_output(capsys):
    assert main(["check", EXAMPLE]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "\x1b[" not in out  # NO_COLOR, and captured output is no terminal
    for name in PAIRS:
        assert name in out
    assert "axis 2 = 8 (the last) or axis 3 = 8 (the last)" in out
    assert "X: worst elements" in out
    assert "(0, 2, 3, 8)" in out  # the worst element, and its index printed as it is
    assert "X: wrong elements, last two axes" in out and "#########" in out
    assert "h < 8" in out and "dX_dropped_edge" in out  # the backward's guard
    assert max(len(line) for line in out.splitlines()) <= 120


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "rich"])
def test_quiet_prints_one_line_per_pair(capsys, plain):
    argv = ["check", EXAMPLE, "--quiet", *(["--plain"] if plain else [])]
    assert main(argv) == EXIT_FAILED
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["PASS", PAIRS[0]], ["FAIL", PAIRS[1]], ["PASS", PAIRS[2]]]
    assert "X: 102 of 486 elements: axis 2 = 8" in lines[1]


def test_plain_text_without_rich(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rich", None)  # ``import rich`` raises ImportError
    monkeypatch.delitem(sys.modules, "tegrad.cli.render_rich", raising=False)
    assert main(["check", EXAMPLE, "-k", "numpy"]) == EXIT_OK
    assert "=== gradcheck_numpy_linear: PASS ===" in capsys.readouterr().out


def test_inconclusive_counts_as_passed_and_shows_kinks(capsys):
    result = InputResult("x", (3,), "float64", verdict=INCONCLUSIVE,
                         kinks=[Kink((1,), -1.0, 1.0, 0.0)], notes=["too noisy"])
    report = GradCheckReport({"x": result}, seed=0, forward_evals=1, backward_evals=1,
                             seconds=0.0, subject="f")
    outcome = Outcome(PairFunction("gradcheck_f", lambda: None), report=report)
    assert not outcome.failed
    renderers: list = [PlainRenderer()]
    if importlib.util.find_spec("rich") is not None:
        from tegrad.cli.render_rich import STYLES, RichRenderer, verdict_text

        assert verdict_text(INCONCLUSIVE).style == STYLES[INCONCLUSIVE] == "bold yellow"
        renderers.append(RichRenderer())
    for renderer in renderers:
        renderer.outcome(outcome)
        renderer.finish([outcome])
        out = capsys.readouterr().out
        assert "INCONCLUSIVE" in out and "too noisy" in out and "(1,) [-1, 1] got 0" in out
        assert "1 pair: 1 inconclusive (counted as passed)" in out


def synthetic(name: str, verdict: str) -> Outcome:
    """An outcome with one input of that verdict, without running a check."""
    result = InputResult("x", (2, 2), "float64", verdict=verdict)
    if verdict == FAIL:
        result.region, result.ascii = "1 of 4 elements: at (1, 1)", "..\n.#"
        result.worst = [((1, 1), 2.0, 0.0, 1e-12)]
    report = GradCheckReport({"x": result}, 0, 1, 1, 0.0, "f")
    return Outcome(PairFunction(name, lambda: None), report=report)


@needs_rich
def test_rich_verdict_colours():
    from rich.console import Console

    from tegrad.cli.render_rich import RichRenderer

    for quiet in (True, False):
        file = io.StringIO()
        console = Console(file=file, force_terminal=True, color_system="standard",
                          no_color=False, width=120)
        renderer = RichRenderer(quiet=quiet, console=console)
        for verdict in (PASS, FAIL, INCONCLUSIVE):
            renderer.outcome(synthetic(f"gradcheck_{verdict.lower()}", verdict))
        out = file.getvalue()
        assert "\x1b[1;32mPASS" in out  # green
        assert "\x1b[1;31mFAIL" in out  # red
        assert "\x1b[1;33mINCONCLUSIVE" in out  # yellow


def test_the_convention_is_documented(capsys):
    assert CONVENTION in tegrad.cli.__doc__
    assert main(["check", "--help"]) == EXIT_OK
    out = capsys.readouterr().out
    assert 'starts with "gradcheck_"' in out and "Exit status:" in out


# -- as a program -----------------------------------------------------------------------------


def test_python_dash_m_tegrad_check():
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [sys.executable, "-m", "tegrad", "check", EXAMPLE, "--plain"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert done.returncode == EXIT_FAILED, done.stderr
    assert "axis 2 = 8" in done.stdout and "FAIL" in done.stdout


def test_import_tegrad_does_not_import_rich():
    code = "import sys, tegrad, tegrad.cli; print('rich' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
