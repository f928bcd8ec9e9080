"""Matrix products on the compiled target's threads: BLAS called from OpenMP.

NumPy's OpenBLAS runs its own worker threads, which spin for about 0.1 s after every
call; tegrad's kernels run on OpenMP's. On a machine with as many threads as cores the
two pools fight for the cores whenever one hands over to the other, and each hand-over
costs a scheduler time slice, many times a small kernel's run. So the compiled target
keeps one pool: each product is
split into ``threads`` blocks of rows (or of columns, whichever dimension is longer,
unless the call says otherwise: ``GemmCall.by_rows``; or batches, each product cut in
``threads / gcd(batch, threads)`` blocks so that the threads' shares are equal: a weight
gradient's 3 kernel rows on 2 threads are 6 halves, not 2 products on one thread and 1
on the other) that OpenMP
threads hand to single-threaded ``cblas_?gemm`` calls (``tg_gemm`` below); on OpenBLAS,
it is set to one thread while a program runs.

A product may be a sum of ``terms`` products over operands at fixed offsets from the
first term's (a looped reduction, ``host/products._gemm``: a convolution's nine shifted
views of its padded input): each thread makes every term's call on its block, the first
with ``beta = 0`` and the rest adding into it, so a block's output stays in its cache.
In float32 on a processor with AVX-512, such a sum or a single product, each thread's
block at least ``term_kernel.MIN_COLS`` columns wide and ``term_kernel.TILE_ROWS`` rows
high, with ``B``'s rows contiguous (or ``B`` stored transposed, the block's terms copied
to rows, for blocks ``term_kernel.ROWS_MIN_M`` rows high), is one register-blocked kernel
instead; a deep product with ``B`` stored transposed and ``A`` row-major is dot products
of rows read where they lie (``tg_dots``). ``term_kernel.py`` has both.

The BLAS is Intel's MKL where the ``mkl`` package is installed (``pip install
tegrad[mkl]``; its ``libmkl_rt`` set to the sequential threading layer, so that it runs on
the calling OpenMP thread), else NumPy's own (found among the loaded libraries:
``scipy_cblas_sgemm64_`` in NumPy's wheels, or a plain ``cblas_sgemm``).
``TEGRAD_BLAS=openblas`` (``Options.blas``) skips MKL. Most float32 products are
``term_kernel``'s where it is compiled; ``benchmarks/bench_blas.py`` measures all three.
Where no BLAS is found, or an operand's layout is not one BLAS takes, ``matmul`` is
``np.matmul``.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
from contextlib import contextmanager
from functools import cache, cached_property
from typing import NamedTuple

import numpy as np

from ...options import Options
from ..host.ops import product_sum, terms
from . import term_kernel

_HELPER = r"""
#include <stdint.h>
#ifdef TG_TERMS
int tg_direct_terms = 1;
#else
int tg_direct_terms = 0;
#endif
long tg_term_blocks = 0;  /* blocks given to the kernel so far: tests read it */
typedef BLASINT bi;
typedef void (*sgemm_t)(int, int, int, bi, bi, bi, float, const float *, bi,
                        const float *, bi, float, float *, bi);
typedef void (*dgemm_t)(int, int, int, bi, bi, bi, double, const double *, bi,
                        const double *, bi, double, double *, bi);

/* B stored transposed (element (k, j) at src[j ld + k]) copied to rows, K x N, in 16 x 16
   tiles written a row at a time (vector stores; the transposed order, a column of dst at
   a time, wrote 16 lines 4 KiB apart, which share a set of the L1 cache: 430 us against 55
   for the LSTM's 256 x 1024, one-off C harness); rows [k0, k1) */
static void tg_rows_part(float *dst, const float *src, long k0, long k1, long N, long ld) {
  for (; k0 < k1; k0 += 16)
    for (long j0 = 0; j0 < N; j0 += 16) {
      long k2 = k0 + 16 < k1 ? k0 + 16 : k1, j1 = j0 + 16 < N ? j0 + 16 : N;
      for (long k = k0; k < k2; k++)
        #pragma omp simd
        for (long j = j0; j < j1; j++)
          dst[k * N + j] = src[j * ld + k];
    }
}

void tg_rows(float *dst, const float *src, long K, long N, long ld, int nthreads) {
  #pragma omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1)
  for (long k0 = 0; k0 < K; k0 += 16)
    tg_rows_part(dst, src, k0, k0 + 16 < K ? k0 + 16 : K, N, ld);
}

