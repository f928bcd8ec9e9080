"""The checks on one input's gradient, and the tolerances they use.

Notation: ``f`` the forward (float64 reference), ``x`` the input checked, ``h`` a random
head, ``g`` the backward under test at ``h``, ``J`` the Jacobian of ``f`` in ``x``.

1. Screen: for probes ``t`` (Gaussian and boundary-targeted), ``<h, J t>`` against
   ``<g, t>``. Where ``f`` is affine in ``x`` this is the adjoint identity and ``J t`` is
   exact up to rounding; elsewhere ``J t`` comes from Richardson differences.
2. Element-wise (small inputs, or any failure or kink in the screen): every column of
   ``J`` by differences in batched evaluations, and, when ``J`` fits in memory, every row
   of the backward's own Jacobian (one-hot heads, batched), compared entry by entry.
   Otherwise ``J^T h`` against ``g`` element by element.

Tolerances are derived, never widened by size: ``C (E + L (eps64 + eps_g A) S)`` where
``E`` is the difference error estimate, ``L`` the accumulation length of forward and
backward (longest chain of roundings), ``eps_g`` the epsilon of the gradient's dtype,
``A`` how much the computation amplifies rounding at these values (the forward's own
float32 error, at most ``|M(f)| / |f|``; see ``_amplification``), and ``S`` the scale of the
terms: ``<|h|, M(f)(|t|)>`` for the adjoint identity, the column's largest Jacobian entry
element-wise.
"""

from __future__ import annotations

import numpy as np

from .locate import ascii_mask, condition_for, describe_region, signature, worst_elements
from .numeric import EPS64, boundary_probes, differences, gaussian_probes, one_hot
from .report import FAIL, INCONCLUSIVE, PASS, Check, InputResult, Kink

SAFETY = 8.0  # C above: the rounding bounds are first-order estimates
FULL_JACOBIAN_ENTRIES = 1 << 21  # out.size * in.size up to this: compare entry by entry
ELEMENTWISE_ALWAYS = 4096  # inputs this small always get the element-wise comparison
TINY = 1e-300


def check_input(pair, name: str, head: np.ndarray, g: np.ndarray, rng, *, probes: int,
                elementwise) -> InputResult:
    x = pair.values[name]
    dtype = pair.grad_dtypes[name]
    res = InputResult(name, x.shape, dtype, linear=pair.affine(name))
    g64 = np.asarray(g, np.float64)
    fwd = lambda xs: pair.forward(name, xs)  # noqa: E731
    f0 = fwd(x[None])[0]
    if not np.all(np.isfinite(f0)):
        res.verdict = INCONCLUSIVE
        res.notes.append("the forward is not finite at these values; nothing was compared")
        return res
    if not np.all(np.isfinite(g64)):
        bad = ~np.isfinite(g64)
        _fail(res, bad, np.zeros_like(g64), g64, np.ones_like(g64), "non-finite gradient")
        res.signature = "non-finite values (nan or inf) in the gradient"
        return res
    eps_g = float(np.finfo(dtype).eps) if np.dtype(dtype).kind == "f" else EPS64
    amp = _amplification(pair, name, x, f0) if eps_g > EPS64 else 1.0
    rel = pair.accumulation * (EPS64 + eps_g * amp)

    structural = _pattern(pair, name, res)
    screen_failed, kinked = _screen(pair, name, x, head, g64, rng, probes, rel, res)
    n = x.size
    if elementwise is True or (
        elementwise == "auto" and (n <= ELEMENTWISE_ALWAYS or screen_failed or kinked)
    ):
        screen_margin = res.margin
        _elementwise(pair, name, x, head, g64, rel, res)
        if screen_failed and not res.wrong_mask.any():
            res.notes.append(f"the screen exceeded its tolerance (margin {screen_margin:.3g}) "
                             "but no element is wrong element by element")
        if structural is not None and structural.any():
            unconfirmed = structural & ~res.wrong_mask
            if unconfirmed.any():
                res.notes.append(
                    f"{int(unconfirmed.sum())} elements differ in dependency pattern but "
                    f"agree in value here ({describe_region(unconfirmed)}): a backward that "
                    "reads what it then multiplies by zero, or coefficients that are zero at "
                    "these values"
                )
                if not (structural & res.wrong_mask).any():
                    res.checks[0].verdict = PASS
                    res.checks[0].detail += "; values agree: not counted"
    elif structural is not None and structural.any():
        _fail(res, structural, np.zeros_like(g64), g64, np.ones_like(g64),
              "dependency pattern differs (see the dependency check)")
        res.ascii = ascii_mask(structural)
    elif screen_failed:
        res.verdict = FAIL
        res.notes.append("element-wise comparison disabled (elementwise=False): no location")
    return res


