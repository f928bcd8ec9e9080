"""Which scan histories a plan stores as checkpoints (``tg.scan(..., checkpoint=k)``).

A scan with ``k0`` init rows and ``T`` rows runs steps ``t in [k0, T)``. With
``checkpoint=k`` they fall into segments ``j = 0, 1, ...`` of ``k`` steps,
``[s_j, e_j)`` with ``s_j = k0 + j k`` and ``e_j = min(s_j + k, T)``. State ``n`` of
largest lag ``L_n`` (its update reads ``S_n[t - 1] ... S_n[t - L_n]``) restarts at ``s_j``
from rows ``[max(k0, s_j - L_n), s_j)`` of every checkpointed state (rows below ``k0`` are
the init, always kept), so a checkpointed history costs

    k0 + sum_j min(L_n, s_j - k0) + c k      rows instead of T,

``c`` segments being held at once by the executor (``segments_cached``): about
``T L / k + c k`` rows, least near ``k = sqrt(T L / c)``; reading it costs one more run of
the steps (``backends/host/scan_run.py``).

The rule (per plan, since a history's readers depend on what is built): state ``n`` of a
scan with ``op.checkpoint`` set is checkpointed when its history is not a plan output and
every kernel that reads it is another scan reading it row by row through its step graph
(``step.sliced``: ``S_n[a t + b]``, as the adjoint scan does); a read of the whole tensor
(any other kernel, a scan's init or ``step.full``) keeps it whole. The scan's own update
reads its states through lags, not through the history, so it never counts.

Trade-off the plan notes name: recomputing a segment runs the step program on the scan's
inputs, so those arrays stay alive until the last row read of the checkpointed history
(in a backward: through the adjoint scan) even where nothing else reads them any more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.scan import StepGraph
from ..ir.tensor import Placeholder, Tensor
from ..ir.traverse import tensors_read
from .kernels import ScanKernel


@dataclass(frozen=True)
class Segments:
    """Steps ``[first, length)`` cut into segments of ``every`` steps."""

    first: int  # k0, the first step (rows before it are the init)
    length: int  # T
    every: int  # k

    @property
    def count(self) -> int:
        return -(-(self.length - self.first) // self.every)

    def bounds(self, j: int) -> tuple[int, int]:
        start = self.first + j * self.every
        return start, min(start + self.every, self.length)

    def of_row(self, row: int) -> int:
        """The segment holding step ``row`` (``row >= first``)."""
        return (row - self.first) // self.every

    def restart_rows(self, j: int, lag: int) -> range:
        """The rows of a state of largest lag ``lag`` that segment ``j`` restarts from
        (beyond the init rows)."""
        start = self.bounds(j)[0]
        return range(max(self.first, start - lag), start)


def largest_lags(step: StepGraph, states: int) -> list[int]:
    """Per state, the largest lag ``c`` its step graph reads (``S[t - c]``; 0: none)."""
    lags = [0] * states
    for n, lag in step.lagged:
        lags[n] = max(lags[n], lag)
    return lags


def mark_checkpoints(plan):
    """Set ``checkpointed`` and ``segments_cached`` on the plan's scan kernels whose op has
    ``checkpoint`` (see the module header); add a note per such scan. Returns ``plan``."""
    wanted = [k for k in plan.kernels if isinstance(k, ScanKernel) and k.op.checkpoint]
    if not wanted:
        return plan
    whole_reader: dict[Tensor, str] = {t: "a plan output" for t in plan.outputs}
    row_reads: dict[Tensor, list[tuple[object, int, int]]] = {}
    last_read: dict[Tensor, int] = {}
    for index, kernel in enumerate(plan.kernels):
        if isinstance(kernel, ScanKernel):
            consumer = kernel
            wholes = [*consumer.op.inits, *consumer.step.full]
            for u, a, b in consumer.step.sliced:
                row_reads.setdefault(u, []).append((consumer, a, b))
                last_read[u] = index
            reader = f"scan {consumer.op.name}"
        else:
            wholes = [*tensors_read(kernel.tensor.body), *kernel.reads_and_makes()[0]]
            reader = kernel.tensor.name
        for t in wholes:
            whole_reader.setdefault(t, reader)
            last_read[t] = index
    for scan in wanted:
        outputs = scan.op.outputs
        scan.checkpointed = frozenset(n for n, out in enumerate(outputs)
                                      if out not in whole_reader)
        scan.unread = frozenset(n for n in scan.checkpointed if outputs[n] not in row_reads)
        scan.segments_cached = _segments_touched_per_step(
            scan, [row_reads.get(outputs[n], []) for n in scan.checkpointed])
        plan.notes.append(_note(scan, plan.kernels, whole_reader, last_read))
    return plan


def _segments_touched_per_step(scan, reads) -> int:
    """How many segments one step of a reader can touch: reads ``S[a t + b]`` with the same
    ``a`` at offsets spread over ``d`` rows touch at most ``1 + ceil(d / k)`` segments.
    Holding that many, a reader moving monotonically in time recomputes each segment once."""
    k = scan.op.checkpoint
    per_reader: dict[int, dict[int, list[int]]] = {}
    for consumer, a, b in (r for rs in reads for r in rs):
        per_reader.setdefault(id(consumer), {}).setdefault(a, []).append(b)
    counts = [sum(1 + math.ceil((max(bs) - min(bs)) / k) for bs in by_a.values())
              for by_a in per_reader.values()]
    return max([1, *counts])


def stored_rows(scan, n: int) -> int:
    """Rows of state ``n``'s history the executor holds at most: all ``T`` when it is kept
    whole; else the init rows, the restart rows of every segment and the cached segments."""
    op = scan.op
    if n not in scan.checkpointed:
        return op.length
    segments = Segments(op.init_rows, op.length, op.checkpoint)
    lag = largest_lags(scan.step, len(op.states))[n]
    restart = sum(len(segments.restart_rows(j, lag)) for j in range(segments.count))
    cached = min(scan.segments_cached, segments.count) * min(op.checkpoint,
                                                             op.length - op.init_rows)
    return op.init_rows + restart + cached


def _nbytes(t: Tensor, rows: int | None = None) -> int:
    per_row = math.prod(t.shape[1:]) if rows is not None else math.prod(t.shape)
    return (rows if rows is not None else 1) * per_row * np.dtype(t.dtype).itemsize


def _size(nbytes: int) -> str:
    for unit, scale in (("MB", 2**20), ("KB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _note(scan, kernels, whole_reader: dict, last_read: dict) -> str:
    op = scan.op
    here = next(i for i, k in enumerate(kernels) if k is scan)
    parts = [f"scan {op.name}: checkpoint={op.checkpoint}"]
    for n, out in enumerate(op.outputs):
        if n in scan.checkpointed:
            parts.append(f"{out.name} checkpointed ({_size(_nbytes(out))} of history -> at "
                         f"most {_size(_nbytes(out, stored_rows(scan, n)))})")
        else:
            parts.append(f"{out.name} kept whole (read whole by {whole_reader[out]})")
    if scan.checkpointed:
        until = max(last_read.get(op.outputs[n], here) for n in scan.checkpointed)
        whole = [out for n, out in enumerate(op.outputs) if n not in scan.checkpointed]
        held = [t for t in [*op.external, *whole]  # placeholders are fed: alive anyway
                if not isinstance(t, Placeholder) and last_read.get(t, here) < until]
        if held:
            names = ", ".join(f"{t.name} ({_size(_nbytes(t))})" for t in held)
            last = kernels[until]
            reader = f"scan {last.op.name}" if isinstance(last, ScanKernel) else last.tensor.name
            parts.append(f"recomputing keeps {names} alive until {reader} (the last row read)")
    return "; ".join(parts)
