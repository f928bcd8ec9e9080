"""Structure and cost of generated backward operators, for every op of the table.

Gather form: no reduction of the backward keeps an index equation (a scatter), and no
tensor of the backward is Jacobian-sized. Cost: the backward's own work (forward tensors
count as given) against the standard hand-written backward, never more than 1.1x.
"""

from __future__ import annotations

import math

import pytest

import tegrad as tg
from optable import SPEC_BY_NAME, SPECS
from tegrad.coverage.structure import backward_computes, equations
from tegrad.ir.traverse import topo_tensors

GATHER_SPECS = [s for s in SPECS if s.gather_form]
SCATTER_SPECS = [s for s in SPECS if not s.gather_form]


def backward(spec):
    ins, out = spec.build()
    head = tg.placeholder(out.shape, out.dtype, name="H")
    grads = tg.gradient(out, [ins[i] for i in spec.diff], head)
    return ins, out, head, grads


@pytest.mark.parametrize("spec", GATHER_SPECS, ids=lambda s: s.name)
def test_backward_is_in_gather_form(spec):
    _, out, head, grads = backward(spec)
    largest = max([t.size for t in topo_tensors([out])] + [head.size])
    for t in backward_computes([out], grads):
        assert not equations(t), f"{t.name} still scatters: {equations(t)}\n{t}"
        assert t.size <= largest, f"{t.name} {t.shape} is larger than any forward tensor"


@pytest.mark.parametrize("spec", SCATTER_SPECS, ids=lambda s: s.name)
def test_non_invertible_maps_stay_explicit_scatters(spec):
    _, out, _, grads = backward(spec)
    assert any(equations(t) for t in backward_computes([out], grads))


def _fwd(spec):
    ins, out = spec.build()
    return ins, out, tg.count_ops(out)


# The hand-written backward's work for each op of the gather-form list, as
# (MACs, reduction points); None where that measure is not the point of the op.
def contraction(spec):  # one forward-sized contraction for each operand of the product
    _, _, f = _fwd(spec)
    return 2 * f.macs, None


def depthwise(spec):
    # the forward pads with a select factor, which the counter charges as MACs; a
    # hand-written backward visits only valid taps: per 5-wide axis with a 3-tap window
    # and padding 1, 2 + 3 + 3 + 3 + 2 = 13 taps, so 13 * 13 per channel, 3 channels,
    # once for dX and once for dW
    return 2 * 3 * 13 * 13, None


def pure_gather(spec):  # data movement: no arithmetic at all
    return 0, 0


def head_once(spec):  # every head element is read and added once (broadcast, upsample)
    _, out, _ = _fwd(spec)
    return 0, out.size


def same_as_forward(spec):  # avg pool: each (output, window tap) pair once
    _, _, f = _fwd(spec)
    return 0, f.reduction_points


def max_pool(spec):
    # a window scan for the winner (the tie count under tegrad's even-split rule) plus
    # one test per (output, window tap) pair in the gather: twice the forward's points
    _, _, f = _fwd(spec)
    return 0, 2 * f.reduction_points


def softmax(spec):  # dX = S * (dY - sum(dY * S)): one row sum of products
    _, out, _ = _fwd(spec)
    return out.size, None


def layer_norm(spec):  # sum(dY g), sum(dY g xhat) per row, sum(dY xhat) per column
    ins, _, _ = _fwd(spec)
    return 3 * ins[0].size, None


def attention(spec):
    # dV = P^T dY, dP = dY V^T, dQ = dS K, dK = dS^T Q (each one forward matmul) and the
    # softmax row sums of dP * P over the causal mask
    ins, out, f = _fwd(spec)
    b, n, _ = ins[0].shape
    return 2 * f.macs + b * n * (n + 1) // 2, None


HANDWRITTEN = {
    "matmul": contraction,
    "batched_matmul": contraction,
    "conv2d_s2_p1_d2_g2": contraction,
    "conv_transpose2d_s2_p1": contraction,
    "depthwise_conv2d": depthwise,
    "avg_pool_3x3_s2": same_as_forward,
    "max_pool_3x3_s2": max_pool,
    "transpose": pure_gather,
    "reshape_flatten": pure_gather,
    "flip": pure_gather,
    "strided_slice": pure_gather,
    "pixel_shuffle": pure_gather,
    "constant_pad": pure_gather,
    "bias_add_broadcast": head_once,
    "upsample_nearest": head_once,
    "softmax_one_compute": softmax,
    "layer_norm": layer_norm,
    "causal_attention": attention,
}


def test_cost_table_names_exist():
    assert set(HANDWRITTEN) <= set(SPEC_BY_NAME)


@pytest.mark.parametrize("name", sorted(HANDWRITTEN))
def test_backward_costs_what_a_hand_written_one_does(name):
    spec = SPEC_BY_NAME[name]
    _, out, _, grads = backward(spec)
    ours = tg.count_ops(grads, given=[out])
    macs, points = HANDWRITTEN[name](spec)
    assert ours.macs <= math.floor(1.1 * macs), f"{name}: {ours.macs} MACs vs {macs}\n{ours}"
    if points is not None:
        assert ours.reduction_points <= math.floor(1.1 * points), (
            f"{name}: {ours.reduction_points} points vs {points}\n{ours}"
        )


def main() -> None:
    """Print the cost table: ``python tests/test_gather_form.py``."""
    head = ("op", "MACs", "hand", "ratio", "points", "hand", "ratio")
    print("{:26s} {:>7s} {:>7s} {:>6s} {:>7s} {:>7s} {:>6s}".format(*head))
    for name in sorted(HANDWRITTEN):
        spec = SPEC_BY_NAME[name]
        _, out, _, grads = backward(spec)
        ours = tg.count_ops(grads, given=[out])
        macs, points = HANDWRITTEN[name](spec)
        mr = f"{ours.macs / macs:.2f}" if macs else ("1.00" if ours.macs == 0 else "inf")
        pts = "-" if points is None else str(points)
        pr = (
            "-"
            if points is None
            else (
                f"{ours.reduction_points / points:.2f}"
                if points
                else ("1.00" if ours.reduction_points == 0 else "inf")
            )
        )
        print(
            f"{name:26s} {ours.macs:7d} {macs:7d} {mr:>6s} {ours.reduction_points:7d} "
            f"{pts:>7s} {pr:>6s}"
        )


if __name__ == "__main__":
    main()