#ifdef TG_TERMS
/* C (+)= sum_t A_t B_t with every B_t stored transposed (x W^T: a linear layer's weight;
   dY X_t^T: a convolution's weight gradient, a term per image): each term's block copied
   to rows, [t][k][j], for term_kernel's kernel. The copy is K N elements a term against
   the kernel's M N K multiply-adds, so it pays for high blocks: from TG_ROWS_MIN_M rows
   on (term_kernel's header). 0 where the buffers cannot be had. */
static int tg_terms_transposed(long m, long n, long K, const float *a, long lda, int ta,
                               const float *b, long ldb, float *c, long ldc,
                               const long *terms, long nterms, int acc) {
  float *rows = aligned_alloc(64, (size_t)(nterms * K * n * 4 + 63) / 64 * 64);
  long *moved = malloc(2 * nterms * sizeof(long));
  int done = 0;
  if (rows && moved) {
    for (long t = 0; t < nterms; t++) {
      tg_rows_part(rows + t * K * n, b + terms[2 * t + 1], 0, K, n, ldb);
      moved[2 * t] = terms[2 * t], moved[2 * t + 1] = t * K * n;
    }
    done = tg_terms_f32(m, n, K, a, lda, ta, rows, n, c, ldc, moved, nterms, acc);
  }
  free(rows);
  free(moved);
  return done;
}
#endif

