"""The Triton spelling of each IR op (the counterpart of ``backends/c/c_ops.py``).

Each rule renders an op whose operands are already names of values of the op's dtype
(``codegen.py`` casts them first). Semantics are the NumPy reference's
(``ir/numpy_ops.py``); where Triton's own operator means something else, the rule calls a
helper of ``tl_math.py``:

  integer // and %     floor rounding (Triton truncates): ``floordiv``/``floormod``, or the
                       plain operator where both operands are known non-negative
  max, min of floats   NaN-propagating ``maximum``/``minimum`` (``tl.maximum`` drops NaN on
                       the GPU)
  not                  ``c == 0`` on a condition
"""

from __future__ import annotations

# unary: op -> template of its operand ``{a}``; float-valued ops take a float operand
UNARY = {
    "exp": "tl.exp({a})",
    "log": "tl.log({a})",
    "log1p": "log1p({a})",
    "expm1": "expm1({a})",
    "sqrt": "tl.sqrt_rn({a})",  # IEEE-rounded (tl.sqrt of a float32 is approximate)
    "rsqrt": "(1.0 / tl.sqrt_rn({a}))",
    "tanh": "tanh({a})",
    "sigmoid": "tl.sigmoid({a})",
    "sin": "tl.sin({a})",
    "cos": "tl.cos({a})",
    "erf": "tl.erf({a})",
    "neg": "(-{a})",
    "abs": "tl.abs({a})",
    "sign": "sign({a})",
    "floor": "tl.floor({a})",
    "ceil": "tl.ceil({a})",
    "round": "round_even({a})",
    "not": "({a} == 0)",
    "stop_gradient": "{a}",
}
FLOAT_VALUED = frozenset(("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sigmoid",
                          "sin", "cos", "erf"))
INTEGRAL_IDENTITY = frozenset(("floor", "ceil", "round"))  # of an integer: itself

# binary: op -> template of ``{a}``, ``{b}``
BINARY = {
    "add": "({a} + {b})",
    "sub": "({a} - {b})",
    "mul": "({a} * {b})",
    "div": "({a} / {b})",
    "pow": "power({a}, {b})",
    "lt": "({a} < {b})",
    "le": "({a} <= {b})",
    "eq": "({a} == {b})",
    "ne": "({a} != {b})",
    "and": "({a} & {b})",
    "or": "({a} | {b})",
}
COMPARISONS = frozenset(("lt", "le", "eq", "ne"))
LOGIC = frozenset(("and", "or"))

# ops whose spelling depends on the operands' dtype: (integer form, float form); // and %
# take integers only (the IR refuses floats)
BY_KIND = {
    "floordiv": ("floordiv({a}, {b})", None),
    "floormod": ("floormod({a}, {b})", None),
    "max": ("tl.maximum({a}, {b})", "maximum({a}, {b})"),
    "min": ("tl.minimum({a}, {b})", "minimum({a}, {b})"),
}
PLAIN_WHEN_NON_NEGATIVE = {"floordiv": "({a} // {b})", "floormod": "({a} % {b})"}

# small constant exponents as products: x ** k (NumPy's power is exact for these)
POWERS = {
    0.0: None,  # 1
    1.0: "{a}",
    2.0: "({a} * {a})",
    3.0: "({a} * {a} * {a})",
    4.0: "(({a} * {a}) * ({a} * {a}))",
    -1.0: "(1.0 / {a})",
    -2.0: "(1.0 / ({a} * {a}))",
    0.5: "tl.sqrt_rn({a})",
}



def in_dtype(form: str, dtype: str) -> str:
    """``form`` for operands of ``dtype``: ``tl.sqrt_rn`` takes float32 only, and a
    float64 ``tl.sqrt`` is IEEE-rounded already."""
    return form.replace("tl.sqrt_rn(", "tl.sqrt(") if dtype == "float64" else form


TL_DTYPE = {"float32": "tl.float32", "float64": "tl.float64", "int32": "tl.int32",
            "int64": "tl.int64", "bool": "tl.int1"}
SIGNATURE_DTYPE = {"float32": "fp32", "float64": "fp64", "int32": "i32", "int64": "i64",
                   "bool": "i1"}
