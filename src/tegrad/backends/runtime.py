"""``tg.build`` and ``tg.evaluate``: argument checking, lowering and the target's programs
(``target.py``)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from ..cache.disk import remembered
from ..ir.tensor import Compute, Placeholder, Tensor
from ..ir.traverse import topo_tensors
from ..lower.plan import compiled, plan
from ..options import Options
from . import targets  # noqa: F401 - registers the targets
from .feed import checked_feed, coerce_input, exact, input_specs
from .target import Target, TargetFailed, default_target, fallback_after, resolve


def build(inputs: Sequence[Tensor], outputs, target: str | None = None,
          options: Options | None = None):
    """Compile ``outputs`` (one tensor, or a list) to a callable taking ``inputs``' arrays.
    ``options``: the settings to plan and generate under (default: this machine's,
    ``Options.from_environment()``)."""
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    ins = list(inputs)
    check_signature(ins, outs)
    options = checked_options(options)
    target, (program,) = make_programs(lambda: [(plan(outs, options=options), ins)], target,
                                       remember=(ins, outs), options=options)
    expected = input_specs(ins)
    direct = getattr(program, "direct", None)  # a one-kernel program, called by position
    coerce = getattr(program, "coerce", coerce_input)  # (the cuda target takes tensors)

    def run(*arrays):
        if direct is not None and exact(expected, arrays):
            results = direct(arrays)
        else:
            results = program.run(checked_feed(expected, arrays, coerce))
        return results[0] if single else tuple(results)

    run.inputs = ins
    run.outputs = outs
    run.program = program
    run.target = target
    return run


def make_programs(make_plans, target: str | None, remember: tuple | None = None,
                  options: Options | None = None) -> tuple[str, list]:
    """``(target, programs)``: one program per ``(plan, inputs)`` of ``make_plans()`` (plans
    as ``lower.plan`` makes them, unfused) for the target (None: the fastest available;
    if it fails to make the programs on this machine, the next, with a warning).
    ``remember``: the tensors that ``make_plans`` depends on alone; a ``cached`` target
    then keeps its prepared plans in the disk cache under them and ``options``, so a new
    process building an equal program loads them."""
    options = checked_options(options)
    chosen = target is None
    name = default_target() if chosen else target
    while True:
        made = resolve(name)
        if not chosen:
            missing = made.unavailable()
            if missing is not None:
                raise missing
        try:
            return name, _programs(made, make_plans, remember, options)
        except TargetFailed as error:
            after = fallback_after(name) if chosen else None
            if after is None:
                raise
            # the target was ours to choose: run on the next one and say why
            warnings.warn(f"the {made.description} failed ({str(error).splitlines()[0]}); "
                          f"running on {resolve(after).description}", RuntimeWarning,
                          stacklevel=3)
            name = after


def _programs(made: Target, make_plans, remember: tuple | None, options: Options) -> list:
    def prepared():
        return [(made.prepare(compiled(p, options) if made.fused else p, options), ins)
                for p, ins in make_plans()]

    if made.cached and remember is not None:
        ready = remembered(made.name, remember, prepared, salt=options.cache_key())
    else:
        ready = prepared()
    return [made.program(p, ins, options) for p, ins in ready]


def checked_options(options) -> Options:
    """``options``, or this machine's (None); anything else raises, naming what it got."""
    if options is None:
        return Options.from_environment()
    if not isinstance(options, Options):
        raise TypeError(f"options must be a tg.Options (tg.Options.from_environment()"
                        f".replace(...)), got {type(options).__name__}")
    return options


def evaluate(outputs, feed: dict, target: str | None = None, options: Options | None = None):
    """Build and run once: ``feed`` maps placeholders to arrays."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    needed = [t for t in topo_tensors(outs) if isinstance(t, Placeholder)]
    for p in needed:
        if p not in feed:
            raise ValueError(f"no value fed for placeholder {p.name} {p.shape} {p.dtype}")
    f = build(needed, outputs, target, options)
    return f(*(feed[p] for p in needed))


def check_signature(ins: list[Tensor], outs: list[Tensor]) -> None:
    for p in ins:
        if not isinstance(p, Placeholder):
            raise TypeError(f"build inputs must be placeholders; {p.name} is a compute")
    if len(set(ins)) != len(ins):
        raise ValueError("a placeholder is listed twice in build inputs")
    from ..ir.scan import STATE_OF, ScanOutput

    given = set(ins)
    for t in topo_tensors(outs):
        if isinstance(t, Placeholder) and t not in given:
            if t in STATE_OF:
                raise ValueError(
                    f"{t.name} is the state placeholder of scan {STATE_OF[t]}: only that "
                    "scan's update may read it; read the scan's output instead"
                )
            raise ValueError(
                f"output reads placeholder {t.name} {t.shape} {t.dtype}, which is not in inputs"
            )
        if not isinstance(t, (Placeholder, Compute, ScanOutput)):
            raise TypeError(f"not a tensor: {t!r}")
