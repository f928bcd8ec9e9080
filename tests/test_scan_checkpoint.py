"""Gradient checkpointing of scans (``tg.scan(..., checkpoint=k)``): the same values as
without (float64, to rounding) and as torch, the plan's marks (which histories are
checkpointed and why not), what the executor holds and recomputes, and bad values.

Where a history qualifies: the loss must not read it and the backward must read it only
through the adjoint scan. In ``tg.nn``'s layers ``h`` is the output (never checkpointed);
an LSTM's ``c`` is read only by the adjoint scan when no parameter gradient is asked (the
parameter gradients are sums over time of lifted step VJPs, which read ``c`` whole)."""

from __future__ import annotations

import functools
import tracemalloc

import numpy as np
import pytest
import torch

import tegrad as tg
from tegrad.backends.host.scan_run import CheckpointedHistory
from tegrad.backends.target import known
from tegrad.nn import recurrent
from test_scan import ph, recurrent_case

CHECKPOINTS = [1, 2, 3, 4, 50]  # 1; dividing 6 steps; not dividing; k >= T


def scan_kernels(f, name=None):
    return [k for k in f.program.plan.kernels
            if k.kind == "scan" and (name is None or k.op.name == name)]


def checkpointed_names(f) -> set[str]:
    return {k.op.outputs[n].name for k in scan_kernels(f) for n in k.checkpointed}


def with_checkpoint(monkeypatch, kind: str, k: int | None):
    """``recurrent_case`` of tests/test_scan.py, its layer built with ``checkpoint=k``."""
    layer = getattr(recurrent, kind)
    monkeypatch.setattr(tg.nn, kind, functools.partial(layer, checkpoint=k))


def torch_gradients(kind, module, placeholders, values, dout, wrt_names):
    tx = {p: torch.tensor(values[p], requires_grad=True) for p in placeholders}
    x, h0 = tx[placeholders[0]], tx[placeholders[1]][None]
    if kind == "lstm":
        out, _ = module(x, (h0, tx[placeholders[-1]][None]))
    else:
        out, _ = module(x, h0)
    params = {"wih": module.weight_ih_l0, "whh": module.weight_hh_l0,
              "bih": module.bias_ih_l0, "bhh": module.bias_hh_l0}
    wrt = [params.get(n) if n in params else tx[next(p for p in placeholders if p.name == n)]
           for n in wrt_names]
    grads = torch.autograd.grad(out, wrt, torch.from_numpy(dout))
    return [out.detach().numpy(), *(g.numpy() for g in grads)]


def run_recurrent(monkeypatch, kind, k, wrt_names, steps=6):
    with_checkpoint(monkeypatch, kind, k)
    out, placeholders, values, module = recurrent_case(kind, steps, 2, 3, 4, 7)
    wrt = [next(p for p in placeholders if p.name == n) for n in wrt_names]
    head = ph(out.shape, "dout")
    grads = tg.gradient(out, wrt, head=head)
    f = tg.build([*placeholders, head], [out, *grads])
    dout = np.random.default_rng(8).standard_normal(out.shape)
    got = f(*(values[p] for p in placeholders), dout)
    return f, got, torch_gradients(kind, module, placeholders, values, dout, wrt_names)


ALL = {"rnn": ["x", "h0", "wih", "whh", "bih", "bhh"],
       "gru": ["x", "h0", "wih", "whh", "bih", "bhh"],
       "lstm": ["x", "h0", "wih", "whh", "bih", "bhh", "c0"]}


