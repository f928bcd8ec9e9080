"""Saying where a gradient is wrong: regions in tensor coordinates, an ASCII mask, an
error signature, and the condition of a tensor-expression backward that the region
points to.

Regions: whole slabs first (every element with ``axis a = v`` wrong, or ``axis a = r mod
m``), then, for what remains, the index values per axis (or the coordinates, when few).
"""

from __future__ import annotations

import numpy as np

from ..ir.bounds import ENUMERATION_LIMIT, grid_values, is_pure_index
from ..ir.expr import Reduce, Select, split_conjunction
from ..ir.printer import format_expr
from ..ir.traverse import free_vars, walk

MAX_LISTED = 8
SHIFT_MAJORITY = 0.75  # a shift explains this share of the wrong elements (borders differ)


def describe_region(mask: np.ndarray) -> str:
    """A sentence naming the wrong elements of ``mask`` (True = wrong)."""
    total, count = mask.size, int(mask.sum())
    if count == 0:
        return "none"
    if count == total:
        return f"all {total} elements"
    if _is_box(mask):
        return f"{count} of {total} elements: {_describe_points(mask)}"
    parts: list[str] = []
    covered = np.zeros_like(mask)
    grids = np.indices(mask.shape)
    for axis, size in enumerate(mask.shape):
        idx = grids[axis]
        slabs = [(f"axis {axis} = {r} mod {m}", idx % m == r)
                 for m in (2, 3) if size > m for r in range(m)]
        slabs += [(f"axis {axis} = {v}{_position(v, size)}", idx == v) for v in range(size)]
        for label, slab in slabs:
            if size > 1 and mask[slab].all() and (slab & ~covered).any():
                parts.append(label)
                covered |= slab
    rest = mask & ~covered
    if rest.any():
        parts.append(_describe_points(rest))
    return f"{count} of {total} elements: " + " or ".join(parts)


def _is_box(mask: np.ndarray) -> bool:
    """Whether the True elements are every combination of some values per axis."""
    coords = np.argwhere(mask)
    return len(coords) == int(np.prod([len(np.unique(coords[:, a])) for a in range(mask.ndim)]))


def _position(v: int, size: int) -> str:
    if v == size - 1:
        return " (the last)"
    if v == 0:
        return " (the first)"
    return ""


def _describe_points(mask: np.ndarray) -> str:
    coords = np.argwhere(mask)
    values = [np.unique(coords[:, axis]) for axis in range(mask.ndim)]
    product = int(np.prod([len(v) for v in values]))
    if len(coords) <= 2:
        return "at " + ", ".join(str(tuple(int(c) for c in p)) for p in coords)
    if product == len(coords):  # a box: every combination of these values
        fixed = [f"axis {a} in {_ranges(v, mask.shape[a])}"
                 for a, v in enumerate(values) if len(v) < mask.shape[a]]
        return "every element with " + " and ".join(fixed)
    if len(coords) <= MAX_LISTED:
        return "at " + ", ".join(str(tuple(int(c) for c in p)) for p in coords)
    per_axis = [f"axis {a} in {_ranges(v, mask.shape[a])}"
                for a, v in enumerate(values) if len(v) < mask.shape[a]]
    if not per_axis:
        return f"{len(coords)} elements scattered over every index of every axis"
    return f"{len(coords)} elements within " + " and ".join(per_axis)


def _ranges(values: np.ndarray, size: int) -> str:
    """``{0..3, 7}`` style, naming the last index; a progression as ``{1, 3, ..., 47}``
    with its phase when it covers every index of that phase."""
    steps = np.diff(values)
    if len(values) >= 3 and steps.min() == steps.max() > 1:
        first, step, last = int(values[0]), int(steps[0]), int(values[-1])
        text = f"{{{first}, {first + step}, ..., {last}}}"
        if first < step and last + step >= size:
            text += f" (every index = {first} mod {step})"
        return text
    runs: list[str] = []
    start = prev = int(values[0])
    for v in [int(v) for v in values[1:]] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        runs.append(str(start) if start == prev else f"{start}..{prev}")
        if v is not None:
            start = prev = v
    text = "{" + ", ".join(runs) + "}"
    return text + (" (the last)" if len(values) == 1 and int(values[0]) == size - 1 else "")


