"""Step values a scan keeps instead of a later kernel recomputing them.

A backward through a scan reads the forward step's values (an LSTM's ``h W_hh^T`` at
every step), and ``autodiff/scan_rules.py`` recomputes them as computes over all steps
``V[r]``, each recorded in ``ir.scan.STEP_VALUES`` as ``(op, x, None)``: ``V[r]`` is step
compute ``x`` at step ``k + r`` of ``op``'s forward run. When the plan also runs that
forward scan, and its step plan materializes ``x`` (a contraction, or an operand of one:
it is written at every step anyway), the scan writes ``x`` at each step into ``V``'s rows
and ``V`` needs no kernel: an LSTM's backward then does one ``(T N) x H x 4H`` product
less. ``V``'s readers come after the scan, which they read through ``V``.

The input gradients after an adjoint scan likewise recompute values the adjoint made at
each of its steps (an LSTM's pre-activation gradient, the operand of the adjoint's
product): ``(adjoint op, x, flip)``, adjoint step ``r'`` holding row ``flip - r'``.

Other step values (elementwise gates, fused into the step's kernels) stay recomputed: to
keep them the step would have to write them out, costing a kernel call per step.
"""

from __future__ import annotations

from ..ir.scan import STEP_VALUES


def keep_step_values(kernels: list) -> list:
    """``kernels`` with the recomputations of step values that a scan of the plan can keep
    removed, each scan kernel's ``saved`` (tensor over the steps -> step compute) set."""
    scans = {k.detail.op: k.detail for k in kernels if k.kind == "scan"}
    if not scans:
        return kernels
    kept = []
    for k in kernels:
        found = STEP_VALUES.get(k.tensor) if k.kind != "scan" else None
        scan = scans.get(found[0]) if found is not None else None
        if scan is not None and _keepable(scan, found[1], k.tensor, found[2]):
            scan.save(found[1], k.tensor, found[2])
            continue
        kept.append(k)
    return kept


def _keepable(scan, x, values, flip) -> bool:
    op = scan.op
    materialized = set()
    for k in scan.plan.kernels:
        if k.kind == "contraction":
            materialized.add(k.tensor)
            materialized.update(f.tensor for p in k.detail.pieces for f in p.factors)
    if flip is None:  # rows k.. of the run
        covered = values.shape[0] == op.length - op.init_rows
    else:  # steps [k, T) write rows flip - T + 1 .. flip - k: every row of values
        covered = flip - op.length + 1 <= 0 and flip - op.init_rows >= values.shape[0] - 1
    same = all(scan.flips[v] == flip for v, y in scan.saved.items() if y is x)  # one array
    return (covered and same and x in materialized and values.dtype == x.dtype
            and values.shape[1:] == x.shape)
