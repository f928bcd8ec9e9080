"""Strided copies on the compiled target's OpenMP threads.

A contraction lays its operands out for BLAS (zero padding, im2col for a convolution):
copies of tens of megabytes that NumPy makes on one core. ``copy`` makes them with the
same OpenMP threads as the kernels and the products (``gemm.py``), split over the outer
index space; the innermost dimension is a ``memcpy`` where both sides are contiguous, or,
in rows of at most ``SHORT_ROW_BYTES`` (a 3x3 weight's 12 bytes, im2col's rows of 4), one
masked move per row (AVX-512), in a loop over the dimension second to last, chosen to keep
both sides near (``_local_rows_inside``). Dims that step by each other's whole on both
sides are one dim first (``_merged``): a 3x3 weight's taps copied to a transposed layout
are a transpose of 9 x C, not a walk over rows of 3.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np

from ...options import Options

_HELPER = r"""
#include <string.h>
#include <stdint.h>
#include <omp.h>
#ifdef __AVX512BW__
#include <immintrin.h>
#endif
#define TILE 32
#define MAX_DIMS 64

/* the byte offsets in dst and src of row-major index f over the first k dimensions */
static inline void offsets(long f, int k, const long *shape, const long *ds, const long *ss,
                           long *doff, long *soff) {
  long rest = f;
  *doff = *soff = 0;
  for (int d = k - 1; d >= 0; d--) {
    long i = rest % shape[d];
    rest /= shape[d];
    *doff += i * ds[d];
    *soff += i * ss[d];
  }
}

/* the next row: an odometer over the outer dims 0..k-1, no division */
static inline void advance(int k, long *index, const long *shape, const long *ds,
                           const long *ss, long *doff, long *soff) {
  for (int d = k - 1; d >= 0; d--) {
    *doff += ds[d];
    *soff += ss[d];
    if (++index[d] < shape[d]) return;
    *doff -= shape[d] * ds[d];
    *soff -= shape[d] * ss[d];
    index[d] = 0;
  }
}

static long outer_of(int k, const long *shape) {
  long outer = 1;
  for (int d = 0; d < k; d++) outer *= shape[d];
  return outer;
}

