"""Linear algebra as contractions: ``matmul`` (torch's 1-D / 2-D / N-D rules with batch
broadcasting), ``linear``, ``bilinear``, ``einsum`` and the small helpers (``dot``,
``mv``, ``outer``, ``trace``, ``diagonal``, ``triu``, ``tril``, ``addmm``, ``baddbmm``).

Every product is one ``tg.sum`` of two affine reads, so the lowering runs it as a BLAS
call and the generated backward is two more contractions (gather form). A broadcast
batch dimension of size 1 is read at index 0 (``ir.broadcast.broadcast_read``); its
gradient sums over the broadcast copies. ``einsum`` contracts its operands pairwise,
left to right (as ``torch.einsum`` does without opt_einsum).
"""

from __future__ import annotations

from ..frontend.math import if_then_else
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.broadcast import broadcast_read, broadcast_shapes
from ..ir.compute import compute
from ..ir.tensor import Tensor, unique_name
from .arguments import axis

__all__ = ["addmm", "baddbmm", "batch_matmul", "bilinear", "bmm", "diagonal", "dot",
           "einsum", "linear", "matmul", "mv", "outer", "trace", "tril", "triu"]


def _rank(t: Tensor, ranks, what: str) -> None:
    if t.ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ValueError(f"{what} must be {want}, got shape {t.shape}")


def _same(n: int, m: int, what: str) -> None:
    if n != m:
        raise ValueError(f"{what}: inner sizes differ ({n} and {m})")


def _broadcast(shapes, what: str) -> tuple[int, ...]:
    try:
        return broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"{what}: shapes {' and '.join(map(str, shapes))} do not "
                         "broadcast") from None


def matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002 - torch's name
    """``torch.matmul``: ``C[..., i, j] = sum_k A[..., i, k] B[..., k, j]``; a 1-D operand
    is a row (left) or column (right) vector whose axis is dropped; batches broadcast."""
    a, b = input, other
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: both arguments need at least 1 dim, got shapes "
                         f"{a.shape} and {b.shape}")
    _same(a.shape[-1], b.shape[-2] if b.ndim > 1 else b.shape[0],
          f"matmul of {a.shape} and {b.shape}")
    a_batch, b_batch = a.shape[:-2], b.shape[:-2]
    batch = _broadcast([a_batch, b_batch], "matmul batch dims")
    rows = (a.shape[-2],) if a.ndim > 1 else ()
    cols = (b.shape[-1],) if b.ndim > 1 else ()
    k = reduce_axis(a.shape[-1], name="k")
    nb = len(batch)

    def body(*idx):
        bidx, rest = idx[:nb], idx[nb:]
        i = rest[:len(rows)]
        j = rest[len(rows):]
        ra = (*_batch_index(a_batch, batch, bidx), *i, k)
        rb = (*_batch_index(b_batch, batch, bidx), k, *j)
        return tsum(a[ra] * b[rb], axis=k)

    return compute((*batch, *rows, *cols), body, name=unique_name("matmul"))


def _batch_index(own: tuple[int, ...], batch: tuple[int, ...], idx) -> tuple:
    """Indices into an operand's batch dims ``own`` (right-aligned with ``batch``); a
    size-1 dim under a larger one reads index 0."""
    off = len(batch) - len(own)
    return tuple(0 if n == 1 and batch[d + off] != 1 else idx[d + off]
                 for d, n in enumerate(own))


def batch_matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """Alias of ``matmul`` (torch semantics, batches broadcast); NOT TOPI's
    ``batch_matmul``, which transposes its second argument by default."""
    return matmul(input, other)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    """``torch.bmm``: ``C[b, i, j] = sum_k A[b, i, k] B[b, k, j]`` (3-D, equal batches)."""
    _rank(input, (3,), "bmm: input")
    _rank(mat2, (3,), "bmm: mat2")
    if input.shape[0] != mat2.shape[0]:
        raise ValueError(f"bmm: batch sizes differ, {input.shape} and {mat2.shape}")
    return matmul(input, mat2)


