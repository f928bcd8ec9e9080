"""Attention: ``scaled_dot_product_attention`` and ``multi_head_attention``.

    S[b, l, s] = scale sum_e q[b, l, e] k[b', s, e] (+ mask[b, l, s])
    P[b, l, s] = exp(S - m) / z   over the allowed s (0 elsewhere),
                 m = max_s S, z = sum_s exp(S - m)
    O[b, l, e] = sum_s P[b, l, s] v[b', s, e]

with ``b'`` the key/value batch index (the head ``h // (Hq / Hk)`` under grouped-query
attention). A boolean mask and ``is_causal`` restrict the reductions with ``where=``
(no ``-inf`` arithmetic); a float mask is added to the scores. ``q`` is scaled first, so
the scores, the output and their gradients are plain contractions (BLAS calls); the row
max (held constant: ``stop_gradient``) and the normalizer are their own computes,
evaluated once per row. Dropout is
refused (it would need its mask as an argument; see ``tg.nn.dropout``).
"""

from __future__ import annotations

import math

from ..frontend.math import exp, if_then_else, logical_not, stop_gradient
from ..frontend.reduce import max as tmax
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.broadcast import broadcast_read, broadcast_shapes
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name

__all__ = ["multi_head_attention", "scaled_dot_product_attention"]


def _attend(sizes, q, k, v, allowed, added, name: str) -> Tensor:
    """The core above. ``sizes = (batch, L, S, E, Ev)``; ``q(b, l, e)`` (already scaled),
    ``k(b, s, e)`` and ``v(b, s, e)`` read the operands (a head split or a grouped head
    is an index map there); ``allowed(b, l, s)`` (a condition, or ``None``) and
    ``added(b, l, s)`` (a float, or ``None``) apply the mask."""
    batch, length, source, e_dim, v_dim = sizes
    e = reduce_axis(e_dim, name="e")
    # a plain sum of products (a BLAS contraction, and so are its gradients)
    S = compute((*batch, length, source), lambda *i: tsum(
        q(i[:-2], i[-2], e) * k(i[:-2], i[-1], e), axis=e), name=f"{name}.scores")

    def logit(b, l_, s):
        value = S[(*b, l_, s)]
        return value if added is None else value + added(b, l_, s)

    def where(b, l_, s):
        return None if allowed is None else allowed(b, l_, s)

    s1 = reduce_axis(source, name="s")
    # the shift is held constant, as in tg.nn.softmax: the result does not depend on it,
    # so differentiating it would only compute a tie count and a zero
    top = compute((*batch, length), lambda *i: stop_gradient(tmax(
        logit(i[:-1], i[-1], s1), axis=s1, where=where(i[:-1], i[-1], s1))), name=f"{name}.max")
    s2 = reduce_axis(source, name="s")
    norm = compute((*batch, length), lambda *i: tsum(
        exp(logit(i[:-1], i[-1], s2) - top[i]), axis=s2, where=where(i[:-1], i[-1], s2)),
        name=f"{name}.sum")

    def probs(*i):
        b, l_, s = i[:-2], i[-2], i[-1]
        p = exp(logit(b, l_, s) - top[i[:-1]]) / norm[i[:-1]]
        return p if allowed is None else if_then_else(allowed(b, l_, s), p, 0.0)

    P = compute(S.shape, probs, name=f"{name}.probs")
    s3 = reduce_axis(source, name="s")
    return compute((*batch, length, v_dim), lambda *i: tsum(
        P[(*i[:-1], s3)] * v(i[:-2], s3, i[-1]), axis=s3), name=name)


