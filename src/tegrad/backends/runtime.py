"""``tg.build`` and ``tg.evaluate``: argument checking and target dispatch."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import numpy as np

from ..ir.tensor import Compute, Placeholder, Tensor
from ..ir.traverse import topo_tensors
from .cpu.errors import CompileError

TARGETS = ("numpy", "cpu")
_WARNED: list[bool] = []


def default_target() -> str:
    """``target=None``: ``$TEGRAD_TARGET`` when set, else the compiled ``"cpu"`` target when
    a C compiler is present, else ``"numpy"`` (with a warning, once)."""
    chosen = os.environ.get("TEGRAD_TARGET")
    if chosen:
        return chosen
    from .cpu.compiler import compiler

    if compiler() is not None:
        return "cpu"
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn("no C compiler found (set CC or install gcc): tegrad falls back to the "
                      "NumPy backend, which is slower", RuntimeWarning, stacklevel=3)
    return "numpy"


def build(inputs: Sequence[Tensor], outputs, target: str | None = None):
    """Compile ``outputs`` (one tensor, or a list) to a callable taking ``inputs``' arrays."""
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    ins = list(inputs)
    check_signature(ins, outs)
    from ..lower.plan import plan

    target, (program,) = make_programs(lambda: [(plan(outs), ins)], target,
                                       remember=(ins, outs))
    expected = input_specs(ins)

    def run(*arrays):
        results = program.run(checked_feed(expected, arrays))
        return results[0] if single else tuple(results)

    run.inputs = ins
    run.outputs = outs
    run.program = program
    run.target = target
    return run


def make_programs(make_plans, target: str | None, remember: tuple | None = None
                  ) -> tuple[str, list]:
    """``(target, programs)``: one program per ``(plan, inputs)`` of ``make_plans()`` for the
    target (None: the fastest available; if that is the compiled one and it cannot build
    for this machine, the NumPy backend, with a warning). ``remember``: the tensors that
    ``make_plans`` depends on alone; the cpu target then keeps its blueprints in the disk
    cache (``ir/disk_cache.py``), so a new process building an equal program loads them."""
    chosen = target is None
    target = target or default_target()
    if target == "cuda":
        raise ValueError(
            "target 'cuda' is not available in this build of tegrad; "
            f"available: {', '.join(TARGETS)} (or None for the fastest available)"
        )
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose from numpy, cpu, cuda")
    from .numpy_backend import NumpyProgram

    if target == "numpy":
        return target, [NumpyProgram(p, ins) for p, ins in make_plans()]
    from .cpu.compiler import CompilerMissing, compiler

    if compiler() is None:
        raise CompilerMissing("target 'cpu' needs a C compiler (set CC or install gcc); "
                              "target=None falls back to 'numpy'")
    from ..ir.disk_cache import remembered
    from .cpu.program import CpuProgram, blueprint

    def blueprints():
        return [(blueprint(p), ins) for p, ins in make_plans()]

    try:
        made = blueprints() if remember is None else remembered("cpu", remember, blueprints)
        return target, [CpuProgram(b, ins) for b, ins in made]
    except CompileError as error:
        if not chosen:
            raise
        # the compiler is there but cannot build for this machine (no OpenMP, no libmvec):
        # the target was ours to choose, so run on the reference backend and say why
        warnings.warn(f"the compiled cpu target failed ({str(error).splitlines()[0]}); "
                      "running on the NumPy backend", RuntimeWarning, stacklevel=3)
        return "numpy", [NumpyProgram(p, ins) for p, ins in make_plans()]  # planned anew


def input_specs(ins: list) -> list:
    return [(p, np.dtype(p.dtype), p.shape) for p in ins]


def checked_feed(expected: list, arrays: tuple) -> dict:
    """The feed of a call: each array checked against its placeholder."""
    if len(arrays) != len(expected):
        raise TypeError(f"expected {len(expected)} arrays "
                        f"({', '.join(p.name for p, _, _ in expected)}), got {len(arrays)}")
    feed = {}
    for (p, dtype, shape), a in zip(expected, arrays, strict=True):
        # an array of the placeholder's shape and (interned) dtype passes as it is:
        # coerce_input's checks cost about 9 us an input, as much as a small kernel
        ok = type(a) is np.ndarray and a.dtype is dtype and a.shape == shape
        feed[p] = a if ok else coerce_input(p, a)
    return feed


def evaluate(outputs, feed: dict, target: str | None = None):
    """Build and run once: ``feed`` maps placeholders to arrays."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    needed = [t for t in topo_tensors(outs) if isinstance(t, Placeholder)]
    for p in needed:
        if p not in feed:
            raise ValueError(f"no value fed for placeholder {p.name} {p.shape} {p.dtype}")
    f = build(needed, outputs, target)
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


def coerce_input(p: Placeholder, a) -> np.ndarray:
    arr = np.asarray(a)
    if arr.shape != p.shape:
        raise ValueError(f"placeholder {p.name}: expected shape {p.shape}, received {arr.shape}")
    if arr.dtype.name != p.dtype:
        same_kind = np.can_cast(arr.dtype, p.dtype, casting="same_kind")
        if not same_kind or (arr.dtype.kind != np.dtype(p.dtype).kind):
            raise TypeError(
                f"placeholder {p.name}: expected dtype {p.dtype}, received {arr.dtype.name}"
            )
        arr = arr.astype(p.dtype)
    return arr