def _pattern(pair, name, res) -> np.ndarray | None:
    """The exact dependency check (pattern.py); returns the mask of elements it finds
    wrong (missing pairs count only where the forward is affine in the input: elsewhere
    a data-dependent backward, such as one routed by argmax, may rightly skip pairs)."""
    from .pattern import PatternUnavailable

    try:
        found = pair.pattern(name)
    except PatternUnavailable as why:
        res.notes.append(f"dependency pattern not checked: {why}")
        return None
    if found is None:
        return None
    missing, spurious, n_missing, n_spurious, n_pairs, exact = found
    shape = res.shape
    wrong = spurious | (missing if res.linear else np.zeros_like(missing))
    detail = f"{n_pairs} (output, input) pairs; {n_missing} missing, {n_spurious} spurious"
    if missing.any():
        detail += f"; missing at {describe_region(missing.reshape(shape))}"
        if not res.linear:
            detail += ("; missing pairs are not counted: the forward is nonlinear in this "
                       "input, where a backward may rightly skip pairs (one routed by an "
                       "argmax); the value checks judge them")
    if spurious.any():
        detail += f"; spurious at {describe_region(spurious.reshape(shape))}"
    if not exact:
        detail += ("; inexact: a condition on float data or with a reduction was taken as "
                   "true, so the extra pairs of that side are not counted")
    res.checks.append(Check("dependency pattern (exact, from the index maps)",
                            FAIL if wrong.any() else PASS, float(wrong.any()), detail))
    return wrong.reshape(shape)


def _term_scale(pair, name, x) -> np.ndarray | None:
    """``M(f)`` at ``x``: the magnitude of the forward's terms, on which its rounding
    errors are made (None for NumPy callables, whose terms are not known)."""
    mag = pair.magnitude(name, x[None])
    return None if mag is None else mag[0]


def _amplification(pair, name, x, f0) -> float:
    """How much this computation at these values amplifies rounding, in units of the
    dtype's epsilon: the forward's own relative error in its dtype (observed against the
    float64 reference), never more than the bound ``|M(f)| / |f|`` and never less than 1."""
    bound = np.inf
    mag = pair.magnitude(name, x[None])
    if mag is not None:
        bound = max(1.0, float(np.linalg.norm(mag) / max(np.linalg.norm(f0), TINY)))
    native = pair.forward_native()
    if native is None or np.dtype(native.dtype).kind != "f" or native.dtype == np.float64:
        return bound if np.isfinite(bound) else 1.0
    eps = float(np.finfo(native.dtype).eps)
    observed = np.linalg.norm(native.astype(np.float64) - f0) / max(np.linalg.norm(f0), TINY)
    return float(min(bound, max(1.0, observed / eps)))


def _screen(pair, name, x, head, g64, rng, probes, rel, res) -> tuple[bool, bool]:
    labels, boundary = boundary_probes(x.shape, rng)
    ts = np.concatenate([gaussian_probes(x.shape, probes, rng), boundary])
    labels = [f"Gaussian {k}" for k in range(probes)] + labels
    d = differences(lambda xs: pair.forward(name, xs), x, ts, res.linear,
                    _term_scale(pair, name, x))
    out_axes = tuple(range(1, d.value.ndim))
    in_axes = tuple(range(1, ts.ndim))
    rhs = np.sum(g64 * ts, axis=in_axes)
    lo = np.sum(np.minimum(head * d.lo, head * d.hi), axis=out_axes)
    hi = np.sum(np.maximum(head * d.lo, head * d.hi), axis=out_axes)
    magnitude = pair.magnitude(name, ts) if res.linear else None
    if magnitude is not None:
        scale = np.sum(np.abs(head) * magnitude, axis=out_axes)
    else:
        scale = np.sum(np.abs(head * d.value), axis=out_axes) + np.sum(np.abs(g64 * ts), in_axes)
    tol = SAFETY * (np.sum(np.abs(head) * d.error, axis=out_axes) + rel * scale) + TINY
    err = np.maximum(0.0, np.maximum(lo - rhs, rhs - hi))  # distance to [lo, hi]
    margins = err / tol
    kinked = bool(d.kink.any())
    failed = margins > 1
    what = "adjoint identity <h, J t> = <g, t>" if res.linear else "directional differences"
    detail = f"{len(ts)} probes: {probes} Gaussian, {len(ts) - probes} boundary"
    if failed.any():
        detail += "; failed: " + ", ".join(np.array(labels)[failed][:6])
    if kinked:
        detail += f"; kinks along {int(d.kink.any(axis=out_axes).sum())} probes"
    res.checks.append(Check(what, FAIL if failed.any() else PASS, float(margins.max()), detail))
    res.margin = float(margins.max())
    res.max_error = float(err.max())
    with np.errstate(divide="ignore"):
        per_element = tol.reshape((-1,) + (1,) * x.ndim) / np.abs(ts)
    res.detectable = float(np.max(np.min(per_element, axis=0)))
    if failed.any():
        res.verdict = FAIL
    return bool(failed.any()), kinked


