"""Forward values a scan keeps instead of the backward recomputing them.

A backward through a scan reads the forward step's values (an LSTM's ``h W_hh^T`` at
every step), and ``autodiff/scan_rules.py`` recomputes them as computes over all steps
``V[r]``, each recorded in ``ir.scan.STEP_VALUES`` as ``(op, x)``: ``V[r]`` is step
compute ``x`` at step ``k + r`` of ``op``'s forward run. When the plan also runs that
forward scan, and its step plan computes ``x`` as a kernel of its own (a contraction: it
is materialized at every step anyway), the scan writes ``x`` at each step into ``V``'s
rows and ``V`` needs no kernel: an LSTM's backward then does one ``(T N) x H x 4H``
product less. ``V``'s readers come after the scan, which they read through ``V``.

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
        if scan is not None and _keepable(scan, found[1], k.tensor):
            scan.save(found[1], k.tensor)
            continue
        kept.append(k)
    return kept


def _keepable(scan, x, values) -> bool:
    op = scan.op
    materialized = {k.tensor for k in scan.plan.kernels if k.kind == "contraction"}
    return (x in materialized and values.dtype == x.dtype
            and values.shape == (op.length - op.init_rows, *x.shape))
