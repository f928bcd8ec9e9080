"""A pair to check, given as a dict: the form ``tegrad check`` files and ``shrink``
builders return.

``{"output": Y, "inputs": [X, ...]}`` plus optional ``grads``, ``head``, ``values`` goes to
``check_gradient``; ``{"forward": f, "backward": b, "args": (x, ...)}`` goes to
``check_vjp``. Anything else (a missing or unknown key, the two forms mixed) raises
``PairSpecError`` naming the keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .checker import check_gradient, check_vjp

EXPRESSION_REQUIRED = ("output", "inputs")
EXPRESSION_OPTIONAL = ("grads", "head", "values")
CALLABLE_REQUIRED = ("forward", "backward", "args")


class PairSpecError(ValueError):
    """The dict does not follow the convention."""


def run_spec(spec: object, **opts):
    """Check the pair ``spec`` describes; ``opts`` go to the checker."""
    check, args, kwargs = check_call(spec)
    return check(*args, **kwargs, **opts)


def check_call(spec: object) -> tuple[Any, tuple, dict]:
    """The checker to call on a pair's dict, with its arguments."""
    if not isinstance(spec, Mapping):
        raise PairSpecError(
            f"returned {type(spec).__name__}; a pair returns a dict with keys "
            f"{_keys(EXPRESSION_REQUIRED)} or {_keys(CALLABLE_REQUIRED)}"
        )
    keys = set(spec)
    expression = keys & set(EXPRESSION_REQUIRED + EXPRESSION_OPTIONAL)
    callable_form = keys & set(CALLABLE_REQUIRED)
    if expression and callable_form:
        raise PairSpecError(
            f"mixes the tensor-expression keys ({_keys(sorted(expression))}) with the "
            f"callable keys ({_keys(sorted(callable_form))}); use one form"
        )
    if callable_form:
        _require(keys, CALLABLE_REQUIRED, ())
        return check_vjp, (spec["forward"], spec["backward"], spec["args"]), {}
    _require(keys, EXPRESSION_REQUIRED, EXPRESSION_OPTIONAL)
    kwargs = {k: spec[k] for k in EXPRESSION_OPTIONAL if k in spec}
    return check_gradient, (spec["output"], spec["inputs"]), kwargs


def _require(keys: set, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    missing = [k for k in required if k not in keys]
    unknown = sorted(str(k) for k in keys - set(required + optional))
    problems = []
    if missing:
        problems.append(f"missing {_keys(missing)}")
    if unknown:
        allowed = _keys(required + optional)
        problems.append(f"unknown {_keys(unknown)} (this form takes {allowed})")
    if problems:
        raise PairSpecError("the returned dict has " + "; ".join(problems))


def _keys(names) -> str:
    return ", ".join(repr(n) for n in names)
