"""Every fenced code block of ``README.md`` and ``docs/*.md`` runs as pasted (issue 31).

One test per block, its id ``file:line`` (the line of the opening fence):

- ``python``: the block alone, in a new interpreter (``sys.executable -c``) started in
  the repository root, with this checkout's ``src`` first on ``PYTHONPATH`` and a
  temporary ``TEGRAD_CACHE_DIR``. It must exit 0 within ``TIMEOUT`` seconds and print
  less than ``MAX_OUTPUT`` characters. No block sees another's names.
- ``bash``, ``sh``, ``shell``, ``console``: each command (a ``console`` block's lines
  after ``$ ``; continuation lines after ``\\`` joined) is classified by its first word,
  after ``VAR=value`` prefixes and a leading ``.venv/bin/``. ``python ...`` and
  ``tegrad ...`` run from the repository root with this interpreter's bin directory
  first on ``PATH`` (so they mean the venv's), and must exit 0; a command that shows a
  failure says so itself (``tegrad check ... || echo "exit status $?"``). Setup that CI
  does itself (``SETUP``: make, pip, git, cd, source, ``python3 -m venv``) and the long
  jobs of ``LONG_JOBS`` (benchmarks, the full report, the test suite) are not run.
  Anything else fails: no block is left unrunnable silently.
- ``text`` (output) and the other languages of ``NOT_RUN`` are not run. A ``text`` block
  right after a ``python`` block (blank lines between at most) is that block's output:
  what it prints must equal it line for line, a line ``...`` standing for any lines. A fence without
  a language fails (say ``text`` for output).

The one opt-out is an HTML comment on the line before the fence,
``<!-- snippet: skip because REASON -->``; a missing reason fails.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
TIMEOUT = 120  # seconds per block or command
MAX_OUTPUT = 20_000  # characters of stdout + stderr: "print nothing huge"

PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell", "console"}
NOT_RUN = {"text", "c", "json", "yaml", "toml", "diff"}
SETUP = ("make", "pip", "pip3", "git", "cd", "source", ".")
# (pattern on the command, why it is not run here)
LONG_JOBS = (
    (r"^python benchmarks/(?!bench_repeat\.py --summarize)", "a benchmark: minutes"),
    (r"^tegrad report(?!.*--ops)", "the whole coverage report: minutes"),
    (r"^python tests/differential\.py .*--count \d{4,}", "the fuzzer's long run"),
    (r"^python -m pytest", "the test suite (CI runs it)"),
    (r"^python examples/train_", "a training run: minutes"),
)

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
OPT_OUT = re.compile(r"^<!--\s*snippet:\s*skip(?:\s+because\s+(?P<reason>.*?))?\s*-->$")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence, from 1
    lang: str
    text: str
    skip: str | None  # the opt-out's reason; "" when the opt-out gives none
    expect: str | None = None  # a text block right after a python block: its output

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(markdown: str, path: str) -> list[Block]:
    """The fenced code blocks of ``markdown``, their text dedented by the fence's indent."""
    lines = markdown.splitlines()
    found, k = [], 0
    while k < len(lines):
        m = FENCE.match(lines[k])
        if not m:
            k += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = k + 1
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        body = "\n".join(_dedent(line, indent) for line in lines[k + 1:end])
        before = next((lines[j].strip() for j in range(k - 1, -1, -1) if lines[j].strip()), "")
        opt = OPT_OUT.match(before)
        if before.startswith("<!--") and "snippet" in before and not opt:
            raise ValueError(f"{path}:{k}: not an opt-out: {before!r} (write "
                             "<!-- snippet: skip because REASON -->)")
        skip = None if opt is None else (opt["reason"] or "").strip()
        found.append(Block(path, k + 1, m["info"].lower(), body + "\n", skip))
        k = end + 1
    return [_expecting(b, found[i + 1] if i + 1 < len(found) else None, lines)
            for i, b in enumerate(found)]


