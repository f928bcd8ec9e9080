"""Cases: scans (``tg.nn.cumsum``..., ``rnn``, ``lstm``, ``gru``) against torch."""

from __future__ import annotations

from ..cases import case, normal, uniform


def _module_call(kind: str, gates: int):
    """torch.nn.<kind> with the given weights, as a function of tensors (one layer)."""
    def call(x, h0, *rest, **kwargs):
        import torch

        if kind == "LSTM":
            c0, w_ih, w_hh, b_ih, b_hh = rest
            state = (h0[None], c0[None])
        else:
            w_ih, w_hh, b_ih, b_hh = rest
            state = h0[None]
        extra = {"nonlinearity": kwargs["nonlinearity"]} if "nonlinearity" in kwargs else {}
        module = getattr(torch.nn, kind)(w_ih.shape[1], w_hh.shape[1], **extra).double()
        params = {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh, "bias_ih_l0": b_ih,
                  "bias_hh_l0": b_hh}
        out, last = torch.func.functional_call(module, params, (x, state))
        return (out, last[0][0], last[1][0]) if kind == "LSTM" else out
    return call


def _recurrent(steps, batch, inputs, hidden, gates, states=1, weights=0.5):
    """x and the initial states, N(0, 0.5^2), then w_ih, w_hh, b_ih, b_hh, N(0,
    ``weights``^2)."""
    data = normal((steps, batch, inputs), *[(batch, hidden)] * states, scale=0.5)
    params = normal((gates * hidden, inputs), (gates * hidden, hidden),
                    (gates * hidden,), (gates * hidden,), scale=weights)
    return lambda rng: data(rng) + params(rng)


def _recurrent_bench(steps, batch, inputs, hidden, gates, states=1):
    """Weights at torch's initial scale, 1/sqrt(hidden): at 0.5, a 256-wide recurrence is
    chaotic over 50 steps, and float32 rounding alone moved its gradients by O(1) (the
    timing's check against torch gave errors of 1.2-2.0)."""
    return _recurrent(steps, batch, inputs, hidden, gates, states, weights=hidden ** -0.5)


for op in ("cumsum", "logcumsumexp"):
    case(op, "dim 1", normal((3, 5, 2)), kwargs=dict(dim=1), ref=f"torch.{op}",
         category="recurrent", bench=normal((64, 1024)))
case("cumprod", "dim 0", uniform((4, 3), lo=0.5, hi=1.5), kwargs=dict(dim=0),
     ref="torch.cumprod", category="recurrent", bench=uniform((64, 1024), lo=0.9, hi=1.1))
case("cumsum", "length 1", normal((1, 4)), kwargs=dict(dim=0), ref="torch.cumsum",
     category="recurrent")

case("rnn", "tanh", _recurrent(4, 2, 3, 5, 1), ref=_module_call("RNN", 1),
     category="recurrent", bench=_recurrent_bench(50, 32, 128, 256, 1))
case("rnn", "relu, length 1", _recurrent(1, 2, 3, 4, 1), kwargs=dict(nonlinearity="relu"),
     ref=_module_call("RNN", 1), category="recurrent")
case("lstm", "", _recurrent(4, 2, 3, 5, 4, states=2), ref=_module_call("LSTM", 4),
     category="recurrent", bench=_recurrent_bench(50, 32, 128, 256, 4, states=2))
case("gru", "", _recurrent(4, 2, 3, 5, 3), ref=_module_call("GRU", 3), category="recurrent",
     bench=_recurrent_bench(50, 32, 128, 256, 3))


