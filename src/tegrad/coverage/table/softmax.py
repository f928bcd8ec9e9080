"""Cases: ``tg.nn.softmax``, ``log_softmax``, ``softmin``, ``logsumexp`` against torch."""

from __future__ import annotations

import numpy as np

from ..cases import case, normal

BENCH = normal((4096, 1024))


def _float32(*shapes):
    return lambda rng: [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _softmax_dtype(x, dim, dtype):
    import torch

    return torch.softmax(x, dim, dtype=getattr(torch, dtype))


for op in ("softmax", "log_softmax", "softmin"):
    case(op, "dim -1", normal((4, 6)), kwargs=dict(dim=-1), category="softmax", bench=BENCH)
    case(op, "dim 1 of 3", normal((2, 5, 3)), kwargs=dict(dim=1), category="softmax")
case("softmax", "dim 0", normal((5, 3)), kwargs=dict(dim=0), category="softmax")
case("softmax", "size-1 dim", normal((3, 1)), kwargs=dict(dim=1), category="softmax")
case("softmax", "large logits", normal((3, 7), scale=300.0), kwargs=dict(dim=1),
     category="softmax")
case("log_softmax", "large logits", normal((3, 7), scale=300.0), kwargs=dict(dim=-1),
     category="softmax")
# float32 input computed in float64 (the gradient comes back in float32)
case("softmax", "dtype float64", _float32((3, 5)), kwargs=dict(dim=1, dtype="float64"),
     ref=_softmax_dtype, category="softmax")

case("logsumexp", "dim 1", normal((3, 5)), kwargs=dict(dim=1), ref="torch.logsumexp",
     category="softmax", bench=BENCH)
case("logsumexp", "keepdim", normal((3, 5)), kwargs=dict(dim=-1, keepdim=True),
     ref="torch.logsumexp", category="softmax")
case("logsumexp", "dims (0, 2)", normal((3, 4, 5)), kwargs=dict(dim=(0, 2)),
     ref="torch.logsumexp", category="softmax")
case("logsumexp", "large values", normal((4, 6), scale=300.0), kwargs=dict(dim=0),
     ref="torch.logsumexp", category="softmax")
