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
