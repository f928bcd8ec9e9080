"""Cases: losses and distances (``tg.nn.mse_loss``... ``cosine_similarity``) against torch.

Class weights of ``cross_entropy``/``nll_loss`` and the weights of the BCE losses are not
differentiable in torch (``diff=`` leaves them out). Arguments that come after torch's
legacy ``size_average``/``reduce`` (``weight=`` of ``mse_loss``, ``pos_weight=``) are
passed by name through ``_by_name``.
"""

from __future__ import annotations

import numpy as np

from ..cases import case, integers, join, normal, uniform


def _by_name(op: str, *names: str) -> dict:
    """``fn``/``ref`` passing the last ``len(names)`` arrays as those keyword arguments."""
    def split(arrays):
        k = len(arrays) - len(names)
        return arrays[:k], dict(zip(names, arrays[k:], strict=True))

    def fn(*arrays, **kwargs):
        from ... import nn

        positional, named = split(arrays)
        return getattr(nn, op)(*positional, **named, **kwargs)

    def ref(*arrays, **kwargs):
        import torch.nn.functional as F

        positional, named = split(arrays)
        return getattr(F, op)(*positional, **named, **kwargs)

    return dict(fn=fn, ref=ref)


def signs(*shapes, dtype=np.int64):
    """``+-1`` targets (int64, or float where the loss multiplies by them)."""
    return lambda rng: [rng.choice([-1, 1], size=s).astype(dtype) for s in shapes]


def targets_with(shape, classes: int, ignore_index: int):
    """Class indices with two entries set to ``ignore_index``."""
    def make(rng):
        t = rng.integers(0, classes, size=shape).astype(np.int64)
        t.reshape(-1)[[0, -1]] = ignore_index
        return [t]
    return make


def probabilities(shape, axis: int = 1):
    """Rows of a softmax (positive, summing to 1 along ``axis``)."""
    def make(rng):
        e = np.exp(rng.standard_normal(shape))
        return [e / e.sum(axis=axis, keepdims=True)]
    return make


def _loss(op, label, inputs, **options):
    case(op, label, inputs, category="loss", **options)


BIG = (1024, 1024)

# ---------------------------------------------------------------------------- regression

for op in ("mse_loss", "l1_loss", "smooth_l1_loss"):
    for reduction in ("mean", "sum", "none"):
        _loss(op, reduction, normal((3, 5), (3, 5)), kwargs=dict(reduction=reduction),
              bench=normal(BIG, BIG) if reduction == "mean" else None)
for op in ("mse_loss", "l1_loss"):
    for reduction in ("mean", "none"):
        _loss(op, f"weight, {reduction}", join(normal((3, 5), (3, 5)), uniform((3, 5))),
              kwargs=dict(reduction=reduction), **_by_name(op, "weight"))
_loss("smooth_l1_loss", "beta 0.5, 0-d", normal((), ()), kwargs=dict(beta=0.5))
_loss("smooth_l1_loss", "beta 0", normal((2, 3, 4), (2, 3, 4)), kwargs=dict(beta=0.0))
for reduction in ("mean", "sum", "none"):
    _loss("huber_loss", reduction, normal((3, 5), (3, 5), scale=1.5),
          kwargs=dict(reduction=reduction, delta=0.7),
          bench=normal(BIG, BIG) if reduction == "mean" else None)
_loss("huber_loss", "weight", join(normal((3, 5), (3, 5)), uniform((3, 5))),
      **_by_name("huber_loss", "weight"))

# ---------------------------------------------------------------------------- classification

for reduction in ("mean", "sum", "none"):
    _loss("cross_entropy", reduction, join(normal((4, 5)), integers((4,), 5)),
          kwargs=dict(reduction=reduction),
          bench=join(normal((4096, 1000)), integers((4096,), 1000))
          if reduction == "mean" else None)
_loss("cross_entropy", "weight", join(normal((4, 5)), integers((4,), 5), uniform((5,))),
      diff=(0,))
_loss("cross_entropy", "ignore_index -100",
      join(normal((5, 4)), targets_with((5,), 4, -100)))
_loss("cross_entropy", "weight, ignore_index 2, sum",
      join(normal((5, 4)), targets_with((5,), 4, 2), uniform((4,))),
      kwargs=dict(ignore_index=2, reduction="sum"), diff=(0,))
for reduction in ("mean", "none"):
    _loss("cross_entropy", f"label_smoothing, weight, ignore, {reduction}",
          join(normal((6, 4)), targets_with((6,), 4, -100), uniform((4,))),
          kwargs=dict(label_smoothing=0.2, reduction=reduction), diff=(0,),
          bench=join(normal((4096, 1000)), integers((4096,), 1000), uniform((1000,)))
          if reduction == "mean" else None)
_loss("cross_entropy", "(N, C, d1, d2)", join(normal((2, 4, 3, 2)), integers((2, 3, 2), 4)),
      bench=join(normal((8, 21, 64, 64)), integers((8, 64, 64), 21)))
_loss("cross_entropy", "(C,), 0-d target", join(normal((5,)), integers((), 5)))
_loss("cross_entropy", "probabilities", join(normal((4, 5)), probabilities((4, 5))),
      bench=join(normal((4096, 1000)), probabilities((4096, 1000))))