@pytest.mark.parametrize("k", CHECKPOINTS)
@pytest.mark.parametrize("kind,wrt,checkpointed", [
    ("rnn", ALL["rnn"], set()), ("gru", ALL["gru"], set()),
    # c: read only by the adjoint scan (the weight and input gradients read the
    # pre-activation gradients the adjoint keeps, not c)
    ("lstm", ALL["lstm"], {"c"}), ("lstm", ["h0", "c0"], {"c"}),
])
def test_recurrent_gradients_with_checkpoint_match_without_and_torch(monkeypatch, kind, wrt,
                                                                    checkpointed, k):
    f, got, ref = run_recurrent(monkeypatch, kind, k, wrt)
    _, plain, _ = run_recurrent(monkeypatch, kind, None, wrt)
    assert {n.rsplit(".", 1)[1] for n in checkpointed_names(f)} == checkpointed
    for g, p, r, name in zip(got, plain, ref, ["output", *wrt], strict=True):
        np.testing.assert_allclose(g, p, rtol=1e-13, atol=1e-14, err_msg=f"{name}, k={k}")
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-11, err_msg=f"{name} vs torch")


def test_plan_notes_say_why_a_history_is_kept_whole(monkeypatch):
    f, _, _ = run_recurrent(monkeypatch, "lstm", 2, ALL["lstm"])
    (note,) = f.program.plan.notes
    assert ".h kept whole (read whole by" in note and ".output)" in note
    assert ".c checkpointed (" in note  # the parameter gradients read the adjoint's rows
    f, _, _ = run_recurrent(monkeypatch, "lstm", 2, ["h0", "c0"])
    (note,) = f.program.plan.notes
    assert ".c checkpointed (" in note and ".x_proj (" in note  # kept alive to recompute
    (forward, adjoint) = scan_kernels(f)
    # the adjoint reads c[t - 1] alone at each step (tanh(c[t]) is kept by the forward)
    assert len([b for u, a, b in adjoint.step.sliced if u.name.endswith(".c")]) == 1
    assert forward.segments_cached == 1  # so one segment at a time
    assert "checkpointed every 2 steps" in f.program.plan.describe()


# a two-state scan with a t - 2 dependency: s (hidden, lags 1 and 2, two init rows) and y


def hidden_scan(steps: int, width: int, checkpoint: int | None):
    x, a, w = ph((steps, width), "x"), ph((width,), "a"), ph((width,), "w")
    y0 = ph((2, 2), "y0")
    s, y = ph((steps, width), "s"), ph((steps, 2), "y")
    i = tg.reduce_axis(width, name="i")
    s_init = tg.compute((2, width), lambda r, j: x[r, j], name="s_init")
    y_init = tg.compute((2, 2), lambda r, m: y0[r, m], name="y_init")
    s_new = tg.compute((steps, width), lambda t, j: a[j] * s[t - 1, j] + 0.5 * tg.tanh(
        s[t - 2, j]) + x[t, j], name="s_new")
    y_new = tg.compute((steps, 2), lambda t, m: y[t - 1, m] * 0.9 + tg.sum(
        w[i] * tg.tanh(s[t - 1, i] + m), axis=i), name="y_new")
    _, ys = tg.scan([s_init, y_init], [s_new, y_new], [s, y], name="hid",
                    checkpoint=checkpoint)
    return ys, [x, a, w, y0]


def hidden_torch(x, a, w, y0):
    s, y = [x[0], x[1]], [y0[0], y0[1]]
    m = torch.arange(2, dtype=x.dtype)
    for t in range(2, x.shape[0]):
        y.append(y[-1] * 0.9 + (w[:, None] * torch.tanh(s[-1][:, None] + m)).sum(0))
        s.append(a * s[-1] + 0.5 * torch.tanh(s[-2]) + x[t])
    return torch.stack(y)


def hidden_values(inputs, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape) * (0.5 if p.name in "aw" else 1.0) for p in inputs]


@pytest.mark.parametrize("k", [*CHECKPOINTS, None])
@pytest.mark.parametrize("wrt,checkpointed", [
    (["x", "y0"], {"hid.s"}), (["x", "a", "w", "y0"], set())])  # a, w: lifts read s whole
