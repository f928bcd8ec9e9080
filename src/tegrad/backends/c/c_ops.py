"""What each scalar op means in C: the compiled counterpart of ``ir/numpy_ops.py``.

Every entry gives NumPy's result for the op's dtype (the reference backend is the spec):
``max``/``min`` propagate NaN like ``np.maximum``; integer ``floordiv``/``floormod`` round
toward minus infinity like Python and give 0 for a zero divisor like NumPy; ``round`` is
half-to-even (``nearbyint`` in the default rounding mode); ``sign`` keeps 0 and NaN.

The transcendental functions are declared ``omp declare simd`` so that gcc vectorizes
them with glibc's vector math library (libmvec) without ``-ffast-math``, which would
break NaN and infinity semantics. ``exp`` is the exception: it is inlined here
(``_EXP``), as libmvec's vector ``exp`` runs every lane through the scalar ``exp`` when one
lane's result under- or overflows, ten times slower, and a softmax of large logits has
such a lane in nearly every vector.
"""

from __future__ import annotations

import math
import re

CTYPE = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t",
         "bool": "uint8_t"}
# locals (values, accumulators) hold bools as int: one-byte lanes among 4-byte ones stop gcc
# vectorizing the loop (a max pool's gradient, a compare per element: 4.4 ms -> 0.96 ms in
# a one-off C timing); arrays keep one byte per bool
LOCAL_CTYPE = {**CTYPE, "bool": "int"}

_MATH = ("log", "log1p", "expm1", "tanh", "sin", "cos", "erf", "pow")

# ``tg_stream(dst, src, n)``: ``n`` bytes copied with non-temporal stores of whole vectors
# (past the caches, so that the line is not read first), the unaligned head and tail
# copied; then a store fence, so that the bytes are seen by the threads that read them
# after the loop. gcc's builtins, not <immintrin.h>, which adds 0.17 s to every compile.
_STREAM = r"""
#if defined(__AVX512F__)
#define TG_LINE 64
#define TG_NT(d, s) __builtin_ia32_movntdq512((tg_line *)(d), *(const tg_uline *)(s))
#elif defined(__AVX__)
#define TG_LINE 32
#define TG_NT(d, s) __builtin_ia32_movntdq256((tg_line *)(d), *(const tg_uline *)(s))
#elif defined(__SSE2__)
#define TG_LINE 16
#define TG_NT(d, s) __builtin_ia32_movntdq((tg_line *)(d), *(const tg_uline *)(s))
#endif
#ifdef TG_LINE
typedef long long tg_line __attribute__((vector_size(TG_LINE)));
typedef long long tg_uline __attribute__((vector_size(TG_LINE), aligned(1)));
#endif
static inline void tg_stream(char *dst, const char *src, long n) {
#ifdef TG_LINE
  long head = (long)((TG_LINE - ((uintptr_t)dst & (TG_LINE - 1))) & (TG_LINE - 1));
  if (head > n) head = n;
  memcpy(dst, src, head);
  dst += head; src += head; n -= head;
  for (; n >= TG_LINE; n -= TG_LINE, dst += TG_LINE, src += TG_LINE) TG_NT(dst, src);
  __builtin_ia32_sfence();
#endif
  memcpy(dst, src, n);
}"""

# ``tg_expf``, ``tg_exp``: exp(x) = 2^n exp(r) with n = round(x / ln 2) (the add-and-
# subtract of 1.5 * 2^23, or 2^52, rounds to an integer in the default rounding mode) and
# r = x - n ln 2, taken in two parts (ln 2's high part has trailing zero bits, so n times
# it is exact), |r| <= ln(2) / 2. exp(r) = 1 + r + r^2 q(r): for float, q of degree 4
# fitted for relative error (7e-9 on the interval, below float's half ulp of 6e-8); for
# double, Taylor's to degree 13 (remainder r^14 / 14! < 4e-18). 2^n is made from its
# exponent bits in two halves, 2^(n - n/2) 2^(n/2), so that a result below the smallest
# normal is rounded once, as a subnormal, rather than flushed. Past the end points the
# result is inf or 0; NaN returns itself. Exhaustively over every float: at most 1.04 ulp
# from exp's correctly rounded value (tests/test_cpu.py checks a sample of both dtypes
# against exp in higher precision, rounded once).
# Branch-free, so it vectorizes inside the caller's loop at libmvec's speed.
_EXP_TEMPLATE = r"""
static inline {t} tg_exp{f}({t} x) {{
  const {t} hi = {hi}, lo = {lo}, shift = {shift};
  {t} c = x > hi ? hi : x;
  c = c < lo ? lo : c;
  {t} t = c * {log2e} + shift, n = t - shift;
  {i} tb, sb; memcpy(&tb, &t, {size}); memcpy(&sb, &shift, {size});
  {i} k = tb - sb, k1 = k >> 1;
  {i} b1 = (k1 + {bias}) << {mantissa}, b2 = (k - k1 + {bias}) << {mantissa};
  {t} r = (c - n * {ln2_hi}) - n * {ln2_lo};
  {t} q = {q_top};
  {horner}
  {t} s1, s2; memcpy(&s1, &b1, {size}); memcpy(&s2, &b2, {size});
  {t} y = ((1.0{f} + (r + r * r * q)) * s1) * s2;
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0{f} : y;
  return x != x ? x : y;
}}"""


