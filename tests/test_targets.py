"""Targets as peers (``backends/target.py``) and ``tg.Options`` (``options.py``)."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends import target as targets
from tegrad.backends.cpu import compiler
from tegrad.backends.reference.program import NumpyProgram


def _program():
    X = tg.placeholder((4, 5), "float64", "X")
    Y = tg.compute((4,), lambda i: tg.sum(tg.exp(X[i, k := tg.reduce_axis(5, "k")]), axis=k),
                   "Y")
    return X, Y


def test_an_unknown_target_names_the_known_ones():
    X, Y = _program()
    for name in ("gpu", "NumPy", "CUDA"):
        with pytest.raises(ValueError,
                           match=r"unknown target .*known targets: cuda, cpu, numpy"):
            tg.build([X], Y, target=name)
    with pytest.raises(ValueError, match="known targets"):
        tg.evaluate(Y, {X: np.zeros((4, 5))}, target="gpu")


class _Counting:
    """A target of its own: the reference's programs, counting what it was asked."""

    name = "counting"
    description = "a counting test target"
    fused = True
    cached = False

    def __init__(self):
        self.prepared = []

    def unavailable(self):
        return None

    def prepare(self, plan, options):
        self.prepared.append(plan)
        return plan

    def program(self, plan, inputs, options):
        return NumpyProgram(plan, inputs, options)


@pytest.fixture
def counting(monkeypatch):
    made = _Counting()
    monkeypatch.setattr(targets, "REGISTRY", dict(targets.REGISTRY))
    monkeypatch.setattr(targets, "PREFERENCE", list(targets.PREFERENCE))
    targets.register(made)
    return made


def test_a_registered_target_is_a_peer(counting):
    """A target joins the registry and ``tg.build``, ``tg.evaluate`` and ``build_vjp`` use
    it; it is handed plans fused (it said ``fused``), and its answers agree."""
    X, Y = _program()
    x = np.random.default_rng(0).standard_normal((4, 5))
    f = tg.build([X], Y, target="counting")
    assert f.target == "counting" and len(counting.prepared) == 1
    np.testing.assert_allclose(f(x), np.exp(x).sum(1), rtol=1e-14)
    # fused: the exp is inlined into the sum, one general kernel
    assert [k.kind for k in counting.prepared[0].kernels] == ["general"]
    np.testing.assert_allclose(tg.evaluate(Y, {X: x}, target="counting"), np.exp(x).sum(1),
                               rtol=1e-14)
    forward, backward = tg.build_vjp([X], Y, target="counting")
    value, saved = forward(x)
    (dx,) = backward(saved, np.ones(4))
    np.testing.assert_allclose(dx, np.exp(x), rtol=1e-14)
    assert "counting" in targets.known()


def test_target_none_takes_the_variable_then_the_first_available(counting, monkeypatch):
    X, Y = _program()
    monkeypatch.setenv("TEGRAD_TARGET", "counting")
    assert tg.build([X], Y).target == "counting"
    monkeypatch.delenv("TEGRAD_TARGET")
    targets.register(counting, preference=0)  # now the fastest
    assert tg.build([X], Y).target == "counting"


def test_an_unavailable_target_is_passed_over_with_a_warning(counting, monkeypatch):
    """``target=None`` passes over an unavailable target, saying why once; naming it
    raises its own error."""
    class Missing(targets.TargetUnavailable):
        pass

    monkeypatch.setattr(counting, "unavailable", lambda: Missing("no such device here"))
    monkeypatch.setattr(targets, "_WARNED", set())
    targets.register(counting, preference=0)
    X, Y = _program()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = tg.build([X], Y)
    assert f.target != "counting"
    assert any("no such device here" in str(w.message) for w in caught)
    with pytest.raises(Missing, match="no such device"):
        tg.build([X], Y, target="counting")


def test_a_failing_default_target_falls_back_to_the_next(counting, monkeypatch):
    monkeypatch.setattr(counting, "prepare", lambda plan, options: (_ for _ in ()).throw(
        targets.TargetFailed("cannot make this one")))
    targets.register(counting, preference=0)
    X, Y = _program()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = tg.build([X], Y)
    assert f.target == targets.PREFERENCE[1]
    assert any("cannot make this one" in str(w.message) for w in caught)
    with pytest.raises(targets.TargetFailed):
        tg.build([X], Y, target="counting")


def test_options_are_read_from_the_environment_once(reread_environment):
    before = tg.Options.from_environment()
    env = reread_environment
    env.setenv("TEGRAD_NUM_THREADS", "3")
    env.setenv("TEGRAD_COPY_THREADS", "2")
    env.setenv("TEGRAD_TERM_KERNEL", "0")
    env.setenv("TEGRAD_BLAS", "openblas")
    assert tg.Options.from_environment() is before  # (read once per process)
    read = tg.Options.from_environment(refresh=True)
    assert (read.machine.threads, read.machine.copy_threads) == (3, 2)
    assert not read.term_kernel and read.blas == "openblas"
    env.setenv("TEGRAD_NUM_THREADS", "none")  # not a number: the default
    assert tg.Options.from_environment(refresh=True).machine.threads >= 1


def test_options_must_be_options():
    X, Y = _program()
    for wrong in ({"unroll": 0}, "fast", 3):
        with pytest.raises(TypeError, match="options must be a tg.Options"):
            tg.build([X], Y, options=wrong)
    with pytest.raises(TypeError, match="options must be a tg.Options"):
        tg.build_vjp([X], Y, options={"merge_products": False})


def test_options_are_frozen_values_with_a_key():
    a = tg.Options()
    b = a.replace(merge_products=False)
    assert a.merge_products and not b.merge_products and a != b
    assert a.cache_key() != b.cache_key() and a.cache_key() == tg.Options().cache_key()
    assert a.replace(machine=tg.Machine(threads=4)).cache_key() != a.cache_key()
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.unroll = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.replace(no_such_knob=1)
    assert tg.Machine.generic() == tg.Machine()


@pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
def test_options_reach_the_program():
    """A knob of the planner (products merged), of the runtime (threads) and of the
    generated code reach what ``tg.build`` makes."""
    X = tg.placeholder((64, 32), "float32", "X")
    W = tg.placeholder((48, 32), "float32", "W")
    H = tg.placeholder((64, 48), "float32", "H")
    Y = tg.nn.linear(X, W)
    outputs = tg.gradient(Y, [X, W], head=H)
    base = tg.Options.from_environment()
    one = tg.build([X, W, H], outputs, target="cpu", options=base.replace(
        machine=dataclasses.replace(base.machine, threads=1)))
    assert one.program.threads == 1
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(p.shape).astype("float32") for p in (X, W, H)]
    want = tg.build([X, W, H], outputs, target="numpy")(*arrays)
    for got, w in zip(one(*arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