def test_two_step_dependency_reverse_mode(wrt, checkpointed, k):
    y, inputs = hidden_scan(8, 3, k)
    head = ph(y.shape, "head")
    chosen = [p for p in inputs if p.name in wrt]
    f = tg.build([*inputs, head], [y, *tg.gradient(y, chosen, head=head)])
    values = hidden_values(inputs)
    hv = np.random.default_rng(1).standard_normal(y.shape)
    got = f(*values, hv)
    assert checkpointed_names(f) == (checkpointed if k else set())
    tv = {p.name: torch.tensor(v, requires_grad=True) for p, v in zip(inputs, values,
                                                                       strict=True)}
    ref = hidden_torch(*tv.values())
    grads = torch.autograd.grad(ref, [tv[n] for n in wrt], torch.from_numpy(hv))
    for g, r in zip(got, [ref, *grads], strict=True):
        np.testing.assert_allclose(g, r.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [1, 3, 50])
def test_two_step_dependency_forward_mode_reads_rows_forwards(k):
    y, inputs = hidden_scan(8, 3, k)
    x = inputs[0]
    tx = ph(x.shape, "tx")
    f = tg.build([*inputs, tx], tg.jvp(y, [x], [tx]))
    values = hidden_values(inputs)
    tv = np.random.default_rng(2).standard_normal(x.shape)
    assert checkpointed_names(f) == {"hid.s", "hid.y"}  # y: not read at all
    _, ref = torch.func.jvp(lambda xx: hidden_torch(xx, *map(torch.tensor, values[1:])),
                            (torch.tensor(values[0]),), (torch.tensor(tv),))
    np.testing.assert_allclose(f(*values, tv), ref.numpy(), rtol=1e-10, atol=1e-12)


def hessian_vector_program(k):
    """``d/de grad_y0(x + e v)`` of ``sum(y ** 2)``: forward over reverse through the
    scan, so the tangent of the adjoint reads the forward history too."""
    y, inputs = hidden_scan(9, 3, k)
    x, y0 = inputs[0], inputs[3]
    i, m = tg.reduce_axis(9, "i"), tg.reduce_axis(2, "m")
    loss = tg.compute((), lambda: tg.sum(y[i, m] ** 2, axis=[i, m]), name="loss")
    one, v = ph((), "one"), ph(x.shape, "v")
    (g_y0,) = tg.gradient(loss, [y0], head=one)
    return tg.build([*inputs, one, v], [g_y0, tg.jvp(g_y0, [x], [v])]), inputs


