"""A sum of products over shifted operands as one register-blocked kernel (AVX-512, float32).

A looped reduction (``gemm.py``; ``host/products._choose_loop``) is a product summed over
``T`` terms, each reading its operands at a fixed offset from the first term's:

    C[i, j] (+)= sum_t sum_k A[i, k + a_t] B[k, j + b_t]

(offsets in elements of the flat operands; ``A`` may be stored transposed). A stride-1
3x3 convolution is one with ``T = 9``: ``A_t`` the weights of tap ``t``, ``B`` the padded
input image as a (channels, pixels) matrix, ``b_t`` the tap's shift. BLAS makes it as
``T`` calls with ``K`` = the channels, small (64), and packs ``B`` again for each: well
below what a direct convolution (oneDNN's, in PyTorch) reaches on the same machine.

Here the terms are one loop inside one kernel, and ``B`` is never packed: its rows are
read where they lie, shifted. ``A`` (the small operand) is packed once per call as
``[row block][t][k][TG_MR]``, zero rows past ``M``; a tile of ``TG_MR`` rows by
``TG_NR`` columns keeps ``TG_MR x 3`` vector accumulators (24 of AVX-512's 32 registers)
and, per ``(t, k)``, loads three vectors of ``B``'s row and broadcasts ``TG_MR`` values
of ``A`` into 24 fused multiply-adds. Columns past ``N`` are masked, in loads and stores
(no element outside the operands is read). Tiles sweep a strip of columns per row block,
as wide as keeps the ``B`` rows it reads within ``TG_TILE_BYTES`` (in L2).

Shifted sums and shallow single products (``K`` 64-256, 128 or more columns) beat MKL's
calls; narrower ones, and a transposed ``B`` copied to rows first, do not, so they stay
BLAS calls. Deeper single products take the kernel only where each thread's block is
``DEEP_MIN_COLS`` wide: narrower deep blocks (an LSTM's ``dG^T H``, 256 columns a thread)
were slower than MKL. ``benchmarks/bench_blas.py`` measures these shapes against MKL.

Compiled only where the compiler targets AVX-512 (``-march=native``); elsewhere, and for
float64, ``tg_gemm`` makes the ``T`` BLAS calls. ``DIRECT_TERMS`` is replaced by 1 or 0
(``gemm.Blas.direct_terms``: tests compare both ways).

**Where it is used** (``wanted_here``). The gains above are on an AMD EPYC, where MKL
does not run its AVX-512 code. On an Intel Xeon, MKL was faster on every shape
``bench_blas.py`` times (a 1024-square product's ``B`` rows 4 KiB apart crowd a few of
L2's sets). So by default the kernel is used on processors other than Intel's
(``Options.term_kernel``); ``TEGRAD_TERM_KERNEL=1`` or ``0`` decides instead.
"""

from ...options import Options


def wanted_here() -> bool:
    """Whether products take the kernel by default on this machine (see the header):
    ``Options.term_kernel`` as the environment sets it (``TEGRAD_TERM_KERNEL``, else True
    unless the processor is Intel's). Read once per process, as the BLAS is loaded once."""
    return Options.from_environment().term_kernel


TILE_ROWS = 8  # TG_MR
MIN_COLS = 128  # a work item's columns; fewer: packing A costs more than BLAS loses
MAX_DEPTH = 256  # a single product deeper than this is BLAS's unless its block is
DEEP_MIN_COLS = 512  # at least this wide

