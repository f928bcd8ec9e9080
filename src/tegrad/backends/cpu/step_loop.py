"""A scan's steps in one C call: the time loop of a traced step program, without Python.

A step trace (``step_trace.py``) runs a step as a few C calls (compiled kernels, recorded
products and copies), but each still costs Python: the feed's rows looked up and
checked, the call's arguments converted, the recipes' loops: for an LSTM's step (a short
product and a shorter kernel) a large part of the step's time.

Once the trace exists, every address a step uses is an affine function of ``t``: a
lagged state's row ``S[t - c]``, an input's row ``U[a t + b]`` (zeros outside), an
output's row in its history or kept values (``t - k``, or ``flip - t``; the trace's own
buffer outside), the trace's buffers and the recipes' workspaces. ``StepLoop`` writes
them as a table of slots and the step's calls as a flat code of int64 words, and
``tg_steps`` runs steps ``[start, stop)``: per step, each slot's address, then each call.

Slot (7 words): kind, base, row bytes, coefficient, offset, rows, fallback address.
``FIXED``: ``base``. ``ROW``: ``base + r * row_bytes`` for ``r = coefficient t +
offset`` in ``[0, rows)``, else the fallback. ``TIME``: the 0-d int32 buffer at ``base``,
set to ``t``.

Calls (an opcode, then its words; operands are a slot and a byte offset):

- ``KERNEL`` fn, err, n, slots[n]: ``fn(pointers, err, threads)``; a nonzero ``err[0]``
  stops the loop at that step (the caller raises the kernel's error);
- ``GEMM`` tg_gemm, then ``GemmCall``'s words (``gemm.py``);
- ``PACKED`` tg_gemm_packed, then ``PackedGemm``'s (its pack made before the loop);
- ``COPY`` tg_copy, then ``CopyCall``'s (``copy.py``);
- ``ZERO`` slot, bytes: a product's output that its calls do not cover.

Only the plain case is taken: a scan whose histories are whole arrays (not
checkpointed), every output written in place (its row has the trace buffer's layout),
and no output that is a fed value. Otherwise the steps stay in Python. The first step of
a run makes or uses the trace in Python, and a program's first run also its second (its
products' packs are made there).

``benchmarks/bench_lstm.py`` and ``bench_cpu.py``'s LSTM rows measure the scans this
serves.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np

from ...ir import dtype as dt
from . import copy as copies
from .gemm import GemmCall
from .packed import PackedGemm, RowsGemm
from .replay import array_address

FIXED, ROW, TIME = 0, 1, 2
KERNEL, GEMM, PACKED, COPY, ZERO = range(5)

_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
enum { FIXED, ROW, TIME };
enum { KERNEL, GEMM, PACKED, COPY, ZERO };
typedef void (*kernel_fn)(void **, long *, int);
typedef void (*gemm_fn)(void *, int, long, long, long, long, const char *, long, long, int,
                        const char *, long, long, int, char *, long, long, const long *, long,
                        int, int, int);
typedef void (*packed_fn)(void *, int, int, long, long, long, const char *, long, int,
                          const char *, long, int, char *, long, long, long, const char *,
                          long, int, int);
typedef void (*copy_fn)(char *, const char *, int, const long *, const long *, const long *,
                        long, int);

/* steps [start, stop); returns -1, or the step at which a kernel set its error slot */
long tg_steps(long start, long stop, long nslots, const long *slots, const long *code,
              long ncode, int nthreads) {
  char **at = malloc(nslots * sizeof(char *));
  void **ptrs = malloc((nslots + 1) * sizeof(void *));
  if (!at || !ptrs) { free(at); free(ptrs); return -2; }
  long failed = -1;
  for (long t = start; t < stop && failed < 0; t++) {
    for (long s = 0; s < nslots; s++) {
      const long *d = slots + 7 * s;
      if (d[0] == ROW) {
        long r = d[3] * t + d[4];
        at[s] = (char *)(r >= 0 && r < d[5] ? d[1] + r * d[2] : d[6]);
      } else {
        at[s] = (char *)d[1];
        if (d[0] == TIME) *(int32_t *)at[s] = (int32_t)t;
      }
    }
    for (long i = 0; i < ncode && failed < 0;) {
      const long *w = code + i;
      switch (w[0]) {
      case KERNEL: {
        long n = w[3];
        for (long k = 0; k < n; k++) ptrs[k] = at[w[4 + k]];
        ((kernel_fn)w[1])(ptrs, (long *)w[2], nthreads);
        if (((long *)w[2])[0]) failed = t;
        i += 4 + n;
        break;
      }
      case GEMM:  /* fn blas dbl batch M N K (a off) sa lda ta (b off) sb ldb tb (c off) sc
                     ldc terms nterms acc by_rows */
        ((gemm_fn)w[1])((void *)w[2], (int)w[3], w[4], w[5], w[6], w[7], at[w[8]] + w[9],
                        w[10], w[11], (int)w[12], at[w[13]] + w[14], w[15], w[16],
                        (int)w[17], at[w[18]] + w[19], w[20], w[21], (const long *)w[22],
                        w[23], (int)w[24], (int)w[25], nthreads);
        i += 26;
        break;
      case PACKED:  /* fn compute dbl which M N K (a off) lda ta (b off) ldb tb (c off) ldc
                       chunks by_rows packs stride acc */
        ((packed_fn)w[1])((void *)w[2], (int)w[3], (int)w[4], w[5], w[6], w[7],
                          at[w[8]] + w[9], w[10], (int)w[11], at[w[12]] + w[13], w[14],
                          (int)w[15], at[w[16]] + w[17], w[18], w[19], w[20],
                          (const char *)w[21], w[22], (int)w[23], nthreads);
        i += 24;
        break;
      case COPY:  /* fn (dst off) (src off) ndim shape ds ss size parallel */
        ((copy_fn)w[1])(at[w[2]] + w[3], at[w[4]] + w[5], (int)w[6], (const long *)w[7],
                        (const long *)w[8], (const long *)w[9], w[10],
                        w[11] ? nthreads : 1);
        i += 12;
        break;
      case ZERO:
        memset(at[w[1]], 0, w[2]);
        i += 3;
        break;
      default:
        failed = -3;
      }
    }
  }
  free(at);
  free(ptrs);
  return failed;
}
"""