def _mask_functions(op: str, attn_mask, shape, is_causal: bool):
    """``(allowed, added)`` for ``_attend`` from a mask broadcast to ``shape``
    (``batch + (L, S)``): a bool mask allows where True, a float mask is added;
    ``is_causal`` allows ``s <= l``."""
    if is_causal:
        return (lambda b, l_, s: s <= l_), None
    if attn_mask is None:
        return None, None
    try:
        fits = broadcast_shapes(attn_mask.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{op}: attn_mask of shape {attn_mask.shape} does not broadcast "
                         f"to the scores' shape {tuple(shape)}")

    def read(b, l_, s):
        return broadcast_read(attn_mask, tuple(shape), (*b, l_, s))

    if attn_mask.dtype == "bool":
        return read, None
    if attn_mask.dtype.startswith("float"):
        return None, read
    raise ValueError(f"{op}: attn_mask must be bool or float, got {attn_mask.dtype}")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` over ``(..., L, E)``, ``(..., S, E)``,
    ``(..., S, Ev)``; bool masks select (True attends), float masks add. No dropout."""
    op = "scaled_dot_product_attention"
    if dropout_p:
        raise ValueError(f"{op}: dropout_p must be 0 (tegrad draws no random masks), "
                         f"got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{op}: pass either attn_mask or is_causal=True, not both")
    if query.ndim < 2 or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ValueError(f"{op}: query, key and value must have the same rank >= 2, got "
                         f"{query.shape}, {key.shape}, {value.shape}")
    if key.shape[-1] != query.shape[-1] or value.shape[-2] != key.shape[-2] \
            or value.shape[:-2] != key.shape[:-2]:
        raise ValueError(f"{op}: expected key (..., S, {query.shape[-1]}) and value "
                         f"(..., S, Ev) of the same S, got {key.shape} and {value.shape}")
    batch = query.shape[:-2]
    kv_batch = _kv_batch(op, query, key, enable_gqa)
    shape = (*batch, query.shape[-2], key.shape[-2])
    allowed, added = _mask_functions(op, attn_mask, shape, is_causal)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    name = unique_name("sdpa")
    scaled = compute(query.shape, lambda *i: query[i] * scale, name=f"{name}.query")
    sizes = (batch, query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1])
    return _attend(sizes, lambda b, l_, e: scaled[(*b, l_, e)],
                   lambda b, s, e: key[(*kv_batch(b), s, e)],
                   lambda b, s, e: value[(*kv_batch(b), s, e)], allowed, added, name)


def _kv_batch(op: str, query: Tensor, key: Tensor, enable_gqa: bool):
    """The key/value batch index of a query batch index (grouped heads on axis -3)."""
    batch, kv = query.shape[:-2], key.shape[:-2]
    if kv == batch:
        return lambda b: tuple(b)
    if not enable_gqa:
        raise ValueError(f"{op}: key/value batch dims {kv} must equal the query's {batch} "
                         "(enable_gqa=True shares key/value heads)")
    if len(batch) < 1 or batch[:-1] != kv[:-1] or batch[-1] % kv[-1]:
        raise ValueError(f"{op}: with enable_gqa the key/value batch dims {kv} must equal "
                         f"the query's {batch} but for the heads (axis -3), a divisor")
    group = batch[-1] // kv[-1]
    return lambda b: (*b[:-1], b[-1] // group)


def multi_head_attention(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                         out_proj_weight, out_proj_bias, attn_mask=None, is_causal=False):
    """``torch.nn.MultiheadAttention(batch_first=True)``'s output (``need_weights=False``):
    ``concat_h sdpa(q W_q^T + b_q, k W_k^T + b_k, v W_v^T + b_v) W_o^T + b_o``. A bool
    ``attn_mask`` is True where attention is NOT allowed (torch's convention there)."""
    op = "multi_head_attention"
    if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
        raise ValueError(f"{op}: query, key and value must be (N, L, E) (batch_first), got "
                         f"{query.shape}, {key.shape}, {value.shape}")
    batch, length, embed = query.shape
    source = key.shape[1]
    if key.shape != (batch, source, embed) or value.shape != key.shape:
        raise ValueError(f"{op}: key and value must be ({batch}, S, {embed}), got "
                         f"{key.shape} and {value.shape}")
    if not isinstance(num_heads, int) or num_heads <= 0 or embed % num_heads:
        raise ValueError(f"{op}: num_heads must divide embed_dim {embed}, got {num_heads!r}")
    for what, t, shape in (("in_proj_weight", in_proj_weight, (3 * embed, embed)),
                           ("in_proj_bias", in_proj_bias, (3 * embed,)),
                           ("out_proj_weight", out_proj_weight, (embed, embed)),
                           ("out_proj_bias", out_proj_bias, (embed,))):
        if t is not None and t.shape != shape:
            raise ValueError(f"{op}: {what} must have shape {shape}, got {t.shape}")
    if in_proj_weight is None or out_proj_weight is None:
        raise ValueError(f"{op}: in_proj_weight and out_proj_weight are required")
    if is_causal and attn_mask is None:
        raise ValueError(f"{op}: is_causal is a hint that needs attn_mask (as in torch); pass "
                         "the causal mask too, or use scaled_dot_product_attention")
    heads, dim = num_heads, embed // num_heads
    name = unique_name("mha")

    def project(x: Tensor, part: int, what: str, scale: float = 1.0) -> Tensor:
        """``(x W_part^T + b_part) * scale``, ``(N, T, E)``: rows ``part E ..`` of the
        packed weight (heads are read as columns ``h D + d``)."""
        # the chunk first (as torch's ``w.chunk(3)``): the weight's gradient is then
        # three plain contractions and a select, not a sum of three guarded contractions
        chunk = compute((embed, embed), lambda j, c: in_proj_weight[part * embed + j, c],
                        name=f"{name}.w_{what}")
        c = reduce_axis(embed, name="c")
        shape = (batch, x.shape[1], embed)
        product = compute(shape, lambda n, t, j: tsum(x[n, t, c] * chunk[j, c], axis=c),
                          name=f"{name}.{what}_product")

        def body(n, t, j):
            y = product[n, t, j]
            y = y if in_proj_bias is None else y + in_proj_bias[part * embed + j]
            return y if scale == 1.0 else y * scale

        return compute(shape, body, name=f"{name}.{what}")

    q = project(query, 0, "q", 1.0 / math.sqrt(dim))
    k, v = project(key, 1, "k"), project(value, 2, "v")
    if is_causal:  # torch drops the mask then and lets SDPA apply the causal one
        allowed, added = (lambda b, l_, s: s <= l_), None
    elif attn_mask is not None:
        allowed, added = _mha_mask(op, attn_mask, batch, heads, length, source)
    else:
        allowed = added = None

    def head(x: Tensor):
        return lambda b, t, d: x[b[0], t, b[1] * dim + d]

    out = _attend(((batch, heads), length, source, dim, dim), head(q), head(k), head(v),
                  allowed, added, f"{name}.attention")
    h, d = reduce_axis(heads, name="h"), reduce_axis(dim, name="d")
    product = compute((batch, length, embed), lambda n, t, j: tsum(
        out[n, h, t, d] * out_proj_weight[j, h * dim + d], axis=[h, d]),
        name=f"{name}.out_product")
    if out_proj_bias is None:
        return product
    return compute(product.shape, lambda n, t, j: product[n, t, j] + out_proj_bias[j],
                   name=name)


def _mha_mask(op, attn_mask, batch, heads, length, source):
    """torch's MHA masks: ``(L, S)``, ``(1, L, S)`` or ``(N * H, L, S)``; bool True masks."""
    shapes = ((length, source), (1, length, source), (batch * heads, length, source))
    if attn_mask.shape not in shapes:
        raise ValueError(f"{op}: attn_mask must have shape (L, S), (1, L, S) or "
                         f"(N * num_heads, L, S) = {shapes}, got {attn_mask.shape}")
    if attn_mask.dtype not in ("bool", "float32", "float64"):
        raise ValueError(f"{op}: attn_mask must be bool or float, got {attn_mask.dtype}")

    def read(b, l_, s):
        if attn_mask.ndim == 2:
            return attn_mask[l_, s]
        return attn_mask[0 if attn_mask.shape[0] == 1 else b[0] * heads + b[1], l_, s]

    if attn_mask.dtype == "bool":
        return (lambda b, l_, s: logical_not(read(b, l_, s))), None
    return None, read
