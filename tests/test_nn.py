"""Every ``tg.nn`` case of the op-spec table against PyTorch in float64.

The table lives in the package (``tegrad.coverage.table``) because the coverage report
(``tegrad report``) runs the same cases; these tests are its assertions: forward values,
every gradient (with a random head), gather form where the index maps invert, and the
gradient checker on the first case of every op (the report runs it on all).
"""

from __future__ import annotations

import pytest

import tegrad as tg
from tegrad.check import FAIL
from tegrad.coverage import CASES
from tegrad.coverage.agreement import agree
from tegrad.coverage.run import gradcheck
from tegrad.coverage.structure import structure

params = pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])


def test_every_nn_op_has_a_case():
    ops = {case.op for case in CASES}
    assert set(tg.nn.__all__) <= ops, (
        f"tg.nn functions without a case in tegrad.coverage.table: "
        f"{sorted(set(tg.nn.__all__) - ops)}")


@params
def test_forward_and_gradients_match_torch(case):
    result = agree(case)
    assert result.ok, f"{case.name}: {result.describe()}"


@params
def test_gather_form(case):
    if case.gather_form is None:
        pytest.skip("data-dependent or clamped index maps: a scatter is expected")
    found = structure(case)
    if not found.grads:
        pytest.skip("no differentiable input")
    if case.gather_form:
        assert not found.scatters, f"{case.name}: {found.describe()}"
        assert not found.oversized, f"{case.name}: {found.describe()}"


FIRST_OF_EACH_OP = list({c.op: c for c in reversed(CASES)}.values())


@pytest.mark.parametrize("case", FIRST_OF_EACH_OP, ids=[c.name for c in FIRST_OF_EACH_OP])
def test_gradient_checker_passes(case):
    verdict = gradcheck(case)
    assert verdict != FAIL, f"{case.name}: tg.check_gradient says {verdict}"


# bins that do not divide their axis: the separable bin-matrix form (pooling._separable_avg),
# every mix of divided, undivided, larger-than-input and unchanged axes
ADAPTIVE_AVG = [
    ("adaptive_avg_pool1d", (2, 3, 3), 5),  # more bins than points: they overlap
    ("adaptive_avg_pool1d", (3, 13), 4),  # no batch dim
    ("adaptive_avg_pool2d", (2, 3, 8, 5), (4, 3)),  # one axis divided, one not
    ("adaptive_avg_pool2d", (1, 2, 9, 7), (9, 2)),  # one axis unchanged
    ("adaptive_avg_pool2d", (2, 1, 5, 6), (7, 1)),
    ("adaptive_avg_pool3d", (1, 2, 4, 6, 5), (3, 4, 5)),
]


@pytest.mark.parametrize("op, shape, size", ADAPTIVE_AVG,
                         ids=[f"{op}{shape}->{size}" for op, shape, size in ADAPTIVE_AVG])
def test_adaptive_avg_pool_uneven_bins_match_torch_float64(op, shape, size):
    import numpy as np
    import torch

    rng = np.random.default_rng(4)
    x = tg.placeholder(shape, "float64", name="x")
    y = getattr(tg.nn, op)(x, size)
    head = tg.placeholder(y.shape, "float64", name="head")
    (dx,) = tg.gradient(y, [x], head)
    xs, hs = rng.standard_normal(shape), rng.standard_normal(y.shape)
    tx = torch.from_numpy(xs).requires_grad_()
    ty = getattr(torch.nn.functional, op)(tx, size)
    (tdx,) = torch.autograd.grad(ty, [tx], torch.from_numpy(hs))
    for target in ("cpu", "numpy"):
        got_y, got_dx = tg.build([x, head], [y, dx], target=target)(xs, hs)
        np.testing.assert_allclose(got_y, ty.detach().numpy(), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(got_dx, tdx.numpy(), rtol=1e-12, atol=1e-13)
