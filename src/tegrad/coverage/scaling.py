"""Timing inputs for a case that has no ``bench`` ones: its test inputs, scaled up.

A case's test inputs are a few elements (``(2, 3, 6, 5)`` images), where a timing
measures only call overhead. The inputs are grown by scaling groups of axes:

    group    axes (input k, axis a) of one size n that must stay equal (an image batch
             and its grid's batch; a matrix's columns and the next one's rows)
    scaled   every axis of a group becomes n * F, the same integer F for all groups
    values   x'[..., j, ...] = x[..., j mod n, ...] along each scaled axis (tiling), so
             every value is one the case's own generator made: indices stay in range,
             ignore_index markers, masks and signs stay what they were; float values
             that are not whole numbers are, past the first copy, multiplied by
             1 + 1e-3 u (u uniform in [-1, 1]): signs, zeros and ranges kept to 0.1%.
             Values that are an arithmetic progression (``cases.distinct``, made so
             that no two tie) become a longer one, shuffled, with the same step and
             the same values modulo the step: still no two tie, even in float32, where
             jittered copies of one value would (a max over 400 copies of its largest
             value ties about once per 100 rows)

Groups are found on the test inputs scaled by 2 and by 3 (``PROBES``: an odd factor
refuses a group that only an even size allows, as channels dividing a depthwise weight's
rows). Each axis of the first input of size > 1 seeds one: the seed alone, else with one
other axis of its size, else with every other axis of its size, the first of these that
tegrad and torch both accept (tegrad's forward traces, torch's runs, on meta tensors
where it can: shapes, no arithmetic; the outputs' shapes agree). A size-1 axis is never
scaled (it broadcasts). F is then the largest whose inputs and outputs hold at most
``ELEMENTS`` elements and whose forward takes at most ``FLOPS`` flops (counted on the
traced graph, ``lower.cost.count_ops``), checked again at that size on both sides.

Limits: axes only the other inputs have stay at their test size (attention's key length,
a convolution's output channels and kernel), so the timed shape has the test shape's
proportions, not a network's; a value structure across a scaled axis is tiled, not kept
(a causal mask tiled along its rows is no longer causal); kwargs that fix a size (a
reshape's target, fold's output size) leave the axes they constrain at their test size.
The timing checks its results against torch (``Timing.check_error``), which shows a
scaling that changed what the case computes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..lower.cost import count_ops
from .agreement import as_list, trace
from .cases import Case

ELEMENTS = 1 << 21  # inputs plus outputs: 8 MiB of float32
FLOPS = 1 << 29  # the forward's, about 10 ms on one core
JITTER = 1e-3
PROBES = (2, 3)  # a group must work at both: 3 refuses what only an even size allows
MAX_FACTOR = 1 << 14

Axis = tuple[int, int]  # (input, axis)


@dataclass(frozen=True)
class Scaling:
    """Groups of axes scaled by ``factor``."""

    groups: tuple[tuple[Axis, ...], ...]
    factor: int

    def reps(self, k: int, ndim: int, factor: int | None = None) -> tuple[int, ...]:
        scaled = {axis for group in self.groups for axis in group}
        f = self.factor if factor is None else factor
        return tuple(f if (k, a) in scaled else 1 for a in range(ndim))

    def shapes(self, arrays: Sequence[np.ndarray], factor: int | None = None) -> list[tuple]:
        return [tuple(n * r for n, r in zip(a.shape, self.reps(k, a.ndim, factor),
                                            strict=True))
                for k, a in enumerate(arrays)]

    def arrays(self, arrays: Sequence[np.ndarray], rng: np.random.Generator,
               factor: int | None = None) -> list[np.ndarray]:
        return [grow(a, self.reps(k, a.ndim, factor), rng) for k, a in enumerate(arrays)]

    def describe(self, arrays: Sequence[np.ndarray]) -> str:
        """``x8: (2, 3, 6, 5) -> (16, 24, 48, 40), (4, 3, 3, 3) -> (4, 24, 3, 3)``."""
        pairs = [f"{tuple(a.shape)} -> {s}" for a, s in zip(arrays, self.shapes(arrays),
                                                           strict=True)]
        return f"x{self.factor}: " + ", ".join(pairs)


def progression_step(a: np.ndarray) -> float | None:
    """The step between ``a``'s sorted values when they are an arithmetic progression of
    at least 3 floats, else None."""
    if a.dtype.kind != "f" or a.size < 3:
        return None
    gaps = np.diff(np.sort(a, axis=None))
    if gaps[0] <= 0 or not np.allclose(gaps, gaps[0], rtol=1e-6, atol=0):
        return None
    return float(gaps[0])


def grow(a: np.ndarray, reps: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """``a`` tiled ``reps`` times per axis; fractional floats jittered past the first copy,
    progressions made longer (see the module docstring)."""
    shape = tuple(n * r for n, r in zip(a.shape, reps, strict=True))
    step = progression_step(a) if any(r > 1 for r in reps) else None
    if step is not None:
        extra = (int(np.prod(shape)) - a.size) // 2  # as many values below as above
        values = a.min() + step * (rng.permutation(int(np.prod(shape))) - extra)
        return values.reshape(shape).astype(a.dtype)
    tiled = np.tile(a, reps)
    if a.dtype.kind != "f" or not any(r > 1 for r in reps) or np.all(a == np.round(a)):
        return tiled
    jitter = rng.uniform(-JITTER, JITTER, size=tiled.shape)
    jitter[tuple(slice(0, n) for n in a.shape)] = 0.0  # the first copy is the test input
    return (tiled * (1.0 + jitter)).astype(a.dtype)


def _torch_shapes(case: Case, tensors: Sequence) -> list[tuple]:
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        outputs = as_list(case.torch_fn()(*tensors, **case.kwargs))
    return [tuple(y.shape) for y in outputs]


def _tegrad_shapes(case: Case, arrays: Sequence[np.ndarray]) -> list[tuple]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = trace(case, list(arrays), with_gradients=False)
    return [tuple(y.shape) for y in graph.outputs]


def _meta(arrays: Sequence[np.ndarray]) -> list:
    """Torch meta tensors shaped like ``arrays`` (shapes and dtypes, no storage)."""
    import torch

    return [torch.empty(a.shape, dtype=torch.from_numpy(np.asarray(a)[..., :0]).dtype,
                        device="meta") for a in arrays]


def accepted(case: Case, arrays: Sequence[np.ndarray]) -> bool:
    """Both sides take ``arrays``: tegrad's forward traces, torch's runs, and their
    outputs have the same shapes. Torch runs on meta tensors (shapes, no arithmetic,
    no kernel set up per shape), on the arrays themselves where an op has no meta
    kernel or refuses them."""
    import torch

    try:
        ours = _tegrad_shapes(case, arrays)
    except Exception:  # noqa: BLE001 - a shape tegrad refuses is not accepted
        return False
    try:
        return ours == _torch_shapes(case, _meta(arrays))
    except Exception:  # noqa: BLE001 - no meta kernel, or refused: run it for real
        pass
    try:
        return ours == _torch_shapes(case, [torch.from_numpy(np.asarray(a)) for a in arrays])
    except Exception:  # noqa: BLE001 - a shape torch refuses is not accepted
        return False


def accepted_at(case: Case, scaling: Scaling, arrays: Sequence[np.ndarray], factor: int,
                rng: np.random.Generator) -> bool:
    """``accepted`` at ``factor``, the arrays themselves made only where torch has no
    meta kernel."""
    import torch

    shapes = scaling.shapes(arrays, factor)
    empty = [np.empty(s, a.dtype) for s, a in zip(shapes, arrays, strict=True)]
    try:
        ours = _tegrad_shapes(case, empty)
    except Exception:  # noqa: BLE001 - a shape tegrad refuses is not accepted
        return False
    try:
        return ours == _torch_shapes(case, _meta(empty))
    except Exception:  # noqa: BLE001 - no meta kernel, or refused: run it for real
        pass
    grown = scaling.arrays(arrays, rng, factor)
    try:
        return ours == _torch_shapes(case, [torch.from_numpy(a) for a in grown])
    except Exception:  # noqa: BLE001 - a shape torch refuses is not accepted
        return False


def _size(case: Case, shapes: Sequence[tuple], dtypes: Sequence[np.dtype]) -> tuple[int, int]:
    """``(elements of inputs and outputs, forward flops)`` at ``shapes``, symbolically."""
    empty = [np.empty(s, d) for s, d in zip(shapes, dtypes, strict=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = trace(case, empty, with_gradients=False)
    elements = sum(int(np.prod(s)) for s in shapes) + sum(y.size for y in graph.outputs)
    return elements, count_ops(graph.outputs).flops


def find_groups(case: Case, arrays: Sequence[np.ndarray],
                rng: np.random.Generator) -> tuple[tuple[Axis, ...], ...]:
    """The groups, seeded by the first input's axes (module docstring)."""
    groups: list[tuple[Axis, ...]] = []
    taken: set[Axis] = set()
    first = arrays[0] if arrays else np.empty(())
    for a, n in enumerate(first.shape):
        if n <= 1 or (0, a) in taken:
            continue
        others = [(k, b) for k, x in enumerate(arrays) for b, m in enumerate(x.shape)
                  if m == n and (k, b) != (0, a) and (k, b) not in taken]
        proposals = [((0, a),), *(((0, a), o) for o in others)]
        if len(others) > 1:
            proposals.append(((0, a), *others))
        for group in proposals:
            trial = Scaling((*groups, group), 1)
            if all(accepted(case, trial.arrays(arrays, rng, f)) for f in PROBES):
                groups.append(group)
                taken.update(group)
                break
    return tuple(groups)


def largest_factor(fits: Callable[[int], bool]) -> int:
    """The largest F in [1, MAX_FACTOR] with ``fits(F)``, ``fits`` falling once false."""
    good, bad = 1, 2
    while bad <= MAX_FACTOR and fits(bad):
        good, bad = bad, 2 * bad
    bad = min(bad, MAX_FACTOR + 1)
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good


def derive(case: Case, seed: int = 0) -> Scaling | None:
    """How to scale the case's test inputs, or None when no axis can grow."""
    rng = np.random.default_rng(seed)
    arrays = case.inputs(rng)
    groups = find_groups(case, arrays, rng)
    if not groups:
        return None
    dtypes = [a.dtype for a in arrays]
    scaling = Scaling(groups, 1)

    def fits(factor: int) -> bool:
        try:
            elements, flops = _size(case, scaling.shapes(arrays, factor), dtypes)
        except Exception:  # noqa: BLE001 - a size tegrad refuses does not fit
            return False
        return elements <= ELEMENTS and flops <= FLOPS

    factor = largest_factor(fits)
    while factor > 1 and not accepted_at(case, scaling, arrays, factor, rng):
        factor //= 2
    return Scaling(groups, factor) if factor > 1 else None
