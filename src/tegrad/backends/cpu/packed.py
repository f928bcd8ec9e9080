"""Products with one operand laid out once for a whole scan: copied to rows for
``term_kernel``'s kernel (``RowsGemm``), or packed by MKL's ``?gemm_pack`` for its
``?gemm_compute`` (``PackedGemm``).

A BLAS call first copies (packs) its operands into the panel layout its kernel reads. For
an LSTM step's ``h W^T`` (``32 x 256`` times ``256 x 1024``) that is a sizeable part of
the call. The weight is the same at every step of a scan (an external tensor read
whole), so a step program's trace packs it at the first step of each run of the scan and
later steps only compute (``bench_cpu.py``'s LSTM rows measure it).

The split over threads is ``tg_gemm``'s (``gemm.py``, one batch): ``chunks`` blocks of
rows of ``C`` when ``M >= N``, else of columns. Each chunk packs its own block of the
constant operand: the whole operand where the split does not cut it. A pack holds the
operand's values, so it is made again at every run of the scan (``StepTrace.new_run``):
the weights may have changed in place between two calls of a program. Only MKL has these
calls; on another BLAS, or for a batched or looped product, the call stays ``tg_gemm``.

Where ``term_kernel``'s kernel takes the product once its fixed ``B`` lies in rows (float32,
AVX-512, blocks wide enough: the LSTM's ``h W^T``), that copy
is all a run makes: the kernel never packs ``B``. Where ``B``'s rows are small
(``Options.shared_rows_bytes``),
``RowsGemm`` splits rows of ``C`` over the threads even when ``M < N``: each thread reads
all of ``B`` and writes whole rows, which the step's kernels, splitting the batch's rows
the same way, read on the thread that wrote them (``benchmarks/bench_ab.py --knob rows
--case lstm --row forward`` measures it against the column split). MKL's packed products
keep their split: the adjoint's ``dpre W`` (``32 x 1024 x 256``) was slower split by rows.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np

from . import term_kernel
from .gemm import MIN_PARALLEL_MACS, GemmCall, _blas

_SOURCE = r"""
#include <stddef.h>
typedef size_t (*size_fn)(int, int, int, int);
typedef void (*spack_fn)(int, int, int, int, int, int, float, const float *, int, float *);
typedef void (*dpack_fn)(int, int, int, int, int, int, double, const double *, int, double *);
typedef void (*scompute_fn)(int, int, int, int, int, int, const float *, int, const float *,
                            int, float, float *, int);
typedef void (*dcompute_fn)(int, int, int, int, int, int, const double *, int,
                            const double *, int, double, double *, int);

/* rows (by_rows) or columns [lo, hi) of chunk c, as tg_gemm splits them */
static void tg_block(long extent, long chunks, long c, long *lo, long *hi) {
  *lo = extent * c / chunks; *hi = extent * (c + 1) / chunks;
}

/* bytes of the largest chunk's pack of operand `which` (0: A, 1: B) */
long tg_pack_bytes(void *size, int which, long M, long N, long K, long chunks, long by_rows) {
  long most = 0;
  for (long c = 0; c < chunks; c++) {
    long lo, hi, m = M, n = N;
    tg_block(by_rows ? M : N, chunks, c, &lo, &hi);
    if (by_rows) m = hi - lo; else n = hi - lo;
    long bytes = (long)((size_fn)size)(which ? 162 : 161, m, n, K);
    if (bytes > most) most = bytes;
  }
  return most;
}

void tg_pack(void *pack, int dbl, int which, long M, long N, long K, const char *X, long ld,
             int trans, long chunks, long by_rows, char *packs, long stride, int nthreads) {
  long size = dbl ? 8 : 4;
  #pragma omp parallel for schedule(static) num_threads(nthreads)
  for (long c = 0; c < chunks; c++) {
    long lo, hi, m = M, n = N;
    const char *x = X;
    tg_block(by_rows ? M : N, chunks, c, &lo, &hi);
    if (by_rows) { m = hi - lo; if (!which) x += (trans ? lo : lo * ld) * size; }
    else { n = hi - lo; if (which) x += (trans ? lo * ld : lo) * size; }
    int id = which ? 162 : 161, t = trans ? 112 : 111;
    if (dbl) ((dpack_fn)pack)(101, id, t, m, n, K, 1.0, (const double *)x, ld,
                              (double *)(packs + c * stride));
    else ((spack_fn)pack)(101, id, t, m, n, K, 1.0f, (const float *)x, ld,
                          (float *)(packs + c * stride));
  }
}