def _expecting(block: Block, after: Block | None, lines: list[str]) -> Block:
    """``block`` with the output its next block shows, where that is a ``text`` block
    with nothing but blank lines between the two."""
    if block.lang not in PYTHON or after is None or after.lang != "text":
        return block
    end = block.line + block.text.count("\n")  # the closing fence, from 0
    if any(line.strip() for line in lines[end + 1:after.line - 1]):
        return block
    return dataclasses.replace(block, expect=after.text)


def matches(output: str, expected: str) -> bool:
    """Whether ``output`` is ``expected`` line for line (trailing blanks aside), where a
    line ``...`` of ``expected`` stands for any lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line.strip() == "..."
                      else re.escape(line.rstrip()) + "\n"
                      for line in expected.strip("\n").splitlines())
    got = "".join(line.rstrip() + "\n" for line in output.strip("\n").splitlines())
    return re.fullmatch(pattern, got) is not None


def _dedent(line: str, indent: int) -> str:
    """``line`` less up to ``indent`` leading blanks (a fence indented in a list item)."""
    blanks = len(line) - len(line.lstrip(" \t"))
    return line[min(blanks, indent):]


def commands(block: Block) -> list[str]:
    """A shell block's commands: a console block's ``$ `` lines, every other block's lines,
    comments and blank lines left out, continuation lines joined."""
    out, pending = [], ""
    for line in block.text.splitlines():
        if block.lang == "console" and not pending:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
    if pending:
        out.append(pending.strip())
    return out


def classify(command: str) -> tuple[str, str]:
    """``("run", command to run)``, ``("setup", why)``, ``("long", why)`` or
    ``("unknown", why)``; the command to run has ``.venv/bin/`` dropped."""
    words = shlex.split(command, comments=True)
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        words = words[1:]
    if not words:
        return "unknown", "no command"
    head = words[0].removeprefix(".venv/bin/")
    if head in SETUP or words[:3] == ["python3", "-m", "venv"]:
        return "setup", f"{head}: setup that CI runs itself"
    if head not in ("python", "tegrad"):
        return "unknown", (f"{words[0]!r} is neither setup ({', '.join(SETUP)}) nor python "
                           "or tegrad")
    rest = command[command.index(words[0]) + len(words[0]):]
    run = head + rest
    for pattern, why in LONG_JOBS:
        if re.search(pattern, run):
            return "long", why
    prefix = command[:command.index(words[0])]
    return "run", prefix + run


def _all_blocks() -> list[Block]:
    return [b for path in FILES if path.exists()
            for b in blocks(path.read_text(), str(path.relative_to(ROOT)))]


def _environment(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["TEGRAD_CACHE_DIR"] = str(cache)
    env["MPLBACKEND"] = "Agg"
    return env


def _run(argv, shell_line: str | None, env) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv if shell_line is None else ["bash", "-c", shell_line],
                              cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{shell_line or 'the block'} ran more than {TIMEOUT} s: make it "
                    "smaller (every block takes seconds)", pytrace=False)


def _judge(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        pytest.fail(f"{what} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                    f"{done.stderr[-3000:]}", pytrace=False)
    printed = len(done.stdout) + len(done.stderr)
    if printed >= MAX_OUTPUT:
        pytest.fail(f"{what} printed {printed} characters (at most {MAX_OUTPUT})",
                    pytrace=False)


@pytest.fixture(scope="module")
def snippet_env(tmp_path_factory):
    return _environment(tmp_path_factory.mktemp("tegrad_cache"))


@pytest.mark.parametrize("block", _all_blocks(), ids=lambda b: b.id)
def test_block_runs_as_pasted(block: Block, snippet_env):
    if block.skip is not None:
        assert block.skip, f"{block.id}: an opt-out must say why (skip because ...)"
        pytest.skip(block.skip)
    assert block.lang, f"{block.id}: a fence needs a language (text for output)"
    if block.lang in NOT_RUN:
        return
    if block.lang in PYTHON:
        done = _run([sys.executable, "-c", block.text], None, snippet_env)
        _judge(done, block.id)
        if block.expect is not None and not matches(done.stdout, block.expect):
            pytest.fail(f"{block.id} printed\n{done.stdout}\nwhere the text block after it "
                        f"shows\n{block.expect}", pytrace=False)
        return
    assert block.lang in SHELL, (f"{block.id}: language {block.lang!r} is none of "
                                 f"{sorted(PYTHON | SHELL | NOT_RUN)}")
    for command in commands(block):
        kind, what = classify(command)
        assert kind != "unknown", f"{block.id}: {command!r}: {what}"
        if kind == "run":
            _judge(_run(None, what, snippet_env), f"{block.id}: {command!r}")


# the collector itself ------------------------------------------------------------------------

SAMPLE = """\
Intro.

