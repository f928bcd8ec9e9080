"""Recurrent layers written with ``tg.scan``, in PyTorch's layouts and gate orders, so
``torch.nn.RNN`` / ``LSTM`` / ``GRU`` weights load directly (one layer, one direction,
``batch_first=False``):

    x (L, N, I), h0 (N, H), weight_ih (G H, I), weight_hh (G H, H), bias_ih/hh (G H,)
    output (L, N, H) = the hidden state after each step, as torch's ``output``

Gates (torch's order): LSTM ``i, f, g, o`` (``G = 4``), GRU ``r, z, n`` (``G = 3``).
The input projection ``x W_ih^T + b_ih`` of every step is one contraction outside the
scan (as cuDNN and PyTorch do it); inside, each step is a contraction with ``W_hh`` and
elementwise gate arithmetic. The scan's state has ``L + 1`` rows: row 0 is ``h0``.

``checkpoint=k`` (keyword) is passed to ``tg.scan``: a state history that only the
backward's adjoint scan reads is stored every ``k`` steps and recomputed by segments
(``ir/scan.py``). ``h`` is the layer's output, read whole, so it is always kept; an LSTM's
``c`` qualifies when the program reads it only through the adjoint scan.
"""

from __future__ import annotations

from ..frontend.math import exp, if_then_else, sigmoid, tanh
from ..frontend.reduce import reduce_axis
from ..frontend.reduce import sum as tsum
from ..ir.compute import compute
from ..ir.scan import scan
from ..ir.tensor import Tensor, placeholder, unique_name

__all__ = ["cumprod", "cumsum", "gru", "logcumsumexp", "lstm", "rnn"]


def _projection(x: Tensor, weight: Tensor, bias: Tensor | None, name: str):
    """``px(t, n, j)``: the input projection of the state's row ``t``, which is step
    ``t - 1`` of ``x`` (row 0, the initial state, gets zeros):
    ``P[t - 1, n, j] (+ b[j])`` with ``P[t, n, j] = sum_k x[t, n, k] W[j, k]`` for every
    step at once. The scan reads row ``t - 1`` of ``P`` and the bias itself: no shifted
    copy of the projection is made."""
    k = reduce_axis(x.shape[2], name="k")
    prod = compute((x.shape[0], x.shape[1], weight.shape[0]),
                   lambda t, n, j: tsum(x[t, n, k] * weight[j, k], axis=k), name=name)

    def px(t, n, j):
        value = prod[t - 1, n, j] if bias is None else prod[t - 1, n, j] + bias[j]
        return if_then_else(t >= 1, value, 0.0)

    return px


def _recurrent_product(state, weight: Tensor, name: str) -> Tensor:
    """``R[t, n, j] = sum_k state[t - 1, n, k] W[j, k]`` (the step's hidden product)."""
    k = reduce_axis(weight.shape[1], name="k")
    return compute((state.shape[0], state.shape[1], weight.shape[0]),
                   lambda t, n, j: tsum(state[t - 1, n, k] * weight[j, k], axis=k), name=name)


def _with_h0(h0: Tensor, name: str) -> Tensor:
    return compute((1, *h0.shape), lambda _, n, j: h0[n, j], name=name)


def _steps(history: Tensor, name: str) -> Tensor:
    """Rows 1..L of a state history (row 0 is the initial state)."""
    return compute((history.shape[0] - 1, *history.shape[1:]),
                   lambda t, n, j: history[t + 1, n, j], name=name)


def _hidden_bias(bias_hh: Tensor | None, j):
    return 0.0 if bias_hh is None else bias_hh[j]