def ascii_mask(mask: np.ndarray, kinks: np.ndarray | None = None, width: int = 64) -> str:
    """The last two axes, '#' where any element over the leading axes is wrong, 'k' at an
    accepted kink, '.' elsewhere; rows are the second-to-last axis."""
    plane = mask if mask.ndim >= 2 else mask.reshape(1, -1)
    lead = tuple(range(plane.ndim - 2))
    wrong = plane.any(axis=lead) if lead else plane
    kink = None
    if kinks is not None and kinks.any():
        k = kinks if kinks.ndim >= 2 else kinks.reshape(1, -1)
        kink = k.any(axis=lead) if lead else k
    rows = []
    for r in range(min(wrong.shape[0], width)):
        row = ""
        for c in range(min(wrong.shape[1], width)):
            row += "#" if wrong[r, c] else ("k" if kink is not None and kink[r, c] else ".")
        rows.append(row)
    return "\n".join(rows)


def signature(expected: np.ndarray, received: np.ndarray, wrong: np.ndarray,
              tol: np.ndarray, entries: str = "gradient elements") -> str:
    """Classify the wrong entries (arrays of one shape: a gradient shaped like the input,
    or a Jacobian, rows = output elements). "" when nothing is wrong, "no simple pattern"
    when no class fits."""
    if not wrong.any():
        return ""
    e, g, t = expected[wrong], received[wrong], tol[wrong]
    zero_received = (np.abs(g) <= t) & (np.abs(e) > t)
    if zero_received.all():
        return f"missing contribution ({entries} received 0 where the forward's are not)"
    if np.all(np.abs(e) <= t):
        return f"spurious contribution ({entries} received nonzero where the forward's are 0)"
    if np.all(np.abs(g + e) <= t):
        return "sign flip (received = -expected)"
    live = np.abs(e) > t
    if live.any():
        k = float(np.median(g[live] / e[live]))
        if np.all(np.abs(g - k * e) <= t * (1 + abs(k))):
            return f"constant scale (received = {k:.6g} x expected)"
    spurious = (np.abs(e) <= t) & (np.abs(g) > t)
    if zero_received.mean() >= 0.5 and not spurious.any():
        return (f"missing contribution ({int(zero_received.sum())} of {zero_received.size} "
                f"wrong {entries} received 0 where the forward's are not)")
    return (_constant_offset(expected, received, wrong, tol)
            or _shift(expected, received, wrong, tol)
            or _transposed(expected, received, wrong, tol)
            or "no simple pattern")


def _constant_offset(expected, received, wrong, tol) -> str:
    """received - expected constant along one axis (a term that does not depend on that
    index, such as a mean, is missing or extra)."""
    diff = received - expected
    for axis in range(diff.ndim - 1, -1, -1):
        if diff.shape[axis] < 2:
            continue
        spread = np.ptp(diff, axis=axis, keepdims=True)
        if np.all(spread <= np.min(tol, axis=axis, keepdims=True)):
            return (f"missing contribution (received - expected is constant along axis "
                    f"{axis}: a term that does not depend on that index, such as a mean, "
                    "is missing or extra)")
    return ""


def _shift(expected, received, wrong, tol) -> str:
    """received[i] = expected[i + d] on the wrong elements for an offset d of at most 2
    along at most two axes."""
    ndim = expected.ndim
    offsets = []
    for a in range(ndim):
        for s in (1, -1, 2, -2):
            offsets.append({a: s})
            for b in range(a + 1, ndim):
                offsets += [{a: s, b: r} for r in (1, -1, 2, -2)]
    for offset in offsets:
        moved = _shifted(expected, offset)
        if moved is None:
            continue
        match = np.abs(received[wrong] - moved[wrong]) <= tol[wrong]
        if match.mean() >= SHIFT_MAJORITY:
            text = "; ".join(f"i {'+' if s > 0 else '-'} {abs(s)} along axis {a}"
                             for a, s in offset.items())
            share = "" if match.all() else f", on {match.mean():.0%} of the wrong elements"
            return f"shifted index (received[i] = expected[{text}]{share})"
    return ""