def test_hessian_vector_product_through_a_checkpointed_scan():
    (f, inputs), (plain, _) = hessian_vector_program(3), hessian_vector_program(None)
    assert checkpointed_names(f) == {"hid.s"} and checkpointed_names(plain) == set()
    values = hidden_values(inputs)
    vv = np.random.default_rng(3).standard_normal(inputs[0].shape)
    got, want_plain = f(*values, np.array(1.0), vv), plain(*values, np.array(1.0), vv)

    def grad_y0(xx, a, w, y0):
        return torch.func.grad(lambda y0_: (hidden_torch(xx, a, w, y0_) ** 2).sum())(y0)

    params = [torch.tensor(v) for v in values]
    ref = torch.func.jvp(lambda xx: grad_y0(xx, *params[1:]), (params[0],),
                         (torch.tensor(vv),))
    for g, p, r in zip(got, want_plain, ref, strict=True):
        np.testing.assert_allclose(g, p, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(g, r.numpy(), rtol=1e-10, atol=1e-12)


# what the executor holds and recomputes


def record_histories(monkeypatch) -> dict:
    """Every checkpointed history the scans of a program return, by output name (on any
    backend: they all run scans with ``run_scan``)."""
    seen = {}
    original = CheckpointedHistory.__init__

    def recording(self, engine, n, *args, **kwargs):
        original(self, engine, n, *args, **kwargs)
        seen[engine.op.outputs[n].name] = self

    monkeypatch.setattr(CheckpointedHistory, "__init__", recording)
    return seen


@pytest.mark.parametrize("target", known())
@pytest.mark.parametrize("steps,k", [(100, 1), (100, 6), (100, 7), (100, 38), (100, 200)])
def test_checkpointed_history_holds_less_and_recomputes_each_segment_once(monkeypatch, steps,
                                                                         k, target):
    width = 16
    y, inputs = hidden_scan(steps, width, k)
    head = ph(y.shape, "head")
    f = tg.build([*inputs, head], tg.gradient(y, [inputs[0]], head=head), target=target)
    seen = record_histories(monkeypatch)
    f(*hidden_values(inputs), np.ones(y.shape))
    history = seen["hid.s"]
    run = steps - 2  # steps of the scan (two init rows)
    segments = -(-run // k)
    last = run - (segments - 1) * k
    assert history.recomputed_steps == run - last  # the adjoint reads backwards
    row_bytes = width * 8
    restart = sum(min(2, j * k) for j in range(segments))  # rows t - 2, t - 1 at each start
    (scan,) = scan_kernels(f, "hid")
    rows = [b for reader in scan_kernels(f) for u, _, b in reader.step.sliced
            if u.name == "hid.s"]  # the adjoint's reads s[-t + b]
    assert scan.segments_cached == 1 + -(-(max(rows) - min(rows)) // k)
    held = 2 + restart + min(scan.segments_cached, segments) * min(k, run)
    assert history.nbytes <= held * row_bytes
    if 3 <= k <= run // 2:
        assert history.nbytes < history.full_nbytes / 2
    # the rows it stands for are the forward's own
    plain_y, plain_inputs = hidden_scan(steps, width, None)
    feed = dict(zip(plain_inputs, hidden_values(inputs), strict=True))
    np.testing.assert_array_equal(np.asarray(history),
                                  tg.evaluate(plain_y.op.outputs[0], feed, target=target))


@pytest.mark.parametrize("target", known())
def test_checkpointing_lowers_the_peak_of_a_backward(target):
    """NumPy reports its arrays to tracemalloc: the peak of a run of the program falls by
    about the history (the gradient of y0 alone, so the adjoint scan is the peak). The
    compiled target keeps buffers (histories too) from run to run: what its pool holds
    is added to the peak of the second run, which reuses them. The cuda target's tensors
    are torch's, which tracemalloc does not see: there it is the CheckpointedHistory's
    own count (the test above) that shows it."""
    if target == "cuda":
        pytest.skip("torch's allocator is not seen by tracemalloc")
    steps, width = 120, 1500
    peaks = {}
    for k in (None, 11):
        y, inputs = hidden_scan(steps, width, k)
        head = ph(y.shape, "head")
        f = tg.build([*inputs, head], tg.gradient(y, [inputs[3]], head=head), target=target)
        args = [*hidden_values(inputs), np.ones(y.shape)]
        f(*args)  # warm: first-use allocations
        tracemalloc.start()
        f(*args)
        peaks[k] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        pool = getattr(f.program, "pool", None)
        peaks[k] += 0 if pool is None else pool.held_bytes()
    history = steps * width * 8
    assert peaks[11] < peaks[None] - 0.6 * history, peaks


# validation


@pytest.mark.parametrize("bad,error", [(0, ValueError), (-3, ValueError), (2.0, TypeError),
                                       ("4", TypeError), (True, TypeError)])
def test_bad_checkpoint_values_raise(bad, error):
    with pytest.raises(error, match="checkpoint"):
        hidden_scan(5, 2, bad)
    x, h0, c0 = ph((3, 1, 2), "x"), ph((1, 2), "h0"), ph((1, 2), "c0")
    wih, whh = ph((8, 2), "wih"), ph((8, 2), "whh")
    with pytest.raises(error, match="scan lstm_bad: checkpoint"):
        tg.nn.lstm(x, h0, c0, wih, whh, name="lstm_bad", checkpoint=bad)


def test_checkpoint_is_stored_on_the_scan_and_numpy_ints_are_accepted():
    y, _ = hidden_scan(5, 2, np.int64(3))
    assert y.op.checkpoint == 3 and type(y.op.checkpoint) is int
    assert hidden_scan(5, 2, None)[0].op.checkpoint is None