@cache
def _tg_steps():
    from .compiler import bind, load

    fn = bind(load(_SOURCE), "tg_steps", [ctypes.c_long, ctypes.c_long, ctypes.c_long,
                                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long,
                                          ctypes.c_int])
    fn.restype = ctypes.c_long
    return fn


def _address(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def _layout(rows) -> tuple | None:
    """``(shape, strides, dtype)`` of one row of ``rows.array`` (``scan_run.StepRows``);
    None when it is not an array (a checkpointed history: rows recomputed on demand)."""
    a = rows.array
    return (a.shape[1:], a.strides[1:], a.dtype) if type(a) is np.ndarray else None


class StepLoop:
    """The code of one traced step (``trace``) over the rows ``fed`` (placeholder ->
    ``scan_run.StepRows``, ``"time"``, or the array of an input fixed over the run) and
    ``targets`` (per program output: ``StepRows``, or None: nowhere). ``make`` returns
    None where the plain case does not hold (see the module header), or a product's pack
    is not made yet this run."""

    @classmethod
    def make(cls, trace, fed: dict, targets: list) -> StepLoop | None:
        if (trace.calls is None or len(trace.forms) != len(trace.calls)
                or not all(pack.ready() for pack in trace.packs)):
            return None
        loop = cls(trace)
        return loop if loop._build(fed, targets) else None

    def __init__(self, trace):
        self.trace = trace
        self.slots: list[list[int]] = []
        self.code: list[int] = []
        self.held: list = []  # arrays whose addresses the code holds

    def _build(self, fed: dict, targets: list) -> bool:
        trace = self.trace
        table: dict[int, list[int]] = {}
        for slot, address in enumerate(trace.addresses):  # the trace's buffers
            table[slot] = [FIXED, address, 0, 0, 0, 0, 0]
        for slot, p, dtype, strides in trace.fed:
            how = fed.get(p)
            if how is None:
                return False
            if isinstance(how, np.ndarray):  # fixed over the run
                if how.dtype != dtype or how.strides != strides:
                    return False
                self.held.append(how)
                table[slot] = [FIXED, array_address(how), 0, 0, 0, 0, 0]
            elif isinstance(how, str):
                if np.dtype(dtype) != np.dtype(dt.INDEX):
                    return False
                buffer = np.zeros((), dtype)
                self.held.append(buffer)
                table[slot] = [TIME, array_address(buffer), 0, 0, 0, 0, 0]
            else:
                layout = _layout(how)
                if layout is None or layout[2] != dtype or layout[1] != strides:
                    return False
                table[slot] = self._rows(how, how.outside)
        for buffer, t in trace.outputs:
            if buffer is None:
                return False  # an output that is a fed value: copied in Python
            table[trace.slot[t]] = [FIXED, array_address(buffer), 0, 0, 0, 0, 0]
        placed = set()
        for (buffer, t), rows in zip(trace.outputs, targets, strict=True):
            if rows is None:
                continue
            if t in placed:
                return False  # (a second target is a copy of the first)
            placed.add(t)
            if _layout(rows) != (buffer.shape, buffer.strides, buffer.dtype):
                return False
            table[trace.slot[t]] = self._rows(rows, buffer)
        self.slots = [table[s] for s in range(len(trace.addresses))]
        for form in trace.forms:
            if not self._emit(form):
                return False
        return True

    def _rows(self, rows, outside: np.ndarray) -> list[int]:
        a = rows.array
        self.held += [a, outside]
        return [ROW, array_address(a), a.strides[0], rows.coefficient, rows.offset, a.shape[0],
                array_address(outside)]

    def _slot_of(self, address: int) -> int:
        """A fixed slot at ``address`` (a recipe's workspace)."""
        self.slots.append([FIXED, address, 0, 0, 0, 0, 0])
        return len(self.slots) - 1

    def _emit(self, form) -> bool:
        kind = form[0]
        if kind == "kernel":
            _, compiled, slots = form
            self.code += [KERNEL, _address(compiled.bound()), compiled.err_address,
                          len(slots), *slots]
            return True
        _, recipe, slots, tensor, actions = form
        owned = [self._slot_of(a) for a in recipe.owned_addresses()]
        where = [*slots, *owned]  # a recipe's operand k: the trace slot or workspace
        if not recipe.covers:
            self.code += [ZERO, self.trace.slot[tensor], self.trace.buffers[tensor].nbytes]
        for call, operands in actions or recipe.actions:
            ops = [(where[k], offset) for k, offset in operands]
            if not self._emit_call(call, ops):
                return False
        return True

    def _emit_call(self, call, ops) -> bool:
        if isinstance(call, RowsGemm):
            if not call.ready():
                return False
            (a, a_off), _, (c, c_off) = ops
            ops = [(a, a_off), (self._slot_of(call.rows.ctypes.data), 0), (c, c_off)]
            call = call.call
        if isinstance(call, GemmCall):
            (a, a_off), (b, b_off), (c, c_off) = ops
            self.held.append(call.terms)
            self.code += [GEMM, _address(call.blas.helper), call.fn, call.dbl, call.batch,
                          call.M, call.N, call.K, a, a_off, call.sa, call.lda, call.ta, b,
                          b_off, call.sb, call.ldb, call.tb, c, c_off, call.sc, call.ldc,
                          ctypes.addressof(call.terms), len(call.terms) // 2,
                          call.accumulate, call.by_rows]
            return True
        if isinstance(call, PackedGemm):
            if not call.ready():
                return False
            (a, a_off), (b, b_off), (c, c_off) = ops
            g = call.call
            self.code += [PACKED, _address(call.packed), call.compute_fn, g.dbl,
                          call.which, g.M, g.N, g.K, a, a_off, g.lda, g.ta, b, b_off, g.ldb,
                          g.tb, c, c_off, g.ldc, call.chunks, call.by_rows, call.packs,
                          call.stride, g.accumulate]
            return True
        if isinstance(call, copies.CopyCall):
            (d, d_off), (s, s_off) = ops
            self.code += [COPY, _address(copies.helper()), d, d_off, s, s_off, call.ndim,
                          *call.addresses, call.itemsize, int(call.parallel)]
            return True
        return False

    def run(self, start: int, stop: int, threads: int) -> int:
        """Steps ``[start, stop)``; -1, or the step whose kernel failed."""
        slots = np.array(self.slots, np.int64).reshape(-1)
        code = np.array(self.code, np.int64)
        return _tg_steps()(start, stop, len(self.slots), array_address(slots), array_address(code),
                           len(code), threads)