void tg_gemm_packed(void *compute, int dbl, int which, long M, long N, long K,
                    const char *A, long lda, int ta, const char *B, long ldb, int tb,
                    char *C, long ldc, long chunks, long by_rows, const char *packs,
                    long stride, int acc, int nthreads) {
  long size = dbl ? 8 : 4;
  int threads = (double)M * N * K >= MIN_PARALLEL_MACS ? nthreads : 1;
  #pragma omp parallel for schedule(static) num_threads(threads) if(threads > 1)
  for (long c = 0; c < chunks; c++) {
    long lo, hi, m = M, n = N;
    const char *a = A, *b = B;
    char *cc = C;
    tg_block(by_rows ? M : N, chunks, c, &lo, &hi);
    if (by_rows) { a += (ta ? lo : lo * lda) * size; cc += lo * ldc * size; m = hi - lo; }
    else { b += (tb ? lo * ldb : lo) * size; cc += lo * size; n = hi - lo; }
    if (m <= 0 || n <= 0) continue;
    if (which) b = packs + c * stride; else a = packs + c * stride;
    int transa = which ? (ta ? 112 : 111) : 151, transb = which ? 151 : (tb ? 112 : 111);
    if (dbl) ((dcompute_fn)compute)(101, transa, transb, m, n, K, (const double *)a, lda,
                                    (const double *)b, ldb, acc ? 1.0 : 0.0, (double *)cc, ldc);
    else ((scompute_fn)compute)(101, transa, transb, m, n, K, (const float *)a, lda,
                                (const float *)b, ldb, acc ? 1.0f : 0.0f, (float *)cc, ldc);
  }
}
"""

_ALIGN = 64  # bytes: MKL's packed panels are read with aligned vector loads
# A ``RowsGemm`` splits rows of ``C`` over the threads, each reading all of ``B``'s rows at
# every step, when they are at most this size (one core's L2 cache on this project's
# machine, 1 MiB): each thread then writes whole rows of ``C``, which the step's kernels,
# splitting the batch's rows the same way, read on the thread that wrote them.


@cache
def _library():
    from .compiler import load

    return load(_SOURCE.replace("MIN_PARALLEL_MACS", f"{float(MIN_PARALLEL_MACS)!r}"))


@cache
def _functions():
    """``(pack_bytes, pack, gemm_packed, mkl)``: the helper's functions and MKL's
    ``{s,d}gemm_pack_get_size / pack / compute`` addresses; None without MKL."""
    blas = _blas()
    if blas.name != "mkl":
        return None
    from .compiler import bind

    mkl = ctypes.CDLL(blas.path)
    names = {n: ctypes.cast(getattr(mkl, f"cblas_{n}"), ctypes.c_void_p).value
             for n in ("sgemm_pack_get_size", "dgemm_pack_get_size", "sgemm_pack",
                       "dgemm_pack", "sgemm_compute", "dgemm_compute")}
    lib = _library()
    L, V, I = ctypes.c_long, ctypes.c_void_p, ctypes.c_int  # noqa: E741
    pack_bytes = bind(lib, "tg_pack_bytes", [V, I, L, L, L, L, L])
    pack_bytes.restype = L
    pack = bind(lib, "tg_pack", [V, I, I, L, L, L, V, L, I, L, L, V, L, I])
    packed = bind(lib, "tg_gemm_packed", [V, I, I, L, L, L, V, L, I, V, L, I, V, L, L, L,
                                          V, L, I, I])
    return pack_bytes, pack, packed, names


def _split(call: GemmCall, threads: int) -> tuple[int, int]:
    """``(by_rows, chunks)``: ``tg_gemm``'s split of a one-batch call over ``threads``,
    one block of rows (``call.by_rows``) or of columns per thread."""
    return call.by_rows, max(1, min(threads, call.M if call.by_rows else call.N))


def takes_term_kernel(call: GemmCall, threads: int) -> bool:
    """Whether ``tg_gemm`` gives every thread's block of the one-batch, one-term call
    ``call`` to ``term_kernel``'s register tiles reading ``B``'s rows where they lie: its
    conditions, from the same constants. A ``B`` stored transposed counts as not (there
    ``tg_gemm`` copies it to rows at every call, or takes dot products of rows)."""
    chunks = _split(call, threads)[1]
    rows = call.M // chunks if call.by_rows else call.M
    cols = call.N if call.by_rows else call.N // chunks
    return bool(call.blas.direct and not call.dbl and not call.tb
                and rows >= term_kernel.TILE_ROWS and cols >= term_kernel.MIN_COLS)


def fixed_operand_product(call: GemmCall, which: int, threads: int,
                          shared_rows_bytes: int = 1 << 20):
    """``call`` with its operand ``which`` fixed over a scan's run, made once per run into
    the layout its product reads fastest (``RowsGemm``, else ``PackedGemm``), or None
    where neither applies or the call takes ``term_kernel``'s kernel as it is (which reads
    ``B``'s rows where they lie and packs only ``A``, for the adjoint's ``dpre W``).
    ``shared_rows_bytes``: see ``RowsGemm.make``."""
    if len(call.terms) == 2 and call.batch == 1 and takes_term_kernel(call, threads):
        return None
    return (RowsGemm.make(call, which, threads, shared_rows_bytes)
            or PackedGemm.make(call, which, threads))


class RowsGemm:
    """A recorded float32 ``GemmCall`` whose ``B``, fixed over a scan's run and stored
    transposed (a weight read as ``h W^T``), is copied to rows at the first call of each
    run, so that the product is ``term_kernel``'s (which reads ``B``'s rows where they lie
    and packs only the small ``A``). ``make`` returns None unless ``tg_gemm`` would then
    take that kernel for every thread's block."""

    @classmethod
    def make(cls, call: GemmCall, which: int, threads: int,
             shared_rows_bytes: int) -> RowsGemm | None:
        """The product, or None; where ``B`` has at most ``shared_rows_bytes`` it may be
        split by rows of ``C`` even when ``M < N`` (module header)."""
        if (which != 1 or not call.tb or call.dbl or call.batch != 1 or len(call.terms) != 2
                or not call.blas.direct):
            return None
        # blocks of rows of C where B is small enough for every thread to read it all
        small = call.K * call.N * 4 <= shared_rows_bytes
        splits = [1, call.by_rows] if small else [call.by_rows]
        for by_rows in splits:
            if takes_term_kernel(call._replace(by_rows=by_rows, tb=0), threads):
                return cls(call._replace(by_rows=by_rows))
        return None

    def __init__(self, call: GemmCall):
        self.rows = np.empty((call.K, call.N), np.float32)
        self.call = call._replace(ldb=call.N, tb=0)
        self.copy = call.blas.rows_copy
        self.ldb = call.ldb
        self.source: int | None = None  # the operand's address, this run

    def new_run(self) -> None:
        self.source = None

    def ready(self) -> bool:
        """Whether this run has made its copy (its later products need only the call)."""
        return self.source is not None

    def run(self, a: int, b: int, c: int, threads: int) -> None:
        rows = self.rows.ctypes.data
        if b != self.source:
            self.copy(rows, b, self.call.K, self.call.N, self.ldb, threads)
            self.source = b
        self.call.run(a, rows, c, threads)