SOURCE = f"""
#define TG_MR {TILE_ROWS}
#define TG_MIN_COLS {MIN_COLS}
#define TG_MAX_DEPTH {MAX_DEPTH}
#define TG_DEEP_MIN_COLS {DEEP_MIN_COLS}
""" + r"""
#if defined(__AVX512F__) && DIRECT_TERMS
#include <immintrin.h>
#include <stdlib.h>
#define TG_TERMS 1
#define TG_NR 48
#define TG_TILE_BYTES (1L << 18)  /* the B rows one column strip of tiles reads */

/* one tile: rows < TG_MR of C, cols <= TG_NR; ap packed [t][k][TG_MR]; b at the tile's
   first column of the first term; terms[2t + 1]: term t's offset of B */
static void tg_terms_tile(const float *ap, const float *b, long ldb, const long *terms,
                          long nterms, long K, float *c, long ldc, int rows, int cols,
                          int acc) {
  __m512 s[TG_MR][3];
#pragma GCC unroll 8
  for (int i = 0; i < TG_MR; i++)
    s[i][0] = s[i][1] = s[i][2] = _mm512_setzero_ps();
  __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
  __mmask16 m1 = cols >= 32 ? 0xffff : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0;
  __mmask16 m2 = cols >= 48 ? 0xffff : cols > 32 ? (__mmask16)((1u << (cols - 32)) - 1) : 0;
  for (long t = 0; t < nterms; t++) {
    const float *bt = b + terms[2 * t + 1];
    for (long k = 0; k < K; k++, ap += TG_MR) {
      const float *row = bt + k * ldb;
      __m512 b0 = _mm512_maskz_loadu_ps(m0, row);
      __m512 b1 = _mm512_maskz_loadu_ps(m1, row + 16);
      __m512 b2 = _mm512_maskz_loadu_ps(m2, row + 32);
#pragma GCC unroll 8
      for (int i = 0; i < TG_MR; i++) {
        __m512 x = _mm512_set1_ps(ap[i]);
        s[i][0] = _mm512_fmadd_ps(x, b0, s[i][0]);
        s[i][1] = _mm512_fmadd_ps(x, b1, s[i][1]);
        s[i][2] = _mm512_fmadd_ps(x, b2, s[i][2]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < TG_MR; i++) {  /* unrolled: the accumulators stay in registers */
    if (i >= rows) break;
    float *out = c + i * ldc;
    if (acc) {
      s[i][0] = _mm512_add_ps(s[i][0], _mm512_maskz_loadu_ps(m0, out));
      s[i][1] = _mm512_add_ps(s[i][1], _mm512_maskz_loadu_ps(m1, out + 16));
      s[i][2] = _mm512_add_ps(s[i][2], _mm512_maskz_loadu_ps(m2, out + 32));
    }
    _mm512_mask_storeu_ps(out, m0, s[i][0]);
    _mm512_mask_storeu_ps(out + 16, m1, s[i][1]);
    _mm512_mask_storeu_ps(out + 32, m2, s[i][2]);
  }
}

/* C (+)= sum_t A_t B_t over M x N, row-major C and B (B's rows contiguous), A row-major
   or transposed (ta); terms[2t], terms[2t + 1]: term t's offsets of A and B. 0 when the
   packing buffer cannot be had (the caller makes BLAS calls instead). */
static int tg_terms_f32(long M, long N, long K, const float *a, long lda, int ta,
                        const float *b, long ldb, float *c, long ldc, const long *terms,
                        long nterms, int acc) {
  long depth = K * nterms, blocks = (M + TG_MR - 1) / TG_MR;
  size_t bytes = (size_t)(blocks * depth * TG_MR * sizeof(float) + 63) / 64 * 64;
  float *ap = aligned_alloc(64, bytes);
  if (!ap) return 0;
  float *p = ap;
  for (long blk = 0; blk < blocks; blk++)
    for (long t = 0; t < nterms; t++) {
      const float *at = a + terms[2 * t];
      for (long k = 0; k < K; k++)
        for (long r = 0; r < TG_MR; r++) {
          long i = blk * TG_MR + r;
          *p++ = i < M ? at[ta ? k * lda + i : i * lda + k] : 0.0f;
        }
    }
  long strip = TG_TILE_BYTES / (depth * (long)sizeof(float)) / TG_NR * TG_NR;
  if (strip < TG_NR) strip = TG_NR;
  for (long j0 = 0; j0 < N; j0 += strip) {
    long j1 = j0 + strip < N ? j0 + strip : N;
    for (long blk = 0; blk < blocks; blk++) {
      long rows = M - blk * TG_MR < TG_MR ? M - blk * TG_MR : TG_MR;
      for (long j = j0; j < j1; j += TG_NR)
        tg_terms_tile(ap + blk * depth * TG_MR, b + j, ldb, terms, nterms, K,
                      c + blk * TG_MR * ldc + j, ldc, (int)rows,
                      (int)(j1 - j < TG_NR ? j1 - j : TG_NR), acc);
    }
  }
  free(ap);
  return 1;
}
#endif
"""
