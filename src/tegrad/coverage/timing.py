"""Timing one case against PyTorch eager on the CPU, side by side in one process.

Inputs (``timing_inputs``), float32: the case's ``bench`` arrays; else its test inputs
scaled up (``scaling``: about 2M elements, the same shape relations and values); else,
where no axis can grow (a 0-d case, kwargs that fix every size), the test inputs, as
also where the scaled ones raise (``Timing.inputs`` says so and why: the scaling's
shape check missed a constraint, or tegrad fails at that size).
Forward: ``op(x)``. Forward+backward: the outputs and every input's gradient for a fixed
random head (tegrad: one built function computing both, sharing intermediates; torch:
the forward, then ``torch.autograd.grad``). Before timing, tegrad's forward+backward
results are compared with torch's (``check_error``: the largest scaled error, as
``agreement`` measures it, over the outputs and gradients, in float32). The four timings
alternate, each repeated ``repeats`` times after a warm-up call; medians are reported.
``first_call`` is tegrad's cold start: generating the gradients, planning, and the
first run.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..backends import build
from .agreement import as_list, head_values, scaled_error, trace
from .cases import Case
from .scaling import derive

# scaled errors in float32 beyond this say the timed inputs changed what the case
# computes; rounding alone stays under it (a 3-norm over 1.7M elements: 1.6e-3)
CHECK_TOLERANCE = 1e-2


@dataclass
class Timing:
    tegrad_forward: float
    torch_forward: float
    tegrad_both: float
    torch_both: float | None  # None: nothing to differentiate
    first_call: float
    threads: int
    inputs: str = "bench"  # "bench", "test xF" (scaled by F), or "test" (and why)
    check_error: float | None = None  # None: not checked

    @property
    def checked(self) -> bool:
        return self.check_error is not None and self.check_error <= CHECK_TOLERANCE

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
    """Float arrays in float32 (a 0-d generator's NumPy scalar made an array), others kept."""
    arrays = [np.asarray(a) for a in arrays]
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]


def timing_inputs(case: Case, seed: int = 0) -> tuple[list[np.ndarray], str]:
    """The float64 arrays the case is timed on, and where they come from (``Timing.inputs``)."""
    rng = np.random.default_rng(seed)
    if case.bench is not None:
        return case.bench(rng), "bench"
    scaling = derive(case, seed)
    arrays = case.inputs(rng)
    if scaling is None:
        return arrays, "test"
    return scaling.arrays(arrays, rng), f"test x{scaling.factor}"


def time_case(case: Case, repeats: int = 5, seed: int = 0) -> Timing:
    with warnings.catch_warnings():  # torch's deprecation notes about its own API
        warnings.simplefilter("ignore", UserWarning)
        return _time_case(case, repeats, seed)


def _time_case(case: Case, repeats: int, seed: int) -> Timing:
    found, source = timing_inputs(case, seed)
    if source in ("bench", "test"):
        return _time_on(case, float32(found), source, repeats, seed)
    try:
        return _time_on(case, float32(found), source, repeats, seed)
    except Exception as exc:  # noqa: BLE001 - the scaling's fault, not the case's: say so
        why = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
        arrays = float32(case.inputs(np.random.default_rng(seed)))
        return _time_on(case, arrays, f"test ({source} raised {why})", repeats, seed)


def _time_on(case: Case, arrays: list[np.ndarray], source: str, repeats: int,
             seed: int) -> Timing:
    import torch

    rng = np.random.default_rng(seed + 1)
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
        outputs = as_list(reference(*leaves, **case.kwargs))
        floats = [y for y in outputs if y.is_floating_point()]
        found = torch.autograd.grad(floats, wrt, grad_outputs=head_tensors, allow_unused=True)
        return outputs, [torch.zeros_like(w) if g is None else g
                         for g, w in zip(found, wrt, strict=True)]

    differentiable = bool(graph.grads)
    got = as_list(both(*arrays, *heads))
    if differentiable:
        outputs, grads = torch_both()
        want = [*outputs, *grads]
    else:
        with torch.no_grad():
            want = as_list(reference(*tensors, **case.kwargs))
    errors = [scaled_error(g, w.detach().numpy()) for g, w in zip(got, want, strict=False)]
    check_error = max(errors, default=0.0) if len(got) == len(want) else float("inf")
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
                  torch.get_num_threads(), source, check_error)
