"""The kernels' call from C (``backends/cpu/call_extension.py``) against the ctypes call.

Where ``Python.h`` is present the extension is built and every compiled kernel is called
through it; a read that is not an ndarray of its compiled dtype and C-order strides (a
view, another byte order, a Python list, a wider dtype) runs nothing in C and is
converted as before. The values are the reference's either way, and the same with the
extension off.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu import call_extension, compiler
from tegrad.backends.cpu.kernel_call import CompiledKernel

pytestmark = pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
HEADERS = (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()


def _add_program(target="cpu"):
    x, y = tg.placeholder((3, 4), "float32", "x"), tg.placeholder((3, 4), "float32", "y")
    z = tg.compute((3, 4), lambda i, j: x[i, j] * 2.0 + y[i, j], name="z")
    return tg.build([x, y], z, target=target)


def _reads():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    return {
        "C order": base,
        "a transposed view": np.ascontiguousarray(base.T).T,
        "every other column": np.arange(24, dtype=np.float32).reshape(3, 8)[:, ::2],
        "big-endian": base.astype(">f4"),
        "float64": base.astype(np.float64),
        "a nested list": base.tolist(),
    }


@pytest.mark.skipif(not HEADERS, reason="no Python.h: kernels are called through ctypes")
def test_the_extension_is_built_and_used():
    assert call_extension.extension() is not None
    f = _add_program()
    (step,) = f.program.steps
    assert isinstance(step, CompiledKernel)
    f(np.ones((3, 4), np.float32), np.ones((3, 4), np.float32))
    assert step.run is call_extension.extension().run and step.layout is not None


@pytest.mark.parametrize("extension", [True, False])
@pytest.mark.parametrize("kind", list(_reads()))
def test_reads_in_any_layout_give_the_reference(kind, extension, monkeypatch):
    if not extension:
        monkeypatch.setattr("tegrad.backends.cpu.kernel_call.extension", lambda: None)
    f, reference = _add_program(), _add_program("numpy")
    x, y = _reads()[kind], np.full((3, 4), 0.5, np.float32)
    want = reference(np.asarray(x, np.float32), y)
    np.testing.assert_array_equal(f(x, y), want)
    np.testing.assert_array_equal(f(y, x), reference(y, np.asarray(x, np.float32)))
    (step,) = f.program.steps
    assert (step.run is not None) == (extension and HEADERS)


def _exp_of(a):
    x = tg.placeholder(a.shape, "float32", "x")
    return [x], tg.compute(a.shape, lambda i, j: tg.exp(x[i, j]), name="e")


@pytest.mark.parametrize("extension", [True, False])
def test_eager_ops_and_gather_errors_through_the_extension(extension, monkeypatch):
    """An eager op's direct call (``CompiledKernel.direct``), views fed to it, and a
    gather's bad index raised from the C call's error slots."""
    if not extension:
        monkeypatch.setattr("tegrad.backends.cpu.kernel_call.extension", lambda: None)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    va, vb = tg.Variable(a), tg.Variable(b)
    for _ in range(2):  # the second call is the cached template's direct call
        np.testing.assert_array_equal((va + vb).numpy(), a + b)
        np.testing.assert_array_equal((va.T * 3.0).numpy(), a.T * np.float32(3.0))
        np.testing.assert_allclose(tg.exp(va[:, ::2]).numpy(),  # (exp: within an ulp)
                                   tg.build(*_exp_of(a[:, ::2]), target="numpy")(a[:, ::2]),
                                   rtol=2e-7)
    table = tg.placeholder((4, 3), "float32", "table")
    ids = tg.placeholder((2,), "int64", "ids")
    rows = tg.compute((2, 3), lambda i, j: table[ids[i], j], name="rows")
    f = tg.build([table, ids], rows, target="cpu")
    t = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_array_equal(f(t, np.array([3, 0])), t[[3, 0]])
    with pytest.raises(IndexError, match="got value 7"):
        f(t, np.array([1, 7]))
    np.testing.assert_array_equal(f(t, np.array([2, 1])), t[[2, 1]])  # the slots cleared


def test_a_kernel_of_more_arrays_than_the_extension_takes_is_called_through_ctypes():
    n = call_extension.MAX_ARRAYS + 2
    xs = [tg.placeholder((2,), "float32", f"x{k}") for k in range(n)]
    total = tg.compute((2,), lambda i: sum((x[i] for x in xs[1:]), xs[0][i]), name="total")
    f = tg.build(xs, total, target="cpu")
    arrays = [np.full(2, k, np.float32) for k in range(n)]
    np.testing.assert_array_equal(f(*arrays), np.full(2, sum(range(n)), np.float32))
    assert all(getattr(s, "run", None) is None for s in f.program.steps)


def test_layout_bytes():
    got = np.frombuffer(call_extension.layout(1, [(np.dtype("float32"), (16, 4)),
                                                  (np.dtype("int64"), ())]), np.dtype("long"))
    assert got.tolist() == [1, np.dtype("float32").num, 2, 16, 4, np.dtype("int64").num, 0]
