"""``tg.build_vjp``: a forward that keeps what its backward reads, and that backward.

Every op of the table, on both targets, against PyTorch autograd in float64; an LSTM whose
backward reads the forward's histories and kept products instead of running the forward
scan again (also checkpointed); a saved forward that stays valid while later forwards
run; and the errors of bad arguments.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tegrad as tg
from optable import SPECS
from tegrad.backends.cpu import compiler
from test_ops import assert_close, grads_or_zeros, random_like, rng_for, to_torch

TARGETS = ["numpy", pytest.param("cpu", marks=pytest.mark.skipif(
    compiler.compiler() is None, reason="no C compiler"))]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_op_table_forward_then_backward_matches_torch(spec, target):
    inputs, out = spec.build()
    wrt = [inputs[k] for k in spec.diff]
    forward, backward = tg.build_vjp(inputs, out, wrt=wrt, target=target)
    arrays = spec.make_inputs(rng_for(spec, "inputs"))
    h = random_like(rng_for(spec, "reverse"), out)
    y, saved = forward(*arrays)
    got = backward(saved, h)
    ts = to_torch(arrays, spec.diff)
    ref = spec.torch_fn(*ts)
    expected = grads_or_zeros(torch.autograd.grad(
        ref, [ts[k] for k in spec.diff], grad_outputs=torch.from_numpy(h), allow_unused=True),
        [ts[k] for k in spec.diff])
    assert_close(y, ref, f"{spec.name} forward")
    assert len(got) == len(wrt)
    for k, g, e in zip(spec.diff, got, expected, strict=True):
        assert_close(g, e, f"{spec.name}: d/d{inputs[k].name}")


def _lstm(steps=5, batch=3, inputs=4, hidden=6, dtype="float64", checkpoint=None):
    ps = [tg.placeholder(s, dtype, n) for s, n in
          (((steps, batch, inputs), "x"), ((batch, hidden), "h0"), ((batch, hidden), "c0"),
           ((4 * hidden, inputs), "w_ih"), ((4 * hidden, hidden), "w_hh"),
           ((4 * hidden,), "b_ih"), ((4 * hidden,), "b_hh"))]
    return ps, tg.nn.lstm(*ps, checkpoint=checkpoint)[0]


def _torch_lstm(arrays, head):
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = (torch.tensor(a, requires_grad=True) for a in arrays)
    h, c, outs = h0, c0, []
    for t in range(x.shape[0]):
        i, f, g, o = (x[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    out = torch.stack(outs)
    leaves = [x, h0, c0, w_ih, w_hh, b_ih, b_hh]
    return out, torch.autograd.grad(out, leaves, torch.from_numpy(head))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("checkpoint", [None, 2])
def test_an_lstm_backward_reads_the_forward_scan_instead_of_running_it(target, checkpoint):
    ps, out = _lstm(checkpoint=checkpoint)
    forward, backward = tg.build_vjp(ps, out, target=target)
    scans = [k for k in backward.program.plan.kernels if k.kind == "scan"]
    assert len(scans) == 1 and ".adj" in scans[0].tensor.name  # the adjoint alone
    (forward_scan,) = [k for k in forward.program.plan.kernels if k.kind == "scan"]
    kept = forward_scan.outputs  # the histories, the kept gates and tanh(c)
    assert len(kept) == 2 + 5 and set(kept) <= set(backward.saved_tensors), kept
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(p.shape) * 0.5 for p in ps]
    head = rng.standard_normal(out.shape)
    y, saved = forward(*arrays)
    got = backward(saved, head)
    ref, ref_grads = _torch_lstm(arrays, head)
    np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    for g, r, p in zip(got, ref_grads, ps, strict=True):
        np.testing.assert_allclose(g, r.numpy(), rtol=1e-9, atol=1e-11, err_msg=p.name)


@pytest.mark.parametrize("target", TARGETS)
def test_a_saved_forward_outlives_later_forwards(target):
    """Buffers a program reuses from call to call are not those of a ``Saved`` still held:
    a backward on the first forward's values gives the first inputs' gradients after two
    more forwards (large enough to take pooled buffers), and twice the same."""
    ps, out = _lstm(steps=6, batch=16, inputs=8, hidden=64, dtype="float32")
    forward, backward = tg.build_vjp(ps, out, target=target)
    joint = tg.build([*ps, backward.head], [out, *tg.gradient(out, ps, backward.head)],
                     target=target)
    rng = np.random.default_rng(3)
    calls = [[rng.standard_normal(p.shape).astype(np.float32) * 0.5 for p in ps]
             for _ in range(3)]
    head = rng.standard_normal(out.shape).astype(np.float32)
    first = forward(*calls[0])
    for arrays in calls[1:]:
        forward(*arrays)
    want = joint(*calls[0], head)
    assert first[1].nbytes > 0 and any(n.endswith("gatef.step.fwd") for n in first[1].names)
    for _ in range(2):
        got = backward(first[1], head)
        for g, w in zip(got, want[1:], strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(first[0], want[0])


def test_bad_arguments_are_named():
    x = tg.placeholder((3, 4), "float64", "x")
    idx = tg.placeholder((3,), "int64", "idx")
    y = tg.compute((3,), lambda i: x[i, 0] * x[i, 1], name="y")
    forward, backward = tg.build_vjp([x], y, target="numpy")
    value, saved = forward(np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"y\.head.*\(3,\)"):
        backward(saved, np.ones(4))
    with pytest.raises(TypeError, match="what this pair's forward returned"):
        backward({"x": 1}, np.ones(3))
    other = tg.build_vjp([x], y, target="numpy")[1]
    with pytest.raises(TypeError, match="what this pair's forward returned"):
        other(saved, np.ones(3))
    with pytest.raises(ValueError, match="not in inputs"):
        tg.build_vjp([x], y, wrt=[tg.placeholder((3, 4), "float64", "z")])
    gathered = tg.compute((3,), lambda i: x[i, idx[i] % 4], name="g")
    with pytest.raises(ValueError, match="idx in wrt is int64"):
        tg.build_vjp([x, idx], gathered, wrt=[idx])
    counts = tg.compute((3,), lambda i: idx[i] * 2, name="counts")
    with pytest.raises(ValueError, match="only a float output"):
        tg.build_vjp([idx], counts)
    with pytest.raises(ValueError, match="not in inputs"):
        tg.build_vjp([], y)
    with pytest.raises(TypeError, match="one tegrad Tensor"):
        tg.build_vjp([x], [y])
    (grad,) = backward(saved, np.ones(3))
    np.testing.assert_array_equal(grad[:, :2], np.ones((3, 2)))
    np.testing.assert_array_equal(grad[:, 2:], np.zeros((3, 2)))
