"""tegrad: backward operators generated from tensor expressions, in gather form.

    import tegrad as tg
    A = tg.placeholder((4, 5), name="A")
    B = tg.placeholder((5, 3), name="B")
    k = tg.reduce_axis(5, name="k")
    C = tg.compute((4, 3), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    dA, dB = tg.gradient(C, [A, B], head=tg.placeholder(C.shape, name="dC"))
"""

from . import models, nn, optim
from .backends import build, build_vjp, evaluate
from .check import GradCheckReport, check_gradient, check_vjp
from .differentiate import gradient
from .differentiate import jvp as _tensor_jvp
from .eager import Variable, wrap_namespace
from .eager import eager_aware as eager_aware  # (tg.eager_aware: wraps a tensor function)
from .eager.functional import grad, jit, value_and_grad
from .eager.tape import GradientTape
from .errors import CacheWarning, GradientCheckError, IRError, NotDifferentiableError
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
from .ir.compute import compute
from .ir.expr import Expr, Var
from .ir.scan import scan
from .ir.tensor import Compute, Placeholder, Tensor, placeholder
from .lower.cost import count_ops
from .options import Machine, Options
from .simplify import simplify

__version__ = "0.1.0"

# every tg.nn function and the math intrinsics also run eagerly on tg.Variable arguments
# (one compiled template each): wrapped here, above both nn and eager
wrap_namespace(vars(nn), nn.__all__)
wrap_namespace(globals(), (
    "abs", "ceil", "cos", "erf", "exp", "expm1", "floor", "log", "log1p", "maximum", "minimum",
    "power", "round", "rsqrt", "sigmoid", "sign", "sin", "sqrt", "tanh"))


def jvp(output, inputs, tangents):
    """Forward mode. On tensors (API section 2): the derivative of ``output`` along
    ``tangents`` as a tensor. On a Python function (JAX style): ``jvp(fn, primals,
    tangents)`` returns ``(fn(*primals), derivative)`` as Variables."""
    if callable(output) and not isinstance(output, Tensor):
        from .eager.functional import jvp as function_jvp
        return function_jvp(output, inputs, tangents)
    return _tensor_jvp(output, inputs, tangents)


def __getattr__(name: str):
    """The framework bridges load on first use (PEP 562): ``import tegrad`` imports none
    of PyTorch, JAX or TVM."""
    bridges = {"to_torch": "torch_bridge", "to_jax": "jax_bridge", "to_tvm": "tvm_bridge",
               "from_tvm": "tvm_bridge"}
    if name in bridges:
        import importlib
        return getattr(importlib.import_module(f".interop.{bridges[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "CacheWarning",
    "Compute",
    "GradientTape",
    "Variable",
    "Expr",
    "GradCheckReport",
    "GradientCheckError",
    "IRError",
    "Machine",
    "NotDifferentiableError",
    "Options",
    "Placeholder",
    "Tensor",
    "Var",
    "abs",
    "all",
    "any",
    "argmax",
    "argmin",
    "build",
    "build_vjp",
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
    "grad",
    "gradient",
    "if_then_else",
    "jit",
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
    "optim",
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
    "to_jax",
    "to_torch",
    "from_tvm",
    "to_tvm",
    "value_and_grad",
]
