"""``to_torch(fn)``: a tegrad function as a PyTorch op whose backward is generated.

    y = op(x_1..x_n)                forward: the traced graph, run on the tensors' memory
    x_bar = op.vjp(x, y_bar)        backward: the same autograd.Function applied to the
                                    VJP graph, so autograd records it under
                                    create_graph=True: double (and higher) backward works
    y_dot = op.jvp(x, x_dot)        forward mode (torch.func.jacfwd, forward_ad), likewise

A call with grad mode on and an input that requires grad runs instead the forward that
keeps what the VJP reads (``GraphFunction.split_vjp``, ``backends/vjp.py``); a backward
that records no graph (no ``create_graph``) then runs that VJP on the kept values, so an
LSTM's backward runs no forward scan again.

``torch.func`` works too: ``grad``, ``jacrev``, ``jacfwd``, ``hessian``; ``vmap`` runs the
op once per batch element (the graph is traced for one element's shapes).

The call's torch.Tensors (positional or keyword, also inside lists and tuples) become
placeholders; every other argument (``stride=2``, ``normalized_shape``) is passed to
``fn`` unchanged and is part of the cache key, as are the shapes and dtypes. Tensors are
float32, float64, int32, int64 or bool; integer inputs get no gradient (``None``).

Devices: CPU tensors run on the default target (the compiled cpu target); CUDA tensors
run on ``target="cuda"`` (Triton kernels on the tensors' memory, on the current stream;
results are new CUDA tensors), backward and double backward too. ``to_torch(fn,
target="cuda")`` sends CPU tensors to it as well (in Triton's interpreter without a GPU).
On the cuda target too, a backward without ``create_graph`` runs on the values its
forward kept, on the device.

Memory: a CPU tensor's array is a view (``tensor.detach().numpy()``), results come back
with ``torch.from_numpy``; an output that would alias an input or another output, or is
not writable, is copied.

    conv = tg.to_torch(tg.nn.conv2d)
    y = conv(x, w, b, stride=2, padding=1)      # x, w, b: torch.Tensor
    y.square().sum().backward()                  # w.grad from tegrad's generated kernels

PyTorch is imported when ``to_torch`` is first called, never by ``import tegrad``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np

from ..function import GraphFunction, split_leaves, trace

_SUPPORTED = ("float32", "float64", "int32", "int64", "bool")


def _torch():
    try:
        import torch
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("tg.to_torch needs PyTorch: pip install torch") from error
    return torch


def to_torch(fn: Callable, target: str | None = None) -> Callable:
    """``fn`` (building tensors from placeholders) as a callable on ``torch.Tensor``s.

    Returns one tensor when ``fn`` returns one tensor, a tuple when it returns a list or
    tuple. Keyword arguments are passed to ``fn``. ``target``: None runs CPU tensors on
    the default target and CUDA tensors on ``"cuda"``; ``"cuda"`` runs every call there."""
    torch = _torch()
    apply = _function_class().apply
    if target not in (None, "cuda"):
        raise ValueError(f"tg.to_torch: target must be None or 'cuda', got {target!r}")

    @functools.wraps(fn)
    def call(*args, **kwargs):
        tensors, spec_args, spec_kwargs = split_leaves(
            args, kwargs, lambda v: isinstance(v, torch.Tensor))
        on = target or ("cuda" if any(t.device.type == "cuda" for t in tensors) else None)
        for t in tensors:
            _check_tensor(t, fn, on)
        graph = trace(fn, spec_args, spec_kwargs)
        # a backward may follow: the forward keeps what it reads (see TegradFunction)
        _HANDOFF.keep = torch.is_grad_enabled()
        try:
            outs = apply(graph, on, *tensors)
        finally:
            _HANDOFF.keep = False
        return outs[0] if graph.single else tuple(outs)

    call.tegrad_fn = fn
    return call


def _check_tensor(t, fn, on: str | None) -> None:
    name = getattr(fn, "__name__", "fn")
    if on == "cuda":
        from ..backends.cuda import device

        missing = device.unavailable()
        if missing is not None:
            raise ValueError(f"tg.to_torch({name}): {missing}")
        if t.device != device.device():
            raise ValueError(f"tg.to_torch({name}): got a tensor on device {t.device}; the "
                             f"cuda target runs on {device.device()}")
    elif t.device.type != "cpu":
        raise ValueError(
            f"tg.to_torch({name}): got a tensor on device {t.device}; tegrad's PyTorch bridge "
            "runs CPU tensors on the cpu target and CUDA tensors on the cuda target: move it "
            "with .cpu() or .cuda()")
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in _SUPPORTED:
        raise TypeError(f"tg.to_torch({name}): unsupported dtype {t.dtype} (shape "
                        f"{tuple(t.shape)}); tegrad supports {', '.join(_SUPPORTED)}")
    if t.is_sparse or t.layout != _torch().strided:
        raise TypeError(f"tg.to_torch({name}): only dense (strided) tensors are supported, "
                        f"got layout {t.layout}")


def as_array(t) -> np.ndarray:
    """A NumPy view of a CPU tensor (a copy only where torch cannot share its memory)."""
    return t.detach().resolve_conj().resolve_neg().numpy()


def as_tensors(values: tuple[np.ndarray, ...], inputs: list[np.ndarray]) -> list:
    """``torch.from_numpy`` on each result; results that alias an input or an earlier
    result, are read-only or have negative strides are copied first."""
    torch = _torch()
    out, seen = [], list(inputs)
    for v in values:
        aliased = any(np.may_share_memory(v, a) for a in seen)
        if aliased or not v.flags.writeable or any(s < 0 for s in v.strides):
            v = np.array(v, copy=True)
        seen.append(v)
        out.append(torch.from_numpy(v))
    return out


def _fresh(results, inputs) -> list:
    """A target's results as the outputs of one autograd node: a result that is an input
    tensor (an identity) or an earlier result is cloned, so each output is its own tensor."""
    out: list = []
    for r in results:
        if any(r is t for t in (*inputs, *out)):
            r = r.clone()
        out.append(r)
    return out


# forward -> setup_context of one apply: whether to keep values for a backward, and the
# values kept (``TegradFunction``); per thread
_HANDOFF = threading.local()


@functools.cache
def _function_class():
    torch = _torch()

    class TegradFunction(torch.autograd.Function):
        """One graph's forward; backward applies this class to ``graph.vjp(wrt)``, or,
        when no graph of the backward is asked for (no ``create_graph``), runs the VJP on
        what the forward kept (``graph.split_vjp``): a call from ``to_torch`` with grad
        mode on and an input requiring grad runs the forward that keeps them."""

        @staticmethod
        def forward(graph: GraphFunction, on: str | None, *tensors):
            # ``on``: a target taking the tensors themselves (the cuda target), else
            # NumPy views of them on the default target
            arrays = tensors if on else [as_array(t) for t in tensors]
            wrt = tuple(k for k in graph.float_inputs if tensors[k].requires_grad)
            _HANDOFF.kept = None  # (what an earlier forward kept went to its setup_context)
            if getattr(_HANDOFF, "keep", False) and wrt and graph.float_outputs:
                _HANDOFF.keep = False  # (this apply's only: not a nested one's)
                split = graph.split_vjp(wrt, on)
                values, kept = split.forward(dict(zip(graph.inputs, tensors, strict=True)) if on
                                             else graph.feed(arrays))
                _HANDOFF.kept = (split, wrt, kept)
                return tuple(_fresh(values, tensors) if on
                             else as_tensors(graph.checked(values), arrays))
            if on:
                return tuple(_fresh(graph.on(on)(*tensors), tensors))
            return tuple(as_tensors(graph(*arrays), arrays))

        @staticmethod
        def setup_context(ctx, inputs, output):
            graph, on, *tensors = inputs
            ctx.graph, ctx.on = graph, on
            ctx.kept = getattr(_HANDOFF, "kept", None)
            _HANDOFF.kept = None
            ctx.save_for_backward(*tensors)
            ctx.save_for_forward(*tensors)
            ctx.mark_non_differentiable(*(y for k, y in enumerate(output)
                                          if k not in graph.float_outputs))

        @staticmethod
        def jvp(ctx, _graph_dot, _on_dot, *dots):
            """Forward mode (``torch.func.jacfwd``, ``torch.autograd.forward_ad``):
            ``graph.jvp()`` applied through this class again."""
            graph: GraphFunction = ctx.graph
            inputs = ctx.saved_tensors
            tangents = [torch.zeros_like(inputs[k]) if dots[k] is None else dots[k]
                        for k in graph.float_inputs]
            found = iter(TegradFunction.apply(graph.jvp(), ctx.on, *inputs, *tangents))
            return tuple(next(found) if k in graph.float_outputs else None
                         for k in range(len(graph.outputs)))

        @staticmethod
        def vmap(info, in_dims, graph: GraphFunction, on, *tensors):
            """``torch.vmap`` (and ``torch.func.jacrev``): one call per batch element (the
            graph is traced for one element's shapes)."""
            dims = in_dims[2:]
            rows = [TegradFunction.apply(graph, on, *(t if d is None else t.select(d, b)
                                                   for t, d in zip(tensors, dims, strict=True)))
                    for b in range(info.batch_size)]
            outs = tuple(torch.stack([row[k] for row in rows]) for k in range(len(graph.outputs)))
            return outs, (0,) * len(outs)

        @staticmethod
        def backward(ctx, *grads):
            graph: GraphFunction = ctx.graph
            n = len(graph.inputs)
            wrt = tuple(k for k in graph.float_inputs if ctx.needs_input_grad[k + 2])
            result: list = [None] * n
            kept = ctx.kept  # (valid for any number of backwards, as saved tensors are)
            if wrt and kept is not None and not torch.is_grad_enabled() \
                    and set(wrt) <= set(kept[1]):
                split, computed, values = kept
                _ = ctx.saved_tensors  # torch's check that no input was changed in place
                if ctx.on:
                    heads = [grads[k] for k in graph.float_outputs]
                    found = _fresh(split.backward(values, heads), [*heads, *values.values()])
                else:
                    heads = [as_array(grads[k]) for k in graph.float_outputs]
                    found = as_tensors(split.backward(values, heads),
                                       [*heads, *(v for v in values.values()
                                                  if isinstance(v, np.ndarray))])
                for k, g in zip(computed, found, strict=True):
                    if k in wrt:
                        result[k] = g
            elif wrt:
                inputs = ctx.saved_tensors
                heads = [grads[k] for k in graph.float_outputs]
                found = TegradFunction.apply(graph.vjp(wrt), ctx.on, *inputs, *heads)
                for k, g in zip(wrt, found, strict=True):
                    result[k] = g
            return (None, None, *result)

    return TegradFunction


def as_module(fn: Callable, **static):
    """``fn`` as a parameter-free ``torch.nn.Module`` (for ``nn.Sequential``): its forward
    is ``to_torch(fn)(*tensors, **static)``."""
    return _module_class()(fn, static)


@functools.cache
def _module_class():
    torch = _torch()

    class TegradModule(torch.nn.Module):
        def __init__(self, fn: Callable, static: dict):
            super().__init__()
            self.op = to_torch(fn)
            self.static = dict(static)

        def forward(self, *tensors):
            return self.op(*tensors, **self.static)

        def extra_repr(self) -> str:
            items = [getattr(self.op, "__name__", "fn")]
            items += [f"{k}={v!r}" for k, v in self.static.items()]
            return ", ".join(items)

    return TegradModule
