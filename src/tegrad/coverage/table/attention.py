"""Cases: ``tg.nn.scaled_dot_product_attention`` and ``multi_head_attention`` against torch.

Bool masks are bool arrays (every row keeps at least one position, so no row of the
softmax is empty). ``multi_head_attention`` is checked against
``torch.nn.MultiheadAttention(batch_first=True)`` through ``torch.func.functional_call``.
"""

from __future__ import annotations

import numpy as np

from ..cases import case, join, normal


def bool_mask(shape, attend: bool = True):
    """Random bool mask; column 0 is ``attend`` in every row (a row never masks all)."""
    def make(rng):
        m = rng.random(shape) < 0.6
        m[..., 0] = True
        return [m if attend else ~m]
    return make


def _mha(*, mask: bool = False) -> dict:
    """``fn``/``ref`` for ``(q, k, v, in_w, in_b, out_w, out_b[, attn_mask])`` arrays, the
    weights passed by name (``num_heads`` comes first in the signature)."""
    names = ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias")

    def fn(q, k, v, *rest, **kwargs):
        from ... import nn

        named = dict(zip(names, rest[:4], strict=True))
        if mask:
            named["attn_mask"] = rest[4]
        return nn.multi_head_attention(q, k, v, **named, **kwargs)

    def ref(q, k, v, in_w, in_b, out_w, out_b, *m, num_heads, is_causal=False):
        import torch

        module = torch.nn.MultiheadAttention(q.shape[-1], num_heads, batch_first=True)
        params = {"in_proj_weight": in_w, "in_proj_bias": in_b, "out_proj.weight": out_w,
                  "out_proj.bias": out_b}
        call = dict(need_weights=False, attn_mask=m[0] if m else None, is_causal=is_causal)
        return torch.func.functional_call(module.double(), params, (q, k, v), call)[0]

    return dict(fn=fn, ref=ref)


def _mha_inputs(batch, length, source, embed, scale=0.5):
    return normal((batch, length, embed), (batch, source, embed), (batch, source, embed),
                  (3 * embed, embed), (3 * embed,), (embed, embed), (embed,), scale=scale)


def _causal(length: int, masked_when_true: bool):
    """The causal mask as a bool array (torch's MHA: True where masked)."""
    def make(rng):
        upper = np.triu(np.ones((length, length), dtype=bool), 1)
        return [upper if masked_when_true else ~upper]
    return make


def _attention(op, label, inputs, **options):
    case(op, label, inputs, category="attention", **options)


SDPA = "scaled_dot_product_attention"
BENCH = (8, 8, 256, 64)

_attention(SDPA, "L != S, Ev != E", normal((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7)),
           bench=normal(BENCH, BENCH, BENCH))
_attention(SDPA, "causal", normal((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4)),
           kwargs=dict(is_causal=True), bench=normal(BENCH, BENCH, BENCH))
_attention(SDPA, "causal, L < S", normal((2, 4, 3), (2, 6, 3), (2, 6, 3)),
           kwargs=dict(is_causal=True))
_attention(SDPA, "bool mask (L, S)", join(normal((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 5)),
                                          bool_mask((4, 6))))
_attention(SDPA, "bool mask (N, 1, L, S), scale",
           join(normal((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 5)), bool_mask((2, 1, 4, 6))),
           kwargs=dict(scale=0.3))
_attention(SDPA, "float mask", normal((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 5), (3, 4, 6)),
           bench=normal(BENCH, BENCH, BENCH, (BENCH[2], BENCH[2])))
_attention(SDPA, "gqa", normal((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5)),
           kwargs=dict(enable_gqa=True))
_attention(SDPA, "(L, E), single row", normal((1, 5), (4, 5), (4, 3)))

MHA = "multi_head_attention"
_attention(MHA, "2 heads, S != L", _mha_inputs(2, 4, 5, 6), kwargs=dict(num_heads=2),
           **_mha())
_attention(MHA, "8 heads", _mha_inputs(2, 3, 3, 16), kwargs=dict(num_heads=8), **_mha(),
           bench=_mha_inputs(8, 256, 256, 512))
_attention(MHA, "1 head", _mha_inputs(2, 3, 3, 4), kwargs=dict(num_heads=1), **_mha())
_attention(MHA, "bool mask (L, S)", join(_mha_inputs(2, 4, 5, 6), bool_mask((4, 5), False)),
           kwargs=dict(num_heads=3), **_mha(mask=True))
_attention(MHA, "float mask (N * H, L, S)",
           join(_mha_inputs(2, 4, 5, 6), normal((4, 4, 5))),
           kwargs=dict(num_heads=2), **_mha(mask=True))
_attention(MHA, "is_causal with its mask", join(_mha_inputs(2, 5, 5, 8), _causal(5, True)),
           kwargs=dict(num_heads=4, is_causal=True), **_mha(mask=True),
           bench=join(_mha_inputs(8, 256, 256, 512), _causal(256, True)))
