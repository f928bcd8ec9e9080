"""The helper functions generated kernels call, in core ``tl`` operations only.

Triton's interpreter has no libdevice, so every function a kernel needs beyond core ``tl``
is written here in core operations: CI then runs the very code the GPU runs. Each is the
NumPy reference's meaning of an IR op:

  floordiv, floormod     integer ``//`` and ``%`` round toward minus infinity; Triton's
                         truncate: q = trunc(a / b), r = a - q b; where r != 0 and the
                         signs of r and b differ, q - 1 and r + b
  maximum, minimum       NaN-propagating (``np.maximum``): a where a > b or a is NaN
  log1p                  log(u) x / (u - 1) with u = 1 + x (exact where u rounds to 1: x)
  expm1                  (u - 1) x / log(u) with u = exp(x) (Kahan); x where u rounds to 1
  tanh                   expm1(2|x|) / (expm1(2|x|) + 2), signed; |x| capped at 20, past
                         which tanh is 1 in float64
  round_even             np.round: floor(x + 1/2), less one where x was halfway and that
                         result is odd
  sign                   +1, -1, or x itself (0, -0, NaN)
  power                  exp2(b log2 |a|), negative where a < 0 and b an odd integer, NaN
                         where a < 0 and b not an integer; 1 where b = 0 or a = 1

``TEXT`` is the module text every generated kernel file starts with, so Triton's cache
key (the source of the kernel and of the functions it calls) covers it.
"""

TEXT = '''import triton
import triton.language as tl

INF = tl.constexpr(float("inf"))
NAN = tl.constexpr(float("nan"))


@triton.jit
def floordiv(a, b):
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@triton.jit
def floormod(a, b):
    r = a - (a // b) * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def log1p(x):
    u = 1.0 + x
    v = tl.log(u) * (x / (u - 1.0))
    return tl.where(u == 1.0, x, tl.where(u == INF, u, v))


@triton.jit
def expm1(x):
    u = tl.exp(x)
    v = (u - 1.0) * (x / tl.log(u))
    v = tl.where(u - 1.0 == -1.0, u - 1.0, v)
    return tl.where(u == 1.0, x, tl.where(u == INF, u, v))


@triton.jit
def tanh(x):
    a = tl.abs(x)
    a = tl.where(a > 20.0, 20.0, a)
    t = expm1(2.0 * a)
    y = t / (t + 2.0)
    return tl.where(x < 0, -y, y)


@triton.jit
def round_even(x):
    f = tl.floor(x + 0.5)
    halfway = (f - x) == 0.5
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0
    return tl.where(halfway & odd, f - 1.0, f)


@triton.jit
def sign(x):
    return tl.where(x > 0, 1, tl.where(x < 0, -1, x)).to(x.dtype)


@triton.jit
def power(a, b):
    m = tl.exp2(b * tl.log2(tl.abs(a)))
    whole = tl.floor(b) == b
    odd = whole & ((b - 2.0 * tl.floor(b * 0.5)) != 0)
    m = tl.where((a < 0) & odd, -m, m)
    m = tl.where((a < 0) & (whole == 0), NAN, m)
    return tl.where((b == 0) | (a == 1.0), 1.0, m).to(m.dtype)
'''
