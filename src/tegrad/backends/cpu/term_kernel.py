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
of ``A`` into 24 fused multiply-adds. A strip's last tile keeps only the vectors its
columns need (a tail of 32 columns is two vectors' work, not three), and columns past
``N`` are masked, in loads and stores (no element outside the operands is read). Tiles
sweep a strip of columns per row block, as wide as keeps the ``B`` rows it reads within
``TG_TILE_BYTES`` (in L2).

A batch of products that share ``A`` (a convolution's weights, batch stride 0) packs it
once for them all (``tg_gemm``), where each product packed it again; split by rows, each
thread's block reads its rows of that pack (their first row a multiple of ``TG_MR``, else
each product packs its own). Then even products narrower than ``MIN_COLS`` take the
kernel, the pack being paid once per batch: 7x7 images' 63 widened columns ran at 52
GFLOP/s through MKL and at 92 here (128 channels, batch of 8, one thread). Deep ones
share the pack too (a ResNet-50 1x1 convolution's per-image products).

Shifted sums and single products of any depth (128 or more columns a thread's block)
beat MKL's calls, about 2x on this project's AMD EPYC (``benchmarks/bench_blas.py``
measures these shapes against MKL): MKL runs its AVX2 code there. A single product
deeper than ``SLICE_DEPTH`` runs in slices of that depth, each adding to ``C``, so that a
slice's strip of ``B`` stays in L2 (``bench_blas.py``, one thread: 256 x 2048 x 2048 at
0.55x MKL's time).

A ``B`` stored transposed (``x W^T``: a linear layer's weight, torch's layout; ``dY X^T``:
a convolution's weight gradient, a term per image) has its block's terms copied to rows,
``[t][k][j]`` (``tg_rows``), for blocks at least ``ROWS_MIN_M`` rows high (64 rows of a
512-square weight: 0.59x MKL's time); below that the copy costs about what the kernel
saves. Where ``A`` is row-major and the product deep (``K`` times the terms at least
``DOTS_DEPTH``, or ``DOTS_SHORT_DEPTH`` for blocks too low for the copy), each element is
a dot product of two rows read where they lie instead (``tg_dots``): nothing is copied
or packed, and a weight read once from memory meets every row of ``A``
(``bench_blas.py``, one thread: 40 rows of a 512-square weight at 0.59x MKL's time,
ResNet-18's 3x3 convolutions at 2x2, 32 x 512 x 2304 with ``B = W^T``, at 0.61x, its
first convolution's weight gradient, 64 x 147 x 8192, at 0.66x). Other blocks stay BLAS
calls.

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
SLICE_DEPTH = 512  # a single product deeper than this runs in slices this deep
ROWS_MIN_M = 64  # a B stored transposed is copied to rows for blocks this high
ROWS_MAX_BYTES = 1 << 24  # whose copy is at most this large
DOTS_DEPTH = 1024  # a B stored transposed and A row-major: dot products from this deep
DOTS_SHORT_DEPTH = 256  # (terms times K), or this deep below ROWS_MIN_M rows
DOTS_SLICE = 1024  # a single product of dot products deeper than this runs in slices

SOURCE = f"""
#define TG_MR {TILE_ROWS}
#define TG_MIN_COLS {MIN_COLS}
#define TG_ROWS_MIN_M {ROWS_MIN_M}
#define TG_SLICE_DEPTH {SLICE_DEPTH}
#define TG_DOTS_DEPTH {DOTS_DEPTH}
#define TG_DOTS_SHORT_DEPTH {DOTS_SHORT_DEPTH}
#define TG_DOTS_SLICE {DOTS_SLICE}
#define TG_ROWS_MAX_BYTES {ROWS_MAX_BYTES}L
""" + r"""
#if defined(__AVX512F__) && DIRECT_TERMS
#include <immintrin.h>
#include <stdlib.h>
#define TG_TERMS 1
#define TG_NR 48
#define TG_TILE_BYTES (1L << 18)  /* the B rows one column strip of tiles reads */

/* one tile: rows < TG_MR of C, cols <= 16 NV (the tile's vectors); ap packed
   [t][k][TG_MR]; b at the tile's first column of the first term; terms[2t + 1]: term t's
   offset of B. Written once per NV (1, 2, 3): a tail of 32 columns is two vectors' work,
   not three with one masked out. PF (the _pf version of a whole tile): it also
   prefetches into L2 the lines of B the next tile reads. */
#define TG_TERMS_TILE(NV, NAME, PF)                                                      \
static void NAME(const float *ap, const float *b, long ldb,                              \
                              const long *terms, long nterms, long K, float *c, long ldc, \
                              int rows, int cols, int acc) {                             \
  __m512 s[TG_MR][NV];                                                                   \
  __mmask16 m[NV];                                                                       \
  for (int v = 0; v < NV; v++) {                                                         \
    int left = cols - 16 * v;                                                            \
    m[v] = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);                          \
  }                                                                                      \
  _Pragma("GCC unroll 8")                                                                \
  for (int i = 0; i < TG_MR; i++)                                                        \
    for (int v = 0; v < NV; v++) s[i][v] = _mm512_setzero_ps();                          \
  for (long t = 0; t < nterms; t++) {                                                    \
    const float *bt = b + terms[2 * t + 1];                                              \
    for (long k = 0; k < K; k++, ap += TG_MR) {                                          \
      const float *row = bt + k * ldb;                                                   \
      if (PF)                                                                            \
        for (int v = 0; v < NV; v++)                                                     \
          _mm_prefetch((const char *)(row + TG_NR + 16 * v), _MM_HINT_T1);               \
      __m512 bv[NV];                                                                     \
      for (int v = 0; v < NV; v++) bv[v] = _mm512_maskz_loadu_ps(m[v], row + 16 * v);   \
      _Pragma("GCC unroll 8")                                                            \
      for (int i = 0; i < TG_MR; i++) {                                                  \
        __m512 x = _mm512_set1_ps(ap[i]);                                                \
        for (int v = 0; v < NV; v++) s[i][v] = _mm512_fmadd_ps(x, bv[v], s[i][v]);      \
      }                                                                                  \
    }                                                                                    \
  }                                                                                      \
  _Pragma("GCC unroll 8")                                                                \
  for (int i = 0; i < TG_MR; i++) {  /* unrolled: the accumulators stay in registers */  \
    if (i >= rows) break;                                                                \
    float *out = c + i * ldc;                                                            \
    for (int v = 0; v < NV; v++) {                                                       \
      if (acc) s[i][v] = _mm512_add_ps(s[i][v], _mm512_maskz_loadu_ps(m[v], out + 16 * v)); \
      _mm512_mask_storeu_ps(out + 16 * v, m[v], s[i][v]);                                \
    }                                                                                    \
  }                                                                                      \
}
TG_TERMS_TILE(1, tg_terms_tile1, 0)
TG_TERMS_TILE(2, tg_terms_tile2, 0)
TG_TERMS_TILE(3, tg_terms_tile3, 0)
TG_TERMS_TILE(3, tg_terms_tile3_pf, 1)

/* rows i0 .. i0 + 7 of A, columns k0 .. k0 + 7 (row-major, lda), as 8 rows of the pack
   (p[k][r]): an 8 x 8 transpose in registers */
static inline void tg_pack_8x8(float *p, const float *a, long lda) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(a + i * lda);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  /* r[c] holds column c (lanes 0-3: rows 0-3) and column c + 4 (lanes 4-7: rows 0-3);
     r[4 + c]: the same of rows 4-7 */
  for (int c = 0; c < 4; c++) {
    _mm256_storeu_ps(p + 8 * c, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
    _mm256_storeu_ps(p + 8 * (c + 4), _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
  }
}

/* A's terms packed for the kernel, [row block][t][k][TG_MR], zero rows past M (aligned;
   the caller frees it); NULL when the buffer cannot be had. A whole block of a row-major
   A goes 8 x 8 at a time, of a transposed one a row of 8 at a time. */
static float *tg_terms_pack(long M, long K, const float *a, long lda, int ta,
                            const long *terms, long nterms) {
  long depth = K * nterms, blocks = (M + TG_MR - 1) / TG_MR;
  size_t bytes = (size_t)(blocks * depth * TG_MR * sizeof(float) + 63) / 64 * 64;
  float *ap = aligned_alloc(64, bytes);
  if (!ap) return 0;
  float *p = ap;
  for (long blk = 0; blk < blocks; blk++)
    for (long t = 0; t < nterms; t++) {
      const float *at = a + terms[2 * t];
      long i0 = blk * TG_MR, k = 0;
      if (i0 + TG_MR <= M && TG_MR == 8) {
        if (ta)
          for (; k < K; k++, p += 8) _mm256_storeu_ps(p, _mm256_loadu_ps(at + k * lda + i0));
        else
          for (; k + 8 <= K; k += 8, p += 64) tg_pack_8x8(p, at + i0 * lda + k, lda);
      }
      for (; k < K; k++)
        for (long r = 0; r < TG_MR; r++) {
          long i = i0 + r;
          *p++ = i < M ? at[ta ? k * lda + i : i * lda + k] : 0.0f;
        }
    }
  return ap;
}

/* C (+)= sum_t A_t B_t over M x N with A packed (tg_terms_pack), row-major C and B (B's
   rows contiguous); terms[2t + 1]: term t's offset of B */
static void tg_terms_packed(long M, long N, long K, const float *ap, const float *b,
                            long ldb, float *c, long ldc, const long *terms, long nterms,
                            int acc) {
  long depth = K * nterms, blocks = (M + TG_MR - 1) / TG_MR;
  /* a single product deeper than TG_SLICE_DEPTH in slices of it: a slice's strip of B
     stays in L2 and its tile's A in L1; the slices after the first add to C */
  long slice = nterms == 1 && K > TG_SLICE_DEPTH ? TG_SLICE_DEPTH : K;
  for (long k0 = 0; k0 < K; k0 += slice) {
    long kk = K - k0 < slice ? K - k0 : slice, read = nterms == 1 ? kk : depth;
    long strip = TG_TILE_BYTES / (read * (long)sizeof(float)) / TG_NR * TG_NR;
    if (strip < TG_NR) strip = TG_NR;
    const float *bk = b + k0 * ldb;
    int add = acc || k0 > 0;
    for (long j0 = 0; j0 < N; j0 += strip) {
      long j1 = j0 + strip < N ? j0 + strip : N;
      for (long blk = 0; blk < blocks; blk++) {
        int rows = (int)(M - blk * TG_MR < TG_MR ? M - blk * TG_MR : TG_MR);
        const float *a = ap + blk * depth * TG_MR + k0 * TG_MR;
        float *cb = c + blk * TG_MR * ldc;
        for (long j = j0; j < j1; j += TG_NR) {
          int cols = (int)(j1 - j < TG_NR ? j1 - j : TG_NR);
          if (cols > 32 && blk == 0)  /* the first row block meets B from memory */
            tg_terms_tile3_pf(a, bk + j, ldb, terms, nterms, kk, cb + j, ldc, rows, cols, add);
          else if (cols > 32)
            tg_terms_tile3(a, bk + j, ldb, terms, nterms, kk, cb + j, ldc, rows, cols, add);
          else if (cols > 16)
            tg_terms_tile2(a, bk + j, ldb, terms, nterms, kk, cb + j, ldc, rows, cols, add);
          else
            tg_terms_tile1(a, bk + j, ldb, terms, nterms, kk, cb + j, ldc, rows, cols, add);
        }
      }
    }
  }
}

/* C (+)= sum_t A_t B_t over M x N, row-major C and B (B's rows contiguous), A row-major
   or transposed (ta); terms[2t], terms[2t + 1]: term t's offsets of A and B. 0 when the
   packing buffer cannot be had (the caller makes BLAS calls instead). */
static int tg_terms_f32(long M, long N, long K, const float *a, long lda, int ta,
                        const float *b, long ldb, float *c, long ldc, const long *terms,
                        long nterms, int acc) {
  float *ap = tg_terms_pack(M, K, a, lda, ta, terms, nterms);
  if (!ap) return 0;
  tg_terms_packed(M, N, K, ap, b, ldb, c, ldc, terms, nterms, acc);
  free(ap);
  return 1;
}

/* C (+)= sum_t A_t B_t with B_t stored transposed and A row-major: every element a dot
   product of two rows read where they lie, C[i, j] = sum_t sum_k A[i lda + k + a_t]
   B[j ldb + k + b_t] (terms[2t], terms[2t + 1]). A tile of TG_DOT_MR rows by TG_DOT_NR
   columns keeps one vector accumulator per element (20 registers) and, per 16 k, loads
   TG_DOT_MR + TG_DOT_NR vectors (masked at K's tail) into 20 fused multiply-adds; each
   accumulator is summed across its lanes once, at the tile's end. Rows and columns past
   the block read its last row again and are not stored. */
#define TG_DOT_MR 4
#define TG_DOT_NR 5
static void tg_dots_tile(const float *a, long lda, const float *b, long ldb,
                         const long *terms, long nterms, long K, float *c, long ldc,
                         int rows, int cols, int acc) {
  __m512 s[TG_DOT_MR][TG_DOT_NR];
  const float *ar[TG_DOT_MR], *br[TG_DOT_NR];
  _Pragma("GCC unroll 8")
  for (int i = 0; i < TG_DOT_MR; i++) ar[i] = a + (i < rows ? i : rows - 1) * lda;
  _Pragma("GCC unroll 8")
  for (int j = 0; j < TG_DOT_NR; j++) br[j] = b + (j < cols ? j : cols - 1) * ldb;
  _Pragma("GCC unroll 8")
  for (int i = 0; i < TG_DOT_MR; i++)
    _Pragma("GCC unroll 8")
    for (int j = 0; j < TG_DOT_NR; j++) s[i][j] = _mm512_setzero_ps();
  long full = K / 16 * 16;
  __mmask16 tail = (__mmask16)((1u << (K - full)) - 1);
  for (long t = 0; t < nterms; t++) {
    long ao = terms[2 * t], bo = terms[2 * t + 1];
    /* one loop with a mask at every k (its last, the tail's): split into a whole and a
       tail loop, gcc folds the loads of B into the multiply-adds, once per row of A, and
       the tile is bound by its loads */
    for (long k = 0; k <= full; k += 16) {
      __mmask16 m = k < full ? 0xffff : tail;
      if (!m) break;
      __m512 x[TG_DOT_MR];
      _Pragma("GCC unroll 8")
      for (int i = 0; i < TG_DOT_MR; i++) x[i] = _mm512_maskz_loadu_ps(m, ar[i] + ao + k);
      _Pragma("GCC unroll 8")
      for (int j = 0; j < TG_DOT_NR; j++) {
        __m512 y = _mm512_maskz_loadu_ps(m, br[j] + bo + k);
        _Pragma("GCC unroll 8")
        for (int i = 0; i < TG_DOT_MR; i++) s[i][j] = _mm512_fmadd_ps(x[i], y, s[i][j]);
      }
    }
  }
  _Pragma("GCC unroll 8")
  for (int i = 0; i < TG_DOT_MR; i++)
    _Pragma("GCC unroll 8")
    for (int j = 0; j < TG_DOT_NR; j++)
      if (i < rows && j < cols) {
        float v = _mm512_reduce_add_ps(s[i][j]);
        c[i * ldc + j] = acc ? c[i * ldc + j] + v : v;
      }
}

/* the tiles over M x N: columns outer, so that B's rows, each read from memory once,
   meet every row of A (a chunk of A's rows at a time, about 128 KiB of them, in L2) */
static void tg_dots(long M, long N, long K, const float *a, long lda, const float *b,
                    long ldb, float *c, long ldc, const long *terms, long nterms, int acc) {
  /* a single product deeper than TG_DOTS_SLICE in slices of it, the later ones adding to
     C: a chunk of A's rows, read again for every column of B, stays in L2 at any depth
     (at 4608 deep a chunk was 4 rows, and B was read from memory once per 4 rows) */
  long slice = nterms == 1 && K > TG_DOTS_SLICE ? TG_DOTS_SLICE : K;
  for (long k0 = 0; k0 < K; k0 += slice) {
    long kk = K - k0 < slice ? K - k0 : slice;
    long chunk = (1L << 17) / (kk * nterms * (long)sizeof(float) + 1) / TG_DOT_MR * TG_DOT_MR;
    if (chunk < TG_DOT_MR) chunk = TG_DOT_MR;
    int add = acc || k0 > 0;
    for (long i0 = 0; i0 < M; i0 += chunk) {
      long i1 = i0 + chunk < M ? i0 + chunk : M;
      for (long j = 0; j < N; j += TG_DOT_NR)
        for (long i = i0; i < i1; i += TG_DOT_MR)
          tg_dots_tile(a + i * lda + k0, lda, b + j * ldb + k0, ldb, terms, nterms, kk,
                       c + i * ldc + j, ldc, (int)(i1 - i < TG_DOT_MR ? i1 - i : TG_DOT_MR),
                       (int)(N - j < TG_DOT_NR ? N - j : TG_DOT_NR), add);
    }
  }
}
#endif
"""
