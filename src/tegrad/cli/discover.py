"""Loading a check file and finding its pairs.

``loaded(path)`` imports FILE.py as a module for the duration of a ``with`` block (its
directory first on ``sys.path``, so it can import its neighbours; both ``sys.path`` and
``sys.modules`` are restored afterwards, so a file can be loaded again, edited or not).
``find_pairs(module)`` lists its ``gradcheck_*`` functions by the rules in
``CONVENTION``, the text that ``tegrad check --help`` prints.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

PREFIX = "gradcheck_"

CONVENTION = """\
Convention:
  FILE.py is imported as a module, with its directory first on sys.path (so it can
  import its neighbours). Every top-level function whose name starts with "gradcheck_"
  and that takes no required arguments is a pair; pairs run in the order the file
  defines them. A pair function returns a dict, either

    {"output": Y, "inputs": [X, ...]}   tensor expressions, checked with
                                        tg.check_gradient(output, inputs, grads, head,
                                        values=...). Optional keys: "grads" (one tensor
                                        per input; absent or None checks the generated
                                        gradients), "head" (the placeholder the grads
                                        read as the output gradient), "values" (arrays
                                        for placeholders, by placeholder or name).
  or
    {"forward": f, "backward": b,       NumPy callables, checked with
     "args": (x, ...)}                  tg.check_vjp(forward, backward, args):
                                        f(*args) -> array, b(head, *args) -> tuple.

  Any other key, or a dict mixing the two forms, is an error in that pair.

Exit status:
  0  every pair passed; INCONCLUSIVE counts as passed (it is shown in yellow)
  1  some pair failed, or raised an exception (its function, or the check on what it
     returned): the exception is printed under the pair's name, the other pairs still
     run, and the pair counts as failed
  2  usage error: bad options, FILE missing or raising when imported, no pairs found
     in it (or none whose name contains -k)
"""


class UsageError(Exception):
    """The command cannot run as asked (exit status 2); the message says why."""


@dataclass(frozen=True)
class PairFunction:
    """A ``gradcheck_*`` function of the check file."""

    name: str
    function: Callable[[], object]

    @property
    def summary(self) -> str:
        """The first line of the function's docstring ("" without one)."""
        doc = inspect.getdoc(self.function) or ""
        return doc.splitlines()[0] if doc else ""


@dataclass
class Discovery:
    """What ``find_pairs`` found: the pairs, and ``gradcheck_*`` functions that are not
    pairs because they take required arguments (name -> those arguments)."""

    pairs: list[PairFunction]
    skipped: dict[str, list[str]] = field(default_factory=dict)


@contextmanager
def loaded(path: str | os.PathLike[str]) -> Iterator[ModuleType]:
    """Import ``path`` as a module for the ``with`` block. Raises ``UsageError`` when the
    file is missing, is not a ``.py`` file, or raises while it is imported."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: no such file")
    if file.suffix != ".py":
        raise UsageError(f"{path}: not a Python file (expected FILE.py)")
    file = file.resolve()
    name = _module_name(file)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:  # pragma: no cover - .py files always load
        raise UsageError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    directory = str(file.parent)
    sys.path.insert(0, directory)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:
            lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
            raise UsageError(f"{path}: importing it raised an exception\n" + "".join(lines)
                             ) from exc
        yield module
    finally:
        if sys.modules.get(name) is module:
            del sys.modules[name]
        if directory in sys.path:
            sys.path.remove(directory)


def _module_name(file: Path) -> str:
    """The file's stem, like a plain import would name it, unless that name is taken by
    another module already imported (a check file called ``json.py``)."""
    stem = file.stem
    taken = sys.modules.get(stem)
    if stem.isidentifier() and taken is None:
        return stem
    safe = "".join(ch if ch.isalnum() else "_" for ch in stem)
    return f"_tegrad_check_{safe}"


def find_pairs(module: ModuleType) -> Discovery:
    """The module's top-level ``gradcheck_*`` functions, in definition order: pairs when
    they can be called without arguments, skipped otherwise."""
    found = Discovery([])
    for name, obj in vars(module).items():
        if not name.startswith(PREFIX) or not inspect.isfunction(obj):
            continue
        required = _required_parameters(obj)
        if required:
            found.skipped[name] = required
        else:
            found.pairs.append(PairFunction(name, obj))
    return found


def _required_parameters(function: Callable) -> list[str]:
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind not in variadic
    ]


def select(pairs: Sequence[PairFunction], substrings: Sequence[str] | None
           ) -> list[PairFunction]:
    """The pairs whose name contains any of ``substrings`` (all of them when None)."""
    if not substrings:
        return list(pairs)
    return [p for p in pairs if any(s in p.name for s in substrings)]