_loss("cross_entropy", "probabilities, (N, C, d), weight, smoothing",
      join(normal((2, 4, 3)), probabilities((2, 4, 3)), uniform((4,))),
      kwargs=dict(label_smoothing=0.1, reduction="sum"), diff=(0, 1))

for reduction in ("mean", "sum", "none"):
    _loss("nll_loss", reduction, join(normal((4, 5)), integers((4,), 5)),
          kwargs=dict(reduction=reduction),
          bench=join(normal((4096, 1000)), integers((4096,), 1000))
          if reduction == "mean" else None)
_loss("nll_loss", "weight, ignore_index", join(normal((6, 4)), targets_with((6,), 4, 1),
                                               uniform((4,))),
      kwargs=dict(ignore_index=1), diff=(0,))
_loss("nll_loss", "(N, C, d)", join(normal((2, 3, 4)), targets_with((2, 4), 3, -100)))

for reduction in ("mean", "sum", "none"):
    _loss("binary_cross_entropy", reduction,
          join(uniform((3, 4), lo=0.05, hi=0.95), uniform((3, 4), lo=0.0, hi=1.0)),
          kwargs=dict(reduction=reduction),
          bench=join(uniform(BIG, lo=0.05, hi=0.95), uniform(BIG, lo=0.0, hi=1.0))
          if reduction == "mean" else None)
_loss("binary_cross_entropy", "weight broadcast",
      join(uniform((3, 4), lo=0.05, hi=0.95), uniform((3, 4), lo=0.0, hi=1.0), uniform((4,))),
      diff=(0, 1))
for reduction in ("mean", "sum", "none"):
    _loss("binary_cross_entropy_with_logits", reduction,
          join(normal((3, 4), scale=2.0), uniform((3, 4), lo=0.0, hi=1.0)),
          kwargs=dict(reduction=reduction),
          bench=join(normal(BIG), uniform(BIG, lo=0.0, hi=1.0)) if reduction == "mean" else None)
_loss("binary_cross_entropy_with_logits", "weight, pos_weight",
      join(normal((3, 4), scale=2.0), uniform((3, 4), lo=0.0, hi=1.0), uniform((3, 1)),
           uniform((4,))),
      diff=(0, 1), **_by_name("binary_cross_entropy_with_logits", "weight", "pos_weight"))

for reduction in ("mean", "sum", "none", "batchmean"):
    _loss("kl_div", reduction, join(normal((3, 4)), uniform((3, 4), lo=0.1, hi=1.0)),
          kwargs=dict(reduction=reduction),
          bench=join(normal(BIG), uniform(BIG, lo=0.1, hi=1.0))
          if reduction == "batchmean" else None)
_loss("kl_div", "log_target, batchmean", normal((3, 4), (3, 4)),
      kwargs=dict(reduction="batchmean", log_target=True))

# ---------------------------------------------------------------------------- embeddings

for reduction in ("mean", "sum", "none"):
    _loss("cosine_embedding_loss", reduction, join(normal((6, 5), (6, 5)), signs((6,))),
          kwargs=dict(reduction=reduction, margin=0.1),
          bench=join(normal((4096, 256), (4096, 256)), signs((4096,)))
          if reduction == "mean" else None)
_loss("cosine_embedding_loss", "(D,)", join(normal((5,), (5,)), signs(())),
      kwargs=dict(margin=-0.2))
for reduction in ("mean", "sum", "none"):
    _loss("margin_ranking_loss", reduction,
          join(normal((7,), (7,)), signs((7,), dtype=np.float64)),
          kwargs=dict(reduction=reduction, margin=0.3),
          bench=join(normal((1 << 20,), (1 << 20,)), signs((1 << 20,), dtype=np.float64))
          if reduction == "mean" else None)
for reduction in ("mean", "sum", "none"):
    _loss("triplet_margin_loss", reduction, normal((5, 4), (5, 4), (5, 4)),
          kwargs=dict(reduction=reduction),
          bench=normal((4096, 256), (4096, 256), (4096, 256)) if reduction == "mean" else None)
_loss("triplet_margin_loss", "p 1, swap", normal((6, 4), (6, 4), (6, 4)),
      kwargs=dict(p=1, swap=True, margin=0.5))
_loss("triplet_margin_loss", "p 3, (D,)", normal((5,), (5,), (5,)), kwargs=dict(p=3, eps=1e-3))

_loss("cosine_similarity", "dim 1", normal((4, 6), (4, 6)),
      bench=normal((4096, 256), (4096, 256)))
_loss("cosine_similarity", "broadcast, dim -1", normal((4, 1, 6), (3, 6)), kwargs=dict(dim=-1))
_loss("cosine_similarity", "dim 0", normal((5, 3), (5, 3)), kwargs=dict(dim=0))
_loss("pairwise_distance", "p 2", normal((4, 6), (4, 6)),
      bench=normal((4096, 256), (4096, 256)))
_loss("pairwise_distance", "p 1, keepdim", normal((4, 6), (4, 6)),
      kwargs=dict(p=1.0, keepdim=True))
_loss("pairwise_distance", "p inf, broadcast", normal((3, 4, 5), (4, 5)),
      kwargs=dict(p=float("inf")))
_loss("pairwise_distance", "p 1.5, eps 0.1", normal((3, 6), (3, 6)),
      kwargs=dict(p=1.5, eps=0.1))