def rnn(x, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, nonlinearity="tanh",
        name=None, *, checkpoint=None) -> Tensor:
    """Elman RNN, ``torch.nn.RNN``: ``h_t = act(x_t W_ih^T + b_ih + h_(t-1) W_hh^T + b_hh)``.
    ``checkpoint``: see the module header."""
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    name = name or unique_name("rnn")
    steps, batch, hidden = x.shape[0], x.shape[1], weight_hh.shape[1]
    px = _projection(x, weight_ih, bias_ih, f"{name}.x_proj")
    h = placeholder((steps + 1, batch, hidden), x.dtype, f"{name}.h")
    ph = _recurrent_product(h, weight_hh, f"{name}.h_proj")

    def act(v):
        return tanh(v) if nonlinearity == "tanh" else _relu(v)

    update = compute(h.shape, lambda t, n, j: act(
        px(t, n, j) + ph[t, n, j] + _hidden_bias(bias_hh, j)), name=f"{name}.update")
    history = scan(_with_h0(h0, f"{name}.h0"), update, h, name=name, checkpoint=checkpoint)
    return _steps(history, f"{name}.output")


def _relu(v):
    from ..frontend.math import maximum

    return maximum(v, 0.0)


def lstm(x, h0, c0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, name=None, *,
         checkpoint=None) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.nn.LSTM`` (gates ``i, f, g, o``): returns ``(output, h_n, c_n)`` with
    ``output`` (L, N, H) and ``h_n``, ``c_n`` (N, H) as torch's ``(h_n[0], c_n[0])``.
    ``checkpoint``: see the module header."""
    name = name or unique_name("lstm")
    steps, batch, hidden = x.shape[0], x.shape[1], weight_hh.shape[1]
    px = _projection(x, weight_ih, bias_ih, f"{name}.x_proj")
    h = placeholder((steps + 1, batch, hidden), x.dtype, f"{name}.h")
    c = placeholder((steps + 1, batch, hidden), x.dtype, f"{name}.c")
    ph = _recurrent_product(h, weight_hh, f"{name}.h_proj")
    # the four pre-activations side by side, one compute: its gradient (the gate
    # gradients side by side) is the one tensor that the gradients of the recurrent
    # product, the input projection and both biases read, so it is made once
    pre = compute((steps + 1, batch, 4 * hidden), lambda t, n, j: px(t, n, j) + ph[t, n, j]
                  + _hidden_bias(bias_hh, j), name=f"{name}.pre")
    # and one compute per activated gate (i, f, g, o) reading its columns: their
    # derivatives are separate elementwise tensors, not one tensor of four guarded column
    # blocks, and each activation's derivative reads the gate itself (s (1 - s),
    # 1 - tanh^2: ``reuse_forward``), which a forward run can keep for the backward
    acts = (sigmoid, sigmoid, tanh, sigmoid)
    gates = [compute(c.shape, lambda t, n, j, k=k: acts[k](pre[t, n, k * hidden + j]),
                     name=f"{name}.gate{'ifgo'[k]}") for k in range(4)]
    i, f, g, o = (lambda t, n, j, k=k: gates[k][t, n, j] for k in range(4))
    c_new = compute(c.shape, lambda t, n, j: f(t, n, j) * c[t - 1, n, j]
                    + i(t, n, j) * g(t, n, j), name=f"{name}.c_new")
    cell_act = compute(c.shape, lambda t, n, j: tanh(c_new[t, n, j]), name=f"{name}.c_act")
    h_new = compute(h.shape, lambda t, n, j: o(t, n, j) * cell_act[t, n, j],
                    name=f"{name}.h_new")
    hs, cs = scan([_with_h0(h0, f"{name}.h0"), _with_h0(c0, f"{name}.c0")], [h_new, c_new],
                  [h, c], name=name, checkpoint=checkpoint)
    last = steps
    h_n = compute((batch, hidden), lambda n, j: hs[last, n, j], name=f"{name}.h_n")
    c_n = compute((batch, hidden), lambda n, j: cs[last, n, j], name=f"{name}.c_n")
    return _steps(hs, f"{name}.output"), h_n, c_n


def gru(x, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, name=None, *,
        checkpoint=None) -> Tensor:
    """``torch.nn.GRU`` (gates ``r, z, n``):
    ``r = s(x_r + h_r)``, ``z = s(x_z + h_z)``, ``n = tanh(x_n + r (h W_hn^T + b_hn))``,
    ``h' = (1 - z) n + z h``. ``checkpoint``: see the module header."""
    name = name or unique_name("gru")
    steps, batch, hidden = x.shape[0], x.shape[1], weight_hh.shape[1]
    px = _projection(x, weight_ih, bias_ih, f"{name}.x_proj")
    h = placeholder((steps + 1, batch, hidden), x.dtype, f"{name}.h")
    ph = _recurrent_product(h, weight_hh, f"{name}.h_proj")

    def pre(t, n, j, k):
        col = k * hidden + j
        return px(t, n, col), ph[t, n, col] + _hidden_bias(bias_hh, col)

    # the activated gates as computes, as in ``lstm``: their derivatives read them, and a
    # forward run keeps them for the backward
    def gate(k):
        def activated(t, n, j):
            from_x, from_h = pre(t, n, j, k)
            return sigmoid(from_x + from_h)

        return compute(h.shape, activated, name=f"{name}.gate{'rz'[k]}")

    r, z = gate(0), gate(1)

    def candidate(t, n, j):
        xn, hn = pre(t, n, j, 2)
        return tanh(xn + r[t, n, j] * hn)

    cand = compute(h.shape, candidate, name=f"{name}.gaten")
    update = compute(h.shape, lambda t, n, j: (1.0 - z[t, n, j]) * cand[t, n, j]
                     + z[t, n, j] * h[t - 1, n, j], name=f"{name}.update")
    history = scan(_with_h0(h0, f"{name}.h0"), update, h, name=name, checkpoint=checkpoint)
    return _steps(history, f"{name}.output")


