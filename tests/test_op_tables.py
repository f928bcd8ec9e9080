"""Every scalar op (``ir.expr.Op``) is in every table a new op must enter: its NumPy
meaning (``ir/numpy_ops.py``, the reference), its C rendering (``backends/c/c_ops.py``),
its derivative (``autodiff/partials.py``: a rule, or declared piecewise constant) and its
printing (``ir/printer.py``). A missing entry fails here, naming the op and the table."""

from __future__ import annotations

import pytest

import tegrad as tg
from tegrad.autodiff.partials import PIECEWISE_CONSTANT, RULES
from tegrad.backends.c import c_ops
from tegrad.ir.expr import UNARY_OPS, Binary, Op, Unary, binary, unary
from tegrad.ir.numpy_ops import BINARY, UNARY
from tegrad.ir.printer import format_expr

DTYPES = ("float32", "float64", "int32", "int64", "bool")


def nodes(op: Op) -> list[Unary | Binary]:
    """``op`` built over reads of every dtype its constructor accepts (the constructor's
    dtype rules decide, not this test); only the nodes that stay ``op`` (an integer
    ``floor`` is its operand)."""
    out = []
    for dtype in DTYPES:
        a = tg.placeholder((), dtype, name="a")[()]
        b = tg.placeholder((), dtype, name="b")[()]
        try:
            e = unary(op, a) if op in UNARY_OPS else binary(op, a, b)
        except TypeError:  # (a dtype this op refuses)
            continue
        if isinstance(e, Unary | Binary) and e.op is op:
            out.append(e)
    return out


@pytest.mark.parametrize("op", list(Op), ids=str)
def test_every_op_is_in_every_table(op):
    built = nodes(op)
    assert built, f"{op}: no dtype builds it"
    table, name = (UNARY, "UNARY") if op in UNARY_OPS else (BINARY, "BINARY")
    assert op in table, f"{op} has no NumPy meaning in ir/numpy_ops.{name}"
    assert (op in RULES) != (op in PIECEWISE_CONSTANT), (
        f"{op} needs exactly one of a derivative rule (autodiff/partials.RULES) or a place "
        "in PIECEWISE_CONSTANT")
    for e in built:
        if isinstance(e, Unary):
            c_ops.unary(op, "a", e.dtype)
        else:
            c_ops.binary(op, "a", "b", e.dtype, e.a.dtype)
        assert format_expr(e), f"{op} prints as nothing"


def test_a_name_given_as_a_string_becomes_its_op():
    x = tg.placeholder((3,), name="x")[0]
    assert Unary("neg", x, x.dtype).op is Op.NEG
    assert (x + 1).op is Op.ADD and (x + 1).op == "add"