void tg_gemm(void *fn, int dbl, long batch, long M, long N, long K,
             const char *A, long sa, long lda, int ta, const char *B, long sb, long ldb, int tb,
             char *C, long sc, long ldc, const long *terms, long nterms, int acc,
             int by_rows, int nthreads) {
  long size = dbl ? 8 : 4;
  /* each product split into chunks, so that every thread gets as many items: nthreads /
     gcd(batch, nthreads) (3 products on 2 threads: 6 halves, not 2 products and 1) */
  long g = nthreads, r = batch;
  while (r) { long t = g % r; g = r; r = t; }
  long chunks = nthreads / g;
  long extent = by_rows ? M : N;
  if (chunks > extent) chunks = extent;
  if (chunks < 1) chunks = 1;
  long items = batch * chunks;
  int threads = (double)M * N * K * nterms >= MIN_PARALLEL_MACS ? nthreads : 1;
#ifdef TG_TERMS
  /* A shared by every product of a batch (a convolution's weights: sa == 0): packed once
     for them all, and then worth it for a batch of narrow products; split by rows, each
     block of rows must start a block of the pack */
  const float *shared = 0;
  int aligned = 1;
  for (long c = 0; by_rows && c < chunks; c++) aligned &= M * c / chunks % TG_MR == 0;
  if (!dbl && sa == 0 && aligned && batch > 1 && !tb && M >= TG_MR
      && N * batch >= TG_MIN_COLS)
    shared = tg_terms_pack(M, K, (const float *)A, lda, ta, terms, nterms);
#endif
  #pragma omp parallel for schedule(static) num_threads(threads) if(threads > 1)
  for (long w = 0; w < items; w++) {
    long b = w / chunks, c = w % chunks;
    long lo = extent * c / chunks, hi = extent * (c + 1) / chunks;
    const char *a = A + b * sa * size, *bb = B + b * sb * size;
    char *cc = C + b * sc * size;
    long m = M, n = N;
    if (by_rows) { a += (ta ? lo : lo * lda) * size; cc += lo * ldc * size; m = hi - lo; }
    else { bb += (tb ? lo * ldb : lo) * size; cc += lo * size; n = hi - lo; }
    if (m <= 0 || n <= 0) continue;
#ifdef TG_TERMS
    if (shared) {
      const float *ap = shared + (by_rows ? lo / TG_MR * K * nterms * TG_MR : 0);
      tg_terms_packed(m, n, K, ap, (const float *)bb, ldb, (float *)cc, ldc, terms, nterms,
                      acc);
      #pragma omp atomic
      tg_term_blocks++;
      continue;
    }
    if (!dbl && tb && !ta && (K * nterms >= TG_DOTS_DEPTH
                              || (m < TG_ROWS_MIN_M && K * nterms >= TG_DOTS_SHORT_DEPTH))) {
      tg_dots(m, n, K, (const float *)a, lda, (const float *)bb, ldb, (float *)cc, ldc, terms,
              nterms, acc);
      #pragma omp atomic
      tg_term_blocks++;
      continue;
    }
    if (!dbl && m >= TG_MR && n >= TG_MIN_COLS
        && (tb ? m >= TG_ROWS_MIN_M && nterms * K * n * 4 <= TG_ROWS_MAX_BYTES
                 && tg_terms_transposed(m, n, K, (const float *)a, lda, ta,
                                        (const float *)bb, ldb, (float *)cc, ldc, terms,
                                        nterms, acc)
               : tg_terms_f32(m, n, K, (const float *)a, lda, ta, (const float *)bb, ldb,
                              (float *)cc, ldc, terms, nterms, acc))) {
      #pragma omp atomic
      tg_term_blocks++;
      continue;
    }
#endif
    for (long t = 0; t < nterms; t++) {  /* term t: operands moved by terms[2t], terms[2t+1] */
      const char *at = a + terms[2 * t] * size, *bt = bb + terms[2 * t + 1] * size;
      if (dbl)
        ((dgemm_t)fn)(101, ta ? 112 : 111, tb ? 112 : 111, m, n, K, 1.0, (const double *)at,
                      lda, (const double *)bt, ldb, t || acc ? 1.0 : 0.0, (double *)cc, ldc);
      else
        ((sgemm_t)fn)(101, ta ? 112 : 111, tb ? 112 : 111, m, n, K, 1.0f, (const float *)at,
                      lda, (const float *)bt, ldb, t || acc ? 1.0f : 0.0f, (float *)cc, ldc);
    }
  }
#ifdef TG_TERMS
  free((void *)shared);
#endif
}
"""
MIN_PARALLEL_MACS = 1 << 20  # smaller products run on the calling thread

_NAMES = (  # (sgemm, dgemm, set threads, get threads, 64-bit integers)
    ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", "scipy_openblas_set_num_threads64_",
     "scipy_openblas_get_num_threads64_", True),
    ("cblas_sgemm64_", "cblas_dgemm64_", "openblas_set_num_threads64_",
     "openblas_get_num_threads64_", True),
    ("cblas_sgemm", "cblas_dgemm", "openblas_set_num_threads", "openblas_get_num_threads",
     False),
)


MKL_THREADING_SEQUENTIAL = 1  # mkl_service.h
INT32_MAX = 2**31 - 1  # MKL's LP64 interface takes 32-bit dimensions and strides


class Blas:
    """The BLAS that products call: ``sgemm``/``dgemm`` addresses, its integer width, and
    ``helper`` (``tg_gemm`` compiled for it). ``mkl=False`` looks only at NumPy's."""

    def __init__(self, mkl: bool = True, direct_terms: bool | None = None):
        # shallow and looped float32 products on term_kernel's kernel (None: where it is
        # faster than the BLAS, term_kernel.wanted_here)
        self.direct_terms = term_kernel.wanted_here() if direct_terms is None else direct_terms
        self.found = False
        self.name = "none"
        if mkl and self._find_mkl():
            return
        for path in _loaded_blas_paths():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for s, d, set_n, get_n, wide in _NAMES:
                if hasattr(lib, s) and hasattr(lib, d):
                    self.sgemm = ctypes.cast(getattr(lib, s), ctypes.c_void_p).value
                    self.dgemm = ctypes.cast(getattr(lib, d), ctypes.c_void_p).value
                    self.set_threads = getattr(lib, set_n, None)
                    self.get_threads = getattr(lib, get_n, None)
                    self.wide = wide
                    self.found = True
                    self.name = "openblas" if "openblas" in path.lower() else path
                    return

    def _find_mkl(self) -> bool:
        path = _mkl_path()
        if path is None:
            return False
        try:
            lib = ctypes.CDLL(path)
            lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
            lib.MKL_Set_Threading_Layer(MKL_THREADING_SEQUENTIAL)
            self.sgemm = ctypes.cast(lib.cblas_sgemm, ctypes.c_void_p).value
            self.dgemm = ctypes.cast(lib.cblas_dgemm, ctypes.c_void_p).value
        except (OSError, AttributeError):
            return False
        self.set_threads = self.get_threads = None  # sequential: nothing to hand over
        self.wide = False
        self.found = True
        self.name = "mkl"
        self.path = path
        return True

    @cached_property
    def _library(self):
        """The helper's library (``tg_gemm``, and ``term_kernel``'s kernel where wanted)."""
        from .compiler import load

        return load(term_kernel.SOURCE.replace("DIRECT_TERMS", str(int(self.direct_terms)))
                    + _HELPER.replace("BLASINT", "int64_t" if self.wide else "int")
                    .replace("MIN_PARALLEL_MACS", f"{float(MIN_PARALLEL_MACS)!r}"))

    @cached_property
    def direct(self) -> bool:
        """Whether ``helper`` has ``term_kernel``'s kernel (wanted, and AVX-512 here)."""
        return bool(ctypes.c_int.in_dll(self._library, "tg_direct_terms").value)

    @property
    def term_blocks(self) -> int:
        """How many thread blocks ``helper`` has given to the kernel in this process."""
        return ctypes.c_long.in_dll(self._library, "tg_term_blocks").value

    @cached_property
    def rows_copy(self):
        """``tg_rows(dst, src, K, N, ld, threads)``: a float32 ``B`` stored transposed
        copied to rows (``packed.RowsGemm`` makes it once per scan run)."""
        from .compiler import bind

        return bind(self._library, "tg_rows", [ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.c_long, ctypes.c_long, ctypes.c_long,
                                               ctypes.c_int])

    @cached_property
    def helper(self):
        """``tg_gemm`` compiled for this BLAS's integer width."""
        from .compiler import bind

        return bind(self._library, "tg_gemm",
                    [ctypes.c_void_p, ctypes.c_int, *[ctypes.c_long] * 4,
                     ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_int,
                     ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_int,
                     ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                     ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_int])


