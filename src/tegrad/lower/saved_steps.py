"""Step values a scan keeps instead of a later kernel recomputing them.

A backward through a scan reads the forward step's values (an LSTM's activated gates at
every step), and ``autodiff/scan_rules.py`` recomputes them as computes over all steps
``V[r]``, each recorded in ``ir.scan.STEP_VALUES`` as ``(op, x, None)``: ``V[r]`` is step
compute ``x`` at step ``k + r`` of ``op``'s forward run. When the plan also runs that
forward scan, and its step plan has ``x`` as a kernel (a contraction or an elementwise
kernel; or an operand of a contraction), the scan writes ``x`` at each step into ``V``'s
rows and ``V`` needs no kernel: ``x`` becomes an output of the step plan, so fusion keeps
it and grouping (``grouping.py``) writes it from the loop of the kernel that
reads it. An LSTM's backward then neither rebuilds the pre-activations over all steps nor
evaluates a sigmoid or tanh: its activations' derivatives read the kept gates
(``s (1 - s)``, ``1 - tanh^2``: ``autodiff/reverse.py``'s ``reuse_forward``). ``V``'s
readers come after the scan, which they read through ``V``.

The input gradients after an adjoint scan likewise recompute values the adjoint made at
each of its steps (an LSTM's pre-activation gradient, the operand of the adjoint's
product): ``(adjoint op, x, flip)``, adjoint step ``r'`` holding row ``flip - r'``.

A value is kept only where something left reads it: once the gates are kept, the
pre-activations (and the products) that their recomputation read are not, and of the
adjoint's values only those the gradients read.
"""

from __future__ import annotations

from ..ir.scan import STEP_VALUES
from .kernels import Contraction, ScanKernel, needs


def keep_step_values(kernels: list, outputs: list, keep_kernels: bool = True) -> list:
    """``kernels`` with the recomputations of step values that a scan of the plan can keep
    removed, each scan kernel's ``saved`` (tensor over the steps -> step compute) set.
    A value is kept only where a kernel left, or an output, reads it: once an LSTM's
    activated gates are kept, the pre-activations they were recomputed from are not.
    ``keep_kernels`` (``Options.keep_step_kernels``) False: only products and their
    operands, which the step writes anyway, are kept, not elementwise step kernels."""
    scans = {k.op: k for k in kernels if isinstance(k, ScanKernel)}
    if not scans:
        return kernels
    chosen: dict = {}  # values -> (scan kernel, step compute, flip)
    kept = []
    for k in kernels:
        found = STEP_VALUES.get(k.tensor) if not isinstance(k, ScanKernel) else None
        scan = scans.get(found[0]) if found is not None else None
        if scan is not None and _keepable(scan, found[1], k.tensor, found[2], chosen,
                                          keep_kernels):
            chosen[k.tensor] = (scan, found[1], found[2])
            continue
        kept.append(k)
    # a scan's reads do not depend on what it keeps: each counts
    needed = needs(kept, outputs, always=lambda k: isinstance(k, ScanKernel))[0]
    for values, (scan, x, flip) in chosen.items():
        if values in needed:
            scan.save(x, values, flip)
    return kept


def _keepable(scan, x, values, flip, chosen: dict, keep_kernels: bool) -> bool:
    op = scan.op
    materialized = set()
    for k in scan.plan.kernels:
        if keep_kernels or isinstance(k, Contraction):
            materialized.add(k.tensor)
        if isinstance(k, Contraction):
            materialized.update(f.tensor for p in k.contraction.pieces for f in p.factors)
    if flip is None:  # rows k.. of the run
        covered = values.shape[0] == op.length - op.init_rows
    else:  # steps [k, T) write rows flip - T + 1 .. flip - k: every row of values
        covered = flip - op.length + 1 <= 0 and flip - op.init_rows >= values.shape[0] - 1
    same = all(f == flip for s, y, f in chosen.values() if s is scan and y is x)  # one array
    return (covered and same and x in materialized and values.dtype == x.dtype
            and values.shape[1:] == x.shape)
