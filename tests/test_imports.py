"""The import graph of ``src/tegrad``: no module imports, however late, a module that
imports it back.

Every ``import`` and ``from ... import`` statement counts, at module level or inside a
function (a function-local import hides a circle from Python, not from the reader). A name
imported from a package counts as its submodule when one has that name, else as the
package's ``__init__``. Circles are the strongly connected components of that graph.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"



def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in (root / "tegrad").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module -> the tegrad modules it imports anywhere in its text."""
    mods = modules(root)

    def known(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = defaultdict(set)
    for name, (path, package) in mods.items():
        here = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base.split(".")[0] == "tegrad":
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else known(base)
                               for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names if a.name.split(".")[0] == "tegrad"]
            edges[name].update(t for t in targets if t and t != name)
    return edges


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in list(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_circles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [{"a", "b", "c"}]


def test_the_graph_sees_function_local_imports(tmp_path):
    package = tmp_path / "tegrad"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("def f():\n    from .two import g\n")
    (package / "two.py").write_text("from . import one\n")
    assert circles(import_graph(tmp_path)) == [{"tegrad.one", "tegrad.two"}]


def test_no_import_circle():
    found = [sorted(c) for c in circles(import_graph())]
    assert not found, f"import circles: {found}"


HEAVY = ("torch", "triton", "jax", "tvm", "rich", "hypothesis")
LIGHT_RUN = """
import sys
import numpy as np
import tegrad as tg
X = tg.placeholder((3, 4), "float64", "X")
k = tg.reduce_axis(4, "k")
Y = tg.compute((3,), lambda i: tg.sum(tg.exp(X[i, k]), axis=k), name="Y")
dX, = tg.gradient(Y, [X])
print("value", tg.build([X], [Y, dX])(np.ones((3, 4)))[0][0])
print("loaded", *(m for m in {heavy!r} if m in sys.modules))
"""


def test_a_build_and_a_call_import_nothing_heavy(tmp_path):
    """``import tegrad``, a gradient, ``tg.build`` with the default target and a call load
    none of the optional libraries, torch included (the default target asks whether a GPU
    may be present without it), on a machine without an NVIDIA driver."""
    import os
    import subprocess
    import sys

    from tegrad.backends.cuda import device

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TEGRAD_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", LIGHT_RUN.format(heavy=HEAVY)], env=env,
                          capture_output=True, text=True, check=True, timeout=300)
    said = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line}
    assert abs(float(said["value"][0]) - 4 * 2.718281828459045) < 1e-9, done.stdout
    heavy = set(said["loaded"])
    if device.may_have_gpu():  # torch answers whether the GPU is usable
        heavy -= {"torch", "triton"}
    assert not heavy, f"loaded by a plain build: {sorted(heavy)}"
