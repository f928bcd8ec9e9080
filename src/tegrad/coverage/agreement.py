"""One case against PyTorch in float64: forward values and every input's gradient.

    outputs  y_1..y_m = op(x_1..x_n)             (tegrad: tensors; torch: tensors)
    heads    H_k ~ N(0, 1), one per float output
    tegrad   grads = tg.gradient(y, x_diff, head=H)          (one output)
             grads = tg.gradient(sum_k <H_k, y_k>, x_diff)    (several outputs)
    torch    torch.autograd.grad(y, x_diff, grad_outputs=H)

Errors are ``max |tegrad - torch| / max(1, max |torch|)``, per tensor: relative to the
tensor's scale, so a value that cancels to ~0 inside a large tensor is not held to a
relative bound it cannot meet in float64.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..backends import build
from ..differentiate import gradient, inner_product
from ..ir.tensor import Tensor, placeholder
from .cases import Case


@dataclass
class Graph:
    """The tegrad side of a case: placeholders, outputs, heads and generated gradients."""

    inputs: list[Tensor]
    outputs: list[Tensor]
    heads: list[Tensor]
    diff: tuple[int, ...]
    grads: list[Tensor] = field(default_factory=list)
    seconds: float = 0.0  # generating the gradients


def as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def placeholders(arrays: list[np.ndarray], dtype: str | None = None) -> list[Tensor]:
    """One placeholder per array; float arrays take ``dtype`` when it is given."""
    out = []
    for k, a in enumerate(arrays):
        kind = str(a.dtype) if (dtype is None or a.dtype.kind != "f") else dtype
        out.append(placeholder(a.shape, kind, name=f"arg{k}"))
    return out


def trace(case: Case, arrays: list[np.ndarray], dtype: str | None = None,
          with_gradients: bool = True) -> Graph:
    """Build the case's forward (and gradients) on placeholders shaped like ``arrays``."""
    inputs = placeholders(arrays, dtype)
    outputs = as_list(case.tegrad_fn()(*inputs, **case.kwargs))
    floats = [y for y in outputs if y.dtype.startswith("float")]
    heads = [placeholder(y.shape, y.dtype, name=f"H{k}") for k, y in enumerate(floats)]
    graph = Graph(inputs, outputs, heads, case.differentiable(arrays))
    if with_gradients and graph.diff and floats:
        start = time.perf_counter()
        wrt = [inputs[k] for k in graph.diff]
        if len(floats) == 1:
            graph.grads = gradient(floats[0], wrt, head=heads[0])
        else:
            graph.grads = gradient(inner_product(floats, heads), wrt)
        graph.seconds = time.perf_counter() - start
    return graph


def head_values(graph: Graph, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(h.shape).astype(h.dtype) for h in graph.heads]


def run_tegrad(graph: Graph, arrays, heads, target=None) -> tuple[list, list]:
    f = build([*graph.inputs, *graph.heads], [*graph.outputs, *graph.grads], target=target)
    values = f(*arrays, *heads)
    n = len(graph.outputs)
    return list(values[:n]), list(values[n:])


def run_torch(case: Case, arrays, heads, diff) -> tuple[list, list]:
    import torch

    tensors = []
    for k, a in enumerate(arrays):
        t = torch.from_numpy(np.array(a))
        tensors.append(t.requires_grad_(True) if k in diff else t)
    with warnings.catch_warnings():  # torch's deprecation notes about its own API
        warnings.simplefilter("ignore", UserWarning)
        outputs = as_list(case.torch_fn()(*tensors, **case.kwargs))
    floats = [y for y in outputs if y.is_floating_point()]
    wrt = [tensors[k] for k in diff]
    grads = []
    if wrt and floats:
        found = torch.autograd.grad(floats, wrt, grad_outputs=[torch.from_numpy(h) for h in heads],
                                    allow_unused=True)
        grads = [torch.zeros_like(w) if g is None else g for g, w in zip(found, wrt, strict=True)]
    return ([y.detach().numpy() for y in outputs], [g.detach().numpy() for g in grads])


def scaled_error(got: np.ndarray, expected: np.ndarray) -> float:
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return float("inf")
    if expected.size == 0:
        return 0.0
    if expected.dtype.kind != "f":
        return 0.0 if np.array_equal(got, expected) else float("inf")
    scale = max(1.0, float(np.max(np.abs(expected))))
    return float(np.max(np.abs(got.astype(np.float64) - expected))) / scale


@dataclass
class Agreement:
    """Scaled errors of every output and gradient against PyTorch (float64)."""

    forward: list[float]
    gradients: dict[str, float]
    tolerance: float
    generation_seconds: float
    graph: Graph

    @property
    def worst(self) -> float:
        return max([*self.forward, *self.gradients.values()], default=0.0)

    @property
    def ok(self) -> bool:
        return self.worst <= self.tolerance

    def describe(self) -> str:
        parts = [f"forward {e:.1e}" for e in self.forward]
        parts += [f"d/d{name} {e:.1e}" for name, e in self.gradients.items()]
        return ", ".join(parts) + f" (tolerance {self.tolerance:.0e})"


def agree(case: Case, seed: int = 0) -> Agreement:
    """Run the case on its test inputs in float64, tegrad against PyTorch."""
    rng = np.random.default_rng(seed)
    arrays = case.inputs(rng)
    graph = trace(case, arrays)
    heads = head_values(graph, rng)
    got_out, got_grads = run_tegrad(graph, arrays, heads)
    ref_out, ref_grads = run_torch(case, arrays, heads, graph.diff if graph.grads else ())
    if len(got_out) != len(ref_out):
        raise AssertionError(f"{case.name}: {len(got_out)} outputs, torch gives {len(ref_out)}")
    forward = [scaled_error(g, e) for g, e in zip(got_out, ref_out, strict=True)]
    gradients = {graph.inputs[k].name: scaled_error(g, e)
                 for k, g, e in zip(graph.diff, got_grads, ref_grads, strict=False)}
    return Agreement(forward, gradients, case.rtol, graph.seconds, graph)
