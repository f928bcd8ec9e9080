"""Targets as peers: what a target is, and the one registry ``tg.build`` looks them up in.

A target turns lowered plans into programs. It declares

  name                 what ``tg.build(..., target=name)`` says
  description          what a warning calls it ("the NumPy backend")
  fused                whether its plans come fused and grouped (``lower.plan.compiled``):
                       a compiled target's do; the NumPy reference runs them as planned
  cached               whether its prepared plans are kept in the disk cache
  unavailable()        None where it can run here, else the ``TargetUnavailable`` error
                       saying why not (no C compiler...)
  prepare(plan, options)   what it makes of a lowered plan before it has arrays (the cpu
                       target: the plan with its C text); plain data, so it can be cached
  program(prepared, inputs, options)   a ``Program``: ``run(feed) -> list of arrays``,
                       with ``plan`` and ``inputs`` (and, where it takes arrays other than
                       NumPy's, ``coerce(placeholder, array)`` checking one of them)

and may declare ``unavailable_by_default()`` (why ``target=None`` passes it over although
it can run: the cuda target in Triton's interpreter) and ``quiet_when_unavailable`` (no
warning for passing it over: most machines have no GPU).

``register`` adds one; ``resolve(name)`` finds one, naming the known targets when the name
is not one of them; ``target=None`` takes ``$TEGRAD_TARGET`` or else the first of
``PREFERENCE`` that is available. A target that fails to prepare a plan for this machine
raises ``TargetFailed``: where the target was chosen by default, ``tg.build`` then takes
the next available one, with a warning.
"""

from __future__ import annotations

import warnings
from typing import Protocol

from ..options import Options, target_variable


class TargetFailed(RuntimeError):
    """A target is present but cannot make this program on this machine."""


class TargetUnavailable(RuntimeError):
    """A target cannot run here at all (``Target.unavailable``)."""


class Program(Protocol):
    plan: object
    inputs: list

    def run(self, feed: dict) -> list: ...


class Target(Protocol):
    name: str
    description: str
    fused: bool
    cached: bool

    def unavailable(self) -> TargetUnavailable | None: ...

    def prepare(self, plan, options: Options): ...

    def program(self, prepared, inputs: list, options: Options) -> Program: ...


REGISTRY: dict[str, Target] = {}
PREFERENCE: list[str] = []  # fastest first
_WARNED: set = set()


def register(target: Target, preference: int | None = None) -> None:
    """Add ``target`` (replacing one of its name); ``preference``: its place in the order
    ``target=None`` tries (None: last)."""
    REGISTRY[target.name] = target
    if target.name in PREFERENCE:
        PREFERENCE.remove(target.name)
    PREFERENCE.insert(len(PREFERENCE) if preference is None else preference, target.name)


def known() -> list[str]:
    return list(REGISTRY)


def resolve(name: str) -> Target:
    """The target called ``name``; an unknown name raises, naming the known ones."""
    found = REGISTRY.get(name)
    if found is None:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(known())} "
                         "(or None for the fastest available)")
    return found


def default_target() -> str:
    """``target=None``: ``$TEGRAD_TARGET`` when set, else the first available target of
    ``PREFERENCE``; passing over a faster one warns once, saying why."""
    chosen = target_variable()
    if chosen:
        return chosen
    passed = []
    for name in PREFERENCE:
        target = REGISTRY[name]
        why = getattr(target, "unavailable_by_default", target.unavailable)()
        if why is None:
            for faster, reason in passed:
                if faster not in _WARNED:
                    _WARNED.add(faster)
                    warnings.warn(f"{reason}: tegrad falls back to "
                                  f"{REGISTRY[name].description}, which is slower",
                                  RuntimeWarning, stacklevel=4)
            return name
        if not getattr(target, "quiet_when_unavailable", False):
            passed.append((name, why))
    raise TargetUnavailable(f"no target is available here (known: {', '.join(known())})")


def fallback_after(name: str) -> str | None:
    """The next available target after ``name`` in ``PREFERENCE``, if any."""
    later = PREFERENCE[PREFERENCE.index(name) + 1:] if name in PREFERENCE else []
    return next((n for n in later if REGISTRY[n].unavailable() is None), None)