def _mkl_path() -> str | None:
    """``libmkl_rt``'s path in the installed ``mkl`` distribution, or None."""
    try:
        files = importlib.metadata.distribution("mkl").files or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name.startswith("libmkl_rt.so"):
            return str(f.locate())
    return None


def blas_name() -> str:
    """Which BLAS the compiled target's products call: ``mkl``, ``openblas`` (or the
    library's path), or ``none``."""
    return _blas().name


def _loaded_blas_paths() -> list[str]:
    np.dot(np.ones((2, 2)), np.ones((2, 2)))  # NumPy loads its BLAS lazily on some builds
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/"))


@cache
def _blas() -> Blas:
    return Blas(mkl=Options.from_environment().blas != "openblas")


def blas_threads_shared() -> bool:
    """Whether the BLAS runs threads of its own (OpenBLAS), which ``one_blas_thread``
    holds at one while a program runs."""
    blas = _blas()
    return blas.found and blas.set_threads is not None and blas.get_threads is not None


@contextmanager
def one_blas_thread():
    """When products are on NumPy's OpenBLAS, it runs on one thread for the duration:
    ``matmul`` splits them over OpenMP's threads. MKL's products need nothing: they are
    sequential calls already, and changing OpenBLAS's thread count on every run costs
    more than it saves (on a mid-sized product's program, a large part of its run):
    NumPy's own calls within a program (products BLAS cannot take) then keep OpenBLAS's
    threads."""
    if not blas_threads_shared():
        yield
        return
    blas = _blas()
    before = blas.get_threads()
    blas.set_threads(1)
    try:
        yield
    finally:
        blas.set_threads(before)


class GemmCall(NamedTuple):
    """One ``tg_gemm`` call but for its three addresses: what ``matmul`` decided for one
    layout of its operands, replayable on others of that layout (``replay.py``). The
    addresses are the first term's; ``terms`` holds each term's element offsets from them,
    ``(a, b)`` pairs flattened."""

    fn: int
    dbl: int
    batch: int
    M: int
    N: int
    K: int
    sa: int
    lda: int
    ta: int
    sb: int
    ldb: int
    tb: int
    sc: int
    ldc: int
    terms: ctypes.Array
    accumulate: int  # 1: the first term adds to C too (beta = 1)
    blas: Blas  # whose ``sgemm``/``dgemm`` ``fn`` is, and so whose ``tg_gemm`` calls it
    by_rows: int  # the split over threads: blocks of rows (1) or of columns (0)

    def run(self, a: int, b: int, c: int, threads: int) -> None:
        self.blas.helper(self.fn, self.dbl, self.batch, self.M, self.N, self.K, a, self.sa,
                         self.lda, self.ta, b, self.sb, self.ldb, self.tb, c, self.sc,
                         self.ldc, self.terms, len(self.terms) // 2, self.accumulate,
                         self.by_rows, threads)


