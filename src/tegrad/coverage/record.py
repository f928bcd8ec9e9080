"""The report as plain data (``coverage.json``): every row, for pages that render it.

    {"format": 2, "context": "...", "seconds": 602.3, "repeats": 5,
     "summary": [{"category": "activation", "ops": 24, "cases": 38, "passing": 38,
                  "gradcheck": {"PASS": 38, "INCONCLUSIVE": 0, "FAIL": 0}, ...,
                  "timed": 38, "over_1.5x": 2, "over_3x": 0,
                  "slowest": {"name": "gelu[tanh]", "ratio": 1.9} | null}, ...],
     "thresholds": [1.5, 3.0],
     "slowest": [{"name": ..., "category": ..., "ratio": 546.0, "inputs": "bench"}, ...],
     "rows": [{"op": "conv2d", "label": "stride 2, pad 1", "name": "conv2d[stride 2, pad 1]",
               "category": "convolution", "passed": true, "failures": [],
               "agreement": {"worst": 3e-16, "tolerance": 1e-12, ...} | null,
               "structure": {"gather_form": true, "forward_flops": ..., ...} | null,
               "gradcheck": "PASS" | "INCONCLUSIVE" | "FAIL" | null,
               "timing": {"tegrad_forward": 0.0012, ..., "both_ratio": 1.1,
                          "inputs": "bench" | "test x64" | "test", "check_error": 2e-7,
                          "checked": true} | null,
               "errors": {"stage": "first line"}, "seconds": 1.9,
               "cells": {"op": "conv2d", ...}}, ...]}

A stage that did not run (or raised: see ``errors``) is null. Times are in seconds.
A case's ``ratio`` in ``slowest`` is its forward+backward time over torch's (its
forward's where nothing is differentiable); ``slowest`` lists ``render.WORST`` cases.
Numbers that are not finite (a shape mismatch's error is infinite) are written as null,
so the file is strict JSON. ``cells`` holds the strings of the printed tables, under
their headers, for a page that wants to show exactly what the Markdown shows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from .render import HEADERS, SLOW, VERDICTS, VERY_SLOW, cells, slowest, speed, summary_rows
from .run import Row

FORMAT = 2  # 2: timing inputs and check, counts over the thresholds, the slowest cases


def _number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _agreement(row: Row) -> dict | None:
    a = row.agreement
    if a is None:
        return None
    return {"worst": _number(a.worst), "ok": a.ok, "tolerance": a.tolerance,
            "forward": [_number(e) for e in a.forward],
            "gradients": {name: _number(e) for name, e in a.gradients.items()},
            "generation_seconds": a.generation_seconds}


def _structure(row: Row) -> dict | None:
    s = row.structure
    if s is None:
        return None
    return {"gradients": len(s.grads), "gather_form": s.gather_form if s.grads else None,
            "scatters": list(s.scatters), "oversized": list(s.oversized),
            "forward_flops": s.forward_flops, "backward_flops": s.backward_flops,
            "cost_ratio": s.cost_ratio if s.grads else None}


def _timing(row: Row) -> dict | None:
    t = row.timing
    if t is None:
        return None
    return {"tegrad_forward": t.tegrad_forward, "torch_forward": t.torch_forward,
            "tegrad_both": t.tegrad_both, "torch_both": t.torch_both,
            "first_call": t.first_call, "threads": t.threads,
            "forward_ratio": _number(t.forward_ratio), "both_ratio": _number(t.both_ratio),
            "inputs": t.inputs, "check_error": _number(t.check_error), "checked": t.checked}


def row_record(row: Row) -> dict:
    """One case's results as JSON values (the layout in the module docstring)."""
    c = row.case
    return {"op": c.op, "label": c.label, "name": c.name, "category": c.category,
            "passed": row.passed, "failures": row.failures,
            "agreement": _agreement(row), "structure": _structure(row),
            "gradcheck": row.gradcheck, "timing": _timing(row),
            "errors": dict(row.errors), "seconds": row.seconds,
            "cells": dict(zip(HEADERS, cells(row), strict=True))}


def json_document(rows: Sequence[Row], context: str, seconds: float, repeats: int) -> str:
    summary = [{"category": s.category, "ops": s.ops, "cases": s.cases, "passing": s.passing,
                "gradcheck": {v: s.verdicts[v] for v in VERDICTS}, "gather_form": s.gather,
                "median_forward_ratio": s.median_forward, "median_both_ratio": s.median_both,
                "timed": s.timed, f"over_{SLOW:g}x": s.slow, f"over_{VERY_SLOW:g}x": s.very_slow,
                "slowest": None if s.slowest is None else {"name": s.slowest[0],
                                                           "ratio": _number(s.slowest[1])}}
               for s in summary_rows(rows)]
    worst = [{"name": r.case.name, "category": r.case.category, "ratio": _number(speed(r)),
              "inputs": r.timing.inputs} for r in slowest(rows)]
    document = {"format": FORMAT, "context": context, "seconds": seconds, "repeats": repeats,
                "summary": summary, "thresholds": [SLOW, VERY_SLOW], "slowest": worst,
                "rows": [row_record(r) for r in rows]}
    return json.dumps(document, indent=1, allow_nan=False) + "\n"