```python
print(1)
```

<!-- snippet: skip because it needs a GPU -->
```python
import cuda
```

1. A list item:

   ```console
   $ tegrad check x.py \\
       --plain
   output line
   $ make test
   ```

<!-- snippet: skip -->
~~~bash
python x.py   # a comment
~~~

```
no language
```
"""


def test_blocks_are_collected_with_their_lines_and_opt_outs():
    found = blocks(SAMPLE, "s.md")
    assert [(b.line, b.lang, b.skip) for b in found] == [
        (3, "python", None), (8, "python", "it needs a GPU"), (14, "console", None),
        (22, "bash", ""), (26, "", None)]
    assert found[0].text == "print(1)\n"
    assert commands(found[2]) == ["tegrad check x.py --plain", "make test"]
    assert commands(found[3]) == ["python x.py   # a comment"]


def test_a_text_block_right_after_a_python_block_is_its_output():
    first, second, third, _ = blocks("```python\nprint(1)\n```\n\n```text\n1\n```\n\n"
                                     "```python\nprint(2)\n```\nProse.\n```text\n2\n```\n",
                                     "s.md")
    assert first.expect == "1\n" and third.expect is None and second.expect is None
    assert matches("1\n2  \n3\n", "1\n2\n3")
    assert matches("1\n2\n3\n4\n", "1\n...\n4\n") and matches("1\n4\n", "1\n...\n4")
    assert not matches("1\n2\n", "1\n") and not matches("1\n", "1\n2")


def test_a_malformed_opt_out_is_an_error():
    with pytest.raises(ValueError, match="not an opt-out"):
        blocks("<!-- snippet: ignore -->\n```python\npass\n```\n", "s.md")


@pytest.mark.parametrize(("command", "kind"), [
    ("python examples/tour.py", "run"),
    (".venv/bin/tegrad check examples/gradcheck_pairs.py --plain", "run"),
    ("TEGRAD_TARGET=numpy python -c 'import tegrad'", "run"),
    ("make test", "setup"),
    ("python3 -m venv .venv", "setup"),
    ("source .venv/bin/activate", "setup"),
    (". .venv/bin/activate", "setup"),
    ("pip install -e '.[test]'", "setup"),
    ("python benchmarks/bench_cpu.py --markdown", "long"),
    ("python benchmarks/bench_repeat.py --summarize reports/bench_cpu_runs/run_*.json", "run"),
    ("tegrad report", "long"),
    ("tegrad report --ops softmax --skip timing", "run"),
    ("python -m pytest tests/test_nn.py", "long"),
    ("ls reports", "unknown"),
    ("rm -rf ~/.cache/tegrad", "unknown"),
])
def test_commands_are_classified(command, kind):
    assert classify(command)[0] == kind


def test_a_run_command_means_the_venv_interpreter():
    assert classify(".venv/bin/python examples/tour.py") == ("run", "python examples/tour.py")
    assert classify("TEGRAD_TARGET=numpy .venv/bin/tegrad --help") == (
        "run", "TEGRAD_TARGET=numpy tegrad --help")
