"""Timing one case against PyTorch eager on the CPU, side by side in one process.

Inputs are the case's ``bench`` arrays (its test inputs where it has none), float32;
the report times only cases that have ``bench`` arrays.
Forward: ``op(x)``. Forward+backward: the outputs and every input's gradient for a fixed
random head (tegrad: one built function computing both, sharing intermediates; torch:
the forward, then ``torch.autograd.grad``). The four timings alternate, each repeated
``repeats`` times after a warm-up call; medians are reported. ``first_call`` is
tegrad's cold start: generating the gradients, planning, and the first run.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..backends import build
from .agreement import as_list, head_values, trace
from .cases import Case


@dataclass
class Timing:
    tegrad_forward: float
    torch_forward: float
    tegrad_both: float
    torch_both: float | None  # None: nothing to differentiate
    first_call: float
    threads: int

    @property
    def forward_ratio(self) -> float:
        return self.tegrad_forward / self.torch_forward

    @property
    def both_ratio(self) -> float | None:
        return None if self.torch_both is None else self.tegrad_both / self.torch_both


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def float32(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]


def time_case(case: Case, repeats: int = 5, seed: int = 0) -> Timing:
    with warnings.catch_warnings():  # torch's deprecation notes about its own API
        warnings.simplefilter("ignore", UserWarning)
        return _time_case(case, repeats, seed)


def _time_case(case: Case, repeats: int, seed: int) -> Timing:
    import torch

    rng = np.random.default_rng(seed)
    arrays = float32((case.bench or case.inputs)(rng))
    start = time.perf_counter()
    graph = trace(case, arrays, dtype="float32")
    heads = head_values(graph, rng)
    forward = build(graph.inputs, graph.outputs)
    both = build([*graph.inputs, *graph.heads], [*graph.outputs, *graph.grads])
    both(*arrays, *heads)
    first_call = time.perf_counter() - start

    tensors = [torch.from_numpy(a) for a in arrays]
    leaves = [t.detach().requires_grad_(k in graph.diff) for k, t in enumerate(tensors)]
    wrt = [leaves[k] for k in graph.diff]
    head_tensors = [torch.from_numpy(h) for h in heads]
    reference = case.torch_fn()

    def torch_forward():
        with torch.no_grad():
            reference(*tensors, **case.kwargs)

    def torch_both():
        floats = [y for y in as_list(reference(*leaves, **case.kwargs)) if y.is_floating_point()]
        torch.autograd.grad(floats, wrt, grad_outputs=head_tensors)

    differentiable = bool(graph.grads)
    runs: dict[str, list[float]] = {"tf": [], "pf": [], "tb": [], "pb": []}
    plan = [("tf", lambda: forward(*arrays)), ("pf", torch_forward),
            ("tb", lambda: both(*arrays, *heads))]
    if differentiable:
        plan.append(("pb", torch_both))
    for _, fn in plan:  # warm-up
        fn()
    for _ in range(repeats):
        for key, fn in plan:
            runs[key].append(_seconds(fn))
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    return Timing(med["tf"], med["pf"], med["tb"], med.get("pb"), first_call,
                  torch.get_num_threads())
