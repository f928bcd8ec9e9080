"""What the checker checks: a forward and a backward behind one interface.

``ExpressionPair`` wraps tensor expressions (the forward, a head placeholder and one
gradient tensor per input, generated or hand-written). ``CallablePair`` wraps
``forward(*args) -> array`` and ``backward(head, *args) -> tuple``. Both offer:

- ``forward(name, xs)``: the float64 forward for a stack of values of one input,
  ``(B,) + shape -> (B,) + out_shape``; an expression pair evaluates the stack in one
  call of the batched graph, a callable pair loops;
- ``backward(heads, names=None)``: the gradients under test (of the inputs named, or
  all), in their own dtype, for a stack of heads (one-hot heads give the backward's
  Jacobian row by row);
- ``magnitude(name, ts)``: ``M(f)`` at ``X = |t|`` (see graph.py), or None;
- ``affine(name)``: whether the forward is affine in that input;
- counts of forward and backward evaluations (one per stacked value).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..backends import build
from ..ir import dtype as dt
from ..ir.tensor import Placeholder, Tensor
from ..ir.traverse import topo_tensors
from . import graph

F64 = "float64"
BATCH_ELEMENTS = 1 << 22  # elements of one stacked evaluation (chunks beyond this)


class Pair:
    names: list[str]
    shapes: dict[str, tuple[int, ...]]
    grad_dtypes: dict[str, str]
    out_shape: tuple[int, ...]
    out_dtype: str
    values: dict[str, np.ndarray]  # checked inputs, float64 copies of the values fed
    accumulation: int
    forward_evals: int = 0
    backward_evals: int = 0

    def chunk(self, per_item: int) -> int:
        return max(1, min(4096, BATCH_ELEMENTS // max(1, per_item)))


class ExpressionPair(Pair):
    def __init__(
        self, output: Tensor, inputs: Sequence[Placeholder], grads, head, values, seed: int = 0
    ):
        self.output = output
        self.inputs = list(inputs)
        for p in self.inputs:
            if not isinstance(p, Placeholder):
                raise TypeError(f"inputs must be placeholders; {p.name} is a compute")
            if not dt.is_float(p.dtype):
                raise TypeError(f"{p.name} is {p.dtype}: only float inputs have gradients")
        if grads is None:
            from ..differentiate import gradient

            head = head or _fresh_head(output)
            grads = gradient(output, self.inputs, head=head)
        grads = list(grads)
        if len(grads) != len(self.inputs):
            raise ValueError(f"{len(grads)} gradient tensors for {len(self.inputs)} inputs")
        head = head if head is not None else _infer_head(output, grads)
        for p, g in zip(self.inputs, grads, strict=True):
            if g.shape != p.shape:
                raise ValueError(
                    f"gradient {g.name} for {p.name} has shape {g.shape}, expected {p.shape}"
                )
        if head.shape != output.shape:
            raise ValueError(f"head {head.name} has shape {head.shape}, expected {output.shape}")
        self.grads, self.head = grads, head
        self.names = [p.name for p in self.inputs]
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"inputs need distinct names to be reported: {self.names}")
        self.shapes = {p.name: p.shape for p in self.inputs}
        self.grad_dtypes = {p.name: g.dtype for p, g in zip(self.inputs, grads, strict=True)}
        self.out_shape, self.out_dtype = output.shape, output.dtype
        self.grad_of = dict(zip(self.names, grads, strict=True))

        leaves = [t for t in topo_tensors([output, *grads]) if isinstance(t, Placeholder)]
        leaves += [p for p in self.inputs if p not in leaves]  # inputs the output ignores
        self.feed = _feed_values(leaves, head, values, seed)
        self.values = {p.name: self.feed[p].astype(F64) for p in self.inputs}
        self.accumulation = max(
            graph.accumulation_length([output]), graph.accumulation_length(grads)
        )
        frozen_output, held = graph.freeze_stop_gradients([output])
        if held:  # stop_gradient(e): differences hold e at its value here
            values_of = _run(list(held.values()), self.feed)
            self.feed.update(zip(held, (np.asarray(v) for v in values_of), strict=True))
        (self.ref,), promoted = graph.promote_graph(frozen_output)
        self.ref_feed = {promoted[p]: a for p, a in self.feed.items() if p in promoted}
        self.ref_input = {p.name: promoted[p] for p in self.inputs if p in promoted}
        self._forward_cache: dict = {}
        self._backward_cache: dict = {}
        self._magnitude_cache: dict = {}

    # -- evaluation ---------------------------------------------------------------------
    def forward_native(self) -> np.ndarray:
        """The forward in its own dtype at the values fed (float32 stays float32)."""
        if "native" not in self._forward_cache:
            self._forward_cache["native"] = np.asarray(_run([self.output], self.feed)[0])
        return self._forward_cache["native"]

    def affine(self, name: str) -> bool:
        p = self.ref_input.get(name)
        return p is None or graph.degree(self.ref, p) <= graph.AFFINE

    def forward(self, name: str, xs: np.ndarray) -> np.ndarray:
        p = self.ref_input.get(name)
        if p is None:  # the output does not read this input
            self.forward_evals += len(xs)
            base = _run([self.ref], self.ref_feed)[0]
            return np.broadcast_to(base, (len(xs), *base.shape)).copy()
        return self._stacked(self._forward_cache, [self.ref], p, self.ref_feed, xs, "fwd")[0]

    def backward(self, heads: np.ndarray, names=None) -> dict[str, np.ndarray]:
        names = list(names or self.names)
        grads = [self.grad_of[n] for n in names]
        outs = self._stacked(self._backward_cache, grads, self.head, self.feed, heads, "bwd")
        return dict(zip(names, outs, strict=True))

    def magnitude(self, name: str, ts: np.ndarray) -> np.ndarray | None:
        p = self.ref_input.get(name)
        if p is None:
            return None
        key = ("mag",)
        if key not in self._magnitude_cache:
            self._magnitude_cache[key] = graph.magnitude_graph([self.ref])
        (mag,), twins = self._magnitude_cache[key]
        feed = dict(self.ref_feed)
        feed.update({twins[q]: np.abs(a) for q, a in self.ref_feed.items() if q in twins})
        return self._stacked(self._magnitude_cache, [mag], twins[p], feed, np.abs(ts), "mag")[0]

    def _stacked(self, cache, outputs, over, feed, stack, kind) -> list[np.ndarray]:
        per_item = max(int(np.prod(o.shape, dtype=np.int64)) for o in outputs)
        per_item = max(per_item, int(np.prod(over.shape, dtype=np.int64)))
        size = min(len(stack), self.chunk(per_item))
        key = (kind, id(over), size, tuple(id(o) for o in outputs))
        if key not in cache:
            try:
                batched, stacked = graph.batch_graph(outputs, over, size)
            except NotImplementedError:  # a scan: one evaluation per stacked value
                return self._one_by_one(outputs, over, feed, stack, kind)
            leaves = [t for t in topo_tensors(batched) if isinstance(t, Placeholder)]
            cache[key] = (build(leaves, batched), leaves, stacked)
        fn, leaves, stacked = cache[key]
        results: list[list[np.ndarray]] = [[] for _ in outputs]
        for start in range(0, len(stack), size):
            part = stack[start : start + size]
            n = len(part)
            if n < size:  # pad the last chunk so one compiled size serves
                part = np.concatenate([part, np.repeat(part[-1:], size - n, axis=0)])
            args = [part if t is stacked else feed[t] for t in leaves]
            got = fn(*args)
            for k, (o, g) in enumerate(zip(outputs, got, strict=True)):
                g = np.asarray(g)
                if g.ndim == len(o.shape):  # this output does not depend on ``over``
                    g = np.broadcast_to(g, (size, *o.shape))
                results[k].append(g[:n])
        if kind == "bwd":
            self.backward_evals += len(stack)
        elif kind == "fwd":
            self.forward_evals += len(stack)
        return [np.concatenate(r) for r in results]

    def _one_by_one(self, outputs, over, feed, stack, kind) -> list[np.ndarray]:
        leaves = [t for t in topo_tensors(outputs) if isinstance(t, Placeholder)]
        fn = build(leaves, list(outputs))
        rows = [fn(*(item if t is over else feed[t] for t in leaves)) for item in stack]
        if kind == "bwd":
            self.backward_evals += len(stack)
        elif kind == "fwd":
            self.forward_evals += len(stack)
        return [np.stack([np.broadcast_to(r[k], o.shape) for r in rows])
                for k, o in enumerate(outputs)]

    def condition_source(self, name: str):
        return self.grad_of[name]

    def pattern(self, name: str):
        """(missing, spurious, counts) from the index maps: see pattern.py. Raises
        PatternUnavailable when the maps cannot be enumerated."""
        from . import pattern

        p = next(q for q in self.inputs if q.name == name)
        ints: dict[Tensor, np.ndarray] = {}

        def int_values(t: Tensor) -> np.ndarray:
            if t not in ints:
                ints[t] = self.feed[t] if t in self.feed else np.asarray(_run([t], self.feed)[0])
            return ints[t]

        fwd, fwd_exact = pattern.dependency(self.output, p, int_values)
        bwd, bwd_exact = pattern.dependency(self.grad_of[name], self.head, int_values)
        missing, spurious, *counts = pattern.compare(fwd, bwd, self.output.size, p.size)
        if not fwd_exact:  # the forward's pattern is a superset: "missing" may be spurious
            missing[:] = False
        if not bwd_exact:
            spurious[:] = False
        return missing, spurious, *counts, fwd_exact and bwd_exact


class CallablePair(Pair):
    def __init__(self, forward: Callable, backward: Callable, args: Sequence):
        self.fn, self.bwd = forward, backward
        self.args = [np.asarray(a) for a in args]
        self.float_positions = [k for k, a in enumerate(self.args) if a.dtype.kind == "f"]
        if not self.float_positions:
            raise TypeError("check_vjp: no float argument to differentiate")
        self.names = [f"arg{k}" for k in self.float_positions]
        self.position = dict(zip(self.names, self.float_positions, strict=True))
        out = np.asarray(forward(*self.args))
        self.native = out
        self.out_shape, self.out_dtype = out.shape, out.dtype.name
        self.shapes = {n: self.args[k].shape for n, k in self.position.items()}
        self.values = {n: self.args[k].astype(F64) for n, k in self.position.items()}
        self.args64 = [a.astype(F64) if a.dtype.kind == "f" else a for a in self.args]
        probe = self._call_backward(np.zeros(out.shape, out.dtype))
        self.grad_dtypes = {n: probe[n].dtype.name for n in self.names}
        self.backward_evals = 1
        self.accumulation = 16
        self._affine: dict[str, bool] = {}

    def _call_backward(self, head: np.ndarray) -> dict[str, np.ndarray]:
        got = self.bwd(head, *self.args)
        got = (got,) if isinstance(got, np.ndarray) else tuple(got)
        if len(got) not in (len(self.args), len(self.names)):
            raise ValueError(
                f"backward returned {len(got)} arrays; expected one per argument "
                f"({len(self.args)}) or one per float argument ({len(self.names)})"
            )
        if len(got) == len(self.args):
            got = tuple(got[k] for k in self.float_positions)
        out = {}
        for name, g in zip(self.names, got, strict=True):
            g = np.asarray(g)
            if g.shape != self.shapes[name]:
                raise ValueError(
                    f"backward: gradient for {name} has shape {g.shape}, "
                    f"expected {self.shapes[name]}"
                )
            out[name] = g
        return out

    def affine(self, name: str) -> bool:
        """Numerically: the second difference along random directions vanishes."""
        if name not in self._affine:
            rng = np.random.default_rng(1234)
            x = self.values[name]
            t = rng.standard_normal((2, *x.shape)) * (1 + np.abs(x))
            ys = self.forward(name, np.stack([x + t[0], x, x - t[0], x + t[1], x - t[1]]))
            scale = np.abs(ys).max() + 1e-300
            second = [ys[0] - 2 * ys[1] + ys[2], ys[3] - 2 * ys[1] + ys[4]]
            self._affine[name] = all(np.abs(s).max() <= 1e-10 * scale for s in second)
        return self._affine[name]

    def forward(self, name: str, xs: np.ndarray) -> np.ndarray:
        k = self.position[name]
        out = []
        for x in xs:
            args = list(self.args64)
            args[k] = x
            out.append(np.asarray(self.fn(*args), dtype=F64))
        self.forward_evals += len(xs)
        return np.stack(out)

    def backward(self, heads: np.ndarray, names=None) -> dict[str, np.ndarray]:
        rows = [self._call_backward(h.astype(self.out_dtype)) for h in heads]
        self.backward_evals += len(heads)
        return {n: np.stack([r[n] for r in rows]) for n in (names or self.names)}

    def magnitude(self, name: str, ts: np.ndarray) -> None:
        return None

    def forward_native(self) -> np.ndarray:
        return self.native

    def condition_source(self, name: str) -> None:
        return None

    def pattern(self, name: str) -> None:
        return None


def _fresh_head(output: Tensor) -> Placeholder:
    from ..ir.tensor import placeholder

    return placeholder(output.shape, output.dtype, f"{output.name}.head")


def _infer_head(output: Tensor, grads: list[Tensor]) -> Placeholder:
    forward = set(topo_tensors([output]))
    candidates = [
        t
        for t in topo_tensors(grads)
        if isinstance(t, Placeholder) and t not in forward and t.shape == output.shape
    ]
    if len(candidates) != 1:
        names = ", ".join(t.name for t in candidates) or "none"
        raise ValueError(
            f"pass head=: cannot tell which placeholder is the output gradient (candidates: "
            f"{names})"
        )
    return candidates[0]


def _feed_values(leaves: list[Placeholder], head: Placeholder, values, seed: int) -> dict:
    """Arrays for every placeholder but the head: given ones (by placeholder or name),
    standard normal draws for the rest of the float ones (seeded by the caller)."""
    given = {}
    for key, a in (values or {}).items():
        given[key.name if isinstance(key, Tensor) else key] = a
    feed = {}
    for p in leaves:
        if p is head:
            continue
        if p.name in given:
            a = np.asarray(given[p.name])
            if a.shape != p.shape:
                raise ValueError(f"values[{p.name!r}] has shape {a.shape}, expected {p.shape}")
            feed[p] = a.astype(p.dtype)
        elif dt.is_float(p.dtype):
            rng = np.random.default_rng([seed, *p.name.encode()])
            feed[p] = rng.standard_normal(p.shape).astype(p.dtype)
        else:
            raise ValueError(
                f"placeholder {p.name} {p.shape} {p.dtype} needs a value: pass values="
                f"{{{p.name!r}: array}} (integer inputs are not drawn at random)"
            )
    return feed


def _run(outputs, feed):
    leaves = [t for t in topo_tensors(outputs) if isinstance(t, Placeholder)]
    fn = build(leaves, outputs)
    return fn(*(feed[t] for t in leaves))