void tg_copy(char *dst, const char *src, int ndim, const long *shape, const long *ds,
             const long *ss, long size, int nthreads) {
  long n = shape[ndim - 1], dl = ds[ndim - 1], sl = ss[ndim - 1];
  /* two rows interleaved (the phases of a stride-2 output): dst[2i + j] = row j[i];
     or split (a stride-2 input's phases, CopyCall puts them second to last): row j[i] =
     src[2i +- j] */
  int pair = ndim >= 2 && size == 4 && shape[ndim - 2] == 2 && ds[ndim - 2] == 4 && dl == 8
             && sl % 4 == 0;
  int unpair = !pair && ndim >= 2 && size == 4 && shape[ndim - 2] == 2
               && (ss[ndim - 2] == 4 || ss[ndim - 2] == -4) && sl == 8 && dl == 4;
  long step = pair ? ss[ndim - 2] : unpair ? ds[ndim - 2] : 0;
  if (!unpair && ndim >= 2 && dl == size && ss[ndim - 2] == size && sl != size &&
      (size == 4 || size == 8)) {  /* a transpose: in tiles, both sides' lines in cache */
    long outer = 1;
    for (int d = 0; d < ndim - 2; d++) outer *= shape[d];
    long m = shape[ndim - 2], dm = ds[ndim - 2];
    long tiles_m = (m + TILE - 1) / TILE, tiles_n = (n + TILE - 1) / TILE;
    #pragma omp parallel for schedule(static) num_threads(nthreads) if(nthreads > 1)
    for (long w = 0; w < outer * tiles_m * tiles_n; w++) {
      long tm = w / tiles_n % tiles_m, tn = w % tiles_n, doff, soff;
      offsets(w / (tiles_m * tiles_n), ndim - 2, shape, ds, ss, &doff, &soff);
      long i_hi = tm * TILE + TILE < m ? tm * TILE + TILE : m;
      long j_hi = tn * TILE + TILE < n ? tn * TILE + TILE : n;
      for (long i = tm * TILE; i < i_hi; i++) {
        char *dp = dst + doff + i * dm;
        const char *sp = src + soff + i * size;
        if (size == 4)
          for (long j = tn * TILE; j < j_hi; j++)
            ((uint32_t *)dp)[j] = *(const uint32_t *)(sp + j * sl);
        else
          for (long j = tn * TILE; j < j_hi; j++)
            ((uint64_t *)dp)[j] = *(const uint64_t *)(sp + j * sl);
      }
    }
    return;
  }
  long outer = 1;
  int k = pair || unpair ? ndim - 2 : ndim - 1;
#ifdef __AVX512BW__
  /* a short contiguous row (a 3x3 weight's 12 bytes) is one masked move, not a call of
     memcpy, which costs several times more per row */
  long bytes = n * size;
  int masked = dl == size && sl == size && bytes <= 64;
  __mmask64 mask = bytes >= 64 ? ~0ULL : (1ULL << bytes) - 1;
  if (masked && k >= 1) {  /* rows of the dimension second to last moved in one loop */
    long m2 = shape[k - 1], d2 = ds[k - 1], s2 = ss[k - 1], outer2 = outer_of(k - 1, shape);
    #pragma omp parallel num_threads(nthreads) if(nthreads > 1)
    {
      int t = omp_get_thread_num(), threads = omp_get_num_threads();
      long lo = outer2 * t / threads, hi = outer2 * (t + 1) / threads, doff, soff;
      long index[MAX_DIMS], rest = lo;
      for (int d = k - 2; d >= 0; d--) { index[d] = rest % shape[d]; rest /= shape[d]; }
      offsets(lo, k - 1, shape, ds, ss, &doff, &soff);
      for (long f = lo; f < hi; f++) {
        char *dp = dst + doff;
        const char *sp = src + soff;
        for (long i = 0; i < m2; i++, dp += d2, sp += s2)
          _mm512_mask_storeu_epi8(dp, mask, _mm512_maskz_loadu_epi8(mask, sp));
        advance(k - 1, index, shape, ds, ss, &doff, &soff);
      }
    }
    return;
  }
#else
  int masked = 0;
#endif
  for (int d = 0; d < k; d++) outer *= shape[d];
  #pragma omp parallel num_threads(nthreads) if(nthreads > 1)
  {
    int t = omp_get_thread_num(), threads = omp_get_num_threads();
    long lo = outer * t / threads, hi = outer * (t + 1) / threads, doff, soff;
    long index[MAX_DIMS], rest = lo;
    for (int d = k - 1; d >= 0; d--) { index[d] = rest % shape[d]; rest /= shape[d]; }
    offsets(lo, k, shape, ds, ss, &doff, &soff);
    for (long f = lo; f < hi; f++) {
      char *dp = dst + doff;
      const char *sp = src + soff;
      if (pair) {
        uint32_t *d = (uint32_t *)dp;
        const uint32_t *s0 = (const uint32_t *)sp, *s1 = (const uint32_t *)(sp + step);
        long sk = sl / 4;
        if (sk == 1)
          for (long i = 0; i < n; i++) { d[2 * i] = s0[i]; d[2 * i + 1] = s1[i]; }
        else
          for (long i = 0; i < n; i++) { d[2 * i] = s0[i * sk]; d[2 * i + 1] = s1[i * sk]; }
      } else if (unpair) {
        uint32_t *d0 = (uint32_t *)dp, *d1 = (uint32_t *)(dp + step);
        const uint32_t *s0 = (const uint32_t *)sp;
        if (ss[ndim - 2] > 0)
          for (long i = 0; i < n; i++) { d0[i] = s0[2 * i]; d1[i] = s0[2 * i + 1]; }
        else
          for (long i = 0; i < n; i++) { d0[i] = s0[2 * i]; d1[i] = s0[2 * i - 1]; }
      } else if (masked) {
#ifdef __AVX512BW__
        _mm512_mask_storeu_epi8(dp, mask, _mm512_maskz_loadu_epi8(mask, sp));
#endif
      } else if (dl == size && sl == size) memcpy(dp, sp, n * size);
      else if (size == 4 && dl == 4 && sl == 8)  /* a stride-2 read: vectorized */
        for (long i = 0; i < n; i++) ((uint32_t *)dp)[i] = ((const uint32_t *)sp)[2 * i];
      else if (size == 4)
        for (long i = 0; i < n; i++)
          *(uint32_t *)(dp + i * dl) = *(const uint32_t *)(sp + i * sl);
      else if (size == 8)
        for (long i = 0; i < n; i++)
          *(uint64_t *)(dp + i * dl) = *(const uint64_t *)(sp + i * sl);
      else
        for (long i = 0; i < n; i++) memcpy(dp + i * dl, sp + i * sl, size);
      advance(k, index, shape, ds, ss, &doff, &soff);
    }
  }
}

