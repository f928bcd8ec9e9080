"""Cases: ``tg.nn.dropout`` with a given mask against ``x * mask / (1 - p)`` in torch."""

from __future__ import annotations

from ..cases import case


def _masked(x_shape, mask_shape, p: float, kind: str = "bool"):
    def make(rng):
        mask = rng.random(mask_shape) >= p
        return [rng.standard_normal(x_shape), mask if kind == "bool" else mask.astype(float)]
    return make


def _dropout_ref(x, mask, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout with the mask given (tegrad's signature)."""
    if not training:
        return x
    if p == 1.0:
        return x * 0.0
    return x * mask / (1.0 - p)


BENCH = _masked((1024, 1024), (1024, 1024), 0.5)

case("dropout", "bool mask", _masked((4, 5), (4, 5), 0.3), kwargs=dict(p=0.3),
     ref=_dropout_ref, category="dropout", bench=BENCH)
case("dropout", "float mask", _masked((4, 5), (4, 5), 0.5, "float"), ref=_dropout_ref,
     diff=(0,), category="dropout")
case("dropout", "channel mask (dropout2d)", _masked((2, 3, 4, 5), (2, 3, 1, 1), 0.4),
     kwargs=dict(p=0.4), ref=_dropout_ref, category="dropout")
case("dropout", "eval", _masked((4, 5), (4, 5), 0.3), kwargs=dict(p=0.3, training=False),
     ref=_dropout_ref, category="dropout")
case("dropout", "p 1", _masked((3, 4), (3, 4), 1.0), kwargs=dict(p=1.0), ref=_dropout_ref,
     category="dropout")