def cumsum(x: Tensor, dim: int = 0, name=None) -> Tensor:
    """``torch.cumsum`` along ``dim``, as a scan over that axis."""
    return _cumulative(x, dim, "sum", name or unique_name("cumsum"))


def cumprod(x: Tensor, dim: int = 0, name=None) -> Tensor:
    """``torch.cumprod`` along ``dim``, as a scan over that axis."""
    return _cumulative(x, dim, "prod", name or unique_name("cumprod"))


def logcumsumexp(x: Tensor, dim: int = 0, name=None) -> Tensor:
    """``torch.logcumsumexp``: ``y_t = y_(t-1) + log(1 + exp(x_t - y_(t-1)))``, written
    stably as ``max + log(exp(y - max) + exp(x - max))``."""
    return _cumulative(x, dim, "logsumexp", name or unique_name("logcumsumexp"))


def _cumulative(x: Tensor, dim: int, kind: str, name: str) -> Tensor:
    from ..frontend.math import log, maximum

    dim = dim % x.ndim
    if x.shape[dim] == 1:  # nothing accumulates: a scan needs an update row
        return compute(x.shape, lambda *i: x[i], name=f"{name}.out")
    perm = [dim] + [a for a in range(x.ndim) if a != dim]
    moved_shape = tuple(x.shape[a] for a in perm)

    def moved(*i):  # x with axis ``dim`` first
        index = [None] * x.ndim
        for pos, a in enumerate(perm):
            index[a] = i[pos]
        return x[tuple(index)]

    state = placeholder(moved_shape, x.dtype, f"{name}.state")
    init = compute((1, *moved_shape[1:]), lambda _, *r: moved(0, *r), name=f"{name}.first")
    # time-major rows: a step reads one contiguous row (a transposed read per step would
    # touch a line per element)
    rows = x if dim == 0 else compute(moved_shape, moved, name=f"{name}.rows")

    def step(t, *r):
        prev, cur = state[(t - 1, *r)], rows[(t, *r)]
        if kind == "sum":
            return prev + cur
        if kind == "prod":
            return prev * cur
        top = maximum(prev, cur)
        return top + log(exp(prev - top) + exp(cur - top))

    history = scan(init, compute(moved_shape, step, name=f"{name}.step"), state, name=name)

    def back(*i):
        index = [None] * x.ndim
        for pos, a in enumerate(perm):
            index[pos] = i[a]
        return history[tuple(index)]

    return compute(x.shape, back, name=f"{name}.out")
