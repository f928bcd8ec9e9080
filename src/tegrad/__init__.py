"""tegrad: backward operators generated from tensor expressions, in gather form.

    import tegrad as tg
    A = tg.placeholder((4, 5), name="A")
    B = tg.placeholder((5, 3), name="B")
    k = tg.reduce_axis(5, name="k")
    C = tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    dA, dB = tg.gradient(C, [A, B], head=tg.placeholder(C.shape, name="dC"))
"""

from . import models, nn
from .backends import build, evaluate
from .check import GradCheckReport, check_gradient, check_vjp
from .differentiate import gradient, jvp
from .errors import GradientCheckError, IRError, NotDifferentiableError
from .frontend.math import (
    abs,
    all,
    any,
    cast,
    ceil,
    const,
    cos,
    equal,
    erf,
    exp,
    expm1,
    floor,
    if_then_else,
    log,
    log1p,
    logical_not,
    maximum,
    minimum,
    not_equal,
    power,
    round,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    stop_gradient,
    tanh,
)
from .frontend.reduce import (
    argmax,
    argmin,
    comm_reducer,
    max,
    min,
    prod,
    reduce_axis,
    sum,
)
from .ir.expr import Expr, Var
from .ir.scan import scan
from .ir.tensor import Compute, Placeholder, Tensor, compute, placeholder
from .lower.cost import count_ops
from .simplify import simplify

__version__ = "0.1.0"

__all__ = [
    "Compute",
    "Expr",
    "GradCheckReport",
    "GradientCheckError",
    "IRError",
    "NotDifferentiableError",
    "Placeholder",
    "Tensor",
    "Var",
    "abs",
    "all",
    "any",
    "argmax",
    "argmin",
    "build",
    "cast",
    "ceil",
    "check_gradient",
    "check_vjp",
    "comm_reducer",
    "compute",
    "const",
    "cos",
    "count_ops",
    "equal",
    "erf",
    "evaluate",
    "exp",
    "expm1",
    "floor",
    "gradient",
    "if_then_else",
    "jvp",
    "log",
    "log1p",
    "logical_not",
    "max",
    "maximum",
    "min",
    "minimum",
    "models",
    "nn",
    "not_equal",
    "placeholder",
    "power",
    "prod",
    "reduce_axis",
    "round",
    "scan",
    "rsqrt",
    "sigmoid",
    "sign",
    "simplify",
    "sin",
    "sqrt",
    "stop_gradient",
    "sum",
    "tanh",
]
