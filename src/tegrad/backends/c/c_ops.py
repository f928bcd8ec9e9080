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
# from exp's correctly rounded value (tests/test_cpu.py checks a sample against NumPy).
# Branch-free, so it vectorizes inside the caller's loop at libmvec's speed.
_EXP = r"""
static inline float tg_expf(float x) {
  const float hi = 0x1.62e42ep6f, lo = -0x1.9fe368p6f, shift = 0x1.8p23f;
  float c = x > hi ? hi : x;
  c = c < lo ? lo : c;
  float t = c * 0x1.715476p0f + shift, n = t - shift;
  int32_t tb, sb; memcpy(&tb, &t, 4); memcpy(&sb, &shift, 4);
  int32_t k = tb - sb, k1 = k >> 1, b1 = (k1 + 127) << 23, b2 = (k - k1 + 127) << 23;
  float r = (c - n * 0x1.62e400p-1f) - n * 0x1.7f7d1cp-20f;
  float q = ((((0x1.6c7b32p-10f * r + 0x1.122538p-7f) * r + 0x1.55558ap-5f) * r
              + 0x1.5554b0p-3f) * r + 0x1p-1f);
  float s1, s2; memcpy(&s1, &b1, 4); memcpy(&s2, &b2, 4);
  float y = ((1.0f + (r + r * r * q)) * s1) * s2;
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}
static inline double tg_exp(double x) {
  const double hi = 0x1.62e42fefa39efp9, lo = -0x1.74910d52d3052p9, shift = 0x1.8p52;
  double c = x > hi ? hi : x;
  c = c < lo ? lo : c;
  double t = c * 0x1.71547652b82fep0 + shift, n = t - shift;
  int64_t tb, sb; memcpy(&tb, &t, 8); memcpy(&sb, &shift, 8);
  int64_t k = tb - sb, k1 = k >> 1, b1 = (k1 + 1023) << 52, b2 = (k - k1 + 1023) << 52;
  double r = (c - n * 0x1.62e42fefa3800p-1) - n * 0x1.ef35793c76730p-45;
  double q = 1.0 / 6227020800.0;
  q = q * r + 1.0 / 479001600.0; q = q * r + 1.0 / 39916800.0; q = q * r + 1.0 / 3628800.0;
  q = q * r + 1.0 / 362880.0; q = q * r + 1.0 / 40320.0; q = q * r + 1.0 / 5040.0;
  q = q * r + 1.0 / 720.0; q = q * r + 1.0 / 120.0; q = q * r + 1.0 / 24.0;
  q = q * r + 1.0 / 6.0; q = q * r + 0.5;
  double s1, s2; memcpy(&s1, &b1, 8); memcpy(&s2, &b2, 8);
  double y = ((1.0 + (r + r * r * q)) * s1) * s2;
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0 : y;
  return x != x ? x : y;
}"""

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
            return f"(({a} != {a} || {a} {cmp} {b}) ? {a} : {b})"
        return f"(({a} {cmp} {b}) ? {a} : {b})"
    sym = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}.get(op)
    if sym is None:
        raise NotImplementedError(f"binary {op} in the C backend")
    return f"({a} {sym} {b})"


def cast(a: str, dtype: str) -> str:
    if dtype == "bool":
        return f"({a} != 0)"
    return f"(({CTYPE[dtype]})({a}))"
