"""Cases: reductions (``tg.nn.sum``, ``mean``, ``max``, ``var``, ``norm``, ``argmax``...)
against torch."""

from __future__ import annotations

import numpy as np

from ..cases import away_from_zero, case, distinct, normal

CAT = "reduction"
BENCH = normal((4096, 1024))


def _values(name: str):
    """torch.max/min with a ``dim`` return ``(values, indices)``: keep the values."""
    def call(x, *args, **kwargs):
        import torch

        out = getattr(torch, name)(x, *args, **kwargs)
        return out if isinstance(out, torch.Tensor) else out.values
    return call


def _apart(*shapes):
    """Distinct values per tensor, and the tensors offset from each other (no ties
    between them either)."""
    def make(rng):
        return [a + 0.03 * k for k, a in enumerate(distinct(*shapes)(rng))]
    return make


def _ties(shape):
    """Small integers as floats: many ties (which index argmax/argmin pick)."""
    return lambda rng: [rng.integers(0, 3, size=shape).astype(np.float64)]


def _near_one(shape, zero_rows: bool = False):
    """Values within 0.1% of 1 (a product of a million stays finite); ``zero_rows``: a
    zero in every third row and two in every fifth (the gradient's zero cases)."""
    def make(rng):
        x = rng.uniform(0.999, 1.001, size=shape)
        if zero_rows:
            x[::3, 1] = 0.0
            x[::5, [2, 7]] = 0.0
        return [x]
    return make


def _with_zeros(shape):
    return lambda rng: [rng.integers(-1, 2, size=shape).astype(np.float64)]


# sum and mean: one dim, several dims, negative dims, keepdim, all dims
for op in ("sum", "mean"):
    case(op, "all dims", normal((3, 4, 2)), ref=f"torch.{op}", category=CAT, bench=BENCH)
    case(op, "dim 1", normal((3, 4, 2)), kwargs=dict(dim=1), ref=f"torch.{op}",
         category=CAT, bench=normal((4096, 1024)))
    case(op, "dims (0, 2), keepdim", normal((3, 4, 2)), kwargs=dict(dim=(0, 2), keepdim=True),
         ref=f"torch.{op}", category=CAT)
    case(op, "dim -1", normal((3, 4)), kwargs=dict(dim=-1), ref=f"torch.{op}", category=CAT)
    case(op, "size-1 dim", normal((3, 1, 2)), kwargs=dict(dim=1), ref=f"torch.{op}",
         category=CAT)

# products over a scaled axis of the test values would overflow: benches near 1
case("prod", "all dims", away_from_zero((3, 4), lo=0.5), ref="torch.prod", category=CAT,
     bench=_near_one((1024, 1024)))
case("prod", "dim 1, keepdim", away_from_zero((3, 5, 2), lo=0.5),
     kwargs=dict(dim=1, keepdim=True), ref="torch.prod", category=CAT,
     bench=_near_one((4096, 1024)))
case("prod", "zeros in rows", lambda rng: [np.array([[2.0, 0.0, -1.5], [0.0, 3.0, 0.0],
                                                     [0.5, 1.5, -2.0]])],
     kwargs=dict(dim=1), ref="torch.prod", category=CAT,
     bench=_near_one((4096, 1024), zero_rows=True))

for op in ("max", "min"):
    case(op, "all dims", distinct((3, 4)), ref=f"torch.{op}", category=CAT, bench=BENCH)
    case(op, "dim 1", distinct((3, 4, 2)), kwargs=dict(dim=1), ref=_values(op),
         category=CAT, bench=distinct((4096, 1024)))
    case(op, "dim -1, keepdim", distinct((3, 4)), kwargs=dict(dim=-1, keepdim=True),
         ref=_values(op), category=CAT)
    case(op, "elementwise other", _apart((3, 4), (4,)), ref=f"torch.{op}", category=CAT)

for op in ("amax", "amin"):
    case(op, "all dims", distinct((3, 4, 2)), ref=f"torch.{op}", category=CAT, bench=BENCH)
    case(op, "dims (0, 2), keepdim", distinct((3, 4, 2)), kwargs=dict(dim=(0, 2), keepdim=True),
         ref=f"torch.{op}", category=CAT)
    case(op, "dim 1", distinct((3, 4)), kwargs=dict(dim=1), ref=f"torch.{op}", category=CAT)

for op in ("var", "std"):
    case(op, "all dims", normal((3, 4)), ref=f"torch.{op}", category=CAT, bench=BENCH)
    case(op, "dim 1", normal((3, 5, 2)), kwargs=dict(dim=1), ref=f"torch.{op}",
         category=CAT, bench=normal((4096, 1024)))
    case(op, "dims (0, 2), correction 0, keepdim", normal((3, 4, 2)),
         kwargs=dict(dim=(0, 2), correction=0, keepdim=True), ref=f"torch.{op}", category=CAT)
    case(op, "unbiased False", normal((3, 4)), kwargs=dict(dim=0, unbiased=False),
         ref=f"torch.{op}", category=CAT)
    case(op, "correction 2", normal((3, 6)), kwargs=dict(dim=1, correction=2),
         ref=f"torch.{op}", category=CAT)

# norm: each p (vector norms; "fro" is the 2-norm over at most 2 dims)
case("norm", "fro", normal((3, 4)), ref="torch.norm", category=CAT, bench=BENCH)
case("norm", "fro, dims (1, 2), keepdim", normal((2, 3, 4)),
     kwargs=dict(p="fro", dim=(1, 2), keepdim=True), ref="torch.norm", category=CAT)
case("norm", "p 2, dim 1", normal((3, 4)), kwargs=dict(p=2, dim=1), ref="torch.norm",
     category=CAT, bench=normal((4096, 1024)))
case("norm", "p 1", away_from_zero((3, 4)), kwargs=dict(p=1, dim=0), ref="torch.norm",
     category=CAT)
case("norm", "p inf", distinct((3, 4)), kwargs=dict(p=float("inf"), dim=1), ref="torch.norm",
     category=CAT)
case("norm", "p -inf", distinct((3, 4)), kwargs=dict(p=float("-inf")), ref="torch.norm",
     category=CAT)
case("norm", "p 3", away_from_zero((3, 4)), kwargs=dict(p=3, dim=(0, 1)), ref="torch.norm",
     category=CAT)
case("norm", "p 0.5", away_from_zero((3, 4)), kwargs=dict(p=0.5, dim=1), ref="torch.norm",
     category=CAT)
case("norm", "p 0", _with_zeros((3, 4)), kwargs=dict(p=0, dim=1), ref="torch.norm",
     category=CAT)

# argmax/argmin: integer outputs, not differentiable; ties pick the first index
for op in ("argmax", "argmin"):
    case(op, "all dims", distinct((3, 4)), ref=f"torch.{op}", category=CAT, diff=(),
         bench=BENCH)
    case(op, "dim 1, keepdim", distinct((3, 4, 2)), kwargs=dict(dim=1, keepdim=True),
         ref=f"torch.{op}", category=CAT, diff=())
    case(op, "ties, dim 1", _ties((5, 6)), kwargs=dict(dim=1), ref=f"torch.{op}",
         category=CAT, diff=())
    case(op, "ties, all dims", _ties((4, 5)), ref=f"torch.{op}", category=CAT, diff=())

case("count_nonzero", "all dims", _with_zeros((3, 4)), ref="torch.count_nonzero",
     category=CAT, diff=())
case("count_nonzero", "dims (0, 2)", _with_zeros((3, 4, 2)), kwargs=dict(dim=(0, 2)),
     ref="torch.count_nonzero", category=CAT, diff=())