def _exp_function(t: str, f: str, i: str, size: int, bias: int, mantissa: int,
                  constants: dict, q: list[str]) -> str:
    """``tg_exp{f}`` for C type ``t`` (integer type ``i`` of ``size`` bytes, exponent
    ``bias``, ``mantissa`` bits), ``q``'s coefficients from the highest power down."""
    horner = " ".join(f"q = q * r + {c};" for c in q[1:])
    return _EXP_TEMPLATE.format(t=t, f=f, i=i, size=size, bias=bias, mantissa=mantissa,
                                q_top=q[0], horner=horner, **constants)


_EXP = "\n".join([
    _exp_function("float", "f", "int32_t", 4, 127, 23, dict(
        hi="0x1.62e42ep6f", lo="-0x1.9fe368p6f", shift="0x1.8p23f", log2e="0x1.715476p0f",
        ln2_hi="0x1.62e400p-1f", ln2_lo="0x1.7f7d1cp-20f"),
        ["0x1.6c7b32p-10f", "0x1.122538p-7f", "0x1.55558ap-5f", "0x1.5554b0p-3f", "0x1p-1f"]),
    _exp_function("double", "", "int64_t", 8, 1023, 52, dict(
        hi="0x1.62e42fefa39efp9", lo="-0x1.74910d52d3052p9", shift="0x1.8p52",
        log2e="0x1.71547652b82fep0", ln2_hi="0x1.62e42fefa3800p-1",
        ln2_lo="0x1.ef35793c76730p-45"),
        [f"1.0 / {math.factorial(k)}.0" for k in range(13, 1, -1)]),
])

PRELUDE = "\n".join([
    "#include <math.h>",
    "#include <omp.h>",
    "#include <stdint.h>",
    "#include <stdlib.h>",
    "#include <string.h>",
    *(f"#pragma omp declare simd notinbranch\nextern {t} {fn}{s}({t}"
      f"{', ' + t if fn == 'pow' else ''});"
      for fn in _MATH for t, s in (("float", "f"), ("double", ""))),
    "static inline long tg_fdiv(long a, long b) { if (b == 0) return 0; long q = a / b;"
    " return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }",
    "static inline long tg_fmod(long a, long b) { if (b == 0) return 0; long r = a % b;"
    " return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }",
    "static inline long tg_imax(long a, long b) { return a > b ? a : b; }",
    "static inline long tg_imin(long a, long b) { return a < b ? a : b; }",
    "static inline long tg_cdiv(long a, long b) { return -tg_fdiv(-a, b); }",
    "static inline long tg_ipow(long a, long b) { long r = 1; if (b < 0) return 0;"
    " while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r; }",
    _EXP,
    "static inline float tg_sigmoidf(float x) { float e = tg_expf(-fabsf(x)),"
    " r = 1.0f / (1.0f + e); return x >= 0 ? r : e * r; }",
    "static inline double tg_sigmoid(double x) { double e = tg_exp(-fabs(x)), r = 1.0 / (1.0 + e);"
    " return x >= 0 ? r : e * r; }",
    "static inline float tg_fmodf(float a, float b) { float m = fmodf(a, b);"
    " return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m; }",
    "static inline double tg_fmodd(double a, double b) { double m = fmod(a, b);"
    " return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m; }",
    _STREAM,
])


def literal(value, dtype: str) -> str:
    """A C literal of ``value`` rounded to ``dtype`` as NumPy would."""
    if dtype in ("float32", "float64"):
        v = float(value)
        cast = "(float)" if dtype == "float32" else "(double)"
        if math.isnan(v):
            return f"{cast}NAN"
        if math.isinf(v):
            return f"{cast}({'-' if v < 0 else ''}INFINITY)"
        return f"{cast}{v.hex()}"  # exact; the cast rounds to float32 like np.float32(v)
    if dtype == "bool":
        return "1" if value else "0"
    v = int(value)
    return f"((int64_t){v}LL)" if dtype == "int64" else f"((int32_t){v})"