def dot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.dot``: ``sum_k a[k] b[k]`` of two 1-D tensors of one size (0-d result)."""
    _rank(input, (1,), "dot: input")
    _rank(other, (1,), "dot: other")
    _same(input.shape[0], other.shape[0], "dot")
    return matmul(input, other)


def mv(input: Tensor, vec: Tensor) -> Tensor:  # noqa: A002
    """``torch.mv``: ``y[i] = sum_k A[i, k] v[k]``."""
    _rank(input, (2,), "mv: input")
    _rank(vec, (1,), "mv: vec")
    return matmul(input, vec)


def outer(input: Tensor, vec2: Tensor) -> Tensor:  # noqa: A002
    """``torch.outer``: ``C[i, j] = a[i] b[j]``."""
    _rank(input, (1,), "outer: input")
    _rank(vec2, (1,), "outer: vec2")
    return compute((input.shape[0], vec2.shape[0]), lambda i, j: input[i] * vec2[j],
                   name=unique_name("outer"))


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``F.linear``: ``y[..., o] = sum_i x[..., i] W[o, i] + b[o]`` (a 1-D ``weight``
    drops the ``o`` axis); any number of leading dims."""
    _rank(weight, (1, 2), "linear: weight")
    if input.ndim == 0:
        raise ValueError("linear: input needs at least 1 dim, got a 0-d tensor")
    _same(input.shape[-1], weight.shape[-1], f"linear of input {input.shape} and weight "
          f"{weight.shape}")
    lead = input.shape[:-1]
    out = (weight.shape[0],) if weight.ndim == 2 else ()
    shape = (*lead, *out)
    if bias is not None and not _fits(bias.shape, shape):
        raise ValueError(f"linear: bias of shape {bias.shape} does not broadcast to "
                         f"the output {shape}")
    k = reduce_axis(input.shape[-1], name="k")
    n, name = len(lead), unique_name("linear")
    # the bias is added by a second compute: the product alone is a BLAS contraction
    product = compute(shape, lambda *idx: tsum(input[(*idx[:n], k)] * weight[(*idx[n:], k)],
                                               axis=k),
                      name=name if bias is None else f"{name}.matmul")
    if bias is None:
        return product
    return compute(shape, lambda *idx: product[idx] + broadcast_read(bias, shape, idx),
                   name=name)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None
             ) -> Tensor:
    """``F.bilinear``: ``y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]``, as
    two contractions (``x1 W`` first, then with ``x2``)."""
    _rank(weight, (3,), "bilinear: weight")
    if input1.ndim == 0 or input1.shape[:-1] != input2.shape[:-1]:
        raise ValueError(f"bilinear: input1 {input1.shape} and input2 {input2.shape} "
                         "need the same leading dims")
    _same(input1.shape[-1], weight.shape[1], "bilinear: input1 and weight dim 1")
    _same(input2.shape[-1], weight.shape[2], "bilinear: input2 and weight dim 2")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"bilinear: bias must have shape {(weight.shape[0],)}, "
                         f"got {bias.shape}")
    lead, n = input1.shape[:-1], input1.ndim - 1
    name = unique_name("bilinear")
    i, j = reduce_axis(weight.shape[1], name="i"), reduce_axis(weight.shape[2], name="j")
    left = compute((*lead, weight.shape[0], weight.shape[2]),
                   lambda *x: tsum(input1[(*x[:n], i)] * weight[x[n], i, x[n + 1]], axis=i),
                   name=f"{name}.left")
    out = compute((*lead, weight.shape[0]),
                  lambda *x: tsum(left[(*x, j)] * input2[(*x[:n], j)], axis=j),
                  name=name if bias is None else f"{name}.product")
    if bias is None:
        return out
    return compute(out.shape, lambda *x: out[x] + bias[x[n]], name=name)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """``torch.addmm``: ``beta * input + alpha * mat1 @ mat2`` (``input`` broadcasts);
    ``beta = 0`` ignores ``input`` (no nan from it), as torch does."""
    _rank(mat1, (2,), "addmm: mat1")
    _rank(mat2, (2,), "addmm: mat2")
    return _add_product(input, matmul(mat1, mat2), beta, alpha, "addmm")


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1  # noqa: A002
            ) -> Tensor:
    """``torch.baddbmm``: ``beta * input + alpha * bmm(batch1, batch2)``."""
    return _add_product(input, bmm(batch1, batch2), beta, alpha, "baddbmm")


def _add_product(input: Tensor, product: Tensor, beta, alpha, what: str) -> Tensor:  # noqa: A002
    shape = product.shape
    if not _fits(input.shape, shape):
        raise ValueError(f"{what}: input of shape {input.shape} does not broadcast to the "
                         f"product's shape {shape}")

    def body(*idx):
        value = product[idx] if alpha == 1 else alpha * product[idx]
        if beta == 0:
            return value
        term = broadcast_read(input, shape, idx)
        return value + (term if beta == 1 else beta * term)

    return compute(shape, body, name=unique_name(what))


