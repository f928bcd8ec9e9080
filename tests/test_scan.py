"""tg.scan: forward semantics, validation, reverse and forward mode, higher order, and the
recurrent layers of tg.nn against torch.nn.RNN / LSTM / GRU and torch.cumsum/cumprod in
float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tegrad as tg

F64 = "float64"


def ph(shape, name, dtype=F64):
    return tg.placeholder(shape, dtype, name=name)


def recurrent_case(kind: str, steps: int, batch: int, inputs: int, hidden: int, seed: int):
    gates = {"rnn": 1, "lstm": 4, "gru": 3}[kind]
    x, h0, c0 = ph((steps, batch, inputs), "x"), ph((batch, hidden), "h0"), ph(
        (batch, hidden), "c0")
    wih, whh = ph((gates * hidden, inputs), "wih"), ph((gates * hidden, hidden), "whh")
    bih, bhh = ph((gates * hidden,), "bih"), ph((gates * hidden,), "bhh")
    if kind == "lstm":
        out = tg.nn.lstm(x, h0, c0, wih, whh, bih, bhh)[0]
        module = torch.nn.LSTM(inputs, hidden)
    elif kind == "gru":
        out = tg.nn.gru(x, h0, wih, whh, bih, bhh)
        module = torch.nn.GRU(inputs, hidden)
    else:
        out = tg.nn.rnn(x, h0, wih, whh, bih, bhh)
        module = torch.nn.RNN(inputs, hidden)
    module = module.double()
    rng = np.random.default_rng(seed)
    placeholders = [x, h0, wih, whh, bih, bhh] + ([c0] if kind == "lstm" else [])
    values = {p: rng.standard_normal(p.shape) * (0.5 if p.name[0] in "wb" else 1.0)
              for p in placeholders}
    with torch.no_grad():
        for torch_name, p in (("weight_ih_l0", wih), ("weight_hh_l0", whh),
                              ("bias_ih_l0", bih), ("bias_hh_l0", bhh)):
            getattr(module, torch_name).copy_(torch.from_numpy(values[p]))
    return out, placeholders, values, module


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("steps,batch,inputs,hidden", [(1, 2, 3, 4), (5, 3, 4, 6), (9, 1, 2, 3)])
def test_recurrent_layers_match_torch(kind, steps, batch, inputs, hidden):
    out, placeholders, values, module = recurrent_case(kind, steps, batch, inputs, hidden, 7)
    head = ph(out.shape, "dout")
    grads = tg.gradient(out, placeholders, head=head)
    dout = np.random.default_rng(8).standard_normal(out.shape)
    got = tg.evaluate([out, *grads], {**values, head: dout})
    tx = {p: torch.tensor(values[p], requires_grad=True) for p in placeholders}
    x, h0 = tx[placeholders[0]], tx[placeholders[1]][None]
    if kind == "lstm":
        ref_out, _ = module(x, (h0, tx[placeholders[-1]][None]))
    else:
        ref_out, _ = module(x, h0)
    wrt = [x, tx[placeholders[1]], module.weight_ih_l0, module.weight_hh_l0,
           module.bias_ih_l0, module.bias_hh_l0] + ([tx[placeholders[-1]]] if kind == "lstm"
                                                     else [])
    ref = torch.autograd.grad(ref_out, wrt, torch.from_numpy(dout))
    np.testing.assert_allclose(got[0], ref_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    for g, r, p in zip(got[1:], ref, placeholders, strict=True):
        np.testing.assert_allclose(g, r.detach().numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=f"{kind} gradient of {p.name}")


@pytest.mark.parametrize("fn,ref", [(tg.nn.cumsum, torch.cumsum), (tg.nn.cumprod, torch.cumprod),
                                    (tg.nn.logcumsumexp, torch.logcumsumexp)])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumulative_ops_match_torch(fn, ref, dim):
    x = ph((3, 5, 4), "x")
    y = fn(x, dim=dim)
    head = ph(y.shape, "dy")
    (dx,) = tg.gradient(y, [x], head=head)
    rng = np.random.default_rng(3)
    xv, hv = rng.uniform(0.5, 1.5, x.shape), rng.standard_normal(x.shape)
    got_y, got_dx = tg.evaluate([y, dx], {x: xv, head: hv})
    tx = torch.tensor(xv, requires_grad=True)
    ty = ref(tx, dim)
    (tdx,) = torch.autograd.grad(ty, tx, torch.from_numpy(hv))
    np.testing.assert_allclose(got_y, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(got_dx, tdx.numpy(), rtol=1e-10, atol=1e-12)


def fibonacci_like(steps: int):
    """s[t] = a s[t-1] + b s[t-2] + x[t]: two rows of init, a two-step dependency."""
    x, a = ph((steps, 3), "x"), ph((3,), "a")
    s = ph((steps, 3), "s")
    init = tg.compute((2, 3), lambda r, i: x[r, i], name="init")
    update = tg.compute((steps, 3), lambda t, i: a[i] * s[t - 1, i] + 0.5 * tg.tanh(
        s[t - 2, i]) + x[t, i], name="update")
    return tg.scan(init, update, s, name="fib"), x, a


def fibonacci_torch(x, a):
    rows = [x[0], x[1]]
    for t in range(2, x.shape[0]):
        rows.append(a * rows[-1] + 0.5 * torch.tanh(rows[-2]) + x[t])
    return torch.stack(rows)


def test_two_step_dependency_forward_reverse_and_forward_mode():
    out, x, a = fibonacci_like(7)
    rng = np.random.default_rng(0)
    xv, av, hv = rng.standard_normal(x.shape), rng.standard_normal(a.shape) * 0.5, \
        rng.standard_normal(out.shape)
    head = ph(out.shape, "h")
    dx, da = tg.gradient(out, [x, a], head=head)
    tangents = [ph(x.shape, "tx"), ph(a.shape, "ta")]
    jvp = tg.jvp(out, [x, a], tangents)
    tx_, ta_ = rng.standard_normal(x.shape), rng.standard_normal(a.shape)
    got = tg.evaluate([out, dx, da, jvp], {x: xv, a: av, head: hv, tangents[0]: tx_,
                                           tangents[1]: ta_})
    X, A = torch.tensor(xv, requires_grad=True), torch.tensor(av, requires_grad=True)
    ref = fibonacci_torch(X, A)
    rdx, rda = torch.autograd.grad(ref, [X, A], torch.from_numpy(hv))
    _, rjvp = torch.func.jvp(fibonacci_torch, (torch.tensor(xv), torch.tensor(av)),
                             (torch.tensor(tx_), torch.tensor(ta_)))
    for g, r in zip(got, [ref, rdx, rda, rjvp], strict=True):
        np.testing.assert_allclose(g, r.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_hessian_vector_product_of_an_lstm_loss():
    out, placeholders, values, module = recurrent_case("lstm", 4, 2, 3, 3, 11)
    i, n, j = (tg.reduce_axis(s, name=f"r{k}") for k, s in enumerate(out.shape))
    loss = tg.compute((), lambda: tg.sum(tg.tanh(out[i, n, j]) ** 2, axis=[i, n, j]),
                      name="loss")
    grads = tg.gradient(loss, placeholders, head=ph((), "one"))
    directions = [ph(p.shape, f"v{p.name}") for p in placeholders]
    wih = placeholders[2]
    # forward over reverse: d/de grad_wih(theta + e v), through the adjoint scan
    hvp = tg.jvp(grads[2], placeholders, directions)
    rng = np.random.default_rng(12)
    vs = {d: rng.standard_normal(d.shape) for d in directions}
    one = next(t for t in _placeholders_of(hvp) if t.name == "one")
    got = tg.evaluate(hvp, {**values, **vs, one: np.array(1.0)})

    def torch_loss(*params):
        x, h0, w_ih, w_hh, b_ih, b_hh, c0 = params
        o, _ = torch.func.functional_call(
            module, {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh, "bias_ih_l0": b_ih,
                     "bias_hh_l0": b_hh}, (x, (h0[None], c0[None])))
        return (torch.tanh(o) ** 2).sum()

    params = tuple(torch.tensor(values[p]) for p in placeholders)
    tangents = tuple(torch.tensor(vs[d]) for d in directions)
    ref = torch.func.jvp(lambda *ps: torch.func.grad(torch_loss, argnums=2)(*ps), params,
                         tangents)[1]
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-9, atol=1e-11)
    assert wih.shape == got.shape


def _placeholders_of(t):
    from tegrad.ir.traverse import topo_tensors

    return [x for x in topo_tensors([t]) if isinstance(x, tg.Placeholder)]


def test_gradient_checker_passes_a_scan_and_catches_a_wrong_adjoint():
    out, x, a = fibonacci_like(5)
    rng = np.random.default_rng(1)
    values = {"x": rng.standard_normal(x.shape), "a": rng.standard_normal(a.shape) * 0.5}
    assert tg.check_gradient(out, [x, a], values=values).passed
    head = ph(out.shape, "h")
    dx, da = tg.gradient(out, [x, a], head=head)
    bad = tg.compute(a.shape, lambda i: da[i] * 1.01, name="da_bad")
    report = tg.check_gradient(out, [x, a], [dx, bad], head=head, values=values,
                               raise_on_failure=False)
    assert report.results["x"].verdict == "PASS"
    assert report.results["a"].verdict == "FAIL" and report.results["a"].wrong_mask.all()


def test_scan_prints_its_body_and_recurrence():
    out, _, _ = fibonacci_like(4)
    text = str(out)
    assert "fib = scan(states [s], first 2 row(s) from [init], then for t in [2, 4):" in text
    assert "update[t, i] = a[i] * s[t - 1, i]" in text


def test_validation_errors_name_the_problem():
    x = ph((5, 3), "x")
    s = ph((5, 3), "s")
    init = tg.compute((1, 3), lambda r, i: x[r, i], name="init")
    same_row = tg.compute((5, 3), lambda t, i: s[t, i] + x[t, i], name="same_row")
    with pytest.raises(ValueError, match="only earlier rows"):
        tg.scan(init, same_row, s)
    update = tg.compute((5, 3), lambda t, i: s[t - 1, i] + x[t, i], name="update")
    with pytest.raises(ValueError, match="has shape"):
        tg.scan(init, tg.compute((5, 2), lambda t, i: s[t - 1, i], name="narrow"), s)
    with pytest.raises(ValueError, match="1 <= k < T"):
        tg.scan(tg.compute((5, 3), lambda r, i: x[r, i]), update, s)
    lag2 = tg.compute((5, 3), lambda t, i: s[t - 2, i], name="lag2")
    with pytest.raises(ValueError, match="Give 2 init rows"):
        tg.scan(init, lag2, s)
    with pytest.raises(ValueError, match="as many inits as updates"):
        tg.scan([init], [update, update], [s])
    other = ph((4, 3), "other")
    with pytest.raises(ValueError, match="disagree on the length"):
        tg.scan([init, init], [update, update], [s, other])
    result = tg.scan(init, update, s, name="ok")
    with pytest.raises(tg.IRError, match="valid only in a tg.scan update"):
        tg.build([x, s], update)  # the update on its own, outside its scan
    leak = tg.compute((5, 3), lambda t, i: result[t, i] + s[t, i], name="leak")
    with pytest.raises(ValueError, match="state placeholder of scan ok"):
        tg.build([x], leak)


def test_reverse_over_reverse_hessian_vector_product_of_an_rnn_loss():
    out, placeholders, values, module = recurrent_case("gru", 4, 2, 3, 3, 5)
    i, n, j = (tg.reduce_axis(s, name=f"r{k}") for k, s in enumerate(out.shape))
    loss = tg.compute((), lambda: tg.sum(out[i, n, j] ** 2, axis=[i, n, j]), name="loss")
    one = ph((), "one")
    grads = tg.gradient(loss, placeholders, head=one)
    directions = [ph(p.shape, f"v{p.name}") for p in placeholders]
    axes = [[tg.reduce_axis(s, name=f"q{k}_{d}") for d, s in enumerate(p.shape)]
            for k, p in enumerate(placeholders)]
    terms = [tg.compute((), lambda g=g, v=v, ax=ax: tg.sum(g[tuple(ax)] * v[tuple(ax)], axis=ax))
             for g, v, ax in zip(grads, directions, axes, strict=True)]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    hvp = tg.gradient(total, placeholders[2:4], head=one)  # d<grad, v>/d(w_ih, w_hh)
    rng = np.random.default_rng(6)
    vs = {d: rng.standard_normal(d.shape) for d in directions}
    got = tg.evaluate(hvp, {**values, **vs, one: np.array(1.0)})

    def torch_loss(*params):
        x, h0, w_ih, w_hh, b_ih, b_hh = params
        o, _ = torch.func.functional_call(
            module, {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh, "bias_ih_l0": b_ih,
                     "bias_hh_l0": b_hh}, (x, h0[None]))
        return (o ** 2).sum()

    params = tuple(torch.tensor(values[p], requires_grad=True) for p in placeholders)
    first = torch.autograd.grad(torch_loss(*params), params, create_graph=True)
    dot = sum((f * torch.from_numpy(vs[d])).sum() for f, d in zip(first, directions,
                                                                  strict=True))
    ref = torch.autograd.grad(dot, params[2:4])
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r.numpy(), rtol=1e-9, atol=1e-11)


def test_checker_judges_a_float32_lstm_against_its_float64_rebuild():
    x, h0, c0 = ph((4, 2, 3), "x", "float32"), ph((2, 3), "h0", "float32"), ph(
        (2, 3), "c0", "float32")
    wih, whh = ph((12, 3), "wih", "float32"), ph((12, 3), "whh", "float32")
    out = tg.nn.lstm(x, h0, c0, wih, whh)[0]
    report = tg.check_gradient(out, [x, h0, c0, wih, whh])
    assert report.verdict == "PASS", report.summary()
    assert all(r.dtype == "float32" for r in report.results.values())


def test_state_read_only_through_a_piecewise_constant_function():
    steps = 5
    x, s = ph((steps, 3), "x"), ph((steps, 3), "s")
    init = tg.compute((1, 3), lambda r, i: x[r, i], name="init")
    update = tg.compute((steps, 3), lambda t, i: tg.floor(s[t - 1, i]) + x[t, i] * 2.0)
    out = tg.scan(init, update, s)
    head = ph(out.shape, "h")
    (dx,) = tg.gradient(out, [x], head=head)
    rng = np.random.default_rng(2)
    xv, hv = rng.random(x.shape), rng.random(x.shape)
    expected = hv * 2.0
    expected[0] = hv[0]
    np.testing.assert_allclose(tg.evaluate(dx, {x: xv, head: hv}), expected)


@pytest.mark.parametrize("target", ["numpy", "cpu"])
@pytest.mark.parametrize("checkpoint", [None, 2])
def test_lstm_backward_keeps_the_forward_products(target, checkpoint, monkeypatch):
    """The forward scan keeps its activated gates and cell activation for the backward
    (``lower/saved_steps.py``; their derivatives read them: ``autodiff/reverse.py``'s
    ``reuse_forward``) instead of the backward recomputing them, with the pre-activations
    they come from, over all steps; and the adjoint scan keeps its per-step pre-activation
    gradients for the input and weight gradients (rows in reversed order) instead of those
    recomputing them after it; no kernel is left that only the recomputations read. The
    gradients are those of the recomputation."""
    import tegrad.lower.plan as plan_module
    from tegrad.backends.cpu import compiler

    if target == "cpu" and compiler.compiler() is None:
        pytest.skip("no C compiler")
    x, h0, c0 = ph((6, 3, 4), "x"), ph((3, 5), "h0"), ph((3, 5), "c0")
    wih, whh, bih, bhh = ph((20, 4), "wih"), ph((20, 5), "whh"), ph((20,), "bih"), ph(
        (20,), "bhh")
    placeholders = [x, h0, c0, wih, whh, bih, bhh]
    out = tg.nn.lstm(*placeholders, checkpoint=checkpoint)[0]
    head = ph(out.shape, "dout")
    outputs = [out, *tg.gradient(out, placeholders, head=head)]
    f = tg.build([*placeholders, head], outputs, target=target)
    kernels = f.program.plan.kernels
    kept = [[v.name for v in k.saved] for k in kernels if k.kind == "scan"]
    assert len(kept) == 2 and len(kept[1]) == 1, kept
    forward_kept = {name.split(".", 1)[1] for name in kept[0]}
    assert forward_kept == {f"{v}.step.fwd" for v in
                            ("gatei", "gatef", "gateg", "gateo", "c_act")}, kept
    assert kept[1][0].endswith(".pre.step.lift"), kept
    made = {k.tensor.name for k in kernels}
    assert not made & {*kept[0], kept[1][0]}
    assert not any(name.endswith((".gatei.step.lift", ".c_new.step.lift", ".pre.step.fwd",
                                  ".h_proj.step.fwd")) for name in made)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(p.shape) for p in [*placeholders, head]]
    products = tg.build([*placeholders, head], outputs, target=target,  # products alone
                        options=tg.Options.from_environment().replace(keep_step_kernels=False))
    kept = [[v.name for v in k.saved] for k in products.program.plan.kernels
            if k.kind == "scan"]
    assert [[name.split(".", 1)[1] for name in names] for names in kept] == [
        ["h_proj.step.fwd"], [kept[1][0].split(".", 1)[1]]], kept
    monkeypatch.setattr(plan_module, "keep_step_values", lambda kernels, outputs, keep: kernels)
    recomputed = tg.build([*placeholders, head], outputs, target=target)
    assert not any(k.saved for k in recomputed.program.plan.kernels if k.kind == "scan")
    for got, mid, want in zip(f(*arrays), products(*arrays), recomputed(*arrays), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(mid, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_gru_backward_reads_the_gates_its_forward_kept(target, monkeypatch):
    """A GRU's activated gates are computes (``nn/recurrent.py``), so their derivatives
    read them and the forward scan keeps them, with ``h W_hh^T`` (the candidate's gradient
    reads its ``h`` part): no kernel after the forward recomputes a gate. The gradients are
    those of the program that keeps the products alone."""
    from tegrad.backends.cpu import compiler

    if target == "cpu" and compiler.compiler() is None:
        pytest.skip("no C compiler")
    x, h0 = ph((5, 3, 4), "x"), ph((3, 6), "h0")
    wih, whh, bih, bhh = ph((18, 4), "wih"), ph((18, 6), "whh"), ph((18,), "bih"), ph(
        (18,), "bhh")
    placeholders = [x, h0, wih, whh, bih, bhh]
    out = tg.nn.gru(*placeholders)
    head = ph(out.shape, "dout")
    outputs = [out, *tg.gradient(out, placeholders, head=head)]
    f = tg.build([*placeholders, head], outputs, target=target)
    forward = next(k for k in f.program.plan.kernels if k.kind == "scan")
    assert {v.name.split(".", 1)[1] for v in forward.saved} == {
        "h_proj.step.fwd", "gater.step.fwd", "gatez.step.fwd", "gaten.step.fwd"}
    assert not any(".gate" in k.tensor.name and k.tensor.name.endswith(".fwd")
                   for k in f.program.plan.kernels)
    products = tg.build([*placeholders, head], outputs, target=target,
                        options=tg.Options.from_environment().replace(keep_step_kernels=False))
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(p.shape) for p in [*placeholders, head]]
    for got, want in zip(f(*arrays), products(*arrays), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_lstm_gradient_makes_each_value_once():
    """The LSTM's pre-activations are one compute, so their gradient (the four gate
    gradients side by side) is one tensor over the steps. Both bias gradients are the same
    sum of it over steps and batch: one compute, which both read (``simplify/cse.py``),
    and one kernel, not a sum copied into each (``lower/fusion.py``). The weight and input
    gradients read it directly: no compute of the gradient is a whole copy of another."""
    from tegrad.backends.cpu import compiler
    from tegrad.ir.tensor import Compute
    from tegrad.ir.traverse import tensors_read, topo_tensors
    from tegrad.simplify.cse import copy_of

    out, placeholders, values, module = recurrent_case("lstm", 5, 3, 4, 6, 7)
    head = ph(out.shape, "dout")
    grads = tg.gradient(out, placeholders, head=head)
    names = [p.name for p in placeholders]
    g_bih, g_bhh = grads[names.index("bih")], grads[names.index("bhh")]
    assert g_bih is not g_bhh
    (shared,) = tensors_read(g_bih.body)
    assert tensors_read(g_bhh.body) == [shared]
    (pre_grad,) = tensors_read(shared.body)
    readers = [t for t in topo_tensors(grads) if isinstance(t, Compute)
               and pre_grad in tensors_read(t.body)]
    assert {g.name for g in grads if g in readers} >= {grads[0].name}  # x's gradient
    assert len(readers) == 4, [t.name for t in readers]  # x, W_ih, W_hh, the bias sum
    returned = set(grads)
    copies = [t.name for t in topo_tensors(grads) if isinstance(t, Compute)
              and t not in returned and copy_of(t) is not None]
    assert not copies, copies
    if compiler.compiler() is not None:
        f = tg.build([*placeholders, head], grads, target="cpu")
        assert shared.name in [k.tensor.name for k in f.program.plan.kernels]