def _elementwise(pair, name, x, head, g64, rel, res) -> None:
    n, m = x.size, int(np.prod(pair.out_shape, dtype=np.int64))
    full = n * m <= FULL_JACOBIAN_ENTRIES
    fwd = lambda xs: pair.forward(name, xs)  # noqa: E731
    scale = _term_scale(pair, name, x)
    hv = head.reshape(-1)
    step = pair.chunk(5 * max(m, n))
    cols = {k: [] for k in ("value", "error", "lo", "hi", "kink")}
    for start in range(0, n, step):
        d = differences(fwd, x, one_hot(x.shape, start, min(n, start + step)), res.linear,
                        scale)
        for k in cols:
            a = getattr(d, k).reshape(len(d.value), m)
            if full:
                cols[k].append(a)
            elif k == "kink":
                cols[k].append(a.any(axis=1))
            elif k == "error":
                cols[k].append(np.abs(a) @ np.abs(hv))
            elif k == "value":
                cols[k].append(a @ hv)
            else:
                lo_or_hi = np.minimum if k == "lo" else np.maximum
                other = getattr(d, "hi" if k == "lo" else "lo").reshape(len(d.value), m)
                cols[k].append(np.sum(lo_or_hi(a * hv, other * hv), axis=1))
    stacked = {k: np.concatenate(v) for k, v in cols.items()}
    expected_shape = x.shape
    if full:
        received = _backward_rows(pair, name, m, n)
        jac, error = stacked["value"].T, stacked["error"].T
        lo, hi, kink = stacked["lo"].T, stacked["hi"].T, stacked["kink"].T
        col_scale = np.max(np.abs(jac), axis=0)
        floor = np.median(col_scale[col_scale > 0]) if (col_scale > 0).any() else 1.0
        tol = SAFETY * (error + rel * np.maximum(col_scale, floor)[None, :]) + TINY
        diff = np.abs(received - jac)
        accepted = kink & (received >= lo - tol) & (received <= hi + tol)
        bad = (diff > tol) & ~accepted
        if kink.any() and not res.linear:
            _tie_groups(fwd, x, received, kink, tol, rel, bad, res, scale)
        wrong = bad.any(axis=0)
        margin = float(np.max(np.where(accepted, 0.0, diff / tol)))
        expected = jac.T @ hv
        tol_elem = np.sqrt((hv**2) @ tol**2)  # root-sum-square of the entries' allowances
        kink_elem = kink.any(axis=0)
        lo_e = np.sum(np.minimum(lo * hv[:, None], hi * hv[:, None]), axis=0)
        hi_e = np.sum(np.maximum(lo * hv[:, None], hi * hv[:, None]), axis=0)
        sig = signature(jac, received, bad, tol, "Jacobian entries") if bad.any() else ""
        what = f"full Jacobian, {m} x {n} entries (rows: output elements)"
        max_error = float(np.max(np.where(accepted, 0.0, diff)))
    else:
        expected, error = stacked["value"], stacked["error"]
        lo_e, hi_e, kink_elem = stacked["lo"], stacked["hi"], stacked["kink"]
        scale = np.abs(expected) + np.abs(g64.reshape(-1)) + np.sqrt(np.mean(expected**2))
        tol_elem = SAFETY * (error + rel * scale) + TINY
        diff = np.abs(g64.reshape(-1) - expected)
        accepted = kink_elem & (g64.reshape(-1) >= lo_e - tol_elem)
        accepted &= g64.reshape(-1) <= hi_e + tol_elem
        wrong = (diff > tol_elem) & ~accepted
        margin = float(np.max(np.where(accepted, 0.0, diff / tol_elem)))
        sig = ""
        what = f"element-wise J^T h, {n} elements"
        max_error = float(np.max(np.where(accepted, 0.0, diff)))
    e_in = expected.reshape(expected_shape)
    tol_in = tol_elem.reshape(expected_shape)
    wrong_in = wrong.reshape(expected_shape)
    if not sig or sig.startswith("no simple"):
        sig = signature(e_in, g64, wrong_in, tol_in) if wrong_in.any() else ""
    res.checks.append(Check(what, FAIL if wrong.any() else PASS, margin,
                            f"{int(wrong.sum())} wrong elements"))
    res.wrong_mask = wrong_in
    res.margin = margin
    res.max_error = max_error
    res.detectable = float(tol.max() if full else tol_elem.max())
    res.detectable_unit = "Jacobian entry" if full else "gradient element"
    res.verdict = PASS
    for flat in np.flatnonzero(kink_elem):
        coords = tuple(int(i) for i in np.unravel_index(flat, expected_shape))
        res.kinks.append(Kink(coords, float(lo_e[flat]), float(hi_e[flat]),
                              float(g64.reshape(-1)[flat])))
    if wrong.any():
        _fail(res, wrong_in, e_in, g64, tol_in, sig)
        res.ascii = ascii_mask(wrong_in, kink_elem.reshape(expected_shape))
        grad = pair.condition_source(name)
        if grad is not None:
            res.condition = condition_for(grad, wrong_in)
    else:
        live = np.abs(expected) > 0
        if live.any() and np.median(tol_elem[live] / np.abs(expected[live])) > 1e-2:
            res.verdict = INCONCLUSIVE
            res.notes.append(
                "the allowed error exceeds 1% of the derivatives (difference error "
                "estimates, or rounding of the gradient's dtype amplified by ill-conditioned "
                "values): nothing finer could be judged; check in float64 or at other values"
            )


