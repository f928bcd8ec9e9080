"""Optimizers on ``tg.Variable``s, written with tegrad's eager operations.

    opt = tg.optim.Adam(params, lr=1e-3)
    for batch in batches:
        with tg.GradientTape() as tape:
            loss = model(params, batch)
        opt.step(tape.gradient(loss, params))

``step(grads)`` takes the gradients in the order of ``params`` (Variables or arrays;
``None`` leaves that parameter, and its state, untouched, as PyTorch does for a parameter
without ``.grad``). There is no ``zero_grad``: a tape gives fresh gradients every time.

The update formulas are PyTorch's (``torch.optim.SGD`` and ``torch.optim.Adam``,
single-tensor implementation), operation for operation, so a torch model trained from
the same weights on the same batches follows the same loss curve (to rounding). Each
operation is a tegrad eager op (``Variable`` arithmetic, ``tg.sqrt``): a compiled
tensor-expression template per shape and dtype. Python numbers (the learning rate, the
bias corrections of step ``t``) are passed as 0-d operands, so one kernel serves every
step. The new value is then written with ``param.assign``.

``jit=True`` traces the whole update of one parameter with ``tg.jit`` instead: one
graph (one kernel launch) per parameter shape, the step's numbers as 0-d arguments.

The arithmetic runs on non-trainable views of the parameters, so an active tape does not
record an update (its automatic watching concerns trainable Variables).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .eager import eager_aware
from .eager.functional import jit as _jit
from .eager.variable import Variable
from .frontend.math import sqrt as _tensor_sqrt

sqrt = eager_aware(_tensor_sqrt)


def _view(value: Variable | np.ndarray, dtype: str) -> Variable:
    """A non-trainable Variable on the same array (no copy when the dtype matches)."""
    array = value.numpy() if isinstance(value, Variable) else np.asarray(value)
    return Variable(array.astype(dtype, copy=False), trainable=False)


def _scalar(value: float, dtype: str) -> Variable:
    return Variable(np.asarray(value, dtype=dtype), trainable=False)


class Optimizer:
    """Parameters, per-parameter state, and ``step(grads)``; subclasses define
    ``_update(param, grad, state, scalars) -> new_param`` (Variables in, Variables out) and
    ``_scalars(state) -> dict`` (the Python numbers of this step)."""

    def __init__(self, params: Iterable[Variable], defaults: dict, jit: bool = False):
        self.params: list[Variable] = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        for k, p in enumerate(self.params):
            if not isinstance(p, Variable):
                raise TypeError(f"parameter {k}: expected tg.Variable, got {type(p).__name__}")
            if not p.dtype.startswith("float"):
                raise TypeError(f"parameter {k} ({p.name}): float dtype needed, got {p.dtype}")
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError("a parameter appears twice in the parameter list")
        self.defaults = dict(defaults)
        self.state: list[dict] = [{} for _ in self.params]
        self.jit = jit
        self._compiled: Callable | None = None

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({len(self.params)} parameters, {settings})"

    def step(self, grads: Sequence) -> None:
        """One update of every parameter from ``grads`` (same order as ``params``)."""
        grads = list(grads)
        if len(grads) != len(self.params):
            raise ValueError(f"step: {len(grads)} gradients for {len(self.params)} parameters")
        for k, (p, g, state) in enumerate(zip(self.params, grads, self.state, strict=True)):
            if g is None:
                continue
            if tuple(np.shape(g)) != p.shape:
                raise ValueError(f"step: gradient {k} has shape {tuple(np.shape(g))}, "
                                 f"parameter {p.name} has {p.shape}")
            self._step_one(p, _view(g, p.dtype), state)

    # -- one parameter --------------------------------------------------------------------
    def _step_one(self, param: Variable, grad: Variable, state: dict) -> None:
        scalars = self._scalars(state)
        buffers = self._buffers(param, state)
        p = _view(param, param.dtype)
        if not self.jit:
            new_p, new_buffers = self._update(p, grad, buffers, scalars)
        else:
            if self._compiled is None:
                names = list(scalars)
                update = self._update

                def traced(p, g, *rest):  # buffers first, then the step's numbers
                    bufs = rest[:len(rest) - len(names)]
                    nums = dict(zip(names, rest[len(bufs):], strict=True))
                    new_p, new_bufs = update(p, g, list(bufs), nums)
                    return (new_p, *new_bufs)
                traced.__name__ = f"{type(self).__name__.lower()}_update"
                self._compiled = _jit(traced)
            numbers = [_scalar(v, param.dtype) for v in scalars.values()]
            out = self._compiled(p, grad, *buffers, *numbers)
            new_p, new_buffers = out[0], list(out[1:])
        self._store(state, new_buffers)
        param.assign(new_p.numpy())

    def _scalars(self, state: dict) -> dict[str, float]:
        raise NotImplementedError

    def _buffers(self, param: Variable, state: dict) -> list[Variable]:
        raise NotImplementedError

    def _store(self, state: dict, buffers: list[Variable]) -> None:
        raise NotImplementedError

    def _update(self, p, g, buffers, scalars):
        raise NotImplementedError


class SGD(Optimizer):
    """``torch.optim.SGD``: with ``g = grad + weight_decay * p``,
    ``b = g`` on the first step, then ``b = momentum * b + (1 - dampening) * g``;
    ``g = g + momentum * b`` (Nesterov) or ``g = b``; ``p = p - lr * g``."""

    def __init__(self, params: Iterable[Variable], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, dampening: float = 0.0,
                 jit: bool = False):
        if lr < 0:
            raise ValueError(f"SGD: invalid learning rate {lr}")
        if momentum < 0:
            raise ValueError(f"SGD: invalid momentum {momentum}")
        if weight_decay < 0:
            raise ValueError(f"SGD: invalid weight_decay {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      nesterov=nesterov, dampening=dampening), jit=jit)

    def _scalars(self, state):
        d = self.defaults
        first = "momentum_buffer" not in state
        out = {"lr": d["lr"]}
        if d["weight_decay"]:
            out["weight_decay"] = d["weight_decay"]
        if d["momentum"]:
            out["momentum"] = d["momentum"]
            # the first step copies the gradient into the buffer: factors 0 and 1 there
            # would be a different template under jit; keep one by passing the factors
            out["keep"] = 0.0 if first else d["momentum"]
            out["take"] = 1.0 if first else 1.0 - d["dampening"]
        return out

    def _buffers(self, param, state):
        if not self.defaults["momentum"]:
            return []
        buf = state.get("momentum_buffer")
        if buf is None and self.jit:
            buf = Variable(np.zeros(param.shape, param.dtype), trainable=False)
        return [buf]

    def _store(self, state, buffers):
        if buffers:
            state["momentum_buffer"] = buffers[0]

    def _update(self, p, g, buffers, s):
        if "weight_decay" in s:
            g = g + p * s["weight_decay"]
        new_buffers = []
        if "momentum" in s:
            buf = buffers[0]
            if buf is None:  # eager first step: torch clones the gradient
                buf = g if g.symbolic else Variable(g.numpy().copy(), trainable=False)
            elif self.defaults["dampening"] or self.jit:
                buf = buf * s["keep"] + g * s["take"]
            else:
                buf = buf * s["momentum"] + g
            new_buffers = [buf]
            g = g + buf * s["momentum"] if self.defaults["nesterov"] else buf
        return p - g * s["lr"], new_buffers


class Adam(Optimizer):
    """``torch.optim.Adam`` (``amsgrad=False``): with ``g = grad + weight_decay * p``,
    ``m = m + (1 - b1)(g - m)`` (torch's ``lerp``), ``v = b2 v + (1 - b2) g g``,
    ``p = p - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)``."""

    def __init__(self, params: Iterable[Variable], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, jit: bool = False):
        if lr < 0:
            raise ValueError(f"Adam: invalid learning rate {lr}")
        if eps < 0:
            raise ValueError(f"Adam: invalid epsilon {eps}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Adam: invalid betas {betas}")
        if weight_decay < 0:
            raise ValueError(f"Adam: invalid weight_decay {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay), jit=jit)

    def _scalars(self, state):
        d = self.defaults
        beta1, beta2 = d["betas"]
        state["step"] = t = state.get("step", 0) + 1
        out = {"one_minus_beta1": 1 - beta1, "beta2": beta2, "one_minus_beta2": 1 - beta2,
               "step_size": d["lr"] / (1 - beta1 ** t),
               "bias_correction2_sqrt": math.sqrt(1 - beta2 ** t), "eps": d["eps"]}
        if d["weight_decay"]:
            out["weight_decay"] = d["weight_decay"]
        return out

    def _buffers(self, param, state):
        if "exp_avg" not in state:
            state["exp_avg"] = Variable(np.zeros(param.shape, param.dtype), trainable=False)
            state["exp_avg_sq"] = Variable(np.zeros(param.shape, param.dtype), trainable=False)
        return [state["exp_avg"], state["exp_avg_sq"]]

    def _store(self, state, buffers):
        state["exp_avg"], state["exp_avg_sq"] = buffers

    def _update(self, p, g, buffers, s):
        m, v = buffers
        if "weight_decay" in s:
            g = g + p * s["weight_decay"]
        m = m + (g - m) * s["one_minus_beta1"]  # lerp(m, g, 1 - b1), weight < 0.5
        v = v * s["beta2"] + g * s["one_minus_beta2"] * g  # addcmul: (c g) g
        denom = sqrt(v) / s["bias_correction2_sqrt"] + s["eps"]
        return p - m * s["step_size"] / denom, [m, v]


__all__ = ["SGD", "Adam", "Optimizer"]