def prepare(a, b, out: np.ndarray, blas: Blas | None = None, accumulate: bool = False):
    """``(call, (a, b, out) as the call's batched operands)`` making ``out[...] = a @ b``
    for float operands ``(..., M, K) @ (..., K, N)``, or None where a layout or dtype is not
    one BLAS takes (``np.matmul`` must then do it). ``a`` and ``b`` may be lists of terms
    (``out[...] = sum_t a[t] @ b[t]``) of one layout each, the operands returned being the
    first term's. An operand may be a copy: the call reads the addresses of the arrays
    returned, which must live until it is made. ``blas``: another than the default;
    ``accumulate``: ``out[...] += a @ b``."""
    blas = blas or _blas()
    a_terms, b_terms = terms(a), terms(b)
    a, b = a_terms[0], b_terms[0]
    if (not blas.found or a.dtype != b.dtype or a.dtype not in (np.float32, np.float64)
            or a.ndim < 2 or b.ndim < 2 or out.dtype != a.dtype
            or len(a_terms) != len(b_terms)):
        return None
    M, K = a.shape[-2:]
    N = b.shape[-1]
    try:
        prefix = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        return None
    if out.shape != (*prefix, M, N) or 0 in out.shape or K == 0 or b.shape[-2] != K:
        return None
    looped = len(a_terms) > 1  # the terms' operands must be views at fixed offsets
    am, bm = _batched(a, prefix, copy=not looped), _batched(b, prefix, copy=not looped)
    try:  # the result is written in place: it must be a view
        cm = out[None] if not prefix else np.reshape(out, (-1, M, N), copy=False)
    except ValueError:
        return None
    if am is None or bm is None:
        return None
    la, lb, lc = _layout(am, M, K), _layout(bm, K, N), _layout(cm, M, N)
    if la is None or lb is None or lc is None or lc[1]:
        return None
    if not blas.wide and max(M, N, K, la[0], lb[0], lc[0]) > INT32_MAX:
        return None
    size = a.itemsize
    offsets = [_offset(x, first, size) for pair in zip(a_terms, b_terms, strict=True)
               for x, first in zip(pair, (a, b), strict=True)]
    if None in offsets:
        return None
    call = GemmCall(blas.dgemm if size == 8 else blas.sgemm, int(size == 8), am.shape[0], M,
                    N, K, am.strides[0] // size, la[0], la[1], bm.strides[0] // size, lb[0],
                    lb[1], cm.strides[0] // size, lc[0], (ctypes.c_long * len(offsets))(*offsets),
                    int(accumulate), blas, int(M >= N))
    return call, (am, bm, cm)


def _offset(x: np.ndarray, first: np.ndarray, size: int) -> int | None:
    """``x``'s element offset from ``first`` when both have one layout, else None."""
    if x.shape != first.shape or x.strides != first.strides or x.dtype != first.dtype:
        return None
    delta = x.ctypes.data - first.ctypes.data
    return None if delta % size else delta // size


def helper():
    """``tg_gemm``, compiled (or loaded from the disk cache) when a BLAS was found."""
    blas = _blas()
    return blas.helper if blas.found else None


def new_result(a, b) -> np.ndarray | None:
    """An empty array for ``a @ b`` (or its terms' sum), None when the operands have no
    such result (fewer than 2 dims, dtypes that differ, batch shapes that do not match)."""
    first, other = terms(a)[0], terms(b)[0]
    if first.ndim < 2 or other.ndim < 2 or first.dtype != other.dtype:
        return None
    try:
        return np.empty(result_shape(first, other), first.dtype)
    except ValueError:
        return None


def result_shape(a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    """The shape of ``a @ b`` (both at least 2-D)."""
    return (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])


def matmul(a, b, out: np.ndarray | None = None, threads: int = 1, blas: Blas | None = None,
           accumulate: bool = False):
    """``np.matmul(a, b, out=out)`` for float operands ``(..., M, K) @ (..., K, N)``,
    split over ``threads`` OpenMP threads; or with lists of terms, their products' sum;
    ``accumulate``: added to ``out``. ``blas``: another than the default."""
    if out is None:
        out = new_result(a, b)
    prepared = None if out is None else prepare(a, b, out, blas, accumulate)
    if prepared is None:
        return product_sum(a, b, out, accumulate)
    call, operands = prepared
    call.run(*(x.ctypes.data for x in operands), threads)
    return out


def _batched(x: np.ndarray, prefix: tuple, copy: bool = True) -> np.ndarray | None:
    """``x`` broadcast over ``prefix`` as one batch dimension: a view (strides may be 0),
    else a copy, or None when ``copy`` is false."""
    x = np.broadcast_to(x, (*prefix, *x.shape[-2:])) if x.shape[:-2] != prefix else x
    if not prefix:
        return x[None]
    try:
        return np.reshape(x, (-1, *x.shape[-2:]), copy=False)
    except ValueError:
        return np.ascontiguousarray(x).reshape(-1, *x.shape[-2:]) if copy else None


def _layout(m: np.ndarray, rows: int, cols: int):
    """``(leading dimension, transposed)`` of the matrices of ``m``, or None: element
    ``(i, j)`` at ``i ld + j`` (row-major) or at ``j ld + i`` (transposed)."""
    size = m.itemsize
    if m.strides[1] % size or m.strides[2] % size:
        return None
    s0, s1 = m.strides[1] // size, m.strides[2] // size
    if cols == 1 or s1 == 1:
        ld = s0 if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            return ld, False
    if rows == 1 or s0 == 1:
        ld = s1 if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return ld, True
    return None