def _backward_rows(pair, name: str, m: int, n: int) -> np.ndarray:
    """The backward's Jacobian (rows: output elements) from one-hot heads, in chunks."""
    step = pair.chunk(max(m, n))
    rows = []
    for start in range(0, m, step):
        heads = one_hot(pair.out_shape, start, min(m, start + step)).astype(pair.out_dtype)
        rows.append(pair.backward(heads, [name])[name].reshape(-1, n).astype(np.float64))
    return np.concatenate(rows)


def _tie_groups(fwd, x, received, kink, tol, rel, bad, res, scale) -> None:
    """Tied elements (several kink columns in one output row, e.g. equal maxima of a
    window) may split that row's derivative in any way, but moved together the function
    is smooth: along ``t = sum of the group's unit vectors`` the derivative must equal the
    sum of their gradients. Rows where it does not are marked wrong on the group."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row in np.flatnonzero(kink.sum(axis=1) >= 2):
        groups.setdefault(tuple(np.flatnonzero(kink[row])), []).append(int(row))
    if not groups:
        return
    members = list(groups)
    ts = np.zeros((len(members), x.size))
    for k, cols in enumerate(members):
        ts[k, list(cols)] = 1.0
    d = differences(fwd, x, ts.reshape(len(members), *x.shape), False, scale)
    broken = 0
    for k, cols in enumerate(members):
        rows = np.array(groups[cols])
        value = d.value[k].reshape(-1)[rows]
        smooth = ~d.kink[k].reshape(-1)[rows]
        got = received[np.ix_(rows, cols)].sum(axis=1)
        allowed = SAFETY * (d.error[k].reshape(-1)[rows] + rel * np.abs(value))
        allowed = allowed + tol[np.ix_(rows, cols)].sum(axis=1)
        wrong_rows = rows[smooth & (np.abs(got - value) > allowed)]
        for row in wrong_rows:
            bad[row, list(cols)] = True
        broken += len(wrong_rows)
    res.checks.append(Check(
        "tie groups moved together", FAIL if broken else PASS, float(broken > 0),
        f"{len(members)} groups of tied elements; {broken} output rows where the tied "
        "gradients do not sum to the derivative along the group"))


def _fail(res, wrong, expected, received, tol, sig) -> None:
    res.verdict = FAIL
    res.wrong_mask = wrong
    res.region = describe_region(wrong)
    res.signature = sig
    res.worst = worst_elements(expected, received, tol, wrong)
