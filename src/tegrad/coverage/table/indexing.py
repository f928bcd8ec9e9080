"""Cases: indexing ops (``tg.nn.gather``, ``embedding``, ``where``...) against torch.

Reads through integer tensors have data-dependent index maps: their backward is a
scatter-add by construction, so those cases set ``gather_form=None``. Index inputs
repeat some indices on purpose (the gradient must accumulate).
"""

from __future__ import annotations

import numpy as np

from ..cases import Inputs, case, integers, join, normal

IDX = "indexing"


def repeated(shape, high: int) -> Inputs:
    """int64 indices in ``[0, high)`` with the first index repeated at the end (and a
    few more duplicates whenever there are more indices than values)."""
    def make(rng):
        idx = rng.integers(0, high, size=shape).astype(np.int64)
        flat = idx.reshape(-1)
        if flat.size > 1:
            flat[-1] = flat[0]
        return [idx]
    return make


def masks(*shapes) -> Inputs:
    """Random bool tensors (about half True)."""
    return lambda rng: [rng.random(s) < 0.5 for s in shapes]


def _gather_fn(name: str, dim: int):
    """``tg.nn.<name>(x, dim, index)`` and ``torch.<name>(x, dim, index)`` on inputs
    ``(x, index)`` (``dim`` sits between them in the signature)."""
    def tegrad_call(x, index):
        from ... import nn
        return getattr(nn, name)(x, dim, index)

    def torch_call(x, index):
        import torch
        return getattr(torch, name)(x, dim, index)
    return tegrad_call, torch_call


def _where_scalar(scalar: float):
    def tegrad_call(c, x):
        from ... import nn
        return nn.where(c, x, scalar)

    def torch_call(c, x):
        import torch
        return torch.where(c, x, scalar)
    return tegrad_call, torch_call


# data-dependent index maps: a scatter-add in the backward (gather_form=None throughout)
_g1, _t1 = _gather_fn("gather", 1)
case("gather", "dim 1, repeats", join(normal((3, 5)), repeated((2, 4), 5)), fn=_g1, ref=_t1,
     category=IDX, gather_form=None,
     bench=join(normal((4096, 1024)), integers((4096, 256), 1024)))
_g0, _t0 = _gather_fn("gather", 0)
case("gather", "dim 0, 3-D", join(normal((4, 2, 3)), repeated((5, 2, 3), 4)), fn=_g0, ref=_t0,
     category=IDX, gather_form=None)
case("take", "repeats", join(normal((3, 4)), repeated((2, 5), 12)), ref="torch.take",
     category=IDX, gather_form=None,
     bench=join(normal((1024, 1024)), integers((512, 512), 1 << 20)))
_s0, _ts0 = _gather_fn("index_select", 0)
case("index_select", "dim 0, repeats", join(normal((5, 3)), repeated((7,), 5)), fn=_s0,
     ref=_ts0, category=IDX, gather_form=None,
     bench=join(normal((8192, 1024)), integers((4096,), 8192)))
_s2, _ts2 = _gather_fn("index_select", -1)
case("index_select", "last dim", join(normal((2, 3, 4)), repeated((6,), 4)), fn=_s2, ref=_ts2,
     category=IDX, gather_form=None)
_EMBED_BENCH = join(integers((64, 128), 50000), normal((50000, 512)))
case("embedding", "repeats", join(repeated((2, 4), 6), normal((6, 4))), category=IDX,
     gather_form=None, bench=_EMBED_BENCH)
case("embedding", "padding_idx 0", join(integers((3, 5), 4), normal((4, 3))),
     kwargs=dict(padding_idx=0), category=IDX, gather_form=None, bench=_EMBED_BENCH)
case("embedding", "padding_idx -1, 1-D", join(integers((9,), 5), normal((5, 2))),
     kwargs=dict(padding_idx=-1), category=IDX, gather_form=None)

# no float input: one_hot is compared exactly, nothing to differentiate
case("one_hot", "", integers((3, 4), 5), kwargs=dict(num_classes=6), category=IDX)

# selects: affine reads, gather form
case("where", "broadcast", join(masks((3, 1, 4)), normal((2, 4), (3, 2, 1))), ref="torch.where",
     category=IDX, bench=join(masks((1024, 1024)), normal((1024, 1024), (1024, 1024))))
_ws, _tws = _where_scalar(0.5)
case("where", "scalar other", join(masks((3, 4)), normal((3, 4))), fn=_ws, ref=_tws, category=IDX)
case("masked_fill", "broadcast mask", join(normal((3, 4)), masks((4,))),
     kwargs=dict(value=-1.5), ref="torch.masked_fill", category=IDX,
     bench=join(normal((1024, 1024)), masks((1024, 1024))))
case("masked_fill", "0-d tensor value", join(normal((2, 3)), masks((2, 3)), normal(())),
     ref="torch.masked_fill", category=IDX)