class PackedGemm:
    """A recorded ``GemmCall`` whose operand ``which`` (0: A, 1: B) is the same array over
    a run of a scan: ``run`` packs it on the first call of each run (``new_run``) and
    computes against the pack. ``make`` returns None where the call cannot be packed."""

    @classmethod
    def make(cls, call: GemmCall, which: int, threads: int) -> PackedGemm | None:
        functions = _functions()
        if (functions is None or call.batch != 1 or len(call.terms) != 2
                or call.fn not in (call.blas.sgemm, call.blas.dgemm)):
            return None
        return cls(call, which, threads, functions)

    def __init__(self, call: GemmCall, which: int, threads: int, functions):
        self.call, self.which = call, which
        self.pack_bytes, self.pack, self.packed, names = functions
        prefix = "d" if call.dbl else "s"
        self.pack_fn, self.compute_fn = names[f"{prefix}gemm_pack"], names[
            f"{prefix}gemm_compute"]
        self.by_rows, self.chunks = _split(call, threads)
        per = self.pack_bytes(names[f"{prefix}gemm_pack_get_size"], which, call.M, call.N,
                              call.K, self.chunks, self.by_rows)
        self.stride = -(-per // _ALIGN) * _ALIGN
        self.buffer = np.empty(self.stride * self.chunks + _ALIGN, np.uint8)
        self.packs = -(-self.buffer.ctypes.data // _ALIGN) * _ALIGN
        self.source: int | None = None  # the packed operand's address, this run

    def new_run(self) -> None:
        self.source = None

    def ready(self) -> bool:
        """Whether this run has made its pack (its later products need only the call)."""
        return self.source is not None

    def run(self, a: int, b: int, c: int, threads: int) -> None:
        call = self.call
        source = b if self.which else a
        if source != self.source:
            ld, trans = (call.ldb, call.tb) if self.which else (call.lda, call.ta)
            self.pack(self.pack_fn, call.dbl, self.which, call.M, call.N, call.K, source, ld,
                      trans, self.chunks, self.by_rows, self.packs, self.stride, threads)
            self.source = source
        self.packed(self.compute_fn, call.dbl, self.which, call.M, call.N, call.K, a,
                    call.lda, call.ta, b, call.ldb, call.tb, c, call.ldc, self.chunks,
                    self.by_rows, self.packs, self.stride, call.accumulate, threads)