def _transposed(expected, received, wrong, tol) -> str:
    """received = expected with two axes of equal size swapped (a transposed layout)."""
    for a in range(expected.ndim):
        for b in range(a + 1, expected.ndim):
            if expected.shape[a] != expected.shape[b] or expected.shape[a] < 2:
                continue
            swapped = np.swapaxes(expected, a, b)
            if np.all(np.abs(received[wrong] - swapped[wrong]) <= tol[wrong]):
                return f"transposed layout (received = expected with axes {a} and {b} swapped)"
    return ""


def _shifted(a: np.ndarray, offset: dict[int, int]) -> np.ndarray | None:
    """``a[i + d]`` (zero outside)."""
    out = np.zeros_like(a)
    src = [slice(None)] * a.ndim
    dst = [slice(None)] * a.ndim
    for axis, s in offset.items():
        size = a.shape[axis]
        if size <= abs(s):
            return None
        if s > 0:
            dst[axis], src[axis] = slice(0, size - s), slice(s, size)
        else:
            dst[axis], src[axis] = slice(-s, size), slice(0, size + s)
    out[tuple(dst)] = a[tuple(src)]
    return out


def worst_elements(expected, received, tol, wrong, count: int = 5) -> list[tuple]:
    """(coordinates, expected, received, allowed error) of the largest errors relative to
    what is allowed, among the wrong elements when there are any."""
    score = np.abs(received - expected) / tol
    if wrong.any():
        score = np.where(wrong, score, -1.0)
    order = np.argsort(score, axis=None)[::-1][:count]
    out = []
    for flat in order:
        idx = np.unravel_index(flat, expected.shape)
        if score[idx] >= 0:
            out.append((tuple(int(i) for i in idx), float(expected[idx]),
                        float(received[idx]), float(tol[idx])))
    return out


def condition_for(grad, wrong: np.ndarray) -> str:
    """The guards of ``grad`` (a Compute) that the wrong region points to. For each
    index-only conjunct ``c`` of a ``where`` or an ``if_then_else``, its cut region is the
    set of output elements for which ``c`` is false at some point of the reduction. The
    guards whose cut lies (90%) inside the wrong elements are named when together they
    cover at least half of them (Jaccard); otherwise the single best guard, if it does."""
    axes = getattr(grad, "axes", None)
    if axes is None or not wrong.any() or wrong.all():  # everything wrong: no region
        return ""
    cuts: list[tuple[str, np.ndarray]] = []
    for node in walk(grad.body):
        conds, bound = [], ()
        if isinstance(node, Reduce) and node.where is not None:
            conds, bound = split_conjunction(node.where), node.axes
        elif isinstance(node, Select):
            conds = split_conjunction(node.cond)
        for c in conds:
            cut = _cut_region(c, axes, bound, wrong.shape)
            text = format_expr(c)
            if cut is not None and cut.any() and all(text != t for t, _ in cuts):
                cuts.append((text, cut))
    inside = [(t, cut) for t, cut in cuts if (cut & wrong).sum() >= 0.9 * cut.sum()]
    union = np.zeros_like(wrong)
    for _, cut in inside:
        union |= cut
    if inside and _jaccard(union, wrong) >= 0.5:
        inside.sort(key=lambda tc: -_jaccard(tc[1], wrong))
        names = " and ".join(f"`{t}`" for t, _ in inside[:4])
        return f"the wrong elements are where the condition(s) {names} of {grad.name} cut terms"
    scored = [(_jaccard(cut, wrong), t) for t, cut in cuts]
    if scored and max(scored)[0] >= 0.5:
        return (f"the wrong elements are where the condition `{max(scored)[1]}` of "
                f"{grad.name} cuts terms")
    return ""


def _cut_region(c, axes, bound, shape) -> np.ndarray | None:
    if not is_pure_index(c):
        return None
    if any(v not in axes and v not in bound for v in free_vars(c)):
        return None
    variables = list(axes) + [v for v in bound if v in free_vars(c)]
    if int(np.prod([v.extent for v in variables], dtype=np.int64)) > ENUMERATION_LIMIT:
        return None
    holds = np.broadcast_to(grid_values(c, variables), [v.extent for v in variables])
    return ~holds.reshape(*shape, -1).all(axis=-1)


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))
