"""Indexing ops: reads through integer tensors (gather, take, index_select, embedding),
selects (where, masked_fill) and one_hot, as ``torch`` defines them.

A read ``x[.., index[i], ..]`` has a data-dependent index map, so its generated backward
is a scatter-add (repeated indices accumulate, as in torch). The indices are checked when
the kernel runs: a value outside ``[0, size)`` raises an error naming the index tensor and
the value. Negative indices are not wrapped (torch wraps them only in ``take``).
"""

from __future__ import annotations

from ..frontend.math import equal, if_then_else, stop_gradient
from ..ir import dtype as dt
from ..ir.broadcast import broadcast_read, broadcast_shapes
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import axis

__all__ = ["embedding", "gather", "index_select", "masked_fill", "one_hot", "take", "where"]


def _indices(index: Tensor, what: str) -> Tensor:
    if not isinstance(index, Tensor) or not dt.is_int(index.dtype):
        found = getattr(index, "dtype", type(index).__name__)
        raise ValueError(f"{what} must be an integer tensor (int64), got {found}")
    return index


def _unflatten(flat, shape) -> tuple:
    """Row-major digits of ``flat`` in ``shape``; the first digit is not reduced modulo
    its size, so a flat index out of range stays out of range (and is reported)."""
    digits, stride = [], 1
    for n in shape:
        stride *= n
    for k, n in enumerate(shape):
        stride //= max(n, 1)
        digit = flat // stride if stride != 1 else flat
        digits.append(digit % n if k > 0 else digit)
    return tuple(digits)


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    """``torch.gather``: ``y[i] = x[i_0, .., index[i], .., i_n]`` (``index[i]`` at ``dim``);
    ``sparse_grad`` is ignored (the gradient is dense)."""
    index = _indices(index, "gather: index")
    d = axis(dim, input.ndim)
    if index.ndim != input.ndim or any(index.shape[a] > input.shape[a]
                                       for a in range(input.ndim) if a != d):
        raise ValueError(f"gather: index of shape {index.shape} must have the rank of input "
                         f"{input.shape} and no larger size outside dim {dim}")
    return compute(index.shape, lambda *o: input[(*o[:d], index[o], *o[d + 1:])],
                   name=unique_name("gather"))


def take(input: Tensor, index: Tensor) -> Tensor:
    """``torch.take``: ``y[i] = x.flatten()[index[i]]``, shaped like ``index``; negative
    indices are an error (torch wraps them)."""
    index = _indices(index, "take: index")
    if input.ndim == 0:
        input = compute((1,), lambda _: input[()], name=unique_name("take.flat"))
    return compute(index.shape, lambda *o: input[_unflatten(index[o], input.shape)],
                   name=unique_name("take"))


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """``torch.index_select``: ``y[.., k, ..] = x[.., index[k], ..]`` along ``dim``."""
    index = _indices(index, "index_select: index")
    if index.ndim > 1:
        raise ValueError(f"index_select: index must be 1-D, got shape {index.shape}")
    d = axis(dim, input.ndim)
    shape = (*input.shape[:d], 1 if index.ndim == 0 else index.shape[0],
             *input.shape[d + 1:])

    def body(*o):
        at = index[()] if index.ndim == 0 else index[o[d]]
        return input[(*o[:d], at, *o[d + 1:])]

    return compute(shape, body, name=unique_name("index_select"))


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """``F.embedding``: ``y[i, :] = weight[input[i], :]``; rows ``padding_idx`` read as
    usual and get no gradient. ``max_norm`` and ``scale_grad_by_freq`` are refused
    (they rewrite the weight or the gradient), ``sparse`` is ignored."""
    input = _indices(input, "embedding: input")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, dim), got shape "
                         f"{weight.shape}")
    if max_norm is not None or scale_grad_by_freq:
        raise ValueError("embedding: max_norm and scale_grad_by_freq are not supported "
                         "(they change the weight in place / rescale its gradient)")
    rows, width = weight.shape
    name = unique_name("embedding")
    shape = (*input.shape, width)
    if padding_idx is None:
        return compute(shape, lambda *o: weight[input[o[:-1]], o[-1]], name=name)
    if not -rows <= padding_idx < rows:
        raise ValueError(f"embedding: padding_idx={padding_idx} is out of range for "
                         f"{rows} embeddings")
    pad = padding_idx % rows
    fixed = compute((width,), lambda e: stop_gradient(weight[pad, e]), name=f"{name}.padding")
    return compute(shape, lambda *o: if_then_else(
        equal(input[o[:-1]], pad), fixed[o[-1]], weight[input[o[:-1]], o[-1]]), name=name)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``F.one_hot`` (int64): ``y[i, c] = [tensor[i] = c]``. ``num_classes`` is required
    (torch's -1 reads the data); a class outside ``[0, num_classes)`` is a run-time error."""
    tensor = _indices(tensor, "one_hot: tensor")
    if not isinstance(num_classes, int) or num_classes <= 0:
        raise ValueError(f"one_hot: num_classes must be given as a positive int (the output "
                         f"shape cannot depend on the data), got {num_classes!r}")
    name = unique_name("one_hot")
    # classes[t] = t: reading it at tensor[i] checks the class at run time
    classes = compute((num_classes,), lambda c: c, name=f"{name}.classes")
    return compute((*tensor.shape, num_classes), lambda *o: if_then_else(
        equal(classes[tensor[o[:-1]]], o[-1]), 1, 0), name=name)


def _value(x, shape, o):
    return broadcast_read(x, shape, o) if isinstance(x, Tensor) else x


def where(condition: Tensor, input, other) -> Tensor:
    """``torch.where``: ``y = condition ? input : other``, all three broadcast (``input``
    or ``other`` may be a Python number)."""
    if not isinstance(condition, Tensor) or condition.dtype != "bool":
        raise ValueError(f"where: condition must be a bool tensor, got "
                         f"{getattr(condition, 'dtype', type(condition).__name__)}")
    tensors = [t for t in (condition, input, other) if isinstance(t, Tensor)]
    if len(tensors) == 1:
        raise ValueError("where: input or other must be a tensor (it sets the output dtype); "
                         "the one-argument form (torch.nonzero) is not supported")
    shape = broadcast_shapes(*(t.shape for t in tensors))

    def body(*o):
        return if_then_else(broadcast_read(condition, shape, o), _value(input, shape, o),
                            _value(other, shape, o))

    return compute(shape, body, name=unique_name("where"))


def masked_fill(input: Tensor, mask: Tensor, value) -> Tensor:
    """``torch.masked_fill``: ``y = mask ? value : input``, ``mask`` broadcast to
    ``input``'s shape; ``value`` a number or a 0-d tensor (differentiable)."""
    if not isinstance(mask, Tensor) or mask.dtype != "bool":
        raise ValueError(f"masked_fill: mask must be a bool tensor, got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if len(mask.shape) > input.ndim or any(
            m not in (1, n) for m, n in zip(mask.shape[::-1], input.shape[::-1], strict=False)):
        raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to "
                         f"input of shape {input.shape}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, got shape "
                         f"{value.shape}")

    def body(*o):
        fill = value[()] if isinstance(value, Tensor) else value
        return if_then_else(broadcast_read(mask, input.shape, o), fill, input[o])

    return compute(input.shape, body, name=unique_name("masked_fill"))
