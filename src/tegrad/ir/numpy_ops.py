"""What each scalar op means, as the NumPy function that computes it.

The one table behind every evaluation of an op: the reference executor, constant folding
in the simplifier, and the enumeration of index domains in the verifier.
"""

from __future__ import annotations

import numpy as np


def _sigmoid(x):
    try:  # scipy's expit: one pass in C, accurate at both tails
        from scipy.special import expit
    except ImportError:  # pragma: no cover - scipy ships with the test extra
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)
    return expit(x)


def _erf(x):
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy ships with the test extra
        import math as m

        return np.vectorize(m.erf, otypes=[x.dtype])(x)
    return erf(x)


UNARY = {
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "sin": np.sin,
    "cos": np.cos,
    "erf": _erf,
    "neg": np.negative,
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "not": np.logical_not,
    "stop_gradient": lambda x: x,
}
BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "floordiv": np.floor_divide,
    "floormod": np.mod,
    "pow": np.power,
    "max": np.maximum,
    "min": np.minimum,
    "lt": np.less,
    "le": np.less_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}
