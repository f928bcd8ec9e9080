"""``tegrad report`` as a user runs it: progress off a terminal, where the files go, the
README block; and the progress helpers on their own (``tegrad.cli.progress``).

One small report (``--ops add,sub --skip timing``: 7 cases, a few seconds) runs once
for the module; its tests read what it printed and wrote.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tegrad.cli import main
from tegrad.cli.options import build_parser
from tegrad.cli.progress import elapsed, group_ends, group_line, live_bar_possible
from tegrad.cli.report import README_END, README_START
from tegrad.coverage.cases import Case, normal
from tegrad.coverage.run import Row

pytest.importorskip("torch", reason="PyTorch is the report's reference")

ROOT = Path(__file__).resolve().parents[1]
README = f"""# a project

before
{README_START}
the old summary
{README_END}
after
"""


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    """``tegrad report --ops add,sub`` with stdout and stderr captured (not TTYs)."""
    folder = tmp_path_factory.mktemp("report")
    readme = folder / "README.md"
    readme.write_text(README)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["report", "--ops", "add,sub", "--skip", "timing",
                       "--out", str(folder / "out"), "--readme", str(readme)])
    return status, out.getvalue(), err.getvalue(), folder / "out", readme


def test_off_a_terminal_each_op_prints_one_line_with_counts_and_elapsed(small_report):
    status, _, err, _, _ = small_report
    assert status == 0
    lines = err.strip().splitlines()
    # add and sub interleave in the table (add, add, sub, sub, add, add, sub): each op
    # still gets one line, when its last case is done
    assert len(lines) == 2, err
    pattern = r"\[(\d)/7\] (\w+): (\d) cases, (\d) passed, 0 failed \((\d+)s elapsed\)"
    found = [re.fullmatch(pattern, line) for line in lines]
    assert all(found), lines
    assert [(m[1], m[2], m[3], m[4]) for m in found] == [("6", "add", "4", "4"),
                                                        ("7", "sub", "3", "3")]


def test_the_files_go_to_out_with_every_row_in_json(small_report):
    _, stdout, _, out, _ = small_report
    names = {"coverage.md", "coverage.html", "coverage.json", "coverage.png"}
    assert {p.name for p in out.iterdir()} == names
    wrote = [line for line in stdout.splitlines() if line.startswith("wrote ")]
    assert wrote and all(str(out / name) in wrote[0] for name in names)  # says where
    document = json.loads((out / "coverage.json").read_text())
    assert [r["name"] for r in document["rows"]] == [
        "add", "add[broadcast (3,1,4) (5,1)]", "sub", "sub[broadcast (3,1,4) (5,1)]",
        "add[broadcast (4,) (3,1)]", "add[scalar 1.5 + A]", "sub[scalar 2.0 - A]"]
    first = document["rows"][0]
    assert first["passed"] and first["gradcheck"] == "PASS" and first["timing"] is None
    assert first["agreement"]["worst"] <= first["agreement"]["tolerance"]
    assert first["cells"]["status"] == "ok"
    assert document["summary"][-1]["gradcheck"] == {"PASS": 7, "INCONCLUSIVE": 0, "FAIL": 0}


def test_the_readme_block_is_replaced_and_the_rest_kept(small_report):
    _, _, _, out, readme = small_report
    text = readme.read_text()
    assert "the old summary" not in text
    assert text.startswith("# a project\n\nbefore\n") and text.endswith(f"{README_END}\nafter\n")
    block = text.split(README_START)[1].split(README_END)[0]
    assert "| arithmetic | 2 | 7 | 7/7 | 7 | 0 | 0 |" in block
    assert str(out / "coverage.md") in block


def test_a_readme_without_the_markers_is_refused(tmp_path):
    from tegrad.cli.report import _embed

    (tmp_path / "README.md").write_text("# no markers\n")
    with pytest.raises(ValueError, match="coverage:start"):
        _embed(tmp_path / "README.md", "table")


def test_by_default_the_files_go_where_git_ignores_them():
    out = build_parser().parse_args(["report"]).out
    assert out == "build/report"
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{out}/coverage.md"], cwd=ROOT)
    assert ignored.returncode == 0, f"{out} is not ignored by git"


def test_group_ends_gives_each_key_once_at_its_last_item():
    assert group_ends(["add", "add", "sub", "add", "mul", "sub"], str) == {
        3: "add", 4: "mul", 5: "sub"}
    assert group_ends([], str) == {}


@pytest.mark.parametrize("seconds, text", [(0.4, "0s"), (59.9, "59s"), (134, "2m14s"),
                                           (3600 + 125, "1h02m")])
def test_elapsed(seconds, text):
    assert elapsed(seconds) == text


def _row(label: str, *, verdict: str = "PASS", failed: bool = False) -> Row:
    row = Row(Case("conv2d", label, "convolution", normal((2,))), gradcheck=verdict)
    if failed:
        row.errors["agreement"] = "AssertionError: off"
    return row


def test_group_line_counts_inconclusive_passes_and_names_failures():
    rows = [_row("a"), _row("b", verdict="INCONCLUSIVE"), _row("c", failed=True)]
    assert group_line(37, 478, "conv2d", rows, 134.0) == (
        "[37/478] conv2d: 3 cases, 2 passed (1 inconclusive), 1 failed: conv2d[c] "
        "(2m14s elapsed)")
    assert group_line(1, 1, "conv2d", rows[:1], 3) == (
        "[1/1] conv2d: 1 case, 1 passed, 0 failed (3s elapsed)")


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty, plain, bar", [(True, False, True), (True, True, False),
                                             (False, False, False)])
def test_the_live_bar_needs_a_terminal_on_stderr(monkeypatch, tty, plain, bar):
    pytest.importorskip("rich")
    monkeypatch.setattr("sys.stderr", _Stream(tty))
    assert live_bar_possible(plain) is bar
