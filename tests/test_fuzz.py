"""Property-based fuzzing of tegrad on random well-formed programs (tests/programs.py).

Properties, each over random programs, inputs, heads and directions:

1. reverse mode matches central finite differences in float64 (two random directions,
   and element by element for inputs of at most 30 elements);
2. the simplifier never changes a value, for every compute of the program, of its
   gradient and of its JVP, and of the raw scatter forms autodiff starts from: each
   compute with its body simplified (the computes it reads left alone) equals it within
   rtol 1e-12; ``tg.simplify(t)``, which also simplifies everything upstream, equals it
   within rtol 1e-9 (upstream rounding differences can be amplified, e.g. ``sin`` of a
   value of 1e4); the public gradient and JVP equal the raw forms within rtol 1e-9;
3. forward and reverse mode agree: ``sum(H * jvp(T)) == sum_x sum(VJP_x * T_x)``, and
   the full Jacobian (``head=None``) contracted with ``H`` is the VJP.

Finite differences use h = 1e-6. Where an estimate disagrees with the gradient, it is
re-examined before the failure counts: with a second step (1e-5) the central estimate
must agree, and the one-sided estimates must not jump (a kink: one-sided slopes differ
by O(1) for every small h, where a smooth function's differ by O(h)). Unstable
directions reject the example (``assume``); unstable single elements are skipped.

Profiles: see conftest.py (HYPOTHESIS_PROFILE=long for 10000 examples).
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, note
from hypothesis import strategies as st

import tegrad as tg

try:
    from .programs import Program, programs, random_inputs
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from programs import Program, programs, random_inputs

# the reference backend: these properties are about autodiff and the simplifier; the
# compiled target is checked against it on random programs in test_cpu.py
TARGET = "numpy"
H1, H2 = 1e-6, 1e-5
RTOL, ATOL = 1e-5, 1e-7
EPS = np.finfo(np.float64).eps

seeds = st.integers(0, 2**32 - 1)


def _topo_computes(outputs) -> list:
    """Every compute the outputs depend on (an internal helper; tests may use it)."""
    from tegrad.ir.traverse import topo_tensors

    return [t for t in topo_tensors(outputs) if isinstance(t, tg.Compute)]


class Objective:
    """phi(xs) = sum(H * f(xs)) and its finite-difference estimates."""

    def __init__(self, program: Program, xs: list[np.ndarray], head: np.ndarray):
        self.f = tg.build(program.inputs, program.output, target=TARGET)
        self.xs = xs
        self.head = head
        y = self.f(*xs)
        self.phi0 = float(np.sum(head * y))
        # rounding noise of one evaluation of phi, generously
        self.scale = float(np.sum(np.abs(head * y))) + 1e-300
        self.noise = 64 * EPS * self.scale

    def phi(self, xs) -> float:
        return float(np.sum(self.head * self.f(*xs)))

    def at(self, vs, t: float) -> float:
        return self.phi([x + t * v for x, v in zip(self.xs, vs, strict=True)])

    def central(self, vs, h: float) -> tuple[float, float]:
        """(central slope, one-sided jump (phi(+h) - 2 phi(0) + phi(-h)) / h)."""
        plus, minus = self.at(vs, h), self.at(vs, -h)
        return (plus - minus) / (2 * h), (plus - 2 * self.phi0 + minus) / h

    def stable(self, vs, c1: float, d1: float) -> bool:
        """Whether the h=1e-6 estimate ``c1`` can be trusted (see the module doc)."""
        c2, d2 = self.central(vs, H2)
        agree = abs(c1 - c2) <= 1e-6 * max(abs(c1), abs(c2)) + 4 * self.noise / H1
        smooth = abs(d1) <= 0.5 * abs(d2) + 8 * self.noise / H1
        return agree and smooth


def _close(got: float, want: float, noise: float) -> bool:
    return abs(got - want) <= RTOL * max(abs(got), abs(want)) + ATOL + 4 * noise / H1


@given(program=programs(), seed=seeds)
def test_gradient_matches_finite_differences(program: Program, seed: int):
    rng = np.random.default_rng(seed)
    xs = random_inputs(program, rng)
    head_value = rng.standard_normal(program.output.shape)
    head = tg.placeholder(program.output.shape, "float64", name="H")
    grads = tg.gradient(program.output, program.inputs, head=head)
    for x, g in zip(program.inputs, grads, strict=True):
        assert g.shape == x.shape, f"gradient of {x.name} has shape {g.shape}, not {x.shape}"
    vjp = tg.build([*program.inputs, head], grads, target=TARGET)(*xs, head_value)
    for x, g in zip(xs, vjp, strict=True):
        assert np.all(np.isfinite(g)), "gradient is not finite"
        assert g.shape == x.shape
    obj = Objective(program, xs, head_value)
    assume(np.isfinite(obj.phi0))

    # (a) two random directions
    for _ in range(2):
        vs = [rng.standard_normal(x.shape) for x in xs]
        got = float(sum(np.sum(g * v) for g, v in zip(vjp, vs, strict=True)))
        want, jump = obj.central(vs, H1)
        if not _close(got, want, obj.noise):
            assume(obj.stable(vs, want, jump))
            note(f"direction check: <VJP, v> = {got!r}, finite differences {want!r}")
        assert _close(got, want, obj.noise), (
            f"<VJP, v> = {got!r} but finite differences give {want!r} "
            f"(difference {got - want:.3g}, phi scale {obj.scale:.3g})"
        )

    # (b) element by element for small inputs
    for k, (p, x, g) in enumerate(zip(program.inputs, xs, vjp, strict=True)):
        if x.size > 30:
            continue
        for flat in range(x.size):
            idx = np.unravel_index(flat, x.shape)
            vs = [np.zeros_like(y) for y in xs]
            vs[k][idx] = 1.0
            want, jump = obj.central(vs, H1)
            got = float(g[idx])
            if _close(got, want, obj.noise) or not obj.stable(vs, want, jump):
                continue
            raise AssertionError(
                f"d phi / d {p.name}{list(int(i) for i in idx)}: gradient {got!r}, "
                f"finite differences {want!r} (difference {got - want:.3g}, "
                f"phi scale {obj.scale:.3g})\nfull gradient of {p.name}:\n{g}"
            )


def _raw_derivatives(out, inputs, head, tangents) -> list:
    """The unsimplified (scatter-form) gradients and JVP, from tegrad's internals; an
    empty list where those internals are not available or do not build."""
    try:
        from tegrad.autodiff.forward import jvp as raw_jvp
        from tegrad.autodiff.reverse import gradient as raw_gradient
    except ImportError:  # pragma: no cover - internals moved
        return []
    return [*raw_gradient(out, inputs, head), raw_jvp(out, inputs, tangents)]


def _simplify_body():
    """tegrad's ``simplify_compute`` (simplifies one compute's body, leaving the computes
    it reads alone), or None where that internal is not available."""
    try:
        from tegrad.simplify import simplify_compute
    except ImportError:  # pragma: no cover - internals moved
        return None
    return simplify_compute


def _terms_scale(t, placeholders, arrays) -> np.ndarray:
    """Per element, the sum of the magnitudes of the terms that form ``t``
    (``tegrad.check.graph.magnitude_graph``): rounding lives on this scale, so a value
    that cancels to ~0 is compared with the size of what cancelled."""
    from tegrad.check.graph import magnitude_graph

    (mag,), twins = magnitude_graph([t])
    feed = dict(zip(placeholders, arrays, strict=True))
    feed.update({twins[p]: np.abs(a) for p, a in feed.items() if p in twins})
    return np.asarray(tg.evaluate(mag, feed, target=TARGET))


def _assert_same(t, got: np.ndarray, want: np.ndarray, what: str, detail,
                 rtol: float = 1e-12, terms=None) -> None:
    """``terms()`` (only called when the plain comparison fails) gives the scale of the
    terms that cancelled, which then widens the absolute tolerance per element."""
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    close = np.isclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
    if not close.all() and terms is not None:
        scale = np.maximum(scale, np.abs(terms()))
        close = np.isclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
    if not close.all():
        bad = tuple(int(i) for i in np.argwhere(~close)[0])
        raise AssertionError(
            f"{what} changed the value of {t.name} at {bad}: "
            f"{want[bad]!r} -> {got[bad]!r}\n{detail()}"
        )


@given(program=programs(), seed=seeds)
def test_simplify_preserves_values(program: Program, seed: int):
    rng = np.random.default_rng(seed)
    out = program.output
    head = tg.placeholder(out.shape, "float64", name="H")
    tangents = [tg.placeholder(p.shape, "float64", name=f"d{p.name}") for p in program.inputs]
    grads = tg.gradient(out, program.inputs, head=head)
    jvp = tg.jvp(out, program.inputs, tangents)
    placeholders = [*program.inputs, *tangents, head]
    arrays = [rng.standard_normal(p.shape) for p in placeholders]
    computes = _topo_computes([out, *grads, jvp])
    reference = tg.build(placeholders, computes, target=TARGET)(*arrays)

    # the scatter forms autodiff starts from, before any simplification
    raw = _raw_derivatives(out, program.inputs, head, tangents)
    public_computes = set(computes)
    raw_computes = [t for t in _topo_computes(raw) if t not in public_computes]
    try:
        raw_values = (tg.build(placeholders, [*raw, *raw_computes], target=TARGET)(*arrays)
                      if raw else ())
    except tg.IRError:  # an ill-formed raw form is the simplifier's to rescue
        raw, raw_computes, raw_values = [], [], ()
    n = len(raw)
    for public, r, value in zip([*grads, jvp], raw, raw_values[:n], strict=False):
        got = reference[computes.index(public)]
        # a gradient that cancels to ~0 (two paths of one input) keeps the rounding of its
        # terms: T2 = prod(-(P + t) + t) gave -9.3e-6 raw, 0 simplified, terms ~3.5e11
        _assert_same(public, got, value, "differentiation with simplification",
                     lambda public=public, r=r: f"raw:\n{r}\nsimplified:\n{public}",
                     rtol=1e-9, terms=lambda r=r: _terms_scale(r, placeholders, arrays))

    simplify_body = _simplify_body()
    for t, want in zip([*computes, *raw_computes], [*reference, *raw_values[n:]], strict=True):
        s = tg.simplify(t)
        assert tuple(s.shape) == tuple(t.shape), (
            f"simplify changed the shape of {t.name}: {t.shape} -> {s.shape}"
        )
        assert s.dtype == t.dtype, f"simplify changed the dtype of {t.name}"
        local = simplify_body(t) if simplify_body is not None else t
        got_local, got = tg.build(placeholders, [local, s], target=TARGET)(*arrays)
        def terms(t=t):
            return _terms_scale(t, placeholders, arrays)

        _assert_same(t, got_local, want, "simplifying the body",
                     lambda t=t, s=local: f"before:\n{t}\nafter:\n{s}", terms=terms)
        _assert_same(t, got, want, "tg.simplify",
                     lambda t=t, s=s: f"before:\n{t}\nafter:\n{s}", rtol=1e-9, terms=terms)


@given(program=programs(), seed=seeds)
def test_forward_mode_agrees_with_reverse_mode(program: Program, seed: int):
    rng = np.random.default_rng(seed)
    out = program.output
    xs = random_inputs(program, rng)
    ts = [rng.standard_normal(p.shape) for p in program.inputs]
    head_value = rng.standard_normal(out.shape)
    head = tg.placeholder(out.shape, "float64", name="H")
    tangents = [tg.placeholder(p.shape, "float64", name=f"d{p.name}") for p in program.inputs]
    jvp = tg.jvp(out, program.inputs, tangents)
    assert jvp.shape == out.shape, f"jvp has shape {jvp.shape}, output {out.shape}"
    grads = tg.gradient(out, program.inputs, head=head)
    f = tg.build([*program.inputs, *tangents, head], [jvp, *grads], target=TARGET)
    jv, *vjp = f(*xs, *ts, head_value)
    forward = float(np.sum(head_value * jv))
    reverse = float(sum(np.sum(g * t) for g, t in zip(vjp, ts, strict=True)))
    scale = float(np.sum(np.abs(head_value * jv))
                  + sum(np.sum(np.abs(g * t)) for g, t in zip(vjp, ts, strict=True)))
    assert abs(forward - reverse) <= 1e-9 * scale + 1e-12, (
        f"sum(H * jvp) = {forward!r} but sum(VJP * tangent) = {reverse!r}"
    )

    # the full Jacobian (head=None) contracted with H is the VJP
    if out.size * max(p.size for p in program.inputs) <= 2000:
        jacobians = tg.gradient(out, program.inputs)
        js = tg.build(program.inputs, jacobians, target=TARGET)(*xs)
        for p, j, g in zip(program.inputs, js, vjp, strict=True):
            assert j.shape == out.shape + p.shape
            contracted = np.tensordot(head_value, j, axes=out.ndim) if out.ndim else head_value * j
            np.testing.assert_allclose(
                contracted, g, rtol=1e-9, atol=1e-12 * (1 + np.max(np.abs(g), initial=0.0)),
                err_msg=f"Jacobian of {out.name} w.r.t. {p.name} contracted with H != VJP",
            )