_NOT_NAN_LITERAL = re.compile(r"\((float|double)\)(-?0x[0-9a-f.]+p[+-]\d+|\(-?INFINITY\))")


def _not_nan_literal(operand: str) -> bool:
    """Whether ``operand`` is a float ``literal`` other than NaN."""
    return _NOT_NAN_LITERAL.fullmatch(operand) is not None


def _float_suffix(dtype: str) -> str:
    return "f" if dtype == "float32" else ""


def unary(op: str, a: str, dtype: str) -> str:
    """C for ``op(a)`` with result (and operand) dtype ``dtype`` (``not``: bool)."""
    if op in ("stop_gradient",):
        return a
    if op == "not":
        return f"(!{a})"
    if op == "neg":
        return f"(-{a})"
    floating = dtype in ("float32", "float64")
    if not floating:
        if op == "abs":
            return f"({a} < 0 ? -{a} : {a})"
        if op == "sign":
            return f"(({a} > 0) - ({a} < 0))"
        if op in ("floor", "ceil", "round"):
            return a
        raise NotImplementedError(f"unary {op} on {dtype} in the C backend")
    f = _float_suffix(dtype)
    one = "1.0f" if f else "1.0"
    if op == "exp":
        return f"tg_exp{f}({a})"
    if op in ("log", "log1p", "expm1", "tanh", "sin", "cos", "erf", "sqrt", "floor",
              "ceil"):
        return f"{op}{f}({a})"
    if op == "rsqrt":
        return f"({one} / sqrt{f}({a}))"
    if op == "abs":
        return f"fabs{f}({a})"
    if op == "round":
        return f"nearbyint{f}({a})"
    if op == "sign":
        return f"({a} > 0 ? {one} : ({a} < 0 ? -{one} : {a}))"
    if op == "sigmoid":
        return f"tg_sigmoid{f}({a})"
    raise NotImplementedError(f"unary {op} in the C backend")


def binary(op: str, a: str, b: str, dtype: str, operand: str) -> str:
    """C for ``a op b``: ``dtype`` is the result's, ``operand`` the operands' common dtype."""
    floating = operand in ("float32", "float64")
    if op in ("add", "sub", "mul"):
        sym = {"add": "+", "sub": "-", "mul": "*"}[op]
        if operand == "bool" and op != "sub":
            return f"({a} {'|' if op == 'add' else '&'} {b})"
        return f"({a} {sym} {b})"
    if op == "div":
        if floating:
            return f"({a} / {b})"
        return f"(({CTYPE[dtype]})((double)({a}) / (double)({b})))"
    if op == "floordiv":
        if floating:
            return f"floor{_float_suffix(operand)}({a} / {b})"
        return f"tg_fdiv({a}, {b})"
    if op == "floormod":
        if floating:
            return f"tg_fmod{'f' if operand == 'float32' else 'd'}({a}, {b})"
        return f"tg_fmod({a}, {b})"
    if op == "pow":
        if floating:
            return f"pow{_float_suffix(operand)}({a}, {b})"
        return f"tg_ipow({a}, {b})"
    if op in ("max", "min"):
        cmp = ">" if op == "max" else "<"
        if floating:  # NaN wins, as in np.maximum
            # against a literal that is not NaN, one comparison: NaN fails ``<=`` as it
            # fails ``>``, so it stays. gcc vectorizes a chain of these (a clamp: relu6,
            # hardtanh), where the test for NaN's branches kept it scalar
            if _not_nan_literal(b):
                return f"(({a} {'<=' if op == 'max' else '>='} {b}) ? {b} : {a})"
            if _not_nan_literal(a):
                return f"(({a} {cmp} {b}) ? {a} : {b})"
            return f"(({a} != {a} || {a} {cmp} {b}) ? {a} : {b})"
        return f"(({a} {cmp} {b}) ? {a} : {b})"
    sym = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}.get(op)
    if sym is None:
        raise NotImplementedError(f"binary {op} in the C backend")
    return f"({a} {sym} {b})"


def power(a: str, b: str, exponent: object, dtype: str, operand: str) -> str:
    """``a ** b`` for a constant ``b`` (of value ``exponent``): a float cube or fourth power as
    products (``powf`` costs tens of cycles and no vector form, an Lp pool's ``x ** 3``
    at every tap; the products round within 2 ulp of it), any other as ``binary``."""
    if operand in ("float32", "float64") and exponent in (3, 4):
        return f"({a} * {a} * {a})" if exponent == 3 else f"(({a} * {a}) * ({a} * {a}))"
    return binary("pow", a, b, dtype, operand)


def cast(a: str, dtype: str) -> str:
    if dtype == "bool":
        return f"({a} != 0)"
    return f"(({CTYPE[dtype]})({a}))"