/* dst[...] += src[...] over the same dims (float, or double where dbl), split over the
   outer index space as tg_copy is */
void tg_add(char *dst, const char *src, int ndim, const long *shape, const long *ds,
            const long *ss, int dbl, int nthreads) {
  long n = shape[ndim - 1], size = dbl ? 8 : 4;
  long dk = ds[ndim - 1] / size, sk = ss[ndim - 1] / size, outer = outer_of(ndim - 1, shape);
  int k = ndim - 1;
  #pragma omp parallel num_threads(nthreads) if(nthreads > 1)
  {
    int t = omp_get_thread_num(), threads = omp_get_num_threads();
    long lo = outer * t / threads, hi = outer * (t + 1) / threads, doff, soff;
    long index[MAX_DIMS], rest = lo;
    for (int d = k - 1; d >= 0; d--) { index[d] = rest % shape[d]; rest /= shape[d]; }
    offsets(lo, k, shape, ds, ss, &doff, &soff);
    for (long f = lo; f < hi; f++) {
      if (dbl) {
        double *d = (double *)(dst + doff);
        const double *s = (const double *)(src + soff);
        if (dk == 1 && sk == 1) for (long i = 0; i < n; i++) d[i] += s[i];
        else for (long i = 0; i < n; i++) d[i * dk] += s[i * sk];
      } else {
        float *d = (float *)(dst + doff);
        const float *s = (const float *)(src + soff);
        if (dk == 1 && sk == 1) for (long i = 0; i < n; i++) d[i] += s[i];
        else for (long i = 0; i < n; i++) d[i * dk] += s[i * sk];
      }
      advance(k, index, shape, ds, ss, &doff, &soff);
    }
  }
}
"""
def limits(options: Options) -> tuple[int, int]:
    """``(elements, transpose elements)``: a copy smaller than the first stays with NumPy
    and runs on one thread; a transpose, which costs more per element, is split over
    threads from the second on (``Options.parallel_copy_elements``,
    ``parallel_transpose_elements``)."""
    return options.parallel_copy_elements, options.parallel_transpose_elements


@cache
def helper(name: str = "tg_copy"):
    """``tg_copy`` (or ``tg_add``), compiled (or loaded from the disk cache)."""
    from .compiler import bind, load

    width = ctypes.c_long if name == "tg_copy" else ctypes.c_int  # (its size, or dbl)
    return bind(load(_HELPER), name,
                [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                 ctypes.c_void_p, ctypes.c_void_p, width, ctypes.c_int])


SHORT_ROW_BYTES = 64  # a contiguous row this short is one masked move (tg_copy)
LOCAL_BYTES = 4096  # a dimension whose strides are this small walks within a few pages


def _merged(axes: list[tuple]) -> list[tuple]:
    """``axes`` (extent, dst stride, src stride), outer first, with each dim that steps on
    both sides by the whole of the next one's (``dst[c, r, s]`` and ``src[c, r, s]`` with
    ``(r, s)`` contiguous in both) folded into it: a 3x3 weight's taps, nine rows of one
    element or one of nine."""
    out = [axes[-1]]
    for n, d, s in reversed(axes[:-1]):
        m, dm, sm = out[-1]
        if d == m * dm and s == m * sm:
            out[-1] = (n * m, dm, sm)
        else:
            out.append((n, d, s))
    return out[::-1]


GATHER_BYTES = 64  # a last dim whose source elements lie a line apart: see _gathered_rows
TRANSPOSE_ROWS = 8  # an axis this long, contiguous in the source, is a transpose's rows
CHUNK = 16  # the destination's rows gathered in chunks of this (one line of float32)


def _gathered_rows(outer: list[tuple], last: tuple, size: int) -> tuple[list, tuple]:
    """``(outer, last)`` for a copy whose contiguous destination rows gather source
    elements a line or more apart (a weight ``[o, c, taps]`` laid out ``[taps, c, o]``).

    Where an outer axis is contiguous in the source and at least ``TRANSPOSE_ROWS`` long,
    it goes second to last: the helper's tiled transpose. Else the rows are cut into
    chunks of ``CHUNK`` elements, the chunks outermost and the outer axes in the source's
    order inside: the ``CHUNK`` source lines one chunk reads then serve the next outer
    indices too, where a whole row's hundreds of lines were read again from L2 for each
    (a stride-2 convolution's 64 x 128 weights in 2 x 2 x 2 x 2 phases: 0.39 ms)."""
    rows = [a for a in outer if abs(a[2]) == size and a[0] >= TRANSPOSE_ROWS]
    if rows:
        best = max(rows, key=lambda a: a[0])
        return [a for a in outer if a is not best] + [best], last
    n, d, s = last
    if n <= CHUNK or n % CHUNK:
        return outer, last
    inner = sorted(outer, key=lambda a: -abs(a[2]))
    return [(n // CHUNK, CHUNK * d, CHUNK * s), *inner], (CHUNK, d, s)


def _local_rows_inside(outer: list[tuple]) -> list[tuple]:
    """The ``outer`` axes (extent, dst stride, src stride) with the longest one that steps
    by at most ``LOCAL_BYTES`` on both sides moved second to last, where it is longer than
    the one there: short rows then follow each other through both arrays. A weight
    gradient laid out ``(r, o, c, s)`` and copied to ``(o, c, r, s)`` walks ``c``, reading
    ``src`` in order and writing within one ``o``'s block, where in ``dst``'s order each
    row read from one of three far-apart places (256 channels: 0.7 ms, 0.24 this way, 1
    thread)."""
    local = [a for a in outer if abs(a[1]) <= LOCAL_BYTES and abs(a[2]) <= LOCAL_BYTES]
    if not local:
        return outer
    best = max(local, key=lambda a: a[0])
    if best[0] <= outer[-1][0]:
        return outer
    return [a for a in outer if a is not best] + [best]


class CopyCall:
    """One ``tg_copy`` call but for its two addresses, replayable on other arrays of the
    same layout (``replay.py``); a copy under ``limits[0]`` elements (a transpose under
    ``limits[1]``) runs on one thread."""

    def __init__(self, dst: np.ndarray, src: np.ndarray, limits: tuple[int, int]):
        dims = [k for k, n in enumerate(dst.shape) if n != 1] or [dst.ndim - 1]  # <= MAX_DIMS
        # (extent, dst stride, src stride) per dim: the outer ones in the destination's
        # memory order (its writes then move forward), the last one last
        axes = [(dst.shape[k], dst.strides[k], src.strides[k]) for k in dims]
        last = axes[-1]
        axes = _merged([*sorted(axes[:-1], key=lambda a: -abs(a[1])), last])
        outer, last = axes[:-1], axes[-1]
        size = dst.itemsize
        # a stride-2 read's two phases (src[2i], src[2i +- 1]) second to last, so that the
        # helper splits each source row once
        phases = [a for a in outer if a[0] == 2 and abs(a[2]) == size]
        if phases and size == 4 and last[1] == 4 and last[2] == 8:
            outer = [a for a in outer if a is not phases[0]] + phases[:1]
        elif outer and last[1] == last[2] == size and last[0] * size <= SHORT_ROW_BYTES:
            outer = _local_rows_inside(outer)
        elif outer and last[1] == size and abs(last[2]) >= GATHER_BYTES:
            outer, last = _gathered_rows(outer, last, size)
        axes = [*outer, last]
        self.ndim = len(axes)
        self.shape, self.ds, self.ss = (np.array([a[j] for a in axes], np.int64)
                                        for j in range(3))
        self.addresses = (self.shape.ctypes.data, self.ds.ctypes.data, self.ss.ctypes.data)
        self.itemsize = dst.itemsize
        transpose = self.ndim >= 2 and self.ds[-1] == dst.itemsize != self.ss[-1]
        self.parallel = dst.size >= (limits[1] if transpose else limits[0])

    def run(self, dst: int, src: int, threads: int) -> None:
        helper()(dst, src, self.ndim, *self.addresses, self.itemsize,
                  threads if self.parallel else 1)


class AddCall:
    """One ``tg_add`` call, ``dst[...] += src`` (float32 or float64), replayable as a
    ``CopyCall`` is; its dims are walked in the order a copy's would be."""

    def __init__(self, dst: np.ndarray, src: np.ndarray, limits: tuple[int, int]):
        self.walk = CopyCall(dst, src, limits)

    def run(self, dst: int, src: int, threads: int) -> None:
        w = self.walk
        helper("tg_add")(dst, src, w.ndim, *w.addresses, int(w.itemsize == 8),
                         threads if w.parallel else 1)


def prepare_add(dst: np.ndarray, src: np.ndarray, limits: tuple[int, int]):
    """``(call, (dst, src broadcast))`` making ``dst[...] += src``, or None for an add
    that NumPy must make (dtypes differ or are not float32 or float64, 0-d, or ``dst``
    overlapping itself: a broadcast view)."""
    if (dst.dtype != src.dtype or dst.dtype not in (np.float32, np.float64)
            or dst.ndim == 0 or dst.size == 0 or 0 in dst.strides):
        return None
    src = np.broadcast_to(src, dst.shape)
    return AddCall(dst, src, limits), (dst, src)


def add(dst: np.ndarray, src: np.ndarray, threads: int, limits: tuple[int, int]) -> None:
    """``dst[...] += src`` (broadcasting ``src``; NumPy's below ``limits[0]`` elements)."""
    if dst.size < limits[0] or not _ran(prepare_add(dst, src, limits), threads):
        np.add(dst, src, out=dst)


def prepare(dst: np.ndarray, src: np.ndarray, limits: tuple[int, int]):
    """``(call, (dst, src broadcast))`` making ``dst[...] = src``, or None for a copy that
    ``np.copyto`` must make (dtypes differ, or 0-d)."""
    if dst.dtype != src.dtype or dst.ndim == 0 or dst.size == 0:
        return None
    src = np.broadcast_to(src, dst.shape)
    return CopyCall(dst, src, limits), (dst, src)


def copy(dst: np.ndarray, src: np.ndarray, threads: int, limits: tuple[int, int]) -> None:
    """``dst[...] = src`` (broadcasting ``src``, same dtype; else ``np.copyto``)."""
    if dst.size < limits[0] or not _ran(prepare(dst, src, limits), threads):
        np.copyto(dst, src)


def _ran(prepared, threads: int) -> bool:
    """Whether ``prepared`` (``prepare``'s or ``prepare_add``'s) was a call, now made."""
    if prepared is None:
        return False
    call, operands = prepared
    call.run(*(x.ctypes.data for x in operands), threads)
    return True
