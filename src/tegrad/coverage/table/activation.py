"""Cases: elementwise activations (``tg.nn.relu``... ``glu``, ``prelu``) against torch."""

from __future__ import annotations

from ..cases import away_from_zero, case, normal

BIG = (1024, 1024)


_TIMED: set[str] = set()


def _act(op: str, label: str, inputs, **options) -> None:
    """One row; the first row of each op is timed on ``bench`` (by default 1024x1024),
    the others on their own test inputs scaled up (``coverage.scaling``)."""
    bench = options.pop("bench", normal(BIG))
    case(op, label, inputs, category="activation", bench=None if op in _TIMED else bench,
         **options)
    _TIMED.add(op)


# kinks at 0: inputs kept away from it
_act("relu", "", away_from_zero((3, 5)))
_act("relu", "size-1 dims", away_from_zero((1, 7, 1)))
_act("relu6", "", normal((4, 5), scale=4.0))
_act("leaky_relu", "", away_from_zero((3, 5)))
_act("leaky_relu", "slope 0.2", away_from_zero((2, 3, 5)), kwargs=dict(negative_slope=0.2))
_act("leaky_relu", "slope 2", away_from_zero((3, 5)), kwargs=dict(negative_slope=2.0))
_act("rrelu", "eval", away_from_zero((3, 5)),
     kwargs=dict(lower=0.1, upper=0.3, training=False))
_act("elu", "", away_from_zero((3, 5)))
_act("elu", "alpha 0.5", away_from_zero((3, 5)), kwargs=dict(alpha=0.5))
_act("selu", "", away_from_zero((3, 5)))
_act("celu", "", away_from_zero((3, 5)))
_act("celu", "alpha 2", away_from_zero((3, 5)), kwargs=dict(alpha=2.0))
_act("gelu", "", normal((3, 5), scale=2.0))
_act("gelu", "tanh", normal((3, 5), scale=2.0), kwargs=dict(approximate="tanh"))
_act("silu", "", normal((3, 5), scale=2.0))
_act("mish", "", normal((3, 5), scale=3.0))
_act("softplus", "", normal((3, 5), scale=3.0))
_act("softplus", "beta 2, threshold 1", normal((3, 5), scale=2.0),
     kwargs=dict(beta=2.0, threshold=1.0))
_act("softplus", "large inputs", normal((3, 5), scale=800.0))
_act("softsign", "", away_from_zero((3, 5)))
_act("hardtanh", "", normal((3, 5), scale=2.0))
_act("hardtanh", "min -0.5 max 2", normal((3, 5), scale=2.0),
     kwargs=dict(min_val=-0.5, max_val=2.0))
# torch's CPU kernel scales the gradient by the float constant 1.0f / 6.0f, also in
# float64: it is 3e-8 off; tegrad's 1/6 is exact
_act("hardsigmoid", "", normal((3, 5), scale=4.0), rtol=1e-8)
_act("hardswish", "", normal((3, 5), scale=4.0))
_act("sigmoid", "", normal((3, 5), scale=3.0), ref="torch.sigmoid")
_act("tanh", "", normal((3, 5), scale=2.0), ref="torch.tanh")
_act("logsigmoid", "", normal((3, 5), scale=3.0))
_act("logsigmoid", "large inputs", normal((3, 5), scale=800.0))
_act("tanhshrink", "", normal((3, 5), scale=2.0))
_act("softshrink", "", normal((3, 5)))
_act("softshrink", "lambd 0.3", normal((3, 5)), kwargs=dict(lambd=0.3))
_act("hardshrink", "", normal((3, 5)))
_act("threshold", "", normal((3, 5)), kwargs=dict(threshold=0.1, value=20.0))
_act("prelu", "per channel", away_from_zero((2, 3, 4, 5), (3,)),
     bench=normal((16, 64, 32, 32), (64,)))
_act("prelu", "one weight", away_from_zero((2, 3, 4), (1,)))
_act("prelu", "1-d input", away_from_zero((5,), (1,)))
_act("glu", "", normal((4, 6)), bench=normal((1024, 2048)))
_act("glu", "dim 1", normal((3, 4, 5)), kwargs=dict(dim=1))