def _fits(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return len(small) <= len(shape) and all(
        s in (1, n) for s, n in zip(small[::-1], shape[::-1], strict=False))


def trace(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.trace``: ``sum_i A[i, i]`` over ``min(rows, cols)`` (2-D only)."""
    _rank(input, (2,), "trace: input")
    i = reduce_axis(min(input.shape), name="i")
    return compute((), lambda: tsum(input[i, i], axis=i), name=unique_name("trace"))


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    """``torch.diagonal``: ``D[..., t] = A[..., t, t + offset]`` over dims ``dim1``,
    ``dim2`` (``offset < 0``: below); the diagonal axis is appended last."""
    if input.ndim < 2:
        raise ValueError(f"diagonal: input needs at least 2 dims, got shape {input.shape}")
    d1, d2 = axis(dim1, input.ndim, "dim1"), axis(dim2, input.ndim, "dim2")
    if d1 == d2:
        raise ValueError(f"diagonal: dim1 and dim2 name the same axis ({dim1}, {dim2})")
    n1, n2 = input.shape[d1], input.shape[d2]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    length = max(0, min(n1 - r0, n2 - c0))
    rest = [d for d in range(input.ndim) if d not in (d1, d2)]

    def body(*idx):
        index = [None] * input.ndim
        for d, v in zip(rest, idx[:-1], strict=True):
            index[d] = v
        index[d1], index[d2] = idx[-1] + r0, idx[-1] + c0
        return input[tuple(index)]

    return compute((*(input.shape[d] for d in rest), length), body,
                   name=unique_name("diagonal"))


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """``torch.triu``: ``A[..., i, j]`` where ``j - i >= diagonal``, else 0."""
    return _triangle(input, diagonal, upper=True)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """``torch.tril``: ``A[..., i, j]`` where ``j - i <= diagonal``, else 0."""
    return _triangle(input, diagonal, upper=False)


def _triangle(x: Tensor, diagonal: int, upper: bool) -> Tensor:
    if x.ndim < 2:
        raise ValueError(f"{'triu' if upper else 'tril'}: input needs at least 2 dims, "
                         f"got shape {x.shape}")

    def body(*idx):
        i, j = idx[-2], idx[-1]
        keep = j - i >= diagonal if upper else j - i <= diagonal
        return if_then_else(keep, x[idx], 0.0)

    return compute(x.shape, body, name=unique_name("triu" if upper else "tril"))


# ---------------------------------------------------------------------------- einsum


def einsum(equation: str, *operands) -> Tensor:
    """``torch.einsum`` (explicit ``->`` or implicit output, repeated labels in one operand
    take its diagonal, size-1 dims broadcast); operands contract pairwise left to right.
    Ellipsis (``...``) is not supported."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, out = _parse(equation, operands)
    sizes: dict[str, int] = {}
    for t, labels in terms:
        for label, n in zip(labels, t.shape, strict=True):
            if sizes.get(label, 1) not in (1, n) and n != 1:
                raise ValueError(f"einsum {equation!r}: label {label!r} has sizes "
                                 f"{sizes[label]} and {n}")
            sizes[label] = n if sizes.get(label, 1) == 1 else sizes[label]
    name = unique_name("einsum")
    current = terms[0]
    for k in range(1, len(terms)):
        later = set(out).union(*(set(labels) for _, labels in terms[k + 1:]))
        if k == len(terms) - 1:
            keep = out
        else:
            seen = dict.fromkeys(current[1] + terms[k][1])
            keep = "".join(label for label in seen if label in later)
        current = (_contract([current, terms[k]], keep, sizes, f"{name}.{k}"), keep)
    if len(terms) == 1:
        current = (_contract([current], out, sizes, name), out)
    return current[0]


def _parse(equation: str, operands) -> tuple[list[tuple[Tensor, str]], str]:
    eq = equation.replace(" ", "")
    if "." in eq:
        raise ValueError(f"einsum {equation!r}: ellipsis ('...') is not supported; name "
                         "every dim with a letter")
    lhs, arrow, out = eq.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(operands) or not operands:
        raise ValueError(f"einsum {equation!r}: {len(specs)} operand(s) in the equation, "
                         f"{len(operands)} given")
    for s in (*specs, out):
        if not all(c.isascii() and c.isalpha() for c in s):
            raise ValueError(f"einsum {equation!r}: labels must be letters, got {s!r}")
    terms = []
    for k, (s, t) in enumerate(zip(specs, operands, strict=True)):
        if len(s) != t.ndim:
            raise ValueError(f"einsum {equation!r}: operand {k} has {t.ndim} dims "
                             f"{t.shape}, its subscript {s!r} names {len(s)}")
        terms.append((t, s))
    if not arrow:  # implicit mode: labels seen exactly once, alphabetically
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    if len(set(out)) != len(out) or not set(out) <= set(lhs):
        raise ValueError(f"einsum {equation!r}: output labels {out!r} must be distinct "
                         "labels of the operands")
    return terms, out


def _contract(terms, keep: str, sizes: dict[str, int], name: str) -> Tensor:
    """``T[keep] = sum over the other labels of prod_t t[labels_t]`` (one compute)."""
    labels = dict.fromkeys("".join(s for _, s in terms))
    summed = [label for label in labels if label not in keep]
    raxes = {label: reduce_axis(sizes[label], name=label) for label in summed}

    def body(*idx):
        var = dict(zip(keep, idx, strict=True)) | raxes
        value = None
        for t, s in terms:
            read = t[tuple(0 if n == 1 and sizes[c] != 1 else var[c]
                           for c, n in zip(s, t.shape, strict=True))]
            value = read if value is None else value * read
        return tsum(value, axis=list(raxes.values())) if raxes else value

    return compute(tuple(sizes[c] for c in keep), body, name=name)
